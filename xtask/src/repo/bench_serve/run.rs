//! The benchmark itself (with the `net` feature): servers, clients, samples, the report
//! and the gate.

use anyhow::{Context, Result, bail};
use cuda_aot::Digest;
use cuda_aot_registry::remote::{HttpOptions, HttpRemote};
use cuda_aot_registry::sync::{STAGING_DIR, SyncOptions, sync};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::Args;
use crate::repo::svg::Svg;
use crate::repo::{machine, servers};
use crate::{anchor, paths};

// Only `serve` runs the `get-hostile` workload; its baseline is serve's own `get`.

const SERVERS: [&str; 2] = ["serve", "nginx"];

/// Samples of one (server, workload).
#[derive(Default)]
struct Samples {
    latencies: Vec<Duration>,
    bytes: u64,
    failures: usize,
    corrupt: usize,
    wall: Duration,
    first_error: Option<String>,
}

impl Samples {
    fn ops(&self) -> usize {
        self.latencies.len()
    }
    fn per_sec(&self) -> f64 {
        self.ops() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.wall.as_secs_f64().max(1e-9)
    }
    fn pct_ms(&self, p: f64) -> f64 {
        let v: Vec<f64> = self
            .latencies
            .iter()
            .map(|d| d.as_secs_f64() * 1e3)
            .collect();
        crate::repo::stats::percentile(&v, p)
    }
    /// The samples of every client thread, merged, with the wall time since `start`.
    fn join(handles: Vec<std::thread::JoinHandle<Samples>>, start: Instant) -> Result<Samples> {
        let mut all = Samples::default();
        for h in handles {
            all.merge(h.join().map_err(|_| anyhow::anyhow!("a client panicked"))?);
        }
        all.wall = start.elapsed();
        Ok(all)
    }
    fn merge(&mut self, o: Samples) {
        self.latencies.extend(o.latencies);
        self.bytes += o.bytes;
        self.failures += o.failures;
        self.corrupt += o.corrupt;
        self.wall += o.wall;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
    }
}

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
        let reg = std::path::absolute(self.at.registry())?;
        if !reg.join("timestamp.json").is_file() {
            return Err(crate::advice::fail(
                format!("{}: no registry to serve", reg.display()),
                "run `cargo xtask release` first, or pass --registry DIR",
            ));
        }
        let cores = machine::cores();
        let work = tempfile::Builder::new()
            .prefix("bench-serve-")
            .tempdir_in(paths::work_dir_created()?)?;
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

        // The servers, one worker per core each, access logs to files.
        let serve_port = servers::pick_port(0)?;
        let serve_log = std::fs::File::create(work.path().join("serve-access.log"))?;
        // Publishing on (a token nobody of this run holds), so wrong tokens meet the
        // throttle; no PUT of the run can succeed.
        let token_file = work.path().join("publish.token");
        let token: String = (0..4).map(|_| format!("{:016x}", rand_u64())).collect();
        std::fs::write(&token_file, format!("{token}\n"))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600))?;
        }
        let serve = Running(
            Command::new(&serve_bin)
                .args(["serve", "--root"])
                .arg(&reg)
                .args(["--addr", &format!("127.0.0.1:{serve_port}")])
                .args(["--threads", &cores.to_string()])
                .arg("--publish-token-file")
                .arg(&token_file)
                .arg("--trust")
                .arg(&trust)
                .stdout(serve_log)
                .stdin(Stdio::null())
                .spawn()
                .with_context(|| format!("starting {}", serve_bin.display()))?,
        );
        let nginx_port = servers::pick_port(0)?;
        let nginx_work = work.path().join("nginx");
        std::fs::create_dir_all(&nginx_work)?;
        let nginx = Running(
            servers::nginx(&reg, nginx_port, &nginx_work, Some(cores))?
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
                let s = self.sync_load(&url, &anchor, &reference, &work.path().join(server))?;
                passes.push(pass_row(pass, server, "sync", &s, ""));
                results.entry((server, "sync")).or_default().merge(s);
                let g = self.get_load(&url, &reference)?;
                passes.push(pass_row(pass, server, "get", &g, ""));
                results.entry((server, "get")).or_default().merge(g);
                if server == "serve" && self.hostile > 0 {
                    let (g, h) = self.get_load_under_attack(&url, addrs[server], &reference)?;
                    let note = format!(" ({} hostile; {h})", 3 * self.hostile);
                    passes.push(pass_row(pass, server, "get-hostile", &g, &note));
                    hostile_seen.push(h);
                    results.entry((server, "get-hostile")).or_default().merge(g);
                }
            }
        }
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
        let out = self
            .out
            .clone()
            .unwrap_or_else(|| paths::work_dir().join("bench-serve"));
        std::fs::create_dir_all(&out)?;
        let csv = render_csv(&results, &header, self.clients);
        std::fs::write(out.join("bench-serve.csv"), &csv)?;
        std::fs::write(out.join("bench-serve.svg"), chart(&results, &header))?;
        let verdict = gate(&results);
        let doc = out.join("bench-serve.md");
        let history = std::fs::read_to_string(&doc).unwrap_or_default();
        std::fs::write(
            &doc,
            render_doc(
                &results,
                &passes,
                &hostile_seen,
                &header,
                &self,
                &verdict,
                &history,
            ),
        )?;
        print!("{csv}");
        println!("wrote {}/bench-serve.{{md,csv,svg}}", out.display());
        match verdict {
            Ok(text) => {
                println!("{text}");
                Ok(())
            }
            Err(text) => bail!("{text}"),
        }
    }

    /// `clients` threads, each running `syncs` cold syncs with a fresh client into empty
    /// folders; each copy is compared with the reference.
    fn sync_load(
        &self,
        url: &str,
        anchor: &[u8],
        reference: &Arc<BTreeMap<String, (u64, Digest)>>,
        base: &Path,
    ) -> Result<Samples> {
        let start = Instant::now();
        let handles: Vec<_> = (0..self.clients)
            .map(|c| {
                let (url, anchor, reference) =
                    (url.to_string(), anchor.to_vec(), reference.clone());
                let dir = base.join(format!("c{c}"));
                let syncs = self.syncs;
                std::thread::spawn(move || {
                    let mut s = Samples::default();
                    for k in 0..syncs {
                        let target = dir.join(k.to_string());
                        let t = Instant::now();
                        let result = HttpRemote::new(&url, HttpOptions::default())
                            .and_then(|r| sync(&r, &target, &anchor, &SyncOptions::default()));
                        let took = t.elapsed();
                        match result {
                            Ok(rep) => {
                                s.latencies.push(took);
                                s.bytes += rep.bytes_fetched;
                                s.corrupt += corrupt_files(&target, &reference);
                            }
                            Err(e) => {
                                s.failures += 1;
                                s.first_error.get_or_insert(e.to_string());
                            }
                        }
                        let _ = std::fs::remove_dir_all(&target);
                    }
                    s
                })
            })
            .collect();
        Samples::join(handles, start)
    }

    /// `clients` threads, each with one keep-alive client, GETting every file of the
    /// release `get_rounds` times; every body is hashed and compared.
    fn get_load(
        &self,
        url: &str,
        reference: &Arc<BTreeMap<String, (u64, Digest)>>,
    ) -> Result<Samples> {
        let start = Instant::now();
        let handles: Vec<_> = (0..self.clients)
            .map(|_| {
                let (url, reference, rounds) =
                    (url.to_string(), reference.clone(), self.get_rounds);
                std::thread::spawn(move || {
                    let mut s = Samples::default();
                    cuda_aot_registry::remote::install_tls_provider();
                    let client = match reqwest::blocking::Client::builder()
                        .timeout(Duration::from_secs(30))
                        .build()
                    {
                        Ok(c) => c,
                        Err(e) => {
                            s.failures += 1;
                            s.first_error = Some(e.to_string());
                            return s;
                        }
                    };
                    for _ in 0..rounds {
                        for (path, (len, digest)) in reference.iter() {
                            let t = Instant::now();
                            let body = (|| -> std::result::Result<Vec<u8>, String> {
                                let mut r = client
                                    .get(format!("{url}{path}"))
                                    .send()
                                    .map_err(|e| e.to_string())?;
                                if !r.status().is_success() {
                                    return Err(format!("{path}: HTTP {}", r.status()));
                                }
                                let mut b = Vec::with_capacity(*len as usize);
                                r.read_to_end(&mut b).map_err(|e| e.to_string())?;
                                Ok(b)
                            })();
                            let took = t.elapsed();
                            match body {
                                Ok(b) => {
                                    s.latencies.push(took);
                                    s.bytes += b.len() as u64;
                                    if Digest::of(&b) != *digest {
                                        s.corrupt += 1;
                                    }
                                }
                                Err(e) => {
                                    s.failures += 1;
                                    s.first_error.get_or_insert(e);
                                }
                            }
                        }
                    }
                    s
                })
            })
            .collect();
        Samples::join(handles, start)
    }
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

