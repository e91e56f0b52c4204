//! `cargo xtask bench`: measures the build itself — full release builds from a cold cache
//! (min / median / max over several runs, with the machine's load), no-op rebuilds (in
//! process, as an `xtask build` process and through `cargo xtask build`) and their ratio to
//! the full build, a rebuild after a shared header changed and after it was reverted,
//! parallel efficiency against `-j1`, and a scaling row at 30 modules × 8 targets (full
//! build, no-op, and `verify` at 240 entries against 24) — and writes the figures to
//! `docs/build-bench.md`. Every figure that is compared is a ratio of two measurements of
//! the same run.

use anyhow::{Context, Result, bail};
use cuda_aot_registry::PublishOptions;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::args::{ToolkitArgs, ToolkitChoice};
use crate::build::{self, BuildOptions, BuildReport};
use crate::files::copy_tree;
use crate::toolchain::ToolchainOptions;
use crate::{devkeys, paths, publish, sign};

/// The aims the figures are held against (issue 12).
const AIM_NOOP_PCT: f64 = 1.0;
const AIM_VERIFY_RATIO: f64 = 5.0;
/// The scaling row's size.
const SCALE_MODULES: usize = 30;

/// Benchmark the build: full and no-op builds, a header edit and its revert, parallel
/// efficiency, and a scaling row at 30 modules × 8 targets.
///
/// Every build runs in a temporary folder inside the project's .cuda-aot/ (own copy of the
/// sources, own caches, outputs and registries), so nothing of the project's own build is
/// touched; only the toolkit is shared. Takes several minutes (about ten full release builds
/// of wall time). This is a benchmark, not a test: numbers depend on the machine and are
/// recorded with it, its load included.
#[derive(clap::Args)]
#[command(after_long_help = "\
Measures, in one run:
  (a) the full release build from a cold cache through `cargo xtask build` (what a developer
      runs), --repeat times: min / median / max;
  (b) the no-op rebuild in process, as an `xtask build` process and through `cargo xtask build`,
      and each one's ratio to (a) (aim: through cargo within 1 %);
  (c) a rebuild after changing the header most modules include, then after reverting it (aim:
      the revert runs no nvcc);
  (d) parallel efficiency: time(-j1) / (N * time(-jN));
  (e) a scaling row: 30 modules x 8 targets (240 jobs): full build, no-op, and `xtask verify`
      of a registry of 240 entries against one of the 24 entries of the release set (aim: at
      most 5x).
The 1-minute load average is sampled before every timed step and reported. Prints a table and
rewrites docs/build-bench.md (the history table keeps one row per run). Run it on a quiet
machine; when cargo is not on PATH the `cargo xtask` rows are skipped.")]
pub struct Args {
    /// Parallel nvcc jobs of the parallel builds (default: the number of available cores).
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    jobs: Option<usize>,
    /// How many no-op rebuilds (and verifies) to time per kind; the median is reported.
    #[arg(long, value_name = "N", default_value_t = 7)]
    noop_runs: usize,
    /// How many times to run each cold build (-jN and -j1): min / median / max.
    #[arg(long, value_name = "N", default_value_t = 3)]
    repeat: usize,
    /// Skip the -j1 builds (parallel efficiency is then not measured).
    #[arg(long)]
    skip_serial: bool,
    /// Skip the scaling row (30 modules x 8 targets: about ten release builds of nvcc time).
    #[arg(long)]
    skip_scale: bool,
    /// Where to write the figures (Markdown; the history table of earlier runs is kept).
    #[arg(long, value_name = "FILE")]
    doc: Option<PathBuf>,
    /// Print the figures only; write no document.
    #[arg(long)]
    no_doc: bool,
    #[command(flatten)]
    toolkit: ToolkitArgs,
}

/// min / median / max of several timings.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stats {
    min: Duration,
    median: Duration,
    max: Duration,
    n: usize,
}

impl Stats {
    fn of(mut v: Vec<Duration>) -> Stats {
        assert!(!v.is_empty(), "at least one timing");
        v.sort();
        Stats {
            min: v[0],
            median: v[v.len() / 2],
            max: v[v.len() - 1],
            n: v.len(),
        }
    }

