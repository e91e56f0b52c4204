//! CPU reference for the research kernels of `research/` (`ntt_fused.cu`): the same tiles,
//! the same order of butterflies, so a GPU result can be compared after every launch.
//!
//! `ntt_stages` runs stages `[s0, s0 + stages)` of the radix-2 decimation-in-time transform
//! of [`crate::ntt`] on independent tiles of `2^stages` elements; [`forward_fused`] composes
//! it into the whole forward transform, which equals [`crate::ntt::forward`] element for
//! element (tested below for every tile size).

use crate::goldilocks;
use crate::ntt;

/// What `ntt_stages(data, twiddles, log_n, s0, stages)` does: for every tile (fixed low
/// bits `l < 2^s0` and high bits `h`), the elements `h 2^(s0+stages) + m 2^s0 + l`,
/// `m in [0, 2^stages)`, go through stages `s0 .. s0 + stages` of the transform with the
/// twiddle `twiddles[(k 2^s0 + l) << (log_n - 1 - s)]` of stage `s`.
///
/// Out-of-range arguments leave `data` untouched, as the kernel does.
///
/// # Panics
///
/// If `data` does not hold `2^log_n` elements or `twiddles` not `n/2` (for in-range
/// arguments).
pub fn ntt_stages(data: &mut [u64], twiddles: &[u64], log_n: u32, s0: u32, stages: u32) {
    if log_n == 0 || log_n > 32 || stages == 0 || s0 >= log_n || stages > log_n - s0 {
        return;
    }
    assert_eq!(data.len() as u64, 1u64 << log_n, "data must hold 2^log_n");
    assert_eq!(twiddles.len(), data.len() / 2, "twiddles must hold n/2");
    let size = 1usize << stages;
    let low = 1usize << s0;
    let tiles = data.len() >> stages;
    let mut tile = vec![0u64; size];
    for t in 0..tiles {
        let l = t & (low - 1);
        let h = t >> s0;
        let base = (h << (s0 + stages)) + l;
        for (m, x) in tile.iter_mut().enumerate() {
            *x = data[base + (m << s0)];
        }
        for st in 0..stages {
            let half = 1usize << st;
            let shift = log_n - 1 - (s0 + st);
            for j in 0..size / 2 {
                let k = j & (half - 1);
                let i0 = ((j >> st) << (st + 1)) + k;
                let i1 = i0 + half;
                let w = twiddles[((k << s0) + l) << shift];
                let u = tile[i0];
                let v = goldilocks::mul(tile[i1], w);
                tile[i0] = goldilocks::add(u, v);
                tile[i1] = goldilocks::sub(u, v);
            }
        }
        for (m, x) in tile.iter().enumerate() {
            data[base + (m << s0)] = *x;
        }
    }
}

/// The launches of the fused forward transform for `log_n` with tiles of `2^tile_log`:
/// `(s0, stages)` of each `ntt_stages` launch after the bit reversal.
pub fn fused_schedule(log_n: u32, tile_log: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut s0 = 0;
    while s0 < log_n && tile_log > 0 {
        out.push((s0, tile_log.min(log_n - s0)));
        s0 += tile_log;
    }
    out
}

/// The forward transform as `ntt_fused` computes it: bit reversal, then
/// [`fused_schedule`]'s `ntt_stages` launches.
pub fn forward_fused(data: &mut [u64], tile_log: u32) {
    let log_n = data.len().trailing_zeros();
    let tw = ntt::twiddles(log_n, false);
    ntt::bit_reverse(data);
    for (s0, stages) in fused_schedule(log_n, tile_log) {
        ntt_stages(data, &tw, log_n, s0, stages);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::XorShift;

    #[test]
    fn fused_stages_equal_the_released_radix2_transform() {
        let mut rng = XorShift::new(0x5eed);
        for log_n in [1u32, 2, 5, 10, 13] {
            let input = rng.vec_u64(1 << log_n);
            let mut want = input.clone();
            ntt::forward(&mut want);
            for tile_log in [1u32, 2, 3, 4, 10, 11] {
                let mut got = input.clone();
                forward_fused(&mut got, tile_log);
                assert_eq!(got, want, "log_n {log_n} tile_log {tile_log}");
            }
        }
    }

    #[test]
    fn one_fused_launch_equals_its_radix2_stages() {
        let mut rng = XorShift::new(7);
        let log_n = 9;
        let tw = ntt::twiddles(log_n, false);
        let input = rng.vec_u64(1 << log_n);
        for (s0, stages) in [(0, 3), (3, 4), (2, 7), (8, 1)] {
            let mut a = input.clone();
            ntt_stages(&mut a, &tw, log_n, s0, stages);
            let mut b = input.clone();
            for s in s0..s0 + stages {
                ntt::butterfly_stage(&mut b, &tw, s);
            }
            assert_eq!(a, b, "s0 {s0} stages {stages}");
        }
    }

    #[test]
    fn out_of_range_arguments_touch_nothing() {
        let mut a = vec![1u64, 2, 3, 4];
        let tw = ntt::twiddles(2, false);
        for (s0, stages) in [(0, 0), (2, 1), (1, 2), (0, 3)] {
            ntt_stages(&mut a, &tw, 2, s0, stages);
            assert_eq!(a, [1, 2, 3, 4]);
        }
        assert_eq!(fused_schedule(20, 8), [(0, 8), (8, 8), (16, 4)]);
        assert_eq!(fused_schedule(0, 8), []);
    }
}
