//! CPU reference for `cuda/ntt.cu`: a radix-2 NTT over Goldilocks, computed
//! with the same steps as the GPU (bit reversal, then one Cooley–Tukey
//! decimation-in-time stage at a time), so that a mismatch after any launch
//! points at the GPU.
//!
//! The host drives the GPU through the same sequence [`forward`] and
//! [`inverse`] run here: [`bit_reverse`] is `ntt_bit_reverse`,
//! [`butterfly_stage`] is `ntt_butterfly`, [`scale`] is `ntt_scale`, and
//! [`twiddles`] is the exact table `ntt_butterfly` reads.

use crate::goldilocks::{self, P};

/// The largest supported `log_n`: p - 1 = 2^32 (2^32 - 1), so 2^32 is the
/// largest power-of-two order of a root of unity.
pub const TWO_ADICITY: u32 = 32;

/// The generator of the multiplicative group used to derive roots of unity.
pub const MULTIPLICATIVE_GENERATOR: u64 = 7;

/// A primitive `2^log_n`-th root of unity: `7 ^ ((p - 1) / 2^log_n)`.
///
/// All of them are powers of the primitive 2^32-th root `root_of_unity(32)`,
/// since `root_of_unity(k) = root_of_unity(32) ^ (2^(32 - k))`.
///
/// # Panics
///
/// If `log_n > 32`.
pub fn root_of_unity(log_n: u32) -> u64 {
    assert!(
        log_n <= TWO_ADICITY,
        "log_n = {log_n} exceeds the 2-adicity {TWO_ADICITY}"
    );
    goldilocks::pow(MULTIPLICATIVE_GENERATOR, (P - 1) >> log_n)
}

/// The table `ntt_butterfly` reads: `omega^t` for `t` in `[0, n/2)`, with
/// `omega = root_of_unity(log_n)`, or its inverse when `inverse` is set.
/// Empty for `log_n = 0`.
///
/// # Panics
///
/// If `log_n > 32`.
pub fn twiddles(log_n: u32, inverse: bool) -> Vec<u64> {
    let omega = root_of_unity(log_n);
    let omega = if inverse {
        goldilocks::inv(omega)
    } else {
        omega
    };
    let half = if log_n == 0 { 0 } else { 1usize << (log_n - 1) };
    let mut table = Vec::with_capacity(half);
    let mut power = 1;
    for _ in 0..half {
        table.push(power);
        power = goldilocks::mul(power, omega);
    }
    table
}

/// The factor `ntt_scale` is given to finish an inverse transform: `n^-1` mod p.
///
/// # Panics
///
/// If `log_n > 32`.
pub fn inverse_scale(log_n: u32) -> u64 {
    assert!(
        log_n <= TWO_ADICITY,
        "log_n = {log_n} exceeds the 2-adicity {TWO_ADICITY}"
    );
    goldilocks::inv(1u64 << log_n)
}

/// `log2(data.len())`, checking the length is a supported power of two.
fn log_len(len: usize) -> u32 {
    assert!(
        len.is_power_of_two(),
        "NTT length {len} is not a power of two"
    );
    let log_n = len.trailing_zeros();
    assert!(
        log_n <= TWO_ADICITY,
        "NTT length 2^{log_n} exceeds 2^{TWO_ADICITY}"
    );
    log_n
}

/// What `ntt_bit_reverse` does: swaps `data[i]` and `data[rev(i)]`, where
/// `rev` reverses the low `log_n` bits, for every `i < rev(i)`.
///
/// # Panics
///
/// If `data.len()` is not a power of two up to 2^32.
pub fn bit_reverse(data: &mut [u64]) {
    let log_n = log_len(data.len());
    if log_n == 0 {
        return;
    }
    for i in 0..data.len() {
        let r = ((i as u64).reverse_bits() >> (64 - log_n)) as usize;
        if i < r {
            data.swap(i, r);
        }
    }
}

