//! `cargo xtask bench --remote-exec`: builds through a Remote Execution API server (issue
//! 45) on the heavy generated corpus, with the pinned BuildGrid and two of the project's
//! workers on this machine. One run measures: the local cold build; the first remote build
//! on a fresh server (the toolkit uploaded); a remote build of changed sources with the
//! ActionCache off at the same `-j` (its overhead over the local build, with the server's,
//! the database's and the workers' own CPU share, since they share the cores with nvcc);
//! a second checkout answered wholly from the ActionCache; and a model of N workers from
//! the measured per-action costs. Every compared figure is a ratio of two measurements of
//! this run. Writes `docs/remote-exec-bench.md`.

use anyhow::{Context, Result, bail};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cuda_aot_builder::build::{self, BuildOptions};
use cuda_aot_builder::executor::RemoteExecCache;
use cuda_aot_builder::executor::remote::{Remote, RemoteStats};

use crate::repo::servers::{pick_port, reapi, reapi_worker};

/// The aims (issue 45).
const AIM_OVERHEAD: f64 = 1.15;
const AIM_HITS_PCT: f64 = 5.0;
/// The real corpus of the model: 41 jobs × 2 SMs, about 240 s cold on 2 cores.
const REAL_ACTIONS: f64 = 82.0;
const REAL_COLD_2_CORES_S: f64 = 240.0;

/// A child process killed (its whole group) when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
    }
}

/// CPU seconds (user + system) the live processes of group `group` have used.
fn group_cpu(group: u32) -> f64 {
    let tick = 100.0; // USER_HZ on Linux
    let mut total = 0.0;
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let f: Vec<&str> = rest.split(' ').collect();
        // state ppid pgrp ... utime (14th field overall: index 11 here) stime (12)
        if f.len() > 12 && f[2].parse() == Ok(group) {
            total += f[11].parse::<f64>().unwrap_or(0.0) + f[12].parse::<f64>().unwrap_or(0.0);
        }
    }
    total / tick
}

/// One measured build.
struct Run {
    wall: Duration,
    blobs: Vec<String>,
    stats: RemoteStats,
    /// CPU seconds of the server (BuildGrid and PostgreSQL) and of the workers (with the
    /// nvcc they ran) during it.
    server_cpu: f64,
    worker_cpu: f64,
}

/// Runs the rows; returns the Markdown table.
pub fn rows(base: &BuildOptions, dir: &Path, modules: usize) -> Result<String> {
    let spec = super::shared::write_corpus(dir, modules, &["sm_80", "sm_90"])?;
    let port = pick_port(0)?;
    std::fs::create_dir_all(dir.join("server"))?;
    let server = Guard(
        reapi::command(port, None, &dir.join("server"), 5)?
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the REAPI server")?,
    );
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if t.elapsed() > Duration::from_secs(180) {
            bail!("the REAPI server did not listen in 180 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = format!("grpc://127.0.0.1:{port}");
    let mut workers = Vec::new();
    let logs = dir.join("workers");
    std::fs::create_dir_all(&logs)?;
    for name in ["one", "two"] {
        let w =
            reapi_worker::Worker::new(&url, &dir.join(name), Some(name.into()), String::new(), 1)?;
        let log = std::fs::File::create(logs.join(format!("{name}.log")))?;
        workers.push(Guard(
            w.command()?
                .process_group(0)
                .stdout(log)
                .stderr(Stdio::null())
                .spawn()
                .context("starting a worker")?,
        ));
    }
    std::thread::sleep(Duration::from_secs(3));
    let measure = |name: &str, remote: Option<RemoteExecCache>, sources: &Path| -> Result<Run> {
        let mut opts = BuildOptions {
            spec: spec.clone(),
            sources: Some(sources.to_path_buf()),
            cache: dir.join(format!("cache-{name}")),
            out: dir.join(format!("out-{name}")),
            ..base.clone()
        };
        let executor = match remote {
            Some(mode) => Some(Arc::new(Remote::connect(&url, mode)?)),
            None => None,
        };
        if let Some(e) = &executor {
            opts.executor = e.clone();
        }
        let cpu = |g: &Guard| group_cpu(g.0.id());
        let (s0, w0) = (cpu(&server), workers.iter().map(cpu).sum::<f64>());
        eprintln!("bench: remote execution: {name}");
        let report = build::run_build(&opts).with_context(|| format!("the {name} build"))?;
        let (s1, w1) = (cpu(&server), workers.iter().map(cpu).sum::<f64>());
        let mut blobs: Vec<String> = report
            .modules
            .iter()
            .map(|m| m.manifest.module_digest.to_string())
            .collect();
        blobs.sort();
        Ok(Run {
            wall: report.wall,
            blobs,
            stats: executor.map(|e| e.stats()).unwrap_or_default(),
            server_cpu: s1 - s0,
            worker_cpu: w1 - w0,
        })
    };
    let src = dir.join("src");
    let local = measure("local", None, &src)?;
    let first = measure("first-remote", Some(RemoteExecCache::ReadWrite), &src)?;
    // Changed sources (a comment), the cache off: every action runs, only sources go up.
    let changed = dir.join("src-changed");
    crate::files::copy_tree(&src, &changed)?;
    let heavy = changed.join("heavy.cu");
    let text = std::fs::read_to_string(&heavy)?;
    std::fs::write(&heavy, format!("// changed for the bench\n{text}"))?;
    let local_changed = measure("local-changed", None, &changed)?;
    let steady = measure("remote-changed", Some(RemoteExecCache::Off), &changed)?;
    let hits = measure("all-hits", Some(RemoteExecCache::ReadWrite), &src)?;
    let same = first.blobs == local.blobs
        && hits.blobs == local.blobs
        && steady.blobs == local_changed.blobs;
    drop(workers);
    drop(server);
    let service = action_seconds(&logs)?;
    Ok(table(&Figures {
        modules,
        jobs: base.jobs,
        local,
        first,
        local_changed,
        steady,
        hits,
        same,
        service,
    }))
}

/// The seconds each finished action took on its worker (fetch, run, upload), from the
/// workers' event lines.
fn action_seconds(logs: &Path) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(logs)? {
        for line in std::fs::read_to_string(e?.path())?.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if v["event"] == "done" {
                out.extend(v["seconds"].as_f64());
            }
        }
    }
    Ok(out)
}

