//! What `sync` does (with the `net` feature): the transfer options, the library's sync, the
//! saved state and the summary.

use anyhow::{Context, Result};
use cuda_aot::state::TrustState;
use cuda_aot_registry::remote::{HttpOptions, MinSpeed};
use cuda_aot_registry::sync::{SyncOptions, SyncReport};
use std::time::Duration;

use super::Args;
use crate::anchor;

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let trust = anchor::trust_file(self.trust.as_deref())?;
        let anchor = anchor::read_bytes(&trust)?;
        let state_path = self.check.state_path(&self.to)?;
        let limits = crate::limits::limits();
        let seen = TrustState::load(&state_path, limits.state)?;
        let opts = SyncOptions {
            verify: cuda_aot::verify::Options {
                awaiting_rebuild: self.awaiting_rebuild,
                ..self.check.options()
            },
            seen,
        };
        let http = HttpOptions {
            connect_timeout: Duration::from_secs(self.connect_timeout_secs),
            read_timeout: Duration::from_secs(self.read_timeout_secs),
            min_speed: (self.min_speed > 0).then_some(MinSpeed {
                bytes_per_sec: self.min_speed,
                window: Duration::from_secs(
                    cuda_aot_registry::defaults::http::MIN_SPEED_WINDOW_SECS,
                ),
            }),
            attempts: self.attempts.max(1),
            ..HttpOptions::default()
        };
        eprintln!(
            "syncing {} into {} against {} (clock skew allowance {}s)",
            self.from,
            self.to.display(),
            trust.display(),
            self.check.clock_skew_secs
        );
        let remote =
            cuda_aot_registry::sync::open_remote(&self.from, &http, &self.oci.oci_options()?)?;
        let report = cuda_aot_registry::sync::sync(remote.as_ref(), &self.to, &anchor, &opts)
            .with_context(|| format!("syncing {} into {}", self.from, self.to.display()))?;
        report.state.save(&state_path)?;
        println!("{}", summary(&report, &self.to));
        Ok(())
    }
}

/// One paragraph saying what a sync did.
pub fn summary(r: &SyncReport, to: &std::path::Path) -> String {
    let head = format!(
        "{} {}: index v{} (timestamp v{}, trust root v{}), {} module(s) verified",
        if r.up_to_date() {
            "up to date"
        } else {
            "synced"
        },
        to.display(),
        r.index_version,
        r.timestamp_version,
        r.root_version,
        r.modules
    );
    let attested = match &r.attestations {
        Some((n, how)) => format!(
            "\n  {n} attestation(s) attached as OCI referrers ({how}), each a verified document of the index"
        ),
        None => String::new(),
    };
    format!(
        "{head}\n  fetched {} file(s), {} bytes ({} resumed, {} retries); reused {}; {} made visible{attested}",
        r.files_fetched,
        r.bytes_fetched,
        r.bytes_resumed,
        r.retries,
        r.files_reused,
        r.files_committed
    )
}
