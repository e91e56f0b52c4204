//! An embedded bundle against the same release on files (issue 36): `Runtime::open_embedded`
//! of the registry packed into one in-memory bundle (as `include_bundle!` embeds it) against
//! `Runtime::open` of the registry folder, each followed by `preload`, interleaved in the
//! balanced order, after the device's primary context exists (held by the bench), so both
//! arms time verification, selection, the blob checks and the loads. Gated: the upper end
//! of the interval at most 1.00 (embedded no slower than files).

use anyhow::Result;
use cuda_aot::bundle::Embedded;
use cuda_aot::source::DirSource;
use cuda_aot::{Digest, Policy, Runtime};
use std::path::Path;
use std::time::Instant;

use super::Args;
use super::run::{Row, interleave};
use super::stats::Ratio;

impl Args {
    /// The two arms for `registry` (rows `<scope>/open_files` and `<scope>/open_embedded`)
    /// and their ratio `<scope>_open_embedded_vs_files`.
    pub(super) fn embedded_arms(
        &self,
        scope: &str,
        registry: &Path,
        trust: &[u8],
        policy: &Policy,
    ) -> Result<(Vec<Row>, Vec<Ratio>)> {
        let paths = DirSource::new(registry).layout_paths()?;
        let packed = Embedded::pack(registry, &paths, &Digest::of(trust), "bench-load")?;
        let size = packed.len();
        // What include_bundle! gives a program: bytes that live as long as it runs.
        let bundle: &'static [u8] = Box::leak(packed.into_boxed_slice());
        let samples = interleave(self.order, 2, self.ratio_reps, |k, _| {
            let t = Instant::now();
            let rt = match k {
                0 => Runtime::open(registry, trust, policy.clone())?,
                _ => Runtime::open_embedded(bundle, trust, policy.clone())?,
            };
            rt.preload()?;
            let took = t.elapsed();
            drop(rt);
            Ok(took)
        })?;
        let mut rows = vec![
            Row::new(scope, "open_files", size),
            Row::new(scope, "open_embedded", size),
        ];
        for (row, s) in rows.iter_mut().zip(samples) {
            row.samples = s;
        }
        let ratio = rows[1].ratio(
            &rows[0],
            &format!("{scope}_open_embedded_vs_files"),
            Some(1.00),
        );
        Ok((rows, vec![ratio]))
    }
}
