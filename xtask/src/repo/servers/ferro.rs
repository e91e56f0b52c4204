//! An OCI registry with the referrers API (issue 46): `cargo xtask servers oci-referrers`
//! runs `ferro-oci-server` 1.0.0 (crates.io, an OCI Distribution Spec v1.1 server whose
//! `GET /v2/<name>/referrers/<digest>` lists the manifests that name a digest as their
//! `subject`), on 127.0.0.1 with its blobs in a folder. The pinned `docker-registry` 2.8.2
//! has no referrers API, and Debian packages no registry that has one.
//!
//! The binary is built once per machine with `cargo install --locked ferro-oci-server
//! --version =1.0.0` (its own lock file pins every dependency; about 4 minutes on 2 cores)
//! into the per-user cache, and its sha256 recorded beside it: every later use re-hashes
//! it, and a binary that no longer matches its record is built again.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::paths;

/// The crate and version built.
const CRATE: &str = "ferro-oci-server";
const VERSION: &str = "1.0.0";

/// The built binary, building it on first use.
pub fn ensure() -> Result<PathBuf> {
    let dir = paths::user_cache_dir()
        .join("bins")
        .join(format!("{CRATE}-{VERSION}"));
    let bin = dir.join("bin").join(CRATE);
    let record = dir.join("sha256");
    if let (Ok(want), true) = (std::fs::read_to_string(&record), bin.is_file()) {
        if super::apt::sha256_file(&bin)? == want.trim() {
            return Ok(bin);
        }
        eprintln!(
            "servers: {} does not match its recorded sha256: building it again",
            bin.display()
        );
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let lock = cuda_aot::fs::open_lock_file(&dir.join(".lock"))?;
    lock.lock()?;
    eprintln!(
        "servers: building {CRATE} {VERSION} with cargo install --locked (once per machine, a few minutes) into {}",
        dir.display()
    );
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["install", "--locked", "--quiet", CRATE, "--version"])
        .arg(format!("={VERSION}"))
        .arg("--root")
        .arg(&dir)
        .env_remove("CARGO_TARGET_DIR")
        .stdin(Stdio::null())
        .status()
        .context("running cargo install")?;
    if !status.success() || !bin.is_file() {
        bail!(
            "cargo install {CRATE} {VERSION} failed ({status}): it needs crates.io and a Rust toolchain"
        );
    }
    let sum = super::apt::sha256_file(&bin)?;
    std::fs::write(&record, format!("{sum}\n"))
        .with_context(|| format!("writing {}", record.display()))?;
    eprintln!("servers: {CRATE} {VERSION} built, sha256 {sum}");
    Ok(bin)
}

/// The registry on 127.0.0.1:`port` with its blobs in `storage` (made if missing).
pub fn command(storage: &Path, port: u16) -> Result<Command> {
    let bin = ensure()?;
    std::fs::create_dir_all(storage).with_context(|| format!("creating {}", storage.display()))?;
    let mut cmd = Command::new(bin);
    cmd.env("FERRO_OCI_LISTEN", format!("127.0.0.1:{port}"))
        .env("FERRO_OCI_STORAGE_DIR", storage)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    Ok(cmd)
}
