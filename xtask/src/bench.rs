//! `cargo xtask bench`: measures the build itself — a full release build from a cold cache,
//! a no-op rebuild (in process and as a fresh `xtask build` process) and its ratio to the
//! full build, a rebuild after a shared header changed, and parallel efficiency against
//! `-j1` — and writes the figures to `docs/build-bench.md`.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::args::{ToolkitArgs, ToolkitChoice};
use crate::build::{self, BuildOptions, BuildReport};
use crate::files::copy_tree;
use crate::paths;
use crate::toolchain::ToolchainOptions;

/// Benchmark the build: full release build, no-op rebuild, parallel efficiency.
///
/// Every build runs in temporary folders (own cache, own output, own copy of the sources),
/// so the repository's .cuda-aot/ is not touched; only the toolkit is shared. Takes about
/// three full builds of wall time. This is a benchmark, not a test: numbers depend on the
/// machine and are recorded with it.
#[derive(clap::Args)]
#[command(after_long_help = "\
Measures (a) the full release build from a cold cache, (b) the no-op rebuild (in process and
as a fresh `xtask build` process) and its ratio to (a), (c) a rebuild after changing the header
most modules include, and (d) parallel efficiency: time(-j1) / (N * time(-jN)). Every build
runs in temporary folders; only the toolkit is shared. Prints a table and rewrites
docs/build-bench.md (the history table keeps one row per run). Run it on a quiet machine.")]
pub struct Args {
    /// Parallel nvcc jobs of the parallel builds (default: the number of available cores).
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    jobs: Option<usize>,
    /// How many no-op rebuilds to time; the median is reported.
    #[arg(long, value_name = "N", default_value_t = 5)]
    noop_runs: usize,
    /// How many times to run each cold build (-jN and -j1); the median is reported.
    #[arg(long, value_name = "N", default_value_t = 1)]
    repeat: usize,
    /// Skip the -j1 build (parallel efficiency is then not measured).
    #[arg(long)]
    skip_serial: bool,
    /// Where to write the figures (Markdown; the history table of earlier runs is kept).
    #[arg(long, value_name = "FILE")]
    doc: Option<PathBuf>,
    /// Print the figures only; write no document.
    #[arg(long)]
    no_doc: bool,
    #[command(flatten)]
    toolkit: ToolkitArgs,
}

/// Everything one run measured.
struct Figures {
    repeat: usize,
    jobs: usize,
    blobs: usize,
    full: Duration,
    full_nvcc: usize,
    noop: Duration,
    noop_process: Duration,
    header: Option<(String, usize, Duration)>,
    serial: Option<Duration>,
}

impl Args {
    /// Runs the benchmark.
    pub fn run(self) -> Result<()> {
        let mut base = BuildOptions {
            progress: false,
            toolkit: ToolchainOptions::from_args(&self.toolkit),
            ..BuildOptions::default()
        };
        if let Some(j) = self.jobs {
            base.jobs = j.max(1);
        }
        let runs = self.noop_runs.max(1);
        // Not timed: bootstrap the toolkit, find the host compiler, validate the spec.
        let plan = build::plan(&base)?;
        let sources = plan.spec.sources.clone();
        let tmp = tempfile::Builder::new()
            .prefix("cuda-aot-bench-")
            .tempdir()
            .context("creating a temporary folder")?;
        let src = tmp.path().join("src");
        copy_tree(&sources, &src)?;
        let par = BuildOptions {
            sources: Some(src.clone()),
            cache: tmp.path().join("cache"),
            out: tmp.path().join("out"),
            ..base.clone()
        };

        let repeat = self.repeat.max(1);
        eprintln!(
            "bench: {repeat} full release build(s), cold cache, -j{}",
            par.jobs
        );
        let mut fulls = Vec::new();
        for _ in 0..repeat {
            for d in [&par.cache, &par.out] {
                let _ = std::fs::remove_dir_all(d);
            }
            fulls.push(build::run_build(&par)?);
        }
        fulls.sort_by_key(|r| r.wall);
        let full = fulls.swap_remove(fulls.len() / 2);
        let blobs = full.modules.len();

        eprintln!("bench: {runs} no-op rebuilds in process");
        let mut noop = Vec::new();
        for _ in 0..runs {
            let r = build::run_build(&par)?;
            expect_noop(&r)?;
            noop.push(r.wall);
        }

        eprintln!("bench: {runs} no-op rebuilds as `xtask build` processes");
        let mut noop_process = Vec::new();
        for _ in 0..runs {
            noop_process.push(noop_as_process(&par, &self.toolkit)?);
        }

        let header = match most_included_header(&src)? {
            Some(h) => {
                eprintln!("bench: rebuild after changing {h}");
                let path = src.join(&h);
                let mut text = std::fs::read_to_string(&path)?;
                text.push_str("\n// changed by cargo xtask bench\n");
                std::fs::write(&path, text)?;
                let r = build::run_build(&par)?;
                Some((h, r.nvcc_runs, r.wall))
            }
            None => None,
        };

        let serial = if self.skip_serial {
            None
        } else {
            eprintln!("bench: {repeat} full release build(s), cold cache, -j1");
            let one = BuildOptions {
                jobs: 1,
                cache: tmp.path().join("cache-j1"),
                out: tmp.path().join("out-j1"),
                sources: Some(sources.clone()),
                ..base.clone()
            };
            let mut walls = Vec::new();
            for _ in 0..repeat {
                for d in [&one.cache, &one.out] {
                    let _ = std::fs::remove_dir_all(d);
                }
                walls.push(build::run_build(&one)?.wall);
            }
            Some(median(walls))
        };

        let f = Figures {
            repeat,
            jobs: par.jobs.min(blobs),
            blobs,
            full: full.wall,
            full_nvcc: full.nvcc_runs,
            noop: median(noop),
            noop_process: median(noop_process),
            header,
            serial,
        };
        let table = f.table(runs);
        println!("{table}");
        if !self.no_doc {
            let doc = self
                .doc
                .unwrap_or_else(|| paths::repo_root().join("docs/build-bench.md"));
            write_doc(&doc, &f, &table, &plan)?;
            println!("wrote {}", doc.display());
        }
        Ok(())
    }
}

