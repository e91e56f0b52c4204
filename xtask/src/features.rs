//! The tool's optional parts: `net` (sync, serve, bench-serve, publishing to http(s)://,
//! s3:// and oci://, such shared build caches), `driver` (doctor's device probe) and `gpu`
//! (bench-load). The `cargo xtask` alias builds the tool without them, so the first command
//! compiles only the local pipeline; a command whose code such a build leaves out runs
//! again through `cargo run --features FEATURE`, which compiles that part on first use and
//! is a no-op build after that. A build with the repository's tasks (`repo`) keeps them.

use anyhow::{Context, Result};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use crate::advice::{fail, tool};
use crate::process;

/// What each optional part brings, for the message printed before it is built.
fn brings(feature: &str) -> &'static str {
    match feature {
        "net" => "the network stack (tokio, hyper, reqwest, rustls, oci-client, object_store)",
        "driver" => "the CUDA driver layer (cudarc)",
        "gpu" => "the CUDA driver layer (cudarc) and the bare-driver baseline",
        _ => "more of the tool",
    }
}

/// Replaces this process with the same command line under a build that has `feature`;
/// `what` says which command needs it. Returns only on failure.
pub fn rerun(what: &str, feature: &str) -> Result<()> {
    // `cargo run` tells the binary which package it runs; outside cargo there is no
    // checkout to build from.
    let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from) else {
        return Err(fail(
            format!("{what} needs the tool's `{feature}` part, which this build leaves out"),
            format!(
                "run it as `{} ...` from a checkout (cargo builds it on first use), or build the tool with `cargo build -p xtask --features {feature}`",
                tool()
            ),
        ));
    };
    eprintln!(
        "{}: {what} needs {}; cargo builds it on first use",
        tool(),
        brings(feature)
    );
    // The repository's tasks stay in the rebuilt tool when this one has them.
    let features = if cfg!(feature = "repo") {
        format!("{feature},repo")
    } else {
        feature.to_string()
    };
    let mut cmd = process::cargo();
    cmd.arg("run")
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .args(["--package", "xtask", "--features", &features, "--"])
        .args(std::env::args_os().skip(1));
    let err = cmd.exec();
    Err(err).with_context(|| format!("running {}", process::show_command(&cmd)))
}
