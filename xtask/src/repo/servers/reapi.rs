//! The REAPI server of the remote-execution tests (`cargo xtask servers reapi`, issue 45):
//! BuildGrid 0.4.4 from pinned PyPI wheels (`manifests/reapi-server.txt`, every wheel by
//! version and sha256, in a venv under `.cuda-aot/servers/`), its scheduler on Debian 12's
//! PostgreSQL 15 (`manifests/servers.toml`, fetched and checked by apt like nginx), run on a
//! loopback port by `reapi_server.py`.
//!
//! Why BuildGrid: a complete open-source server of the Remote Execution API (CAS,
//! ByteStream, ActionCache, Execution, Operations) and of the Remote Workers API (Bots),
//! which is how its workers take work: a test runs a real scheduler handing leases to our
//! worker, not a fake. It is on PyPI (pinned and hash-checked like the CUDA wheels, no root);
//! 0.4.4 is the newest release for Python 3.11. Why PostgreSQL: since 0.3 BuildGrid's SQL
//! scheduler runs on PostgreSQL only (it refuses SQLite) and is woken by its notifications.
//! PostgreSQL runs from the unpacked package as the current user (as root, in a user
//! namespace of its own, since it refuses to run as root), on a Unix socket in the work
//! folder only, and ends with BuildGrid (`PR_SET_PDEATHSIG`): killing the announced
//! process leaves nothing running. `reapi_check.py` beside the launcher checks a running
//! server through the APIs (`xtask/tests/reapi_server.rs` runs it).

use anyhow::{Context, Result, bail};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::venv::{self, Pins};
use crate::advice::fail;

/// The pinned wheels.
const PINS: Pins = Pins {
    name: "buildgrid",
    file: "manifests/reapi-server.txt",
    text: include_str!("../../../../manifests/reapi-server.txt"),
    what: "the REAPI test server (BuildGrid)",
};
/// The launcher.
const LAUNCHER: &str = include_str!("reapi_server.py");

/// The shortest bot keepalive that lets a worker wait for work: BuildGrid long-polls a
/// bot for 80% of it and hands out no lease when that is under its 3 s network timeout.
pub const MIN_KEEPALIVE_SECS: u64 = 4;

/// The pinned BuildGrid version (from the pin file).
pub fn version() -> &'static str {
    PINS.version("buildgrid")
}

/// The venv with the pinned wheels installed (made on first use); returns its folder.
pub fn ensure() -> Result<PathBuf> {
    PINS.ensure()
}

/// PostgreSQL's unpacked `postgres` binary and the folder of its libpq, fetched on first
/// use; fails, naming them, when the machine lacks a library they link.
pub fn ensure_postgres() -> Result<(PathBuf, PathBuf)> {
    let postgres = super::ensure("postgresql-15")?;
    let libpq = super::ensure("libpq5")?;
    let lib = libpq
        .parent()
        .context("libpq5's library has no folder")?
        .to_path_buf();
    let initdb = postgres.with_file_name("initdb");
    let missing = super::missing_libraries(&[&postgres, &initdb], lib.as_os_str())?;
    if !missing.is_empty() {
        return Err(fail(
            format!(
                "PostgreSQL ({}) links libraries this machine lacks: {}",
                postgres.display(),
                missing.join(", ")
            ),
            "install the Debian 12 packages that hold them (e.g. `apt-get install libicu72 libxml2 libldap-2.5-0 libgssapi-krb5-2 libssl3`), then run `cargo xtask servers reapi` again",
        ));
    }
    Ok((postgres, lib))
}

/// Fails with advice when something already listens on 127.0.0.1:`port` (BuildGrid would
/// only say so after PostgreSQL and its own start).
pub fn check_port_free(port: u16) -> Result<()> {
    match TcpListener::bind(("127.0.0.1", port)) {
        Ok(_) => Ok(()),
        Err(e) => Err(fail(
            format!("port {port} on 127.0.0.1 is not free: {e}"),
            "pass another --port, or --port 0 for a free one (printed)",
        )),
    }
}

/// The server on 127.0.0.1:`port` (which [`check_port_free`] checked) with its CAS,
/// PostgreSQL data and configuration in `work`, a silent bot's session closed after
/// `keepalive_secs`, and with TLS on 127.0.0.1:`tls_port` too when given (the test CA in
/// `work/tls/ca.pem`: [`tls_ca`]); the launcher written into `work`.
pub fn command(
    port: u16,
    tls_port: Option<u16>,
    work: &Path,
    keepalive_secs: u64,
) -> Result<Command> {
    if keepalive_secs < MIN_KEEPALIVE_SECS {
        bail!(
            "--keepalive-secs {keepalive_secs}: BuildGrid hands a bot no lease when its keepalive is under {MIN_KEEPALIVE_SECS} s"
        );
    }
    let (postgres, lib) = ensure_postgres()?;
    let dir = ensure()?;
    let launcher = work.join("reapi_server.py");
    std::fs::write(&launcher, LAUNCHER)
        .with_context(|| format!("writing {}", launcher.display()))?;
    let mut cmd = Command::new(venv::python(&dir));
    cmd.arg(&launcher)
        .arg(format!("--port={port}"))
        .arg("--work")
        .arg(work)
        .arg("--postgres")
        .arg(&postgres)
        .arg("--lib")
        .arg(&lib)
        .arg(format!("--keepalive-secs={keepalive_secs}"))
        .args(tls_port.map(|p| format!("--tls-port={p}")))
        .stdin(Stdio::null());
    Ok(cmd)
}

/// The certificate authority that signs the TLS listener's certificate (made by the
/// launcher in `work`): what a client trusts, e.g. through `SSL_CERT_FILE`.
pub fn tls_ca(work: &Path) -> PathBuf {
    work.join("tls/ca.pem")
}