struct Figures {
    modules: usize,
    jobs: usize,
    local: Run,
    first: Run,
    local_changed: Run,
    steady: Run,
    hits: Run,
    same: bool,
    service: Vec<f64>,
}

fn pass(ok: bool) -> &'static str {
    if ok { "pass" } else { "**fail**" }
}

fn table(f: &Figures) -> String {
    let secs = |r: &Run| r.wall.as_secs_f64();
    let mib = |r: &Run| r.stats.uploaded as f64 / f64::from(1 << 20);
    let overhead = secs(&f.steady) / secs(&f.local_changed);
    let hits_pct = 100.0 * secs(&f.hits) / secs(&f.first);
    let share = |cpu: f64, r: &Run| 100.0 * cpu / (secs(r) * 2.0);
    let actions = f.steady.stats.actions as f64;
    // Per action: its service time on a worker, and the rest of the remote round trip
    // (scheduling, transfers), from the steady build at 2 workers.
    let served: f64 = f.service.iter().sum::<f64>() / f.service.len().max(1) as f64;
    let gap = (secs(&f.steady) * 2.0 / actions - served).max(0.0);
    let local_per_action = secs(&f.local_changed) * 2.0 / actions;
    let real_cpu = REAL_COLD_2_CORES_S * 2.0 / REAL_ACTIONS;
    let model = |n: f64| REAL_ACTIONS * (real_cpu + (served - local_per_action).max(0.0) + gap) / n;
    let n30 = (1..=1024).find(|&n| model(n as f64) < 30.0).unwrap_or(0);
    let mut t = String::new();
    t += "| row | figure | aim | |\n|---|---|---|---|\n";
    t += &format!(
        "| local cold build, {} modules × 2 SMs, -j{} | {:.1} s | — | |\n",
        f.modules,
        f.jobs,
        secs(&f.local)
    );
    t += &format!(
        "| first remote build, fresh server (2 workers, -j{}) | {:.1} s, {} actions, **{:.1} MiB uploaded** (the toolkit, once) | — | |\n",
        f.jobs,
        secs(&f.first),
        f.first.stats.actions,
        mib(&f.first)
    );
    t += &format!(
        "| changed sources, ActionCache off: remote / local at equal parallelism | {:.1} s / {:.1} s = **{overhead:.3}×**, {:.2} MiB uploaded (sources only); the server's processes {:.0} % and the workers' own (not their nvcc) {:.0} % of the 2 cores | ≤ {AIM_OVERHEAD}× | {} |\n",
        secs(&f.steady),
        secs(&f.local_changed),
        mib(&f.steady),
        share(f.steady.server_cpu, &f.steady),
        share(f.steady.worker_cpu, &f.steady),
        pass(overhead <= AIM_OVERHEAD)
    );
    t += &format!(
        "| second checkout, empty caches: every action from the ActionCache | {:.2} s = **{hits_pct:.1} %** of the first remote build, {} of {} from the cache, 0 executed | ≤ {AIM_HITS_PCT} % | {} |\n",
        secs(&f.hits),
        f.hits.stats.cached,
        f.hits.stats.actions,
        pass(hits_pct <= AIM_HITS_PCT && f.hits.stats.cached == f.hits.stats.actions)
    );
    t += &format!(
        "| blobs | remote builds give the local builds' digests: {} | same | {} |\n",
        f.same,
        pass(f.same)
    );
    t += &format!(
        "| per action | on a worker {served:.2} s (fetch, run, upload; both remote builds that ran actions) against {local_per_action:.2} s locally; the rest of the round trip {gap:.2} s (the steady build) | reported | |\n"
    );
    t += &format!(
        "| model: the real corpus (41 jobs × 2 SMs, {REAL_COLD_2_CORES_S:.0} s cold on 2 cores) on N workers of one core | N = 8: {:.0} s, 16: {:.0} s, 32: {:.0} s; under 30 s from **N = {n30}** | reported | |\n",
        model(8.0),
        model(16.0),
        model(32.0)
    );
    t
}

/// Writes `table` into `doc` (a page of its own, one run per write).
pub fn write_doc(doc: &Path, table: &str, modules: usize) -> Result<PathBuf> {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let text = format!(
        "# Remote execution benchmark\n\n\
         `cargo xtask bench --remote-exec --heavy-modules {modules}` (issue 45), run {now} on this \
         machine: the pinned BuildGrid (`cargo xtask servers reapi`) and two of the project's \
         workers (`servers reapi-worker`) on the same cores as nvcc, the heavy generated corpus. \
         Every compared figure is a ratio of two measurements of this run. The model assumes each \
         worker runs one action at a time on a core of its own, with the per-action costs measured \
         here.\n\n{table}"
    );
    crate::files::write(doc, text.as_bytes())?;
    Ok(doc.to_path_buf())
}