/// What the hostile clients of one `get-hostile` run met.
#[derive(Default, Clone, Copy)]
struct Hostile {
    /// Slow-reader and pipeliner connections the server cut (its send timeout).
    cut: usize,
    /// Connections the server refused or closed at once (its per-address cap).
    refused: usize,
    /// Wrong-token PUTs answered 401, and 429 (throttled).
    unauthorized: usize,
    throttled: usize,
    /// Wrong-token PUTs answered otherwise, or not at all (a timeout, a reset).
    other: usize,
}

impl std::fmt::Display for Hostile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "hostile: {} wrong-token PUTs answered 401, {} throttled (429), {} otherwise; {} stalled connections cut, {} refused",
            self.unauthorized, self.throttled, self.other, self.cut, self.refused
        )
    }
}

impl Args {
    /// [`Args::get_load`] against serve with `3 × --hostile` hostile clients running
    /// beside the honest ones: slow readers (GET the largest file, read nothing),
    /// pipeliners (write GETs of `timestamp.json` as fast as the socket takes them, read
    /// nothing) and wrong-token publishers (PUT `timestamp.json` in a loop). The hostile
    /// ones start first and stop when the honest ones are done.
    fn get_load_under_attack(
        &self,
        url: &str,
        addr: SocketAddr,
        reference: &Arc<BTreeMap<String, (u64, Digest)>>,
    ) -> Result<(Samples, Hostile)> {
        use std::io::Write as _;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let stop = Arc::new(AtomicBool::new(false));
        let counts: Arc<[AtomicUsize; 5]> = Arc::new(Default::default());
        let largest = reference
            .iter()
            .max_by_key(|(_, (n, _))| *n)
            .map(|(p, _)| p.clone())
            .unwrap_or_else(|| "timestamp.json".into());
        let mut handles = Vec::new();
        for kind in 0..2 {
            for _ in 0..self.hostile {
                let (stop, counts, largest) = (stop.clone(), counts.clone(), largest.clone());
                handles.push(std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(mut c) = std::net::TcpStream::connect(addr) else {
                            counts[1].fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(100));
                            continue;
                        };
                        let _ = c.set_write_timeout(Some(Duration::from_millis(200)));
                        let _ = c.set_nodelay(true);
                        let one = match kind {
                            0 => format!("GET /{largest} HTTP/1.1\r\nHost: x\r\n\r\n"),
                            _ => "GET /timestamp.json HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
                        };
                        let repeat = if kind == 0 { 1 } else { 100_000 };
                        let mut written = 0;
                        for _ in 0..repeat {
                            if stop.load(Ordering::Relaxed) || c.write_all(one.as_bytes()).is_err()
                            {
                                break;
                            }
                            written += 1;
                        }
                        // Read nothing; wait until the server gives up on us (or the run
                        // ends): an empty line a second (allowed between requests) fails to
                        // send once the server has closed the connection.
                        let started = Instant::now();
                        while !stop.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(250));
                            match c.write(b"\r\n") {
                                // A full send buffer (the server stopped reading: it is
                                // blocked on answers nobody reads) is still a live connection.
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock
                                            | std::io::ErrorKind::TimedOut
                                    ) => {}
                                Err(_) => break,
                                Ok(_) => {}
                            }
                        }
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let slot = if written == 0 || started.elapsed() < Duration::from_millis(50)
                        {
                            1
                        } else {
                            0
                        };
                        counts[slot].fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
        }
        for _ in 0..self.hostile {
            let (stop, counts, url) = (stop.clone(), counts.clone(), url.to_string());
            handles.push(std::thread::spawn(move || {
                cuda_aot_registry::remote::install_tls_provider();
                let Ok(client) = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(5))
                    .build()
                else {
                    return;
                };
                while !stop.load(Ordering::Relaxed) {
                    let guess = format!("{:016x}{:016x}", rand_u64(), rand_u64());
                    match client
                        .put(format!("{url}timestamp.json"))
                        .bearer_auth(guess)
                        .body("{}")
                        .send()
                        .map(|r| r.status().as_u16())
                    {
                        Ok(401) => counts[2].fetch_add(1, Ordering::Relaxed),
                        Ok(429) => counts[3].fetch_add(1, Ordering::Relaxed),
                        _ => counts[4].fetch_add(1, Ordering::Relaxed),
                    };
                }
            }));
        }
        // Let the attack take hold before the honest clients start.
        std::thread::sleep(Duration::from_millis(500));
        let honest = self.get_load(url, reference);
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let _ = h.join();
        }
        let n = |i: usize| counts[i].load(Ordering::Relaxed);
        Ok((
            honest?,
            Hostile {
                cut: n(0),
                refused: n(1),
                unauthorized: n(2),
                throttled: n(3),
                other: n(4),
            },
        ))
    }
}

