//! `cargo xtask sync`: bring a registry served over HTTP into a local folder, verified
//! before anything becomes visible (the library function `cuda_aot_registry::sync::sync`
//! does the work; a prover's init step calls the same function).

use anyhow::{Context, Result};
use cuda_aot::Limits;
use cuda_aot::state::TrustState;
use cuda_aot_registry::remote::{HttpOptions, MinSpeed};
use cuda_aot_registry::sync::{SyncOptions, SyncReport};
use std::path::PathBuf;
use std::time::Duration;

use crate::anchor;
use crate::args::CheckArgs;

/// Sync a registry from a URL into a local folder, verified before anything is visible.
///
/// Runs the full verification a prover runs (trust root and rotations, timestamp, index,
/// every manifest, every blob) while fetching each file it needs into a staging folder
/// inside DIR; only when all of it passed are the files moved into place — content-addressed
/// files first, then roots, then the index, then timestamp.json — so DIR always holds a
/// complete, verified release. Files DIR already holds are reused; interrupted downloads
/// resume with Range requests on the next run. Works with any static file server (nginx,
/// a CDN, object storage behind HTTP), with `cuda-aot-registry serve`, and with releases
/// pushed to an OCI registry (`publish --registry oci://…`).
#[derive(clap::Args)]
pub struct Args {
    /// Where to sync from: the http(s) URL of the folder holding timestamp.json, or
    /// oci://HOST/REPOSITORY:TAG for a release pushed to an OCI registry.
    #[arg(long, value_name = "URL")]
    from: String,
    /// The local registry folder to bring up to date (created if needed).
    #[arg(long, value_name = "DIR")]
    to: PathBuf,
    /// The trust root [default: the dev root .cuda-aot/dev-keys/root.json if generated,
    /// else keys/root.json of the project].
    #[arg(long, value_name = "FILE")]
    trust: Option<PathBuf>,
    #[command(flatten)]
    check: CheckArgs,
    /// Seconds allowed to open a connection.
    #[arg(long, value_name = "N", default_value_t = 10)]
    connect_timeout_secs: u64,
    /// Seconds allowed without receiving a byte.
    #[arg(long, value_name = "N", default_value_t = 30)]
    read_timeout_secs: u64,
    /// Fail (and retry) a transfer averaging fewer bytes per second than this over 30 s
    /// (0: no minimum).
    #[arg(long, value_name = "N", default_value_t = 1024)]
    min_speed: u64,
    /// Attempts per file on transient failures (connection errors, timeouts, 5xx, 429).
    #[arg(long, value_name = "N", default_value_t = 5)]
    attempts: u32,
    #[command(flatten)]
    oci: crate::remote::RemoteArgs,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let trust = anchor::trust_file(self.trust.as_deref())?;
        let anchor = anchor::read_bytes(&trust)?;
        let state_path = self.check.state_path(&self.to);
        let limits = Limits::default();
        let seen = TrustState::load(&state_path, limits.state)?;
        let opts = SyncOptions {
            verify: self.check.options(),
            seen,
        };
        let http = HttpOptions {
            connect_timeout: Duration::from_secs(self.connect_timeout_secs),
            read_timeout: Duration::from_secs(self.read_timeout_secs),
            min_speed: (self.min_speed > 0).then_some(MinSpeed {
                bytes_per_sec: self.min_speed,
                window: Duration::from_secs(30),
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
    format!(
        "{head}\n  fetched {} file(s), {} bytes ({} resumed, {} retries); reused {}; {} made visible",
        r.files_fetched,
        r.bytes_fetched,
        r.bytes_resumed,
        r.retries,
        r.files_reused,
        r.files_committed
    )
}
