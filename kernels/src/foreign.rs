//! CPU references of the foreign-style corpus (`kernels/foreign`): the same computations as
//! its template kernels, for both fields, element for element.
//!
//! Field elements are their device representation: Goldilocks (`gl64_t`) is a `u64` below
//! [`crate::goldilocks::P`], BabyBear (`bb31_t`) a `u32` below [`BB31_P`].
//!
//! ```
//! use cuda_aot_kernels::foreign::{Field, poly_eval, BB31_P};
//! // 1 + 2x at x = 3, in both fields.
//! assert_eq!(poly_eval(&[1u64, 2], &[3]), vec![7]);
//! assert_eq!(poly_eval(&[1u32, BB31_P - 1], &[1]), vec![0]);
//! assert_eq!(<u32 as Field>::from_u32(BB31_P), 0);
//! ```

use crate::goldilocks;

/// The BabyBear prime, 2^31 - 2^27 + 1.
pub const BB31_P: u32 = 0x7800_0001;

/// A prime field element in its device representation.
pub trait Field: Copy + PartialEq + std::fmt::Debug {
    /// The C++ type name the kernels are instantiated for (`gl64_t`, `bb31_t`).
    const CPP: &'static str;
    /// a + b.
    fn add(self, b: Self) -> Self;
    /// a · b.
    fn mul(self, b: Self) -> Self;
    /// A small integer as a field element.
    fn from_u32(x: u32) -> Self;
    /// Reduces any representative into the field.
    fn canonical(self) -> Self;
}

impl Field for u64 {
    const CPP: &'static str = "gl64_t";
    fn add(self, b: u64) -> u64 {
        goldilocks::add(self, b)
    }
    fn mul(self, b: u64) -> u64 {
        goldilocks::mul(self, b)
    }
    fn from_u32(x: u32) -> u64 {
        u64::from(x)
    }
    fn canonical(self) -> u64 {
        goldilocks::canonical(self)
    }
}

impl Field for u32 {
    const CPP: &'static str = "bb31_t";
    fn add(self, b: u32) -> u32 {
        ((u64::from(self) + u64::from(b)) % u64::from(BB31_P)) as u32
    }
    fn mul(self, b: u32) -> u32 {
        ((u64::from(self) * u64::from(b)) % u64::from(BB31_P)) as u32
    }
    fn from_u32(x: u32) -> u32 {
        x % BB31_P
    }
    fn canonical(self) -> u32 {
        self % BB31_P
    }
}

/// `b^e` in BabyBear (square and multiply): the CPU reference of `ntt_pow`, and how the
/// tests make roots of unity and inverses.
pub fn bb31_pow(b: u32, mut e: u64) -> u32 {
    let p = u64::from(BB31_P);
    let (mut r, mut b) = (1u64, u64::from(b) % p);
    while e > 0 {
        if e & 1 == 1 {
            r = r * b % p;
        }
        b = b * b % p;
        e >>= 1;
    }
    r as u32
}

/// `fields::vec_mul<F>`: out[i] = a[i] · b[i].
pub fn vec_mul<F: Field>(a: &[F], b: &[F]) -> Vec<F> {
    a.iter().zip(b).map(|(x, y)| x.mul(*y)).collect()
}

/// `fields::vec_axpy<F>`: y[i] = alpha · x[i] + y[i], in place.
pub fn vec_axpy<F: Field>(y: &mut [F], alpha: F, x: &[F]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi = alpha.mul(*xi).add(*yi);
    }
}

/// `ntt::bit_rev_permutation<F>`: d[i] and d[rev(i)] swapped, for 2^lg_n elements.
pub fn bit_rev_permutation<F: Field>(d: &mut [F]) {
    let n = d.len();
    assert!(
        n.is_power_of_two(),
        "{n} elements: a power of two is required"
    );
    let lg_n = n.trailing_zeros();
    for i in 0..n {
        let r = if lg_n == 0 {
            0
        } else {
            (i as u32).reverse_bits() as usize >> (32 - lg_n)
        };
        if i < r {
            d.swap(i, r);
        }
    }
}

/// `poly::eval<F>`: out[i] = sum_k coeffs[k] · xs[i]^k (Horner).
pub fn poly_eval<F: Field>(coeffs: &[F], xs: &[F]) -> Vec<F> {
    xs.iter()
        .map(|x| {
            let mut acc = *coeffs.last().expect("at least one coefficient");
            for c in coeffs.iter().rev().skip(1) {
                acc = acc.mul(*x).add(*c);
            }
            acc
        })
        .collect()
}

/// `poly::derivative<F>`: out[k] = (k + 1) · coeffs[k + 1], for k < deg.
pub fn poly_derivative<F: Field>(coeffs: &[F]) -> Vec<F> {
    coeffs
        .iter()
        .enumerate()
        .skip(1)
        .map(|(k, c)| F::from_u32(k as u32).mul(*c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn babybear_powers_follow_fermat() {
        let p = u64::from(BB31_P);
        assert_eq!(bb31_pow(31, p - 1), 1);
        assert_eq!(bb31_pow(31, (p - 1) / 2), BB31_P - 1, "31 is a non-residue");
        let inv = bb31_pow(1024, p - 2);
        assert_eq!(u64::from(inv) * 1024 % p, 1);
        assert_eq!(bb31_pow(7, 0), 1);
    }

    #[test]
    fn references_agree_with_hand_computed_values() {
        // (p - 1)^2 = 1 in both fields.
        assert_eq!(vec_mul(&[goldilocks::P - 1], &[goldilocks::P - 1]), [1u64]);
        assert_eq!(vec_mul(&[BB31_P - 1], &[BB31_P - 1]), [1u32]);
        let mut y = vec![1u32, 2];
        vec_axpy(&mut y, 3, &[BB31_P - 1, 5]);
        assert_eq!(y, [BB31_P - 2, 17]);
        let mut d: Vec<u64> = (0..8).collect();
        bit_rev_permutation(&mut d);
        assert_eq!(d, [0, 4, 2, 6, 1, 5, 3, 7]);
        // 3 + 2x + x^2: value at 2 is 11, derivative 2 + 2x.
        assert_eq!(poly_eval(&[3u64, 2, 1], &[2, 0]), [11, 3]);
        assert_eq!(poly_derivative(&[3u32, 2, 1]), [2, 2]);
        assert_eq!(<u64 as Field>::CPP, "gl64_t");
    }
}