    fn show(&self) -> String {
        if self.n == 1 {
            return ms(self.median);
        }
        format!(
            "{} (min {}, max {}; {} runs)",
            ms(self.median),
            ms(self.min),
            ms(self.max),
            self.n
        )
    }

    fn short(&self) -> String {
        if self.n == 1 {
            return ms(self.median);
        }
        format!("{} / {} / {}", ms(self.min), ms(self.median), ms(self.max))
    }
}

/// The 1-minute load average, sampled before each timed step.
#[derive(Default)]
struct Load {
    samples: Vec<f64>,
}

impl Load {
    fn sample(&mut self) {
        if let Some(l) = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse().ok())
        {
            self.samples.push(l);
        }
    }

    fn show(&self) -> String {
        if self.samples.is_empty() {
            return "unknown".into();
        }
        let min = self.samples.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.samples.iter().copied().fold(0.0, f64::max);
        let mut v = self.samples.clone();
        v.sort_by(f64::total_cmp);
        format!("{min:.2} / {:.2} / {max:.2}", v[v.len() / 2])
    }
}

struct Header {
    name: String,
    nvcc: usize,
    wall: Duration,
    revert_nvcc: usize,
    revert_wall: Duration,
}

struct Scale {
    modules: usize,
    targets: usize,
    jobs: usize,
    full: Duration,
    full_nvcc: usize,
    noop_process: Stats,
    noop_cargo: Option<Stats>,
    verify_small: Stats,
    verify_large: Stats,
    entries_small: usize,
    entries_large: usize,
}

impl Scale {
    fn verify_ratio(&self) -> f64 {
        ratio(self.verify_large.median, self.verify_small.median)
    }
}

/// Everything one run measured.
struct Figures {
    jobs: usize,
    blobs: usize,
    full: Stats,
    full_nvcc: usize,
    full_via: &'static str,
    noop: Stats,
    noop_process: Stats,
    noop_cargo: Option<Stats>,
    header: Option<Header>,
    serial: Option<Stats>,
    scale: Option<Scale>,
    load: Load,
}

