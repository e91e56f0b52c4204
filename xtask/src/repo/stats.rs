//! Order statistics for every benchmark (`bench`, `bench-load`, `bench-serve`): one
//! median and one percentile, so the three report the same thing under the same name.
//! The median of an even count is the mean of the two middle values; a percentile is the
//! sample at the nearest rank. NaN samples sort last (`total_cmp`); no samples give NaN.

use std::time::Duration;

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// The median of `v` (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    let v = sorted(v);
    let m = v.len() / 2;
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[m],
        _ => (v[m - 1] + v[m]) / 2.0,
    }
}

/// The `p`-th quantile of `v` (`p` in [0, 1], e.g. 0.99), the sample at the nearest rank
/// (NaN when empty).
#[cfg_attr(not(feature = "net"), allow(dead_code))] // bench-serve's p99
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let v = sorted(v);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((v.len() - 1) as f64 * p.clamp(0.0, 1.0)).round() as usize;
    v[rank]
}

/// The median of durations, as [`median`] (to the nanosecond).
pub fn median_duration(v: &[Duration]) -> Duration {
    let secs: Vec<f64> = v.iter().map(Duration::as_secs_f64).collect();
    Duration::from_secs_f64(median(&secs).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_percentile_have_one_definition() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 0.5), 51.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert!(percentile(&[], 0.5).is_nan());
        let d = Duration::from_millis;
        assert_eq!(median_duration(&[d(30), d(10), d(20), d(40)]), d(25));
    }
}