/// A random 64-bit number (tokens and guesses; not a key).
fn rand_u64() -> u64 {
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

/// Every file of a synced folder (staging excluded): size and blake3.
fn files_of(dir: &Path) -> Result<BTreeMap<String, (u64, Digest)>> {
    let mut out = BTreeMap::new();
    for f in crate::files::files_under(dir)?
        .into_iter()
        .filter(|f| f.regular)
    {
        if f.rel.starts_with(STAGING_DIR) {
            continue;
        }
        let b = std::fs::read(&f.path)?;
        out.insert(f.rel, (b.len() as u64, Digest::of(&b)));
    }
    Ok(out)
}

/// Files of `dir` that differ from the reference, are missing, or are extra.
fn corrupt_files(dir: &Path, reference: &BTreeMap<String, (u64, Digest)>) -> usize {
    match files_of(dir) {
        Ok(got) => {
            let missing_or_wrong = reference
                .iter()
                .filter(|(p, v)| got.get(*p) != Some(v))
                .count();
            let extra = got.keys().filter(|p| !reference.contains_key(*p)).count();
            missing_or_wrong + extra
        }
        Err(_) => reference.len(),
    }
}

fn render_csv(results: &BTreeMap<(&str, &str), Samples>, header: &str, clients: usize) -> String {
    let mut s = format!(
        "# {header}\nserver,workload,clients,ops,failures,corrupt,seconds,ops_per_s,mb_per_s,p50_ms,p99_ms\n"
    );
    for ((server, workload), r) in results {
        let _ = writeln!(
            s,
            "{server},{workload},{clients},{},{},{},{:.3},{:.1},{:.2},{:.3},{:.3}",
            r.ops(),
            r.failures,
            r.corrupt,
            r.wall.as_secs_f64(),
            r.per_sec(),
            r.mb_per_sec(),
            r.pct_ms(0.5),
            r.pct_ms(0.99)
        );
    }
    s
}

/// The verdict: no failures, no corrupt files, serve ≥ 0.5 × nginx in both workloads.
fn gate(results: &BTreeMap<(&str, &str), Samples>) -> std::result::Result<String, String> {
    let mut problems = Vec::new();
    let mut lines = Vec::new();
    for ((server, workload), r) in results {
        if r.failures > 0 || r.corrupt > 0 {
            problems.push(format!(
                "{server} {workload}: {} failures, {} corrupt files (first error: {})",
                r.failures,
                r.corrupt,
                r.first_error.as_deref().unwrap_or("none")
            ));
        }
    }
    for workload in ["sync", "get"] {
        let (Some(a), Some(b)) = (
            results.get(&("serve", workload)),
            results.get(&("nginx", workload)),
        ) else {
            continue;
        };
        let ratio = a.per_sec() / b.per_sec();
        lines.push(format!("{workload}: serve/nginx throughput {ratio:.2}x"));
        if ratio < 0.5 {
            problems.push(format!(
                "{workload}: serve reached {ratio:.2}x of nginx (goal: 0.5x)"
            ));
        }
    }
    if let (Some(h), Some(clean)) = (
        results.get(&("serve", "get-hostile")),
        results.get(&("serve", "get")),
    ) {
        let ratio = h.pct_ms(0.99) / clean.pct_ms(0.99);
        lines.push(format!(
            "get under attack: honest p99 {ratio:.2}x of serve's own get ({:.2} ms vs {:.2} ms), throughput {:.2}x",
            h.pct_ms(0.99),
            clean.pct_ms(0.99),
            h.per_sec() / clean.per_sec()
        ));
        if ratio > 10.0 {
            problems.push(format!(
                "get under attack: honest p99 {ratio:.2}x of the same run without attackers (goal: at most 10x)"
            ));
        }
    }
    if problems.is_empty() {
        Ok(format!("gate passed: {}", lines.join(", ")))
    } else {
        Err(format!("gate FAILED: {}", problems.join("; ")))
    }
}

const HISTORY: &str = "## History";

/// The document: this run in full (totals, each pass, the chart, how to read it), and one
/// history row per run (rows of earlier runs, read back from `previous`, are kept).
#[allow(clippy::too_many_arguments)]
fn render_doc(
    results: &BTreeMap<(&str, &str), Samples>,
    passes: &[String],
    hostile: &[Hostile],
    header: &str,
    a: &Args,
    verdict: &std::result::Result<String, String>,
    previous: &str,
) -> String {
    let mut s = String::from("# Serving benchmark\n\n");
    s += "Written by `cargo xtask bench-serve`; rerun it to refresh. A measurement of one \
machine, not a test: `cuda-aot-registry serve` and nginx (the pinned Debian package) serve \
the same registry folder on loopback, each with one worker per core and an access log, and \
the same clients load both in the same run, alternating which goes first.\n\n";
    let _ = writeln!(s, "- run: {header}");
    let _ = writeln!(
        s,
        "- command: `cargo xtask bench-serve --clients {} --syncs {} --get-rounds {} --passes {} --hostile {}` (release build)",
        a.clients, a.syncs, a.get_rounds, a.passes, a.hostile
    );
    let _ = writeln!(
        s,
        "- sync: each client runs cold verified syncs into empty folders with a fresh HTTP client (what a prover's first start does): every file fetched, every signature and digest checked, staged and committed; each copy is then compared with the release file by file"
    );
    let _ = writeln!(
        s,
        "- get: each client GETs every file of the release over one keep-alive connection; every body is hashed"
    );
    let _ = writeln!(
        s,
        "- get-hostile (serve only): the same GETs while {} slow readers (the largest file requested, nothing read), {} pipeliners (GETs written as fast as the socket takes them, nothing read) and {} wrong-token publishers (PUT in a loop) hold on; serve publishes in this run, so wrong tokens meet its throttle\n",
        a.hostile, a.hostile, a.hostile
    );
    for (pass, h) in hostile.iter().enumerate() {
        let _ = writeln!(s, "- pass {pass}, {h}");
    }
    if !hostile.is_empty() {
        s += "\n";
    }
    s += "| server | workload | ops | failures | corrupt files | throughput | MB/s | p50 | p99 |\n|---|---|---|---|---|---|---|---|---|\n";
    for ((server, workload), r) in results {
        let unit = if *workload == "sync" {
            "syncs/s"
        } else {
            "req/s"
        };
        let _ = writeln!(
            s,
            "| {server} | {workload} | {} | {} | {} | {:.1} {unit} | {:.2} | {:.2} ms | {:.2} ms |",
            r.ops(),
            r.failures,
            r.corrupt,
            r.per_sec(),
            r.mb_per_sec(),
            r.pct_ms(0.5),
            r.pct_ms(0.99)
        );
    }
    let _ = writeln!(
        s,
        "\n{}\n\n![throughput and latency](bench-serve.svg)\n",
        match verdict {
            Ok(t) | Err(t) => t,
        }
    );
    s += "Each pass (the servers alternate which goes first):\n\n| pass | server | workload | throughput | p50 | p99 |\n|---|---|---|---|---|---|\n";
    for line in passes {
        s += line;
        s += "\n";
    }
    s += "\nHow to read it: clients and servers share the machine's cores (on a shared build \
machine, with other jobs too: passes of the same server can differ by 2x, so compare the \
servers within a run and look at the history across runs). A cold verified sync \
is mostly client work — one build statement and the index signature checked, every manifest \
and blob hashed and content-checked, every staged file fsynced and renamed — so both servers \
reach similar sync rates and the latencies mostly measure 64 clients queueing for the cores. \
The GET workload isolates the server's per-request cost: for `serve`, one blocking-pool trip \
(path and link checks, open, ETag from a cache keyed by inode, size and mtime, small files \
read whole) and a JSON log line; for nginx, its sendfile path and access log. The gate asks \
for at least half of nginx's throughput in both workloads, with zero failures and zero \
corrupt files. In `get-hostile` the attackers share the cores with the server and the \
honest clients (the wrong-token loop alone sends hundreds of PUTs a second, each answered \
429 once the throttle holds), so its throughput mostly measures the CPU they take; the gate \
asks that the honest clients see no failure and a p99 within 10x of serve's own `get` of \
the same run.\n";
    let rate = |server: &str, workload: &str| {
        results
            .get(&(server, workload))
            .map_or(f64::NAN, Samples::per_sec)
    };
    let bad: usize = results.values().map(|r| r.failures + r.corrupt).sum();
    let row = format!(
        "| {} | {} | {} | {:.1} / {:.1} ({:.2}x) | {:.0} / {:.0} ({:.2}x) | {bad} |",
        header.split(", ").nth(1).unwrap_or("?"),
        machine::cores(),
        a.clients,
        rate("serve", "sync"),
        rate("nginx", "sync"),
        rate("serve", "sync") / rate("nginx", "sync"),
        rate("serve", "get"),
        rate("nginx", "get"),
        rate("serve", "get") / rate("nginx", "get"),
    );
    let mut rows: Vec<String> = previous
        .split_once(HISTORY)
        .map(|(_, h)| {
            h.lines()
                .filter(|l| l.starts_with("| 2"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    rows.push(row);
    s += &format!(
        "\n{HISTORY}\n\n| date | cores | clients | sync serve / nginx (syncs/s) | get serve / nginx (req/s) | failures + corrupt |\n|---|---|---|---|---|---|\n"
    );
    for r in rows {
        s += &r;
        s += "\n";
    }
    s
}

/// Two panels of horizontal bars: throughput per workload (relative to the faster server)
/// and p50/p99 latency, serve and nginx side by side.
fn chart(results: &BTreeMap<(&str, &str), Samples>, title: &str) -> String {
    let (w, left, bar_h) = (1000.0, 150.0, 20.0);
    let mut rows = Vec::new();
    for workload in ["sync", "get", "get-hostile"] {
        for server in SERVERS {
            if let Some(r) = results.get(&(server, workload)) {
                rows.push((workload, server, r));
            }
        }
    }
    let h = 90.0 + rows.len() as f64 * 2.0 * (bar_h + 8.0) + 60.0;
    let color = |server: &str| {
        if server == "serve" {
            "#2b8a3e"
        } else {
            "#1c7ed6"
        }
    };
    let mut s = Svg::new(w, h);
    s.text(10.0, 20.0, "font-size='13'", title);
    s.text(
        10.0,
        42.0,
        "",
        "throughput (bar length relative to the faster server of each workload); green: cuda-aot-registry serve, blue: nginx",
    );
    let span = w - left - 170.0;
    let mut y = 60.0;
    for workload in ["sync", "get", "get-hostile"] {
        let max = rows
            .iter()
            .filter(|r| r.0 == workload)
            .map(|r| r.2.per_sec())
            .fold(1e-9, f64::max);
        for (_, server, r) in rows.iter().filter(|r| r.0 == workload) {
            let unit = if workload == "sync" {
                "syncs/s"
            } else {
                "req/s"
            };
            let len = (r.per_sec() / max * span).max(1.0);
            let label = format!("{workload} · {server}");
            s.text(left - 8.0, y + 14.0, "text-anchor='end'", &label);
            s.rect(left, y, len, bar_h, color(server), "");
            let figure = format!("{:.1} {unit}", r.per_sec());
            s.text(left + len + 6.0, y + 14.0, "", &figure);
            y += bar_h + 8.0;
        }
    }
    y += 20.0;
    s.text(
        10.0,
        y,
        "",
        "latency per operation, p50 (solid) and p99 (light), relative to the slowest p99 of each workload",
    );
    y += 14.0;
    for workload in ["sync", "get", "get-hostile"] {
        let max = rows
            .iter()
            .filter(|r| r.0 == workload)
            .map(|r| r.2.pct_ms(0.99))
            .fold(1e-9, f64::max);
        for (_, server, r) in rows.iter().filter(|r| r.0 == workload) {
            let (p50, p99) = (r.pct_ms(0.5), r.pct_ms(0.99));
            let l99 = (p99 / max * span).max(1.0);
            let l50 = (p50 / max * span).max(1.0);
            let label = format!("{workload} · {server}");
            s.text(left - 8.0, y + 14.0, "text-anchor='end'", &label);
            s.rect(left, y, l99, bar_h, color(server), "opacity='0.35'");
            s.rect(left, y, l50, bar_h, color(server), "");
            let figure = format!("p50 {p50:.2} ms, p99 {p99:.2} ms");
            s.text(left + l99 + 6.0, y + 14.0, "", &figure);
            y += bar_h + 8.0;
        }
    }
    s.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(n: usize, ms: u64, failures: usize) -> Samples {
        Samples {
            latencies: vec![Duration::from_millis(ms); n],
            bytes: 1000,
            failures,
            corrupt: 0,
            wall: Duration::from_secs(1),
            first_error: None,
        }
    }

    #[test]
    fn the_gate_wants_half_of_nginx_and_no_failures() {
        let mut r = BTreeMap::new();
        r.insert(("serve", "sync"), samples(60, 5, 0));
        r.insert(("nginx", "sync"), samples(100, 3, 0));
        assert!(gate(&r).is_ok(), "{:?}", gate(&r));
        r.insert(("serve", "get"), samples(40, 5, 0));
        r.insert(("nginx", "get"), samples(100, 3, 0));
        assert!(gate(&r).unwrap_err().contains("get: serve reached 0.40x"));
        r.insert(("serve", "get"), samples(100, 5, 1));
        assert!(gate(&r).unwrap_err().contains("1 failures"));
        // Under attack: the honest p99 against serve's own get of the same run.
        r.insert(("serve", "get"), samples(100, 5, 0));
        r.insert(("serve", "get-hostile"), samples(100, 45, 0));
        assert!(gate(&r).is_ok(), "{:?}", gate(&r));
        r.insert(("serve", "get-hostile"), samples(100, 55, 0));
        assert!(gate(&r).unwrap_err().contains("honest p99 11.00x"));
    }

    #[test]
    fn the_chart_and_the_csv_hold_every_row() {
        let mut r = BTreeMap::new();
        r.insert(("serve", "sync"), samples(10, 5, 0));
        r.insert(("nginx", "sync"), samples(10, 3, 0));
        let svg = chart(&r, "t");
        assert!(svg.contains("sync · serve") && svg.contains("sync · nginx"));
        let csv = render_csv(&r, "t", 64);
        assert_eq!(csv.lines().count(), 4);
        assert!(csv.contains("nginx,sync,64,10,0,0,1.000,10.0"));
    }
}