/// How a build is started.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    /// `cargo xtask build` in the repository (cargo's own check included).
    Cargo,
    /// This executable as `xtask build`.
    Binary,
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
        let repeat = self.repeat.max(1);
        // Not timed: bootstrap the toolkit, find the host compiler, validate the spec.
        let plan = build::plan(&base)?;
        let tmp = tempfile::Builder::new()
            .prefix("bench-")
            .tempdir_in(paths::work_dir_created()?)
            .context("creating a temporary folder in the project's .cuda-aot")?;
        let src = tmp.path().join("src");
        copy_tree(&plan.spec.sources, &src)?;
        let par = BuildOptions {
            sources: Some(src.clone()),
            cache: tmp.path().join("cache"),
            out: tmp.path().join("out"),
            ..base.clone()
        };
        let cargo = cargo_available(&self.toolkit)?;
        let full_via = if cargo { Via::Cargo } else { Via::Binary };
        let mut load = Load::default();

        eprintln!(
            "bench: {repeat} full release build(s), cold cache, -j{}, through {}",
            par.jobs,
            via_name(full_via)
        );
        let mut fulls = Vec::new();
        let mut full_nvcc = 0;
        let mut blobs = 0;
        for _ in 0..repeat {
            for d in [&par.cache, &par.out] {
                let _ = std::fs::remove_dir_all(d);
            }
            load.sample();
            let (wall, report) = build_process(full_via, &par, &self.toolkit)?;
            full_nvcc = report_count(&report, "nvcc_runs");
            blobs = report["modules"].as_array().map_or(0, Vec::len);
            fulls.push(wall);
        }
        let full = Stats::of(fulls);

        eprintln!("bench: {runs} no-op rebuilds in process");
        let mut noop = Vec::new();
        for _ in 0..runs {
            load.sample();
            let r = build::run_build(&par)?;
            expect_noop(&r)?;
            noop.push(r.wall);
        }

        eprintln!("bench: {runs} no-op rebuilds as `xtask build` processes");
        let noop_process = noop_processes(Via::Binary, &par, &self.toolkit, runs, &mut load)?;
        let noop_cargo = if cargo {
            eprintln!("bench: {runs} no-op rebuilds through `cargo xtask build`");
            Some(noop_processes(
                Via::Cargo,
                &par,
                &self.toolkit,
                runs,
                &mut load,
            )?)
        } else {
            None
        };

        let header = match most_included_header(&src)? {
            Some(h) => {
                eprintln!("bench: rebuild after changing {h}, then after reverting it");
                let path = src.join(&h);
                let original = std::fs::read(&path)?;
                let mut text = original.clone();
                text.extend_from_slice(b"\n// changed by cargo xtask bench\n");
                std::fs::write(&path, text)?;
                load.sample();
                let r = build::run_build(&par)?;
                std::fs::write(&path, original)?;
                load.sample();
                let back = build::run_build(&par)?;
                if back.nvcc_runs != 0 {
                    bail!(
                        "reverting {h} ran nvcc {} times: the build cache did not find the earlier inputs",
                        back.nvcc_runs
                    );
                }
                Some(Header {
                    name: h,
                    nvcc: r.nvcc_runs,
                    wall: r.wall,
                    revert_nvcc: back.nvcc_runs,
                    revert_wall: back.wall,
                })
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
                ..par.clone()
            };
            let mut walls = Vec::new();
            for _ in 0..repeat {
                for d in [&one.cache, &one.out] {
                    let _ = std::fs::remove_dir_all(d);
                }
                load.sample();
                walls.push(build_process(full_via, &one, &self.toolkit)?.0);
            }
            Some(Stats::of(walls))
        };

        let scale = if self.skip_scale {
            None
        } else {
            Some(self.scale(tmp.path(), &par, &plan, cargo, runs, &mut load)?)
        };

        let f = Figures {
            jobs: par.jobs.min(blobs.max(1)),
            blobs,
            full,
            full_nvcc,
            full_via: via_name(full_via),
            noop: Stats::of(noop),
            noop_process,
            noop_cargo,
            header,
            serial,
            scale,
            load,
        };
        let table = f.table();
        println!("{table}");
        if !self.no_doc {
            let doc = self
                .doc
                .clone()
                .unwrap_or_else(|| paths::repo_root().join("docs/build-bench.md"));
            write_doc(&doc, &f, &table, &plan, &self)?;
            println!("wrote {}", doc.display());
        }
        Ok(())
    }

    /// The scaling row: a spec of 30 modules (the release set's modules, each as several
    /// variants told apart by a geometry value) with the release set's 8 targets.
    fn scale(
        &self,
        dir: &Path,
        small: &BuildOptions,
        plan: &build::Plan,
        cargo: bool,
        runs: usize,
        load: &mut Load,
    ) -> Result<Scale> {
        let spec_path = dir.join("scale.toml");
        let modules = write_scale_spec(&plan.spec.path, &dir.join("src"), &spec_path)?;
        let opts = BuildOptions {
            spec: spec_path,
            sources: None,
            cache: dir.join("scale-cache"),
            out: dir.join("scale-out"),
            ..small.clone()
        };
        let scale_plan = build::plan(&opts)?;
        let jobs = scale_plan.jobs.len();
        eprintln!(
            "bench: scaling row: {modules} modules, {jobs} jobs, full build (-j{})",
            opts.jobs
        );
        load.sample();
        let full = build::run_build(&opts)?;
        eprintln!("bench: scaling row: {runs} no-op rebuilds");
        let noop_process = noop_processes(Via::Binary, &opts, &self.toolkit, runs, load)?;
        let noop_cargo = if cargo {
            Some(noop_processes(
                Via::Cargo,
                &opts,
                &self.toolkit,
                runs,
                load,
            )?)
        } else {
            None
        };

        eprintln!("bench: scaling row: signing and publishing 24 and {jobs} entries");
        let keys = devkeys::ensure()?;
        let mut registries = Vec::new();
        for (name, out) in [
            ("registry-small", &small.out),
            ("registry-large", &opts.out),
        ] {
            sign::sign_output(out, &keys.builder)?;
            let reg = dir.join(name);
            let p = publish::publish_output(
                &reg,
                out,
                &keys.root_file,
                &keys.publisher,
                &PublishOptions::default(),
            )?;
            registries.push((reg, p.entries));
        }
        eprintln!("bench: scaling row: {runs} verifies of each registry, interleaved");
        let (mut small_t, mut large_t) = (Vec::new(), Vec::new());
        for i in 0..runs {
            for (k, (reg, _)) in registries.iter().enumerate() {
                load.sample();
                let t = verify_process(
                    reg,
                    &keys.root_file,
                    &dir.join(format!("state-{k}-{i}.json")),
                )?;
                if k == 0 {
                    small_t.push(t);
                } else {
                    large_t.push(t);
                }
            }
        }
        Ok(Scale {
            modules,
            targets: jobs / modules.max(1),
            jobs,
            full: full.wall,
            full_nvcc: full.nvcc_runs,
            noop_process,
            noop_cargo,
            verify_small: Stats::of(small_t),
            verify_large: Stats::of(large_t),
            entries_small: registries[0].1,
            entries_large: registries[1].1,
        })
    }
}

