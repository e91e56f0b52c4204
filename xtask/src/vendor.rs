//! `cargo xtask vendor`: the kernel release a project's `cuda-aot.lock` pins, fetched,
//! verified and checked against the lock (as a build script's `cuda-aot-build` does), copied
//! into a folder a build then reads with no network (`CUDA_AOT_BUNDLE_DIR`).

use std::path::PathBuf;

use anyhow::Result;

/// Copy the kernel release the project's `cuda-aot.lock` pins into a folder, for builds
/// with no network.
///
/// Fetches the release the lock pins (through the per-user cache), verifies it against the
/// trust root the lock was made under, checks that it is exactly what the lock pins, and
/// writes the registry files into DIR (made, or replaced whole). Then
/// `CUDA_AOT_BUNDLE_DIR=DIR cargo build` reads it, checked against the lock the same way,
/// with no network.
///
/// Example: cargo xtask vendor --trust kernels-root.json --to vendor/kernels
#[derive(clap::Args)]
pub struct Args {
    /// The folder to write the release into.
    #[arg(long, value_name = "DIR")]
    to: PathBuf,
    /// The trust root the lock was made under.
    #[arg(long, value_name = "FILE")]
    trust: PathBuf,
    /// The lock file [default: ./cuda-aot.lock].
    #[arg(long, value_name = "FILE")]
    lock: Option<PathBuf>,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        run(self)
    }
}

#[cfg(feature = "net")]
fn run(a: Args) -> Result<()> {
    let lock = a
        .lock
        .unwrap_or_else(|| PathBuf::from(cuda_aot_registry::lock::LOCK_FILE));
    let fetch = cuda_aot_build::Fetch {
        lock,
        trust: a.trust,
        out: a.to.clone(),
        cache: crate::paths::user_cache_dir(),
        vendored: None,
    };
    let (binaries, index) = fetch
        .vendor(&a.to)
        .map_err(|e| crate::advice::fail(e.message, e.fix))?;
    println!(
        "vendored {binaries} module binaries (index v{index}) into {}; build with CUDA_AOT_BUNDLE_DIR={}",
        a.to.display(),
        a.to.display()
    );
    Ok(())
}

/// Fetching needs the network stack: the tool runs itself again with it.
#[cfg(not(feature = "net"))]
fn run(_a: Args) -> Result<()> {
    crate::features::rerun("vendor", "net")?;
    anyhow::bail!("vendor: the run with the network stack did not take over")
}
