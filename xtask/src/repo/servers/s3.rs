//! The S3-compatible server of the network tests: moto's S3 service from pinned PyPI wheels
//! (`manifests/s3-server.txt`, every wheel by version and sha256), installed by pip with
//! `--require-hashes` into a venv under `.cuda-aot/servers/`, run on a loopback port by
//! `s3_server.py`.
//!
//! Why moto: it is on PyPI (pinned and hash-checked like the CUDA wheels, no root, no
//! Debian package of an S3 server exists for Debian 12), it implements the S3 REST API the
//! clients speak (SigV4, path-style buckets, ETags) including the conditional writes a
//! registry on object storage needs (`If-None-Match: *` and `If-Match` on PutObject,
//! answered 412). moto's own server is threaded and holds no lock between checking a
//! condition and writing the object; 16 racing writers did not break it in our runs, but
//! nothing excludes two winners. `s3_server.py` serves one request at a time, which makes
//! every conditional write atomic by construction (`xtask/tests/s3_server.rs` races 16
//! writers through boto3 and wants exactly one winner). It keeps objects in memory: a test
//! starts its own.

use anyhow::{Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::venv::{self, Pins};

/// The pinned wheels.
const PINS: Pins = Pins {
    name: "moto-s3",
    file: "manifests/s3-server.txt",
    text: include_str!("../../../../manifests/s3-server.txt"),
    what: "the S3 test server (moto)",
};
/// The launcher.
const LAUNCHER: &str = include_str!("s3_server.py");

/// The pinned moto version (from the pin file).
pub fn version() -> &'static str {
    PINS.version("moto")
}

/// The venv with the pinned wheels installed (made on first use; a change of the pins gets
/// a venv of its own); returns its folder.
pub fn ensure() -> Result<PathBuf> {
    PINS.ensure()
}

/// What the S3 server does wrong on purpose, for the fault tests.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Faults {
    /// Behave like a store without conditional writes: drop If-None-Match and If-Match
    /// from every request (what a publisher must detect and refuse).
    #[arg(long)]
    pub ignore_conditions: bool,
    /// Answer every Nth object request with 503 Slow Down before it reaches the store
    /// (a 5xx storm a client must retry through; 0: none).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub fail_every: u32,
    /// Wait N milliseconds before answering each request (a slow store; requests are
    /// served one at a time, so the waits add up; 0: none).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub delay_ms: u32,
    /// Cut the connection half-way through the first METHOD request for a key ending in
    /// SUFFIX (`PUT:/blob`: half the body read and the object not stored; `GET:/blob`: half
    /// the object sent), then serve on (repeat for several).
    #[arg(long, value_name = "METHOD:SUFFIX", value_parser = break_point)]
    pub cut_on: Vec<String>,
    /// Like --cut-on, but the server process ends there: a store killed mid-upload or
    /// mid-download.
    #[arg(long, value_name = "METHOD:SUFFIX", value_parser = break_point)]
    pub die_on: Vec<String>,
    /// Hold the first METHOD request for a key ending in SUFFIX for an hour before serving
    /// it: a store that hangs (requests are served one at a time, so all later ones wait).
    #[arg(long, value_name = "METHOD:SUFFIX", value_parser = break_point)]
    pub stall_on: Vec<String>,
}

/// `GET:SUFFIX` or `PUT:SUFFIX`.
fn break_point(s: &str) -> std::result::Result<String, String> {
    match s.split_once(':') {
        Some(("GET" | "PUT", suffix)) if !suffix.is_empty() => Ok(s.to_string()),
        _ => Err(
            "expected GET:SUFFIX or PUT:SUFFIX (the end of an object key, e.g. PUT:/blob)".into(),
        ),
    }
}

/// The S3 server on 127.0.0.1:`port` with `buckets` created, its launcher written into
/// `work`.
pub fn command(port: u16, buckets: &[String], work: &Path, faults: Faults) -> Result<Command> {
    for b in buckets {
        let ok = (3..=63).contains(&b.len())
            && b.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
            && !b.starts_with('-')
            && !b.ends_with('-');
        if !ok {
            bail!(
                "bucket name {b:?}: S3 bucket names are 3-63 characters of a-z, 0-9 and -, not starting or ending with -"
            );
        }
    }
    let dir = ensure()?;
    let launcher = work.join("s3_server.py");
    std::fs::write(&launcher, LAUNCHER)?;
    let mut cmd = Command::new(venv::python(&dir));
    cmd.arg(&launcher);
    if faults.ignore_conditions {
        cmd.arg("--ignore-conditions");
    }
    if faults.fail_every > 0 {
        cmd.arg(format!("--fail-every={}", faults.fail_every));
    }
    if faults.delay_ms > 0 {
        cmd.arg(format!("--delay-ms={}", faults.delay_ms));
    }
    for at in &faults.cut_on {
        cmd.arg(format!("--cut-on={at}"));
    }
    for at in &faults.die_on {
        cmd.arg(format!("--die-on={at}"));
    }
    for at in &faults.stall_on {
        cmd.arg(format!("--stall-on={at}"));
    }
    cmd.arg(port.to_string()).args(buckets).stdin(Stdio::null());
    Ok(cmd)
}