fn via_name(v: Via) -> &'static str {
    match v {
        Via::Cargo => "`cargo xtask build`",
        Via::Binary => "`xtask build`",
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

/// The cargo that runs this tool: `$CARGO` (set by `cargo run`), else `cargo` on PATH.
fn cargo_cmd() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Whether `cargo xtask` works here; builds the tool once (untimed) if it must.
fn cargo_available(tk: &ToolkitArgs) -> Result<bool> {
    let mut cmd = cargo_cmd();
    cmd.current_dir(paths::repo_root())
        .args(["xtask", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(d) = &tk.toolkit_dir {
        cmd.env("CUDA_AOT_TOOLKIT_DIR", d);
    }
    Ok(cmd.status().is_ok_and(|s| s.success()))
}

/// One `build` as a fresh process (`cargo xtask build` or `xtask build`): its wall time and
/// its `build-finished` report.
fn build_process(
    via: Via,
    opts: &BuildOptions,
    tk: &ToolkitArgs,
) -> Result<(Duration, serde_json::Value)> {
    let report = opts.out.with_extension("report.json");
    let mut cmd = match via {
        Via::Cargo => {
            let mut c = cargo_cmd();
            c.current_dir(paths::repo_root()).arg("xtask");
            c
        }
        Via::Binary => {
            Command::new(std::env::current_exe().context("finding the xtask executable")?)
        }
    };
    cmd.arg("build")
        .arg("--spec")
        .arg(&opts.spec)
        .arg("--cache-dir")
        .arg(&opts.cache)
        .arg("--out")
        .arg(&opts.out)
        .arg("--report-json")
        .arg(&report)
        .arg("-j")
        .arg(opts.jobs.to_string())
        .arg("--toolkit")
        .arg(match tk.toolkit {
            ToolkitChoice::Pinned => "pinned",
            ToolkitChoice::System => "system",
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env("CUDA_AOT_TOOLKIT_DIR", &opts.toolkit.toolkit_dir)
        .env_remove("CUDA_AOT_BUILD_CACHE")
        .env_remove("CUDA_AOT_CACHE_MAX_SIZE");
    if let Some(s) = &opts.sources {
        cmd.arg("--sources").arg(s);
    }
    let t = Instant::now();
    let out = cmd.output().context("running xtask build")?;
    let wall = t.elapsed();
    if !out.status.success() {
        bail!(
            "xtask build failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let bytes = std::fs::read(&report).with_context(|| format!("reading {}", report.display()))?;
    Ok((wall, serde_json::from_slice(&bytes)?))
}

fn report_count(report: &serde_json::Value, field: &str) -> usize {
    report[field].as_u64().unwrap_or(0) as usize
}

/// `runs` no-op builds as processes; each must run no nvcc.
fn noop_processes(
    via: Via,
    opts: &BuildOptions,
    tk: &ToolkitArgs,
    runs: usize,
    load: &mut Load,
) -> Result<Stats> {
    let mut walls = Vec::new();
    for _ in 0..runs {
        load.sample();
        let (wall, report) = build_process(via, opts, tk)?;
        let n = report_count(&report, "nvcc_runs");
        if n != 0 {
            bail!("a no-op {} ran nvcc {n} times", via_name(via));
        }
        walls.push(wall);
    }
    Ok(Stats::of(walls))
}

/// One `xtask verify` as a fresh process.
fn verify_process(registry: &Path, trust: &Path, state: &Path) -> Result<Duration> {
    let mut cmd = Command::new(std::env::current_exe().context("finding the xtask executable")?);
    cmd.arg("verify")
        .arg("--registry")
        .arg(registry)
        .arg("--trust")
        .arg(trust)
        .arg("--state")
        .arg(state)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let out = cmd.output().context("running xtask verify")?;
    let wall = t.elapsed();
    if !out.status.success() {
        bail!(
            "xtask verify failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(wall)
}

/// Writes a spec of [`SCALE_MODULES`] modules made from the modules of `release` (each
/// repeated with a `variant` geometry value, which is a `-DCUDA_AOT_VARIANT=k` flag: another
/// identity, a real compile), sources in `sources`. Returns the number of modules.
fn write_scale_spec(release: &Path, sources: &Path, out: &Path) -> Result<usize> {
    let text = std::fs::read_to_string(release)
        .with_context(|| format!("reading {}", release.display()))?;
    let mut doc: toml::Table =
        toml::from_str(&text).with_context(|| format!("parsing {}", release.display()))?;
    let build = doc
        .get_mut("build")
        .and_then(toml::Value::as_table_mut)
        .context("the spec has no [build] table")?;
    build.insert(
        "sources".into(),
        toml::Value::String(sources.display().to_string()),
    );
    let originals: Vec<toml::Table> = doc
        .get("module")
        .and_then(toml::Value::as_array)
        .map(|a| a.iter().filter_map(|m| m.as_table().cloned()).collect())
        .unwrap_or_default();
    if originals.is_empty() {
        bail!("{}: no modules to scale", release.display());
    }
    // Include folders are relative to the spec, which the copy does not sit beside.
    let has_includes = doc["build"].get("include_dirs").is_some()
        || originals.iter().any(|m| m.contains_key("include_dirs"));
    if has_includes {
        bail!(
            "{}: the scaling row copies the spec elsewhere and does not rebase include_dirs; run the bench with --skip-scale",
            release.display()
        );
    }
    let variants = SCALE_MODULES.div_ceil(originals.len());
    let mut modules = Vec::new();
    'outer: for k in 0..variants {
        for m in &originals {
            if modules.len() == SCALE_MODULES {
                break 'outer;
            }
            let mut m = m.clone();
            let name = m.get("name").and_then(toml::Value::as_str).unwrap_or("m");
            m.insert(
                "name".into(),
                toml::Value::String(format!("{name}_v{k:02}")),
            );
            let geometry = m
                .entry("geometry")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let Some(g) = geometry.as_table_mut() {
                g.insert("variant".into(), toml::Value::Integer(k as i64));
            }
            modules.push(toml::Value::Table(m));
        }
    }
    let n = modules.len();
    doc.insert("module".into(), toml::Value::Array(modules));
    crate::files::write(out, toml::to_string(&doc)?.as_bytes())?;
    Ok(n)
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

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn aim(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

impl Figures {
    fn efficiency(&self) -> Option<f64> {
        self.serial
            .map(|s| ratio(s.median, self.full.median) / self.jobs as f64)
    }

    fn noop_cargo_pct(&self) -> Option<f64> {
        self.noop_cargo.map(|n| pct(n.median, self.full.median))
    }

    fn table(&self) -> String {
        let mut rows = vec![
            (
                format!(
                    "full release build, cold cache, -j{}, through {} (median, min, max)",
                    self.jobs, self.full_via
                ),
                format!(
                    "{} ({} blobs, {} nvcc runs)",
                    self.full.show(),
                    self.blobs,
                    self.full_nvcc
                ),
            ),
            (
                "no-op rebuild, in process".into(),
                format!(
                    "{} = {:.2} % of the full build (0 nvcc runs)",
                    self.noop.show(),
                    pct(self.noop.median, self.full.median)
                ),
            ),
            (
                "no-op rebuild, `xtask build` process".into(),
                format!(
                    "{} = {:.2} % of the full build",
                    self.noop_process.show(),
                    pct(self.noop_process.median, self.full.median)
                ),
            ),
        ];
        if let (Some(n), Some(p)) = (self.noop_cargo, self.noop_cargo_pct()) {
            rows.push((
                "no-op rebuild, through `cargo xtask build`".into(),
                format!(
                    "{} = **{p:.2} %** of the full build (aim ≤ {AIM_NOOP_PCT} %: {})",
                    n.show(),
                    aim(p <= AIM_NOOP_PCT)
                ),
            ));
        }
        if let Some(h) = &self.header {
            rows.push((
                format!("rebuild after changing `{}`", h.name),
                format!(
                    "{} ({} of {} blobs recompiled)",
                    ms(h.wall),
                    h.nvcc,
                    self.blobs
                ),
            ));
            rows.push((
                format!("rebuild after reverting `{}`", h.name),
                format!(
                    "{} (**{} nvcc runs**, aim 0: {})",
                    ms(h.revert_wall),
                    h.revert_nvcc,
                    aim(h.revert_nvcc == 0)
                ),
            ));
        }
        if let Some(s) = self.serial {
            rows.push((
                "full release build, cold cache, -j1 (median, min, max)".into(),
                s.show(),
            ));
            rows.push((
                format!(
                    "parallel efficiency time(-j1) / ({} × time(-j{})), medians",
                    self.jobs, self.jobs
                ),
                format!("{:.2}", self.efficiency().unwrap_or(0.0)),
            ));
        }
        if let Some(s) = &self.scale {
            rows.push((
                format!(
                    "scaling: {} modules × {} targets, full build, cold cache, -j{} (in process)",
                    s.modules, s.targets, self.jobs
                ),
                format!(
                    "{} ({} blobs, {} nvcc runs)",
                    ms(s.full),
                    s.jobs,
                    s.full_nvcc
                ),
            ));
            rows.push((
                "scaling: no-op rebuild, `xtask build` process".into(),
                format!(
                    "{} = {:.2} % of its full build",
                    s.noop_process.show(),
                    pct(s.noop_process.median, s.full)
                ),
            ));
            if let Some(n) = s.noop_cargo {
                rows.push((
                    "scaling: no-op rebuild, through `cargo xtask build`".into(),
                    format!(
                        "{} = {:.2} % of its full build",
                        n.show(),
                        pct(n.median, s.full)
                    ),
                ));
            }
            rows.push((
                format!(
                    "`xtask verify`, {} entries (the release set)",
                    s.entries_small
                ),
                s.verify_small.show(),
            ));
            rows.push((
                format!("`xtask verify`, {} entries", s.entries_large),
                format!(
                    "{} = **{:.2} ×** the {}-entry verify (aim ≤ {AIM_VERIFY_RATIO} ×: {})",
                    s.verify_large.show(),
                    s.verify_ratio(),
                    s.entries_small,
                    aim(s.verify_ratio() <= AIM_VERIFY_RATIO)
                ),
            ));
        }
        rows.push((
            "machine load, 1-minute average before each timed step (min / median / max)".into(),
            self.load.show(),
        ));
        let mut out = String::from("| measurement | result |\n|---|---|\n");
        for (k, v) in rows {
            out.push_str(&format!("| {k} | {v} |\n"));
        }
        out
    }

    /// The history row of this run.
    fn history_row(&self, date: &str, machine: &str, profile: &str) -> String {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        format!(
            "| {date} | {machine} | {} | {profile} | -j{} | {} | {} | {} | {} | {} | {} | {} |",
            self.load.show(),
            self.jobs,
            self.full.short(),
            opt(self
                .noop_cargo
                .zip(self.noop_cargo_pct())
                .map(|(n, p)| format!("{} ({p:.2} %)", ms(n.median)))),
            opt(self.header.as_ref().map(|h| h.revert_nvcc.to_string())),
            opt(self.serial.map(|s| s.short())),
            opt(self.efficiency().map(|e| format!("{e:.2}"))),
            opt(self.scale.as_ref().map(|s| format!(
                "{} / {}",
                ms(s.full),
                ms(s.noop_process.median)
            ))),
            opt(self
                .scale
                .as_ref()
                .map(|s| format!("{:.2} ×", s.verify_ratio()))),
        )
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
const EARLIER: &str = "### Earlier runs (previous format)";
const HISTORY_HEADER: &str = "| date | machine | load (1 min: min / median / max) | xtask build | jobs | full build (min / median / max) | no-op through cargo (ratio) | revert: nvcc runs | full -j1 (min / median / max) | efficiency | 30×8: full / no-op | verify 240 ÷ 24 |\n|---|---|---|---|---|---|---|---|---|---|---|---|";
const EARLIER_HEADER: &str = "| date | machine | xtask build | jobs | full build | no-op in process (ratio) | full -j1 | efficiency |\n|---|---|---|---|---|---|---|---|";

/// The history rows of an earlier document: (rows of this format, rows of the previous
/// one). A row is kept in the table whose number of cells it has.
fn history_rows(old: &str) -> (Vec<String>, Vec<String>) {
    let cells = |h: &str| h.lines().next().map_or(0, |l| l.matches('|').count());
    let (now, earlier) = (cells(HISTORY_HEADER), cells(EARLIER_HEADER));
    let mut rows = (Vec::new(), Vec::new());
    let Some((_, tail)) = old.split_once(HISTORY) else {
        return rows;
    };
    for l in tail.lines() {
        let is_row = l.starts_with("| 1") || l.starts_with("| 2");
        if !is_row {
            continue;
        }
        let n = l.matches('|').count();
        if n == now {
            rows.0.push(l.to_string());
        } else if n == earlier {
            rows.1.push(l.to_string());
        }
    }
    rows
}

/// Writes the document: the latest figures in full, and one history row per run (rows of
/// earlier runs are kept).
fn write_doc(path: &Path, f: &Figures, table: &str, plan: &build::Plan, a: &Args) -> Result<()> {
    let date = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = cpu_model();
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let (mut history, earlier) = std::fs::read_to_string(path)
        .map(|old| history_rows(&old))
        .unwrap_or_default();
    let short_cpu = cpu.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    history.push(f.history_row(&date, &format!("{cores} × {short_cpu}"), profile));
    let mut args = String::new();
    if a.repeat != 3 {
        args += &format!(" --repeat {}", a.repeat);
    }
    if a.noop_runs != 7 {
        args += &format!(" --noop-runs {}", a.noop_runs);
    }
    if let Some(j) = a.jobs {
        args += &format!(" -j {j}");
    }
    if a.skip_serial {
        args += " --skip-serial";
    }
    if a.skip_scale {
        args += " --skip-scale";
    }
    let tk = &plan.toolkit.identity;
    let earlier = if earlier.is_empty() {
        String::new()
    } else {
        format!("\n\n{EARLIER}\n\n{EARLIER_HEADER}\n{}", earlier.join("\n"))
    };
    let doc = format!(
        "# Build benchmark\n\n\
         Written by `cargo xtask bench`; rerun it to refresh (the history table keeps one row \
         per run). Each build runs in temporary folders with its own cache and output. Timed \
         steps repeat (full builds `--repeat` times, no-op builds and verifies `--noop-runs` \
         times) and are given as median with min and max; every ratio divides two figures of \
         the same run. The 1-minute load average is sampled before each timed step: on a \
         shared machine, read the figures with it. Aims (issue 12): a no-op `cargo xtask \
         build` within {AIM_NOOP_PCT} % of a full build, a revert after a header edit runs \
         no nvcc, `verify` of 240 entries within {AIM_VERIFY_RATIO} × that of 24. This is a \
         measurement of one machine, not a test.\n\n\
         ## Latest run\n\n\
         - date: {date}\n\
         - machine: {cores} cores available, CPU {cpu}, {os} {arch}\n\
         - command: `cargo xtask bench{args}` (xtask {profile} build)\n\
         - toolkit: nvcc {nvcc} ({source}, {digest}); host compiler: {host}\n\
         - release set: {modules} modules, {blobs} blobs ({spec})\n\n\
         {table}\n\
         How to read it: the full build runs one nvcc per (module, target) on -jN workers; a \
         no-op rebuild runs no nvcc at all (a dependency record proves every source and header \
         unchanged, the cache entry is checked and the output already holds the bytes); \
         changing a header that several modules include recompiles exactly those modules, and \
         putting it back finds the earlier record and entry again (several records per job, \
         as ccache's direct mode keeps them). Through cargo, a no-op also pays cargo's own \
         check of the workspace (tens of milliseconds, most of it resolving the lock file), \
         which is most of that row. `verify` checks a constant number of signatures (one build \
         statement, not one per entry) and hashes the blobs on several threads once the bundle \
         is large, so its cost grows slower than the number of entries. Each nvcc job is its \
         own process chain (host preprocessor, cicc, ptxas), so jobs scale with the cores; \
         what keeps efficiency below 1 is the tail of the queue, where workers idle beside the \
         last jobs (longest-first ordering keeps that tail short), and other load on the \
         machine.\n\n\
         {HISTORY}\n\n\
         {HISTORY_HEADER}\n\
         {rows}{earlier}\n",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_are_min_median_max() {
        let d = |ms: u64| Duration::from_millis(ms);
        let s = Stats::of(vec![d(30), d(10), d(20), d(50), d(40)]);
        assert_eq!((s.min, s.median, s.max, s.n), (d(10), d(30), d(50), 5));
        assert_eq!(s.short(), "10.0 ms / 30.0 ms / 50.0 ms");
        assert_eq!(Stats::of(vec![d(1500)]).show(), "1.50 s");
    }

    #[test]
    fn history_keeps_rows_of_both_formats_apart() {
        let old = format!(
            "# x\n\n{HISTORY}\n\n{HISTORY_HEADER}\n| 2027-01-01T00:00:00Z | a | b | c | d | e | f | g | h | i | j | k |\n\n{EARLIER}\n\n{EARLIER_HEADER}\n\
             | 2026-11-29T19:52:04Z | 2 × AMD EPYC | debug | -j2 | 5.28 s | 30.7 ms (0.58 %) | 10.53 s | 1.00 |\n"
        );
        let (now, earlier) = history_rows(&old);
        assert_eq!(now.len(), 1);
        assert!(now[0].starts_with("| 2027"));
        assert_eq!(earlier.len(), 1);
        assert!(earlier[0].contains("5.28 s"));
    }

    #[test]
    fn the_scale_spec_has_thirty_modules_with_the_release_targets() {
        let dir = tempfile::tempdir().unwrap();
        let release = paths::repo_root().join("manifests/release.toml");
        let out = dir.path().join("scale.toml");
        let n = write_scale_spec(&release, dir.path(), &out).unwrap();
        assert_eq!(n, SCALE_MODULES);
        let spec: toml::Table = toml::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let modules = spec["module"].as_array().unwrap();
        assert_eq!(modules.len(), SCALE_MODULES);
        let names: std::collections::BTreeSet<&str> = modules
            .iter()
            .map(|m| m["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), SCALE_MODULES, "module names are distinct");
        assert!(names.contains("ntt_v00") && names.contains("merkle_v09"));
        assert_eq!(modules[29]["geometry"]["variant"].as_integer(), Some(9));
    }
}