/// What `ntt_butterfly` does for `stage` (half = 2^stage): for each `j` in
/// `[0, n/2)`, with `k = j mod half`, `i0 = (j / half) * 2 half + k`,
/// `i1 = i0 + half` and `w = twiddles[k << (log_n - 1 - stage)]`, replaces
/// `(a[i0], a[i1])` by `(u + v, u - v)` where `u = a[i0]`, `v = a[i1] w`.
///
/// # Panics
///
/// If `data.len()` is not a power of two up to 2^32, `twiddles` does not hold
/// `n/2` entries, or `stage >= log_n`.
pub fn butterfly_stage(data: &mut [u64], twiddles: &[u64], stage: u32) {
    let log_n = log_len(data.len());
    assert_eq!(
        twiddles.len(),
        data.len() / 2,
        "the twiddle table must hold n/2 entries"
    );
    assert!(
        stage < log_n,
        "stage {stage} out of range for log_n = {log_n}"
    );
    let half = 1usize << stage;
    let twiddle_shift = log_n - 1 - stage;
    for j in 0..data.len() / 2 {
        let k = j & (half - 1);
        let i0 = ((j >> stage) << (stage + 1)) + k;
        let i1 = i0 + half;
        let w = twiddles[k << twiddle_shift];
        let u = data[i0];
        let v = goldilocks::mul(data[i1], w);
        data[i0] = goldilocks::add(u, v);
        data[i1] = goldilocks::sub(u, v);
    }
}

/// What `ntt_scale` does: `data[i] = data[i] * factor` mod p.
pub fn scale(data: &mut [u64], factor: u64) {
    for x in data {
        *x = goldilocks::mul(*x, factor);
    }
}

/// The forward transform in place: `X[k] = sum_j x[j] omega^(j k)`, with
/// `omega = root_of_unity(log_n)`, input and output in natural order.
///
/// # Panics
///
/// If `data.len()` is not a power of two up to 2^32.
pub fn forward(data: &mut [u64]) {
    transform(data, false);
}

/// The inverse transform in place: `forward` with `omega^-1`, then a scaling
/// by `n^-1`, so `inverse(forward(x)) = x` (for canonical `x`).
///
/// # Panics
///
/// If `data.len()` is not a power of two up to 2^32.
pub fn inverse(data: &mut [u64]) {
    let log_n = transform(data, true);
    scale(data, inverse_scale(log_n));
}

