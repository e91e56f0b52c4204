//! CPU reference for the Goldilocks field, p = 2^64 - 2^32 + 1, and for the
//! entry points of `cuda/field_ops.cu`.
//!
//! Arithmetic here is plain u128 arithmetic followed by `% P`, on purpose a
//! different method from the GPU's (`cuda/goldilocks.cuh`), so that the two
//! check each other. Like the GPU functions, every function accepts any u64
//! (read as its residue mod p) and returns the canonical value in `[0, P)`.

/// The field modulus, p = 2^64 - 2^32 + 1.
pub const P: u64 = 0xFFFF_FFFF_0000_0001;

const P128: u128 = P as u128;

/// The canonical representative of `a` mod p, in `[0, P)`.
pub fn canonical(a: u64) -> u64 {
    (u128::from(a) % P128) as u64
}

/// `a + b` mod p.
pub fn add(a: u64, b: u64) -> u64 {
    ((u128::from(a) + u128::from(b)) % P128) as u64
}

/// `a - b` mod p.
pub fn sub(a: u64, b: u64) -> u64 {
    ((u128::from(a) % P128 + P128 - u128::from(b) % P128) % P128) as u64
}

/// `a * b` mod p.
pub fn mul(a: u64, b: u64) -> u64 {
    ((u128::from(a) * u128::from(b)) % P128) as u64
}

/// `base ^ exp` mod p, by square and multiply; `pow(x, 0) = 1`.
pub fn pow(base: u64, mut exp: u64) -> u64 {
    let mut result = 1;
    let mut square = canonical(base);
    while exp > 0 {
        if exp & 1 == 1 {
            result = mul(result, square);
        }
        square = mul(square, square);
        exp >>= 1;
    }
    result
}

/// The multiplicative inverse of `a` mod p, as `a ^ (p - 2)`.
///
/// # Panics
///
/// If `a` is 0 mod p, which has no inverse.
pub fn inv(a: u64) -> u64 {
    assert_ne!(canonical(a), 0, "0 has no inverse mod p");
    pow(a, P - 2)
}

/// What `gl_add` writes: `out[i] = a[i] + b[i]` mod p.
///
/// # Panics
///
/// If the slices differ in length.
pub fn add_vec(a: &[u64], b: &[u64]) -> Vec<u64> {
    assert_eq!(a.len(), b.len(), "gl_add operands differ in length");
    a.iter().zip(b).map(|(&a, &b)| add(a, b)).collect()
}

/// What `gl_mul` writes: `out[i] = a[i] * b[i]` mod p.
///
/// # Panics
///
/// If the slices differ in length.
pub fn mul_vec(a: &[u64], b: &[u64]) -> Vec<u64> {
    assert_eq!(a.len(), b.len(), "gl_mul operands differ in length");
    a.iter().zip(b).map(|(&a, &b)| mul(a, b)).collect()
}

/// What `gl_axpy` writes: `out[i] = alpha * x[i] + y[i]` mod p.
///
/// # Panics
///
/// If the slices differ in length.
pub fn axpy(alpha: u64, x: &[u64], y: &[u64]) -> Vec<u64> {
    assert_eq!(x.len(), y.len(), "gl_axpy operands differ in length");
    x.iter()
        .zip(y)
        .map(|(&x, &y)| add(mul(alpha, x), y))
        .collect()
}

/// The number of coefficients of `field_ops`'s `gl_poly_coeffs` table.
pub const POLY_TERMS: usize = 8;

