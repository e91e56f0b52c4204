//! Paired ratios with a bootstrap 95 % interval: how bench-load compares two arms measured
//! interleaved in the same run, and what its gate reads.

use std::time::Duration;

/// The ratio of two arms measured in pairs (rep i of each arm ran back to back).
#[derive(Debug, Clone, PartialEq)]
pub struct Ratio {
    /// Its name in `bench-ratios.csv` (e.g. `load_vs_bare_kept`).
    pub name: String,
    /// The arm in the numerator (`scope/method`).
    pub numerator: String,
    /// The arm in the denominator.
    pub denominator: String,
    /// How many pairs.
    pub pairs: usize,
    /// The median of the per-pair ratios.
    pub median: f64,
    /// The bootstrap 95 % interval of that median.
    pub low: f64,
    /// Upper end of the interval: what the gate compares with `limit`.
    pub high: f64,
    /// The gate's limit on `high`; `None` for a ratio that is reported, not gated.
    pub limit: Option<f64>,
}

/// Bootstrap resamples.
const RESAMPLES: usize = 4000;

impl Ratio {
    /// The median per-pair ratio `a[i] / b[i]` with a bootstrap 95 % interval (resampling
    /// pairs with replacement; a fixed seed, so the same samples give the same interval).
    pub fn paired(
        name: &str,
        numerator: &str,
        denominator: &str,
        a: &[Duration],
        b: &[Duration],
        limit: Option<f64>,
    ) -> Ratio {
        let ratios: Vec<f64> = a
            .iter()
            .zip(b)
            .filter(|(_, d)| !d.is_zero())
            .map(|(n, d)| n.as_secs_f64() / d.as_secs_f64())
            .collect();
        let (median, low, high) = bootstrap(&ratios);
        Ratio {
            name: name.into(),
            numerator: numerator.into(),
            denominator: denominator.into(),
            pairs: ratios.len(),
            median,
            low,
            high,
            limit,
        }
    }

    /// The `bench-ratios.csv` line.
    pub fn csv_line(&self) -> String {
        format!(
            "{},{},{},{},{:.4},{:.4},{:.4},{}",
            self.name,
            self.numerator,
            self.denominator,
            self.pairs,
            self.median,
            self.low,
            self.high,
            self.limit.map_or("-".to_string(), |l| format!("{l:.2}"))
        )
    }

    /// Parses a `bench-ratios.csv` line.
    pub fn parse(line: &str) -> Option<Ratio> {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 8 {
            return None;
        }
        Some(Ratio {
            name: f[0].into(),
            numerator: f[1].into(),
            denominator: f[2].into(),
            pairs: f[3].parse().ok()?,
            median: f[4].parse().ok()?,
            low: f[5].parse().ok()?,
            high: f[6].parse().ok()?,
            limit: match f[7] {
                "-" => None,
                l => Some(l.parse().ok()?),
            },
        })
    }

    /// Whether the gate accepts it: a gated ratio's upper end within its limit; an A/A
    /// control's whole interval within [1/[`CONTROL_LIMIT`], [`CONTROL_LIMIT`]]; always,
    /// when reported only.
    pub fn passes(&self) -> bool {
        self.pairs > 0
            && match self.is_control() {
                true => self.low >= 1.0 / CONTROL_LIMIT && self.high <= CONTROL_LIMIT,
                false => self.limit.is_none_or(|l| self.high <= l),
            }
    }

    /// An A/A control: one arm against itself (named `*_vs_itself`). It must show no
    /// difference the gate could mistake for a cost.
    pub fn is_control(&self) -> bool {
        self.name.ends_with("_vs_itself")
    }

    /// Whether the gate judges it (a limit, or a control).
    pub fn gated(&self) -> bool {
        self.is_control() || self.limit.is_some()
    }

    /// The gate's limits, as the chart draws them: the upper one of a gated ratio, both of
    /// a control, none of a reported one.
    pub fn limits(&self) -> Vec<f64> {
        match self.is_control() {
            true => vec![1.0 / CONTROL_LIMIT, CONTROL_LIMIT],
            false => self.limit.into_iter().collect(),
        }
    }
}

/// How far an A/A control may stray from 1, either way.
pub const CONTROL_LIMIT: f64 = 1.05;

/// The `bench-ratios.csv` header line.
pub const CSV_HEADER: &str = "ratio,numerator,denominator,pairs,median,ci95_low,ci95_high,limit";

use crate::repo::stats::median;

/// (median, 2.5th and 97.5th percentile of the bootstrap medians).
fn bootstrap(x: &[f64]) -> (f64, f64, f64) {
    let m = median(x);
    if x.len() < 2 {
        return (m, m, m);
    }
    let mut rng = fastrand::Rng::with_seed(0x5eed_0cda_0a07);
    let mut medians = Vec::with_capacity(RESAMPLES);
    let mut sample = vec![0.0; x.len()];
    for _ in 0..RESAMPLES {
        for s in sample.iter_mut() {
            *s = x[rng.usize(..x.len())];
        }
        medians.push(median(&sample));
    }
    medians.sort_by(f64::total_cmp);
    let at = |p: f64| medians[((medians.len() - 1) as f64 * p).round() as usize];
    (m, at(0.025), at(0.975))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|u| Duration::from_micros(*u)).collect()
    }

    #[test]
    fn the_interval_brackets_the_median_and_narrows_with_agreement() {
        let a = us(&[101, 99, 103, 100, 98, 102, 100, 101, 99, 100]);
        let b = us(&[100; 10]);
        let r = Ratio::paired("x", "a", "b", &a, &b, Some(1.05));
        assert!(r.low <= r.median && r.median <= r.high, "{r:?}");
        assert!((r.median - 1.0).abs() < 0.011, "{r:?}");
        assert!(r.passes());
        // Noisy pairs give a wide interval that can fail the gate even with a fine median.
        let a = us(&[100, 70, 130, 100, 60, 140, 100, 150, 50, 100]);
        let noisy = Ratio::paired("x", "a", "b", &a, &b, Some(1.05));
        assert!(noisy.high - noisy.low > r.high - r.low, "{noisy:?}");
        assert!(!noisy.passes(), "{noisy:?}");
        // The CSV line round-trips.
        assert_eq!(Ratio::parse(&r.csv_line()).unwrap().pairs, 10);
        // A reported-only ratio never fails.
        let report = Ratio::paired("x", "a", "b", &a, &b, None);
        assert!(report.passes() && Ratio::parse(&report.csv_line()).unwrap().limit.is_none());
    }
}
