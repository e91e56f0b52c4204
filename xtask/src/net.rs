//! The network commands in a build without the `net` feature (what the `cargo xtask`
//! alias builds, so the first command compiles only the local pipeline): the command runs
//! again through `cargo run --features net`, which compiles the network stack on first use
//! and is a no-op build after that.

use anyhow::{Context, Result};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use crate::advice::{fail, tool};
use crate::process;

/// Replaces this process with the same command line under a build that has the network
/// stack; `what` says which command needs it. Returns only on failure.
pub fn rerun(what: &str) -> Result<()> {
    // `cargo run` tells the binary which package it runs; outside cargo there is no
    // checkout to build from.
    let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from) else {
        return Err(fail(
            format!("{what} needs the network commands, which this build of the tool leaves out"),
            format!(
                "run it as `{} ...` from a checkout (cargo builds them on first use), or build the tool with `cargo build -p xtask --features net`",
                tool()
            ),
        ));
    };
    eprintln!(
        "{}: {what} needs the network stack (tokio, hyper, reqwest, rustls, oci-client); cargo builds it on first use",
        tool()
    );
    let mut cmd = process::cargo();
    cmd.arg("run")
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .args(["--package", "xtask", "--features", "net", "--"])
        .args(std::env::args_os().skip(1));
    let err = cmd.exec();
    Err(err).with_context(|| format!("running {}", process::show_command(&cmd)))
}
