//! The benchmark itself (with the `net` feature): the servers, the reference copy, the
//! passes over both servers, and the release rebuild it runs under.

use anyhow::{Context, Result, bail};
use cuda_aot::Digest;
use cuda_aot_registry::remote::{HttpOptions, HttpRemote};
use cuda_aot_registry::sync::{SyncOptions, sync};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::Args;
use super::clients::{Samples, files_of};
use super::hostile::Hostile;
use crate::repo::{machine, servers};
use crate::{anchor, paths};

// Only `serve` runs the `get-hostile` workload; its baseline is serve's own `get`.

pub(super) const SERVERS: [&str; 2] = ["serve", "nginx"];

/// A server process stopped (SIGTERM, then reaped) on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let t = Instant::now();
        while matches!(self.0.try_wait(), Ok(None)) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        if cfg!(debug_assertions) && !self.no_release_rebuild {
            return rerun_release();
        }
        let trust = self.at.trust_file()?;
        let anchor = anchor::read_bytes(&trust)?;
        // The registry to serve: it must hold a release.
        let reg = self.registry()?;
        let cores = machine::cores();
        let work = tempfile::Builder::new()
            .prefix("bench-serve-")
            .tempdir_in(paths::work_dir_created()?)?;
        // The server binary, built beside this tool.
        let serve_bin = serve_binary()?;

        // The servers, one worker per core each, access logs to files.
        let (serve, nginx, addrs) = start_servers(
            &serve_bin,
            &reg,
            &trust,
            work.path(),
            cores,
            self.stall_timeout_secs,
        )?;

        // The reference copy: one verified sync, whose files every later copy must equal.
        let reference_dir = work.path().join("reference");
        let url = format!("http://{}/", addrs["serve"]);
        let remote = HttpRemote::new(&url, HttpOptions::default())?;
        let r = sync(&remote, &reference_dir, &anchor, &SyncOptions::default())
            .context("the reference sync")?;
        let reference = Arc::new(files_of(&reference_dir)?);
        let release_bytes: u64 = reference.values().map(|(n, _)| *n).sum();
        eprintln!(
            "bench-serve: index v{} — {} files, {} bytes; {} clients, {} cores",
            r.index_version,
            reference.len(),
            release_bytes,
            self.clients,
            cores
        );

        // Every pass over both servers, the order alternating.
        let (results, passes, hostile_seen) =
            self.passes(&addrs, &anchor, &reference, work.path())?;
        drop((serve, nginx));

        let header = format!(
            "cuda-aot bench-serve, {}, {} cores ({}), {} clients, index v{} ({} files, {} bytes)",
            humantime::format_rfc3339_seconds(SystemTime::now()),
            cores,
            machine::cpu_model(),
            self.clients,
            r.index_version,
            reference.len(),
            release_bytes
        );
        // bench-serve.{csv,svg,md} written, the CSV printed, then the gate's verdict.
        self.report(&results, &passes, &hostile_seen, &header)
    }

    /// The registry folder to serve, made absolute; it must hold a release.
    fn registry(&self) -> Result<PathBuf> {
        let reg = std::path::absolute(self.at.registry())?;
        if !reg.join("timestamp.json").is_file() {
            return Err(crate::advice::fail(
                format!("{}: no registry to serve", reg.display()),
                "run `cargo xtask release` first, or pass --registry DIR",
            ));
        }
        Ok(reg)
    }

    /// Every pass: each server in turn (the order alternating between passes) under the
    /// sync and get workloads, and serve under get-hostile. Returns the merged samples per
    /// (server, workload), the pass table's rows and what the hostile clients met.
    #[allow(clippy::type_complexity)]
    fn passes(
        &self,
        addrs: &BTreeMap<&str, SocketAddr>,
        anchor: &[u8],
        reference: &Arc<BTreeMap<String, (u64, Digest)>>,
        work: &Path,
    ) -> Result<(
        BTreeMap<(&'static str, &'static str), Samples>,
        Vec<String>,
        Vec<Hostile>,
    )> {
        let mut results: BTreeMap<(&str, &str), Samples> = BTreeMap::new();
        let mut passes: Vec<String> = Vec::new();
        let mut hostile_seen: Vec<Hostile> = Vec::new();
        for pass in 0..self.passes {
            let order: Vec<&str> = if pass % 2 == 0 {
                SERVERS.to_vec()
            } else {
                SERVERS.iter().rev().copied().collect()
            };
            for server in order {
                let url = format!("http://{}/", addrs[server]);
                let s = self.sync_load(&url, anchor, reference, &work.join(server))?;
                passes.push(pass_row(pass, server, "sync", &s, ""));
                results.entry((server, "sync")).or_default().merge(s);
                let g = self.get_load(&url, reference)?;
                passes.push(pass_row(pass, server, "get", &g, ""));
                results.entry((server, "get")).or_default().merge(g);
                if server == "serve" && self.hostile > 0 {
                    let (g, h) = self.get_load_under_attack(&url, addrs[server], reference)?;
                    let note = format!(
                        " ({} hostile, {} stalled; {h})",
                        3 * self.hostile,
                        self.stalled
                    );
                    passes.push(pass_row(pass, server, "get-hostile", &g, &note));
                    hostile_seen.push(h);
                    results.entry((server, "get-hostile")).or_default().merge(g);
                }
            }
        }
        Ok((results, passes, hostile_seen))
    }
}

