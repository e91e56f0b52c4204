//! `cargo xtask sync`: bring a registry served over HTTP into a local folder, verified
//! before anything becomes visible (the library function `cuda_aot_registry::sync::sync`
//! does the work; a prover's init step calls the same function).

use std::path::PathBuf;

use crate::args::CheckArgs;
use cuda_aot_registry::defaults::http;

#[cfg(feature = "net")]
mod run;

/// Sync a registry from a URL into a local folder, verified before anything is visible.
///
/// Runs the full verification a prover runs (trust root and rotations, timestamp, index,
/// every manifest, every blob, and the sources the build statements name, which a rebuilder
/// needs) while fetching each file it needs into a staging folder
/// inside DIR; only when all of it passed are the files moved into place — content-addressed
/// files first, then roots, then the index, then timestamp.json — so DIR always holds a
/// complete, verified release. Files DIR already holds are reused; interrupted downloads
/// resume with Range requests on the next run. Works with any static file server (nginx,
/// a CDN, object storage behind HTTP), with `cuda-aot-registry serve`, with releases
/// pushed to an OCI registry (`publish --registry oci://…`) and with buckets of S3 or an
/// S3-compatible store (`publish --registry s3://…`).
#[derive(clap::Args)]
pub struct Args {
    /// Where to sync from: the http(s) URL of the folder holding timestamp.json,
    /// oci://HOST/REPOSITORY:TAG for a release pushed to an OCI registry, or
    /// s3://BUCKET/PREFIX for one published to a bucket (credentials and endpoint in the
    /// AWS variables).
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
    #[arg(long, value_name = "N", default_value_t = http::CONNECT_TIMEOUT_SECS)]
    connect_timeout_secs: u64,
    /// Seconds allowed without receiving a byte.
    #[arg(long, value_name = "N", default_value_t = http::READ_TIMEOUT_SECS)]
    read_timeout_secs: u64,
    /// Fail (and retry) a transfer averaging fewer bytes per second than this over 30 s
    /// (0: no minimum).
    #[arg(long, value_name = "N", default_value_t = http::MIN_SPEED_BYTES_PER_SEC)]
    min_speed: u64,
    /// Attempts per file on transient failures (connection errors, timeouts, 5xx, 429).
    #[arg(long, value_name = "N", default_value_t = http::ATTEMPTS)]
    attempts: u32,
    /// Mirror a candidate release awaiting its independent rebuild (`publish
    /// --awaiting-rebuild`): its build statement needs one listed builder's signature instead
    /// of the trust root's builder threshold. For a rebuilder (`cargo xtask rebuild`), never
    /// for a prover's copy.
    #[arg(long)]
    awaiting_rebuild: bool,
    #[command(flatten)]
    oci: crate::endpoint::RemoteArgs,
}

#[cfg(not(feature = "net"))]
impl Args {
    /// Runs the task: under a build with the network stack.
    pub fn run(self) -> anyhow::Result<()> {
        crate::features::rerun("sync", "net")
    }
}
