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
use std::time::{Duration, Instant};

use crate::args::{ToolkitArgs, ToolkitChoice};
use crate::files::copy_tree;
use crate::{devkeys, paths, publish, sign};
use cuda_aot_builder::build::{self, BuildOptions, BuildReport};

mod report;
// With the network part: its S3 row runs the pinned S3 server and its client.
#[cfg(feature = "net")]
mod shared;
// Remote execution through the pinned REAPI server (its client is in the network part).
#[cfg(feature = "net")]
mod remote;

use report::{Figures, Header, Load, Scale, Stats};

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
      and each one's ratio to (a) (aim: through cargo within 1 %), beside cargo's own share
      (`cargo build -p xtask --bin xtask` with nothing to build);
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
    /// Only the shared build cache rows (issue 20) on a generated heavy corpus: a cold build
    /// into a shared cache, a second machine, one SM added, 2, 3 and 4 shards with a final
    /// build, remote fetch against a plain copy. Writes docs/shared-cache-bench.md (or
    /// --doc). About twelve minutes on 2 cores.
    #[arg(long)]
    shared_cache: bool,
    /// Only the remote execution rows (issue 45) on the heavy corpus: the pinned BuildGrid
    /// and two workers on this machine; the local cold build, the first remote build (the
    /// toolkit uploaded), changed sources with the ActionCache off against the local build
    /// at the same -j, a second checkout answered from the ActionCache, and a model of N
    /// workers. Writes docs/remote-exec-bench.md (or --doc).
    #[arg(long, conflicts_with = "shared_cache")]
    remote_exec: bool,
    /// Modules of the heavy corpus of --shared-cache and --remote-exec (two SMs each).
    #[arg(long, value_name = "N", default_value_t = 24)]
    heavy_modules: usize,
    #[command(flatten)]
    toolkit: ToolkitArgs,
}