/// What `gl_poly_eval` writes with the table `coeffs` in `gl_poly_coeffs`:
/// `out[i] = sum_k coeffs[k] * x[i]^k` mod p (Horner's rule, as the kernel runs it).
pub fn poly_eval(coeffs: &[u64; POLY_TERMS], x: &[u64]) -> Vec<u64> {
    x.iter()
        .map(|&x| {
            coeffs[..POLY_TERMS - 1]
                .iter()
                .rev()
                .fold(coeffs[POLY_TERMS - 1], |acc, &c| add(mul(acc, x), c))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::XorShift;

    #[test]
    fn poly_eval_is_the_sum_of_the_terms() {
        let mut rng = XorShift::new(11);
        let coeffs: [u64; POLY_TERMS] = std::array::from_fn(|_| rng.next_u64() % P);
        let x: Vec<u64> = (0..64)
            .map(|_| rng.next_u64() % P)
            .chain([0, 1, P - 1])
            .collect();
        let want: Vec<u64> = x
            .iter()
            .map(|&x| (0..POLY_TERMS).fold(0, |acc, k| add(acc, mul(coeffs[k], pow(x, k as u64)))))
            .collect();
        assert_eq!(poly_eval(&coeffs, &x), want);
        assert_eq!(poly_eval(&coeffs, &[0]), [coeffs[0]]);
    }

    /// 2^64 mod p.
    const EPSILON: u64 = 0xFFFF_FFFF;

    /// The reduction of `cuda/goldilocks.cuh`, transcribed line for line, so
    /// the GPU's method is checked against u128 arithmetic on this machine.
    mod gpu {
        use super::{EPSILON, P};

        pub(super) fn canonical(a: u64) -> u64 {
            if a >= P { a - P } else { a }
        }

        pub(super) fn add(a: u64, b: u64) -> u64 {
            let (a, b) = (canonical(a), canonical(b));
            let s = a.wrapping_add(b);
            if s < a {
                return s + EPSILON;
            }
            canonical(s)
        }

        pub(super) fn sub(a: u64, b: u64) -> u64 {
            let (a, b) = (canonical(a), canonical(b));
            let d = a.wrapping_sub(b);
            if a < b {
                return d - EPSILON;
            }
            d
        }

        pub(super) fn reduce128(lo: u64, hi: u64) -> u64 {
            let hh = hi >> 32;
            let hl = hi & EPSILON;
            let mut t0 = lo.wrapping_sub(hh);
            if lo < hh {
                t0 -= EPSILON;
            }
            let t1 = hl * EPSILON;
            let mut s = t0.wrapping_add(t1);
            if s < t1 {
                s += EPSILON;
            }
            canonical(s)
        }

        pub(super) fn mul(a: u64, b: u64) -> u64 {
            let product = u128::from(a) * u128::from(b);
            reduce128(product as u64, (product >> 64) as u64)
        }
    }

    /// Values where carries, borrows and reductions change behaviour.
    fn edge_values() -> Vec<u64> {
        let mut values = vec![
            0,
            1,
            2,
            EPSILON - 1,
            EPSILON,
            1 << 32,
            (1 << 32) + 1,
            1 << 48,
            1 << 63,
            P - 2,
            P - 1,
            P,
            P + 1,
            u64::MAX - 1,
            u64::MAX,
        ];
        values.extend(values.clone().iter().map(|&v| v ^ 0x5555_5555_5555_5555));
        values
    }

    #[test]
    fn modulus_and_epsilon() {
        assert_eq!(u128::from(P), (1u128 << 64) - (1u128 << 32) + 1);
        assert_eq!(((1u128 << 64) % P128) as u64, EPSILON);
        // 2^96 = -1 mod p, which the GPU reduction relies on.
        assert_eq!(((1u128 << 96) % P128) as u64, P - 1);
    }

    #[test]
    fn specific_values() {
        assert_eq!(canonical(u64::MAX), EPSILON - 1);
        assert_eq!(add(P - 1, 1), 0);
        assert_eq!(add(P - 1, P - 1), P - 2);
        assert_eq!(add(u64::MAX, u64::MAX), 2 * (EPSILON - 1));
        assert_eq!(sub(0, 1), P - 1);
        assert_eq!(sub(1, P), 1);
        assert_eq!(sub(0, u64::MAX), P - (EPSILON - 1));
        assert_eq!(mul(P - 1, P - 1), 1);
        assert_eq!(mul(1 << 32, 1 << 32), EPSILON);
        assert_eq!(mul(1 << 48, 1 << 48), P - 1);
        assert_eq!(mul(u64::MAX, u64::MAX), 0xFFFF_FFFC_0000_0004);
        assert_eq!(inv(2), 0x7FFF_FFFF_8000_0001);
        assert_eq!(pow(7, P - 1), 1);
        assert_eq!(pow(12345, 0), 1);
        assert_eq!(pow(3, 5), 243);
    }

    #[test]
    fn reference_agrees_with_u128_on_edges() {
        for &a in &edge_values() {
            for &b in &edge_values() {
                let (a128, b128) = (u128::from(a), u128::from(b));
                assert_eq!(
                    u128::from(add(a, b)),
                    (a128 + b128) % P128,
                    "add({a:#x}, {b:#x})"
                );
                assert_eq!(
                    u128::from(mul(a, b)),
                    (a128 * b128) % P128,
                    "mul({a:#x}, {b:#x})"
                );
                assert_eq!(add(sub(a, b), b), canonical(a), "sub({a:#x}, {b:#x})");
                assert!(sub(a, b) < P);
            }
        }
    }

    #[test]
    fn gpu_reduction_agrees_with_reference_on_edges() {
        for &a in &edge_values() {
            for &b in &edge_values() {
                assert_eq!(gpu::add(a, b), add(a, b), "add({a:#x}, {b:#x})");
                assert_eq!(gpu::sub(a, b), sub(a, b), "sub({a:#x}, {b:#x})");
                assert_eq!(gpu::mul(a, b), mul(a, b), "mul({a:#x}, {b:#x})");
            }
        }
        // 128-bit inputs that drive each branch of reduce128.
        for &lo in &edge_values() {
            for &hi in &edge_values() {
                let x = (u128::from(hi) << 64) | u128::from(lo);
                assert_eq!(
                    u128::from(gpu::reduce128(lo, hi)),
                    x % P128,
                    "reduce128({lo:#x}, {hi:#x})"
                );
            }
        }
    }

    #[test]
    fn gpu_reduction_agrees_with_reference_on_random_values() {
        let mut rng = XorShift::new(0x9E37_79B9_7F4A_7C15);
        for _ in 0..200_000 {
            let (a, b) = (rng.next_u64(), rng.next_u64());
            assert_eq!(gpu::add(a, b), add(a, b), "add({a:#x}, {b:#x})");
            assert_eq!(gpu::sub(a, b), sub(a, b), "sub({a:#x}, {b:#x})");
            assert_eq!(gpu::mul(a, b), mul(a, b), "mul({a:#x}, {b:#x})");
        }
    }

    #[test]
    fn mul_inv_round_trips() {
        let mut rng = XorShift::new(42);
        let mut values = edge_values();
        values.extend(rng.vec_u64(1000));
        for a in values.into_iter().filter(|&a| canonical(a) != 0) {
            let a_inv = inv(a);
            assert_eq!(mul(a, a_inv), 1, "a = {a:#x}");
            assert_eq!(inv(a_inv), canonical(a), "a = {a:#x}");
        }
    }

    #[test]
    #[should_panic(expected = "0 has no inverse")]
    fn inverse_of_p_panics() {
        inv(P);
    }

    #[test]
    fn vector_entry_points() {
        let a = [P - 1, 5, u64::MAX];
        let b = [2, P - 5, 1];
        assert_eq!(add_vec(&a, &b), [1, 0, EPSILON]);
        assert_eq!(mul_vec(&a, &b), [P - 2, P - 25, EPSILON - 1]);
        // alpha = -1: out = y - x.
        assert_eq!(axpy(P - 1, &a, &b), [3, P - 10, P - (EPSILON - 2)]);
        assert_eq!(axpy(3, &[4], &[5]), [17]);
    }
}