/// Bit reversal and all butterfly stages; returns `log_n`.
fn transform(data: &mut [u64], inverse: bool) -> u32 {
    let log_n = log_len(data.len());
    let table = twiddles(log_n, inverse);
    bit_reverse(data);
    for stage in 0..log_n {
        butterfly_stage(data, &table, stage);
    }
    log_n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::goldilocks::{add, canonical, inv, mul, pow};
    use crate::test_rng::XorShift;

    /// `X[k] = sum_j x[j] omega^(j k)`, O(n^2), straight from the definition.
    fn naive_dft(x: &[u64], omega: u64) -> Vec<u64> {
        (0..x.len() as u64)
            .map(|k| {
                x.iter().enumerate().fold(0, |acc, (j, &xj)| {
                    add(acc, mul(xj, pow(omega, j as u64 * k)))
                })
            })
            .collect()
    }

    #[test]
    fn primitive_root_of_order_two_to_the_32() {
        let g = root_of_unity(32);
        // The value other Goldilocks libraries (e.g. plonky2) use.
        assert_eq!(g, 1_753_635_133_440_165_772);
        assert_eq!(pow(g, 1 << 31), P - 1);
        assert_eq!(pow(g, 1 << 32), 1);
    }

    #[test]
    fn every_root_has_exact_order() {
        assert_eq!(root_of_unity(0), 1);
        assert_eq!(root_of_unity(1), P - 1);
        for log_n in 1..=TWO_ADICITY {
            let omega = root_of_unity(log_n);
            // omega^(n/2) = -1 means the order is n exactly, not a divisor.
            assert_eq!(pow(omega, 1 << (log_n - 1)), P - 1, "log_n = {log_n}");
            assert_eq!(pow(omega, 1 << log_n), 1, "log_n = {log_n}");
            assert_eq!(
                pow(root_of_unity(32), 1 << (32 - log_n)),
                omega,
                "log_n = {log_n}"
            );
        }
    }

    #[test]
    #[should_panic(expected = "exceeds the 2-adicity")]
    fn log_n_above_32_panics() {
        root_of_unity(33);
    }

    #[test]
    fn twiddle_tables() {
        assert!(twiddles(0, false).is_empty());
        assert_eq!(twiddles(1, false), [1]);
        let omega = root_of_unity(3);
        let table = twiddles(3, false);
        assert_eq!(table, [1, omega, mul(omega, omega), pow(omega, 3)]);
        // omega_8^2 is a square root of -1: omega_4.
        assert_eq!(table[2], root_of_unity(2));
        let inverse_table = twiddles(3, true);
        assert_eq!(inverse_table.len(), 4);
        for (w, w_inv) in table.iter().zip(&inverse_table) {
            assert_eq!(mul(*w, *w_inv), 1);
        }
        assert_eq!(inverse_scale(3), inv(8));
        assert_eq!(mul(inverse_scale(32), 1 << 32), 1);
    }

    #[test]
    fn bit_reverse_permutation() {
        let mut data: Vec<u64> = (0..8).collect();
        bit_reverse(&mut data);
        assert_eq!(data, [0, 4, 2, 6, 1, 5, 3, 7]);
        bit_reverse(&mut data);
        assert_eq!(data, [0, 1, 2, 3, 4, 5, 6, 7]);
        let mut one = [9];
        bit_reverse(&mut one);
        assert_eq!(one, [9]);
    }

    #[test]
    fn forward_of_unit_vectors() {
        let mut delta = [1, 0, 0, 0];
        forward(&mut delta);
        assert_eq!(delta, [1, 1, 1, 1]);
        let omega = root_of_unity(2);
        let mut shifted = [0, 1, 0, 0];
        forward(&mut shifted);
        assert_eq!(shifted, [1, omega, P - 1, mul(P - 1, omega)]);
        let mut pair = [3, 5];
        forward(&mut pair);
        assert_eq!(pair, [8, P - 2]);
    }

    #[test]
    fn forward_matches_naive_dft() {
        let mut rng = XorShift::new(7);
        for log_n in 0..=6 {
            let x: Vec<u64> = rng.vec_u64(1 << log_n).into_iter().map(canonical).collect();
            let mut fast = x.clone();
            forward(&mut fast);
            assert_eq!(
                fast,
                naive_dft(&x, root_of_unity(log_n)),
                "n = {}",
                1 << log_n
            );

            // The inverse is the naive DFT with omega^-1, scaled by n^-1.
            let mut back = x.clone();
            inverse(&mut back);
            let mut expected = naive_dft(&x, inv(root_of_unity(log_n)));
            scale(&mut expected, inverse_scale(log_n));
            assert_eq!(back, expected, "n = {}", 1 << log_n);
        }
    }

    #[test]
    fn inverse_undoes_forward() {
        let mut rng = XorShift::new(0xDEAD_BEEF);
        for log_n in 0..=12 {
            let x: Vec<u64> = rng.vec_u64(1 << log_n).into_iter().map(canonical).collect();
            let mut y = x.clone();
            forward(&mut y);
            if log_n >= 2 {
                assert_ne!(y, x, "log_n = {log_n}");
            }
            inverse(&mut y);
            assert_eq!(y, x, "log_n = {log_n}");
        }
    }

    #[test]
    fn non_canonical_input_is_read_mod_p() {
        let mut raw = [u64::MAX, P, P + 1, 2];
        let mut reduced = raw.map(canonical);
        forward(&mut raw);
        forward(&mut reduced);
        assert_eq!(raw, reduced);
    }

    #[test]
    fn convolution_theorem() {
        // (1 + 2x)(3 + 4x) = 3 + 10x + 8x^2, via pointwise products.
        let mut a = [1, 2, 0, 0];
        let mut b = [3, 4, 0, 0];
        forward(&mut a);
        forward(&mut b);
        let mut c: Vec<u64> = a.iter().zip(&b).map(|(&a, &b)| mul(a, b)).collect();
        inverse(&mut c);
        assert_eq!(c, [3, 10, 8, 0]);
    }

    #[test]
    #[should_panic(expected = "not a power of two")]
    fn length_must_be_a_power_of_two() {
        forward(&mut [1, 2, 3]);
    }
}
