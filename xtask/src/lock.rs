//! `cargo xtask lock`: pin the kernel release a prover's project builds from in
//! `cuda-aot.lock` (the format and its checks are `cuda_aot_registry::lock`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use cuda_aot::Target;
use cuda_aot_registry::lock::{LOCK_FILE, Lock};

use crate::advice::fail;
use crate::anchor;

/// Pin the kernel release a project builds from in `cuda-aot.lock`.
///
/// Verifies the registry the way a prover does (trust root and rotations, timestamp, index,
/// every manifest and blob) and records in the lock its address, the trust root's digest,
/// the index version and build statements, and the manifest and blob digests and sizes of
/// every module binary (of `--targets`, if given). Commit the lock: a build checks what the
/// registry serves against it.
///
/// When the lock exists, a registry that still serves what it pins leaves it as it is; one
/// that serves anything else (a module removed, another digest, an older index) is refused
/// with the difference, and `--update` moves the lock to what the registry holds now,
/// printing what changed.
///
/// Example: cargo xtask lock --registry https://kernels.example/team --trust keys/root.json --targets sm_80,sm_90
#[derive(clap::Args)]
pub struct Args {
    /// The registry: a folder, or the http(s):// URL of the folder holding timestamp.json,
    /// oci://HOST/REPOSITORY:TAG or s3://BUCKET/PREFIX (fetched and verified into the
    /// per-user cache first).
    #[arg(long, value_name = "URL")]
    registry: String,
    /// The trust root the project's users will trust.
    #[arg(long, value_name = "FILE")]
    trust: PathBuf,
    /// Only these exact targets (comma-separated), e.g. sm_80,sm_90: the SMs the project's
    /// users have.
    #[arg(long, value_name = "TARGET", value_delimiter = ',')]
    targets: Vec<Target>,
    /// The lock file [default: ./cuda-aot.lock].
    #[arg(long, value_name = "FILE")]
    lock: Option<PathBuf>,
    /// Move an existing lock to what the registry holds now, printing what changed.
    #[arg(long)]
    update: bool,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let (anchor_bytes, _) = anchor::read(&self.trust)?;
        let dir = self.registry_dir(&anchor_bytes)?;
        let served = Lock::served(&dir, &self.registry, &anchor_bytes, &self.targets)
            .with_context(|| format!("verifying {}", self.registry))?;
        if served.modules.is_empty() {
            return Err(fail(
                format!(
                    "{} holds no module for the targets {:?}",
                    self.registry, self.targets
                ),
                "name targets the registry has (cargo xtask verify --registry DIR lists them), or leave --targets out",
            ));
        }
        let path = self
            .lock
            .clone()
            .unwrap_or_else(|| PathBuf::from(LOCK_FILE));
        self.write_or_check(&path, &served)
    }

    /// The verified folder the registry's files are read from: the folder itself, or the
    /// per-user cache a URL is synced into.
    fn registry_dir(&self, anchor_bytes: &[u8]) -> Result<PathBuf> {
        if !self.registry.contains("://") {
            return Ok(PathBuf::from(&self.registry));
        }
        fetched(&self.registry, anchor_bytes)
    }

    fn write_or_check(&self, path: &Path, served: &Lock) -> Result<()> {
        let existing = match std::fs::read_to_string(path) {
            Ok(text) => Some(Lock::parse(&text, path)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        match existing {
            Some(old) if !self.update => match old.check(served) {
                Ok(()) => {
                    println!(
                        "{}: up to date (index v{}, {} module binaries pinned)",
                        path.display(),
                        old.registry.index,
                        old.modules.len()
                    );
                    Ok(())
                }
                Err(diff) => Err(fail(
                    format!(
                        "{} serves other kernels than {} pins:\n{}",
                        self.registry,
                        path.display(),
                        diff.iter()
                            .map(|l| format!("  {l}"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    ),
                    "if the registry's maintainers meant this release, review the lines above and run the lock again with --update; otherwise the registry was altered or rolled back: keep the lock and ask them",
                )),
            },
            old => {
                if let Some(old) = &old {
                    for line in old.diff(served) {
                        println!("  {line}");
                    }
                }
                crate::files::write(path, served.to_text().as_bytes())?;
                println!(
                    "{}: index v{}, {} module binaries pinned{}",
                    path.display(),
                    served.registry.index,
                    served.modules.len(),
                    if old.is_some() { " (updated)" } else { "" }
                );
                Ok(())
            }
        }
    }
}

/// Syncs `url` (verified) into its folder in the per-user cache and returns the folder.
#[cfg(feature = "net")]
fn fetched(url: &str, anchor_bytes: &[u8]) -> Result<PathBuf> {
    let cache = crate::paths::user_cache_dir();
    cuda_aot_registry::lock::fetch_into_cache(url, anchor_bytes, &cache)
        .with_context(|| format!("fetching {url} into the per-user cache {}", cache.display()))
}

/// A URL needs the network stack: the tool runs itself again with it.
#[cfg(not(feature = "net"))]
fn fetched(_url: &str, _anchor_bytes: &[u8]) -> Result<PathBuf> {
    crate::features::rerun("lock", "net")?;
    anyhow::bail!("lock of {_url}: the run with the network stack did not take over")
}