/// `cuda-aot-registry` beside this tool's executable; an error with advice if missing.
fn serve_binary() -> Result<PathBuf> {
    let serve_bin = std::env::current_exe()?
        .parent()
        .context("the xtask binary has a folder")?
        .join("cuda-aot-registry");
    if !serve_bin.is_file() {
        return Err(crate::advice::fail(
            format!("{} is missing", serve_bin.display()),
            "build it first: cargo build -p cuda-aot-registry (with --release for a release xtask)",
        ));
    }
    Ok(serve_bin)
}

/// Starts `serve_bin serve` (publishing on, with a token nobody of the run holds, and the
/// stall bound `stall_secs`) and nginx on loopback over `reg`, `cores` workers each, their
/// logs in `work`; returns both once they listen, and their addresses.
fn start_servers(
    serve_bin: &Path,
    reg: &Path,
    trust: &Path,
    work: &Path,
    cores: usize,
    stall_secs: u64,
) -> Result<(Running, Running, BTreeMap<&'static str, SocketAddr>)> {
    let serve_port = servers::pick_port(0)?;
    let serve_log = std::fs::File::create(work.join("serve-access.log"))?;
    // Publishing on (a token nobody of this run holds), so wrong tokens meet the
    // throttle; no PUT of the run can succeed.
    let token_file = work.join("publish.token");
    let token: String = (0..4).map(|_| format!("{:016x}", rand_u64())).collect();
    std::fs::write(&token_file, format!("{token}\n"))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600))?;
    }
    let serve = Running(
        Command::new(serve_bin)
            .args(["serve", "--root"])
            .arg(reg)
            .args(["--addr", &format!("127.0.0.1:{serve_port}")])
            .args(["--threads", &cores.to_string()])
            .args(["--stall-timeout-secs", &stall_secs.to_string()])
            .arg("--publish-token-file")
            .arg(&token_file)
            .arg("--trust")
            .arg(trust)
            .stdout(serve_log)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", serve_bin.display()))?,
    );
    let nginx_port = servers::pick_port(0)?;
    let nginx_work = work.join("nginx");
    std::fs::create_dir_all(&nginx_work)?;
    let nginx = Running(
        servers::nginx(reg, nginx_port, &nginx_work, Some(cores))?
            .spawn()
            .context("starting nginx")?,
    );
    let addrs: BTreeMap<&str, SocketAddr> = BTreeMap::from([
        ("serve", SocketAddr::from(([127, 0, 0, 1], serve_port))),
        ("nginx", SocketAddr::from(([127, 0, 0, 1], nginx_port))),
    ]);
    for a in addrs.values() {
        servers::wait_listening(*a, Duration::from_secs(20))?;
    }
    Ok((serve, nginx, addrs))
}

/// Prints one measurement of a pass (server, workload) and returns its row of the pass
/// table: syncs/s with latencies to 0.1 ms, requests/s with latencies to 0.01 ms.
fn pass_row(pass: usize, server: &str, workload: &str, s: &Samples, note: &str) -> String {
    let (rate, unit, digits) = match workload {
        "sync" => (format!("{:.1}", s.per_sec()), "syncs/s", 1),
        _ => (format!("{:.0}", s.per_sec()), "req/s", 2),
    };
    let (p50, p99) = (s.pct_ms(0.5), s.pct_ms(0.99));
    eprintln!(
        "  pass {pass} {server:<5} {workload:<11} {rate:>7} {unit}, p50 {p50:.digits$} ms, p99 {p99:.digits$} ms, {} failures, {} corrupt{note}",
        s.failures, s.corrupt
    );
    format!(
        "| {pass} | {server} | {workload} | {rate} {unit} | {p50:.digits$} ms | {p99:.digits$} ms |"
    )
}

/// A random 64-bit number (tokens and guesses; not a key).
pub(super) fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("the OS random source");
    u64::from_le_bytes(b)
}

/// Builds xtask and the server with --release and re-runs this command with them.
fn rerun_release() -> Result<()> {
    use std::os::unix::process::CommandExt;
    eprintln!("bench-serve: building release binaries (xtask, cuda-aot-registry)");
    let status = crate::process::cargo()
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "xtask",
            "-p",
            "cuda-aot-registry",
        ])
        .current_dir(paths::repo_root())
        .status()
        .context("running cargo build --release")?;
    if !status.success() {
        bail!("cargo build --release failed");
    }
    let exe = paths::repo_root().join("target/release/xtask");
    let err = Command::new(&exe).args(std::env::args_os().skip(1)).exec();
    Err(err).with_context(|| format!("running {}", exe.display()))
}