impl Args {
    /// The options of this run that differ from the defaults, as typed.
    fn command_args(&self) -> String {
        let mut args = String::new();
        if self.repeat != 3 {
            args += &format!(" --repeat {}", self.repeat);
        }
        if self.noop_runs != 7 {
            args += &format!(" --noop-runs {}", self.noop_runs);
        }
        if let Some(j) = self.jobs {
            args += &format!(" -j {j}");
        }
        if self.skip_serial {
            args += " --skip-serial";
        }
        if self.skip_scale {
            args += " --skip-scale";
        }
        args
    }
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
        let base = self.base_options();
        // --shared-cache: only the shared build cache rows.
        if self.shared_cache {
            return self.shared_cache_rows(&base);
        }
        if self.remote_exec {
            return self.remote_exec_rows(&base);
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

        // (a) Full release builds from a cold cache.
        let (full, full_nvcc, blobs) = self.full_builds(full_via, &par, repeat, &mut load)?;
        // (b) No-op rebuilds: in process, as processes, through cargo; cargo's own share.
        let noop = noop_in_process(&par, runs, &mut load)?;
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
        let cargo_check = if cargo {
            Some(cargo_checks(runs, &mut load)?)
        } else {
            None
        };
        // (c) A rebuild after changing the most included header, then after reverting it.
        let header = header_edit(&src, &par, &mut load)?;
        // (d) The -j1 builds, for parallel efficiency.
        let serial = if self.skip_serial {
            None
        } else {
            Some(self.serial_builds(tmp.path(), full_via, &par, repeat, &mut load)?)
        };
        // (e) The scaling row.
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
            cargo_check,
            header,
            serial,
            scale,
            load,
        };
        // The table, printed, and the document unless --no-doc.
        self.report(&f, &plan)
    }

    /// The build options every build of the run starts from (-j, the toolkit, no progress).
    fn base_options(&self) -> BuildOptions {
        let mut base = BuildOptions {
            progress: false,
            toolkit: self.toolkit.options(),
            ..BuildOptions::default()
        };
        if let Some(j) = self.jobs {
            base.jobs = j.max(1);
        }
        base
    }

    /// The remote execution rows (`--remote-exec`), which need the network part.
    fn remote_exec_rows(&self, base: &BuildOptions) -> Result<()> {
        #[cfg(not(feature = "net"))]
        {
            let _ = base;
            crate::features::rerun("bench --remote-exec", "net")?;
            bail!("the tool did not run again with its network part");
        }
        #[cfg(feature = "net")]
        {
            let tmp = tempfile::Builder::new()
                .prefix("bench-remote-")
                .tempdir_in(paths::work_dir_created()?)
                .context("creating a temporary folder in the project's .cuda-aot")?;
            let table = remote::rows(base, tmp.path(), self.heavy_modules)?;
            println!("{table}");
            if !self.no_doc {
                let doc = self
                    .doc
                    .clone()
                    .unwrap_or_else(|| paths::repo_root().join("docs/remote-exec-bench.md"));
                let written = remote::write_doc(&doc, &table, self.heavy_modules)?;
                eprintln!("bench: wrote {}", written.display());
            }
            Ok(())
        }
    }

    /// The shared build cache rows (`--shared-cache`), which need the network part: without
    /// it, the tool runs again with it.
    fn shared_cache_rows(&self, base: &BuildOptions) -> Result<()> {
        #[cfg(not(feature = "net"))]
        {
            let _ = base;
            crate::features::rerun("bench --shared-cache (its S3 row)", "net")?;
            bail!("the tool did not run again with its network part");
        }
        #[cfg(feature = "net")]
        {
            let doc = (!self.no_doc).then(|| {
                self.doc
                    .clone()
                    .unwrap_or_else(|| paths::repo_root().join("docs/shared-cache-bench.md"))
            });
            shared::run(base, self.heavy_modules.max(1), doc.as_deref())
        }
    }

    /// (a) `repeat` full release builds from a cold cache through `via`: their times, and
    /// the last one's nvcc runs and module count.
    fn full_builds(
        &self,
        via: Via,
        par: &BuildOptions,
        repeat: usize,
        load: &mut Load,
    ) -> Result<(Stats, usize, usize)> {
        eprintln!(
            "bench: {repeat} full release build(s), cold cache, -j{}, through {}",
            par.jobs,
            via_name(via)
        );
        let mut fulls = Vec::new();
        let mut full_nvcc = 0;
        let mut blobs = 0;
        for _ in 0..repeat {
            for d in [&par.cache, &par.out] {
                let _ = std::fs::remove_dir_all(d);
            }
            load.sample();
            let (wall, report) = build_process(via, par, &self.toolkit)?;
            full_nvcc = report_count(&report, "nvcc_runs");
            blobs = report["modules"].as_array().map_or(0, Vec::len);
            fulls.push(wall);
        }
        Ok((Stats::of(fulls), full_nvcc, blobs))
    }

    /// (d) `repeat` full release builds with -j1 from a cold cache of their own (in `dir`).
    fn serial_builds(
        &self,
        dir: &Path,
        via: Via,
        par: &BuildOptions,
        repeat: usize,
        load: &mut Load,
    ) -> Result<Stats> {
        eprintln!("bench: {repeat} full release build(s), cold cache, -j1");
        let one = BuildOptions {
            jobs: 1,
            cache: dir.join("cache-j1"),
            out: dir.join("out-j1"),
            ..par.clone()
        };
        let mut walls = Vec::new();
        for _ in 0..repeat {
            for d in [&one.cache, &one.out] {
                let _ = std::fs::remove_dir_all(d);
            }
            load.sample();
            walls.push(build_process(via, &one, &self.toolkit)?.0);
        }
        Ok(Stats::of(walls))
    }

    /// Prints the table of `f` and, unless --no-doc, rewrites the document with it.
    fn report(&self, f: &Figures, plan: &build::Plan) -> Result<()> {
        let table = f.table();
        println!("{table}");
        if !self.no_doc {
            let doc = self
                .doc
                .clone()
                .unwrap_or_else(|| paths::repo_root().join("docs/build-bench.md"));
            report::write_doc(&doc, f, &table, plan, &self.command_args())?;
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

/// (b) `runs` no-op rebuilds in process: their times.
fn noop_in_process(par: &BuildOptions, runs: usize, load: &mut Load) -> Result<Vec<Duration>> {
    eprintln!("bench: {runs} no-op rebuilds in process");
    let mut noop = Vec::new();
    for _ in 0..runs {
        load.sample();
        let r = build::run_build(par)?;
        expect_noop(&r)?;
        noop.push(r.wall);
    }
    Ok(noop)
}

/// (b) `runs` no-op `cargo build -p xtask`: cargo's own share of `cargo xtask build`.
fn cargo_checks(runs: usize, load: &mut Load) -> Result<Stats> {
    eprintln!("bench: {runs} no-op `cargo build -p xtask` (cargo's own share)");
    let mut walls = Vec::new();
    for _ in 0..runs {
        load.sample();
        walls.push(cargo_noop_check()?);
    }
    Ok(Stats::of(walls))
}

/// (c) A rebuild after changing the header most modules of `src` include, then after
/// reverting it (which must run no nvcc); none when no header is included.
fn header_edit(src: &Path, par: &BuildOptions, load: &mut Load) -> Result<Option<Header>> {
    Ok(match most_included_header(src)? {
        Some(h) => {
            eprintln!("bench: rebuild after changing {h}, then after reverting it");
            let path = src.join(&h);
            let original = std::fs::read(&path)?;
            let mut text = original.clone();
            text.extend_from_slice(b"\n// changed by cargo xtask bench\n");
            std::fs::write(&path, text)?;
            load.sample();
            let r = build::run_build(par)?;
            std::fs::write(&path, original)?;
            load.sample();
            let back = build::run_build(par)?;
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
    })
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

/// One `cargo build -p xtask` that has nothing to build: what cargo itself costs before a
/// `cargo xtask` starts the tool.
fn cargo_noop_check() -> Result<Duration> {
    let mut cmd = crate::process::cargo();
    cmd.current_dir(paths::repo_root())
        .args(["build", "-q", "-p", "xtask", "--bin", "xtask"]);
    timed(&mut cmd, "cargo build -p xtask")
}

/// Runs `cmd` (output discarded) and returns its wall time, or fails with its stderr.
fn timed(cmd: &mut Command, what: &str) -> Result<Duration> {
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let t = Instant::now();
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    let wall = t.elapsed();
    if !out.status.success() {
        bail!("{what} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(wall)
}

/// Whether `cargo xtask` works here; builds the tool once (untimed) if it must.
fn cargo_available(tk: &ToolkitArgs) -> Result<bool> {
    let mut cmd = crate::process::cargo();
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
            let mut c = crate::process::cargo();
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
        .arg(state);
    timed(&mut cmd, "xtask verify")
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
    for f in crate::files::files_under(src)?
        .into_iter()
        .filter(|f| f.regular)
    {
        if f.rel.ends_with(".cuh") || f.rel.ends_with(".h") {
            headers.push(f.rel);
        } else if f.rel.ends_with(".cu") {
            sources.push(std::fs::read_to_string(&f.path)?);
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

#[cfg(test)]
mod tests {
    use super::*;

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