fn expect_noop(r: &BuildReport) -> Result<()> {
    if r.nvcc_runs != 0 {
        bail!(
            "a no-op rebuild ran nvcc {} times; the build cache is not working",
            r.nvcc_runs
        );
    }
    Ok(())
}

/// One no-op `xtask build` as a fresh process (what a developer sees, minus cargo).
fn noop_as_process(opts: &BuildOptions, tk: &ToolkitArgs) -> Result<Duration> {
    let exe = std::env::current_exe().context("finding the xtask executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("build")
        .arg("--spec")
        .arg(&opts.spec)
        .arg("--cache-dir")
        .arg(&opts.cache)
        .arg("--out")
        .arg(&opts.out)
        .arg("-j")
        .arg(opts.jobs.to_string())
        .arg("--toolkit")
        .arg(match tk.toolkit {
            ToolkitChoice::Pinned => "pinned",
            ToolkitChoice::System => "system",
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(s) = &opts.sources {
        cmd.arg("--sources").arg(s);
    }
    cmd.env("CUDA_AOT_TOOLKIT_DIR", &opts.toolkit.toolkit_dir);
    let t = Instant::now();
    let out = cmd.output().context("running xtask build")?;
    let wall = t.elapsed();
    if !out.status.success() {
        bail!(
            "xtask build failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(wall)
}

/// The `.cuh` header that the most `.cu` files of `src` include (by name).
fn most_included_header(src: &Path) -> Result<Option<String>> {
    let mut headers = Vec::new();
    let mut sources = Vec::new();
    for e in walkdir::WalkDir::new(src) {
        let e = e?;
        let rel = e.path().strip_prefix(src)?.to_string_lossy().into_owned();
        if rel.ends_with(".cuh") || rel.ends_with(".h") {
            headers.push(rel);
        } else if rel.ends_with(".cu") {
            sources.push(std::fs::read_to_string(e.path())?);
        }
    }
    let count = |h: &str| {
        let name = Path::new(h)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        sources
            .iter()
            .filter(|s| {
                s.lines()
                    .any(|l| l.trim_start().starts_with("#include") && l.contains(&name))
            })
            .count()
    };
    Ok(headers
        .into_iter()
        .max_by_key(|h| (count(h), std::cmp::Reverse(h.clone()))))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else {
        format!("{ms:.1} ms")
    }
}

fn pct(part: Duration, whole: Duration) -> f64 {
    100.0 * part.as_secs_f64() / whole.as_secs_f64()
}

impl Figures {
    fn efficiency(&self) -> Option<f64> {
        self.serial
            .map(|s| s.as_secs_f64() / (self.jobs as f64 * self.full.as_secs_f64()))
    }

    fn table(&self, runs: usize) -> String {
        let mut rows = vec![
            (
                format!(
                    "full release build, cold cache, -j{} (median of {})",
                    self.jobs, self.repeat
                ),
                format!(
                    "{} ({} blobs, {} nvcc runs)",
                    ms(self.full),
                    self.blobs,
                    self.full_nvcc
                ),
            ),
            (
                format!("no-op rebuild, in process (median of {runs})"),
                format!(
                    "{} = {:.2} % of the full build (0 nvcc runs)",
                    ms(self.noop),
                    pct(self.noop, self.full)
                ),
            ),
            (
                format!("no-op rebuild, `xtask build` process (median of {runs})"),
                format!(
                    "{} = {:.2} % of the full build",
                    ms(self.noop_process),
                    pct(self.noop_process, self.full)
                ),
            ),
        ];
        if let Some((h, n, t)) = &self.header {
            rows.push((
                format!("rebuild after changing `{h}`"),
                format!("{} ({n} of {} blobs recompiled)", ms(*t), self.blobs),
            ));
        }
        if let Some(s) = self.serial {
            rows.push((
                format!(
                    "full release build, cold cache, -j1 (median of {})",
                    self.repeat
                ),
                ms(s),
            ));
            rows.push((
                format!(
                    "parallel efficiency time(-j1) / ({} × time(-j{}))",
                    self.jobs, self.jobs
                ),
                format!("{:.2}", self.efficiency().unwrap_or(0.0)),
            ));
        }
        let mut out = String::from("| measurement | result |\n|---|---|\n");
        for (k, v) in rows {
            out.push_str(&format!("| {k} | {v} |\n"));
        }
        out
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

const HISTORY: &str = "## History";

/// Writes the document: the latest figures in full, and one history row per run (rows of
/// earlier runs are kept).
fn write_doc(path: &Path, f: &Figures, table: &str, plan: &build::Plan) -> Result<()> {
    let date = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = cpu_model();
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let mut history: Vec<String> = std::fs::read_to_string(path)
        .ok()
        .and_then(|old| old.split_once(HISTORY).map(|(_, h)| h.to_string()))
        .map(|h| {
            h.lines()
                .filter(|l| l.starts_with("| 2") || l.starts_with("| 1"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    history.push(format!(
        "| {date} | {cores} × {cpu} | {profile} | -j{} | {} | {} ({:.2} %) | {} | {} |",
        f.jobs,
        ms(f.full),
        ms(f.noop),
        pct(f.noop, f.full),
        f.serial.map_or("-".into(), ms),
        f.efficiency().map_or("-".into(), |e| format!("{e:.2}"))
    ));
    let tk = &plan.toolkit.identity;
    let doc = format!(
        "# Build benchmark\n\n\
         Written by `cargo xtask bench`; rerun it to refresh (the history table keeps one row \
         per run). Each build runs in temporary folders with its own cache and output; the \
         no-op figures are the median of several runs. The aim for a no-op rebuild is under \
         2 % of the full build. This is a measurement of one machine, not a test.\n\n\
         ## Latest run\n\n\
         - date: {date}\n\
         - machine: {cores} cores available, CPU {cpu}, {os} {arch}\n\
         - command: `cargo xtask bench{args}` (xtask {profile} build)\n\
         - toolkit: nvcc {nvcc} ({source}, {digest}); host compiler: {host}\n\
         - release set: {modules} modules, {blobs} blobs ({spec})\n\n\
         {table}\n\
         How to read it: the full build runs one nvcc per (module, target) on -jN workers; a \
         no-op rebuild runs no nvcc at all (dependency records prove every source and header \
         unchanged, the cache entry is checked and the output already holds the bytes); \
         changing a header that several modules include recompiles exactly those modules. \
         Each job is its own nvcc process chain (host preprocessor, cicc, ptxas), so jobs \
         scale with the cores; what keeps efficiency below 1 is the tail of the queue, where \
         workers idle beside the last jobs (longest-first ordering keeps that tail short), and \
         other load on the machine. Timings on a shared machine vary by several percent.\n\n\
         {HISTORY}\n\n\
         | date | machine | xtask build | jobs | full build | no-op in process (ratio) | full -j1 | efficiency |\n\
         |---|---|---|---|---|---|---|---|\n\
         {rows}\n",
        args = if f.repeat > 1 {
            format!(" --repeat {}", f.repeat)
        } else {
            String::new()
        },
        os = std::env::consts::OS,
        arch = std::env::consts::ARCH,
        nvcc = tk.nvcc,
        source = tk.source,
        digest = tk.digest.short(),
        host = plan.host.version,
        modules = plan.spec.modules.len(),
        blobs = f.blobs,
        spec = plan
            .spec
            .path
            .strip_prefix(paths::repo_root())
            .unwrap_or(&plan.spec.path)
            .display(),
        rows = history.join("\n"),
    );
    crate::files::write(path, doc.as_bytes())
}
