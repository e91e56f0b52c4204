//! `cargo xtask build`: compiles every (module, target) of the release spec with the pinned
//! nvcc, in parallel, through a content-addressed cache, into per-SM cubins (and opted-in
//! PTX) with unsigned manifests. A failed build writes nothing: not to the output folder,
//! not to the cache.
//!
//! The library-ish entry points for other tasks are [`run_build`] and [`plan`].

pub mod atomic;
mod cache;
mod job;
mod nvcc;
pub mod output;
pub mod spec;

use anyhow::Result;
use cuda_aot::{Channel, Digest, Kind, Manifest, ModuleName, Target};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::paths::{self, Fix};
use crate::toolchain::{self, ToolchainOptions, ToolkitArgs, ToolkitInfo};
use cache::{Cache, DepRecord, FileDigests, Names};
use job::{Ctx, Done};
pub use nvcc::HostCompiler;
pub use spec::{Job, ModuleSpec, ReleaseSpec};

/// Compile every module for every target SM into cubins and unsigned manifests.
///
/// Compiles each module of manifests/release.toml for each target SM with one nvcc run per
/// (module, target), in parallel, and writes `<out>/<module>/<target>.cubin` plus
/// `<out>/<module>/<target>.cubin.manifest.json` (an unsigned manifest) for each; PTX that a
/// module opts into lands beside them as `<target>.ptx`. Results come from the build cache
/// (.cuda-aot/cache) when every input is unchanged: toolkit, host compiler, flags, sources
/// and every header they include. A rebuild with nothing changed runs no nvcc at all.
#[derive(clap::Args)]
#[command(after_long_help = "\
Outputs (read by `cargo xtask sign` and `publish`):
  <out>/<module>/<target>.cubin                 one per module and target SM
  <out>/<module>/<target>.cubin.manifest.json   its unsigned manifest (identity, digests, entry points)
  <out>/<module>/<target>.ptx[.manifest.json]   only for modules that opt into PTX (compatibility mode)

A failed build changes nothing: not the output folder, not the cache. docs/build.md explains the
toolkit, the identity, the cache key and reproducibility.

Examples:
  cargo xtask build                                  the release set, one job per core
  cargo xtask build --module ntt --target sm_90 -j 4
  cargo xtask build --dry-run                        the jobs and their exact nvcc flags")]
pub struct Args {
    /// Output folder; files of earlier builds that this build does not produce are removed.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Parallel nvcc jobs (default: the number of available cores).
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    jobs: Option<usize>,
    /// Build only this module (repeatable; default: every module of the spec).
    #[arg(long = "module", value_name = "NAME", value_parser = parse_module)]
    modules: Vec<ModuleName>,
    /// Build only for this target instead of the spec's (repeatable): `sm_90`, `sm_90a`, or
    /// `compute_90` for PTX, the labelled compatibility mode.
    #[arg(long = "target", value_name = "TARGET")]
    targets: Vec<Target>,
    /// The channel written into every manifest: `dev` (default) or `production`.
    #[arg(long, value_enum, default_value_t = ChannelArg::Dev)]
    channel: ChannelArg,
    #[command(flatten)]
    toolkit: ToolkitArgs,
    /// The release spec (default: manifests/release.toml).
    #[arg(long, value_name = "FILE")]
    spec: Option<PathBuf>,
    /// Take module sources from this folder instead of the spec's `build.sources`.
    #[arg(long, value_name = "DIR")]
    sources: Option<PathBuf>,
    /// The build cache (default: .cuda-aot/cache).
    #[arg(long, value_name = "DIR", env = "CUDA_AOT_BUILD_CACHE")]
    cache_dir: Option<PathBuf>,
    /// Print the jobs (module, target, exact nvcc flags) and compile nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also write a machine-readable summary of the build (JSON) to FILE.
    #[arg(long, value_name = "FILE")]
    report_json: Option<PathBuf>,
}

/// The trust channel, as a command-line value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ChannelArg {
    /// Development: signed with generated dev keys.
    Dev,
    /// Production: signed with managed release keys.
    Production,
}

impl From<ChannelArg> for Channel {
    fn from(c: ChannelArg) -> Channel {
        match c {
            ChannelArg::Dev => Channel::Dev,
            ChannelArg::Production => Channel::Production,
        }
    }
}

fn parse_module(s: &str) -> std::result::Result<ModuleName, String> {
    ModuleName::new(s).map_err(|e| e.to_string())
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let mut opts = BuildOptions::default();
        if let Some(o) = self.out {
            opts.out = o;
        }
        if let Some(j) = self.jobs {
            opts.jobs = j;
        }
        if let Some(s) = self.spec {
            opts.spec = s;
        }
        if let Some(c) = self.cache_dir {
            opts.cache = c;
        }
        opts.sources = self.sources;
        opts.modules = self.modules;
        opts.targets = self.targets;
        opts.channel = self.channel.into();
        opts.toolkit = self.toolkit.options();
        if self.dry_run {
            let plan = plan(&opts)?;
            print_plan(&plan);
            return Ok(());
        }
        let report = run_build(&opts)?;
        print_report(&report);
        if let Some(p) = self.report_json {
            atomic::write(&p, &serde_json::to_vec_pretty(&JsonReport::of(&report))?)?;
        }
        Ok(())
    }
}

/// What to build, from where, into where.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The release spec (`manifests/release.toml`).
    pub spec: PathBuf,
    /// Overrides the spec's sources folder.
    pub sources: Option<PathBuf>,
    /// The output folder (`.cuda-aot/build`).
    pub out: PathBuf,
    /// The build cache (`.cuda-aot/cache`).
    pub cache: PathBuf,
    /// Parallel nvcc jobs (at least 1).
    pub jobs: usize,
    /// Only these modules (empty: all).
    pub modules: Vec<ModuleName>,
    /// Only these targets, for every selected module (empty: the spec's).
    pub targets: Vec<Target>,
    /// Which toolkit.
    pub toolkit: ToolchainOptions,
    /// The channel written into the manifests.
    pub channel: Channel,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
}

impl Default for BuildOptions {
    /// The repository's release set: manifests/release.toml, pinned toolkit, dev channel,
    /// `.cuda-aot/build` and `.cuda-aot/cache`, one job per available core.
    fn default() -> Self {
        BuildOptions {
            spec: paths::repo_root().join("manifests/release.toml"),
            sources: None,
            out: paths::default_build_out(),
            cache: paths::work_dir().join("cache"),
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            modules: Vec::new(),
            targets: Vec::new(),
            toolkit: ToolchainOptions::new(toolchain::ToolkitChoice::Pinned),
            channel: Channel::Dev,
            progress: true,
        }
    }
}

/// What a build produced.
#[derive(Debug, Clone)]
pub struct BuildReport {
    /// The output folder.
    pub out: PathBuf,
    /// One entry per (module, target), in spec order.
    pub modules: Vec<BuiltModule>,
    /// How many times nvcc ran (0 for a no-op rebuild).
    pub nvcc_runs: usize,
    /// Wall time of the whole build.
    pub wall: Duration,
    /// The toolkit that compiled.
    pub toolkit: cuda_aot::Toolkit,
    /// Stale outputs of earlier builds that were removed.
    pub removed: Vec<PathBuf>,
}

/// One built (module, target).
#[derive(Debug, Clone)]
pub struct BuiltModule {
    /// The unsigned manifest (as written next to the blob).
    pub manifest: Manifest,
    /// `<out>/<module>/<target>.<kind>`.
    pub blob: PathBuf,
    /// `<out>/<module>/<target>.<kind>.manifest.json`.
    pub manifest_path: PathBuf,
    /// Taken from the build cache rather than compiled.
    pub cached: bool,
}

/// A validated build: the spec, the toolkit and host compiler, and the jobs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The release spec.
    pub spec: ReleaseSpec,
    /// The toolkit (bootstrapped if it was not).
    pub toolkit: ToolkitInfo,
    /// The host compiler passed to `-ccbin`.
    pub host: HostCompiler,
    /// One job per (module, target).
    pub jobs: Vec<Job>,
}

/// Loads the spec, selects the jobs, ensures the toolkit and host compiler, and checks
/// that nvcc supports every target, all before anything is compiled or written.
pub fn plan(opts: &BuildOptions) -> Result<Plan> {
    let spec = spec::load(&opts.spec, opts.sources.as_deref())?;
    let jobs = spec.jobs(&opts.modules, &opts.targets)?;
    if jobs.is_empty() {
        return Err(fail(
            "nothing to build: no (module, target) selected",
            "select at least one module and target",
        ));
    }
    let toolkit = toolchain::ensure_with(&opts.toolkit)?;
    for j in &jobs {
        if !toolkit.supports(&j.target) {
            let m = &spec.modules[j.module];
            return Err(fail(
                format!(
                    "unknown target {} for module `{}`: nvcc {} ({}) compiles for {} (and sm_XXa from sm_90 on) and PTX for {}",
                    j.target,
                    m.name,
                    toolkit.identity.nvcc,
                    toolkit.identity.source,
                    toolkit.real_targets.join(" "),
                    toolkit.virtual_targets.join(" ")
                ),
                format!(
                    "use one of those targets in {} or on --target",
                    spec.path.display()
                ),
            ));
        }
    }
    let host = nvcc::host_compiler()?;
    Ok(Plan {
        spec,
        toolkit,
        host,
        jobs,
    })
}

/// Builds everything `opts` selects. On success the output folder holds exactly this
/// build's files and the cache holds every result; on any failure neither was changed.
pub fn run_build(opts: &BuildOptions) -> Result<BuildReport> {
    let t0 = Instant::now();
    let plan = plan(opts)?;
    // Noted after the plan: planning may unpack the toolkit, whose headers are inputs of
    // every job; only a change after this point is a change "while the build was running".
    let build_start = SystemTime::now();
    let cache = Cache::new(&opts.cache);
    let ctx = Ctx {
        plan: &plan,
        cache: &cache,
        names: Names::new(&plan.spec.sources, &plan.toolkit.root),
        digests: FileDigests::default(),
        nvcc_runs: AtomicUsize::new(0),
        build_start,
    };
    let n = plan.jobs.len();
    // Each job's dependency record (read on the workers: parsing them is most of the work
    // of a no-op rebuild).
    let keyed: Vec<(Digest, Option<DepRecord>)> = par_map(&plan.jobs, opts.jobs, |j| {
        let k = ctx.dep_key(j);
        let rec = cache.deps(&k);
        (k, rec)
    });
    // Longest first (unknown counts as longest): the last job to start is a short one.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| Reverse(keyed[i].1.as_ref().map_or(u64::MAX, |r| r.compile_ms)));

    let results: Vec<Mutex<Option<Result<Done>>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let bar = progress_bar(opts.progress, n);
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.clamp(1, n) {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    let job = &plan.jobs[i];
                    bar.set_message(format!(
                        "{} {}",
                        plan.spec.modules[job.module].name, job.target
                    ));
                    let r = ctx.run_job(job, keyed[i].1.as_ref());
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    *results[i].lock().expect("result slot") = Some(r);
                    bar.inc(1);
                }
            });
        }
    });
    bar.finish_and_clear();

    let results: Vec<Option<Result<Done>>> = results
        .into_iter()
        .map(|m| m.into_inner().expect("result slot"))
        .collect();
    let failed: Vec<usize> = (0..n)
        .filter(|&i| matches!(results[i], Some(Err(_))))
        .collect();
    if let Some(&first) = failed.first() {
        cache.tidy();
        let labels: Vec<String> = failed.iter().map(|&i| plan.label(&plan.jobs[i])).collect();
        let not_run = results.iter().filter(|r| r.is_none()).count();
        let Some(Some(Err(e))) = results.into_iter().nth(first) else {
            unreachable!("a failed slot")
        };
        return Err(e.context(format!(
            "build failed: {} of {n} jobs failed ({}){}; nothing was written to {} or to the build cache",
            failed.len(),
            labels.join(", "),
            if not_run > 0 {
                format!(", {not_run} not started")
            } else {
                String::new()
            },
            opts.out.display()
        )));
    }

    // Every job succeeded: commit to the cache, then write the output folder.
    let mut modules = Vec::with_capacity(n);
    let mut keep = BTreeSet::new();
    let mut changed = false;
    for (i, r) in results.into_iter().enumerate() {
        let done = r.expect("every job ran").expect("every job succeeded");
        let (mut manifest, blob, cached) = match done {
            Done::Cached { manifest, blob } => (manifest, blob, true),
            Done::Compiled {
                manifest,
                blob,
                deps,
            } => {
                cache.commit(&manifest, &blob)?;
                cache.put_deps(&keyed[i].0, &deps)?;
                (manifest, blob, false)
            }
        };
        manifest.channel = opts.channel;
        let ([blob_path, manifest_path], wrote) =
            output::write_module(&opts.out, &manifest, &blob)?;
        changed |= wrote;
        keep.insert(blob_path.clone());
        keep.insert(manifest_path.clone());
        modules.push(BuiltModule {
            manifest,
            blob: blob_path,
            manifest_path,
            cached,
        });
    }
    let removed = output::remove_stale(&opts.out, &keep)?;
    if changed || !removed.is_empty() {
        // The builder's statement covers the previous set of manifests: sign again.
        output::remove_statement(&opts.out)?;
    }
    cache.tidy();
    Ok(BuildReport {
        out: opts.out.clone(),
        modules,
        nvcc_runs: ctx.nvcc_runs.load(Ordering::Relaxed),
        wall: t0.elapsed(),
        toolkit: plan.toolkit.identity.clone(),
        removed,
    })
}

/// `f` over `items` on up to `threads` threads, results in item order.
fn par_map<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, items.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    *slots[i].lock().expect("slot") = Some(f(item));
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|m| m.into_inner().expect("slot").expect("every item ran"))
        .collect()
}

/// An error whose message is `message` and whose `Fix:` advice is `fix`.
pub fn fail(message: impl Display, fix: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Fix(fix.into())).context(message.to_string())
}

/// Attaches a message and `Fix:` advice to any error.
pub trait Advise<T> {
    /// The error becomes `message: error`, with `fix` as its advice.
    fn advise(self, message: impl FnOnce() -> String, fix: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Into<anyhow::Error>> Advise<T> for std::result::Result<T, E> {
    fn advise(self, message: impl FnOnce() -> String, fix: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| {
            let e: anyhow::Error = e.into();
            fail(format!("{}: {e:#}", message()), fix())
        })
    }
}

fn progress_bar(enabled: bool, n: usize) -> indicatif::ProgressBar {
    if !enabled {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(n as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {wide_msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

fn print_plan(plan: &Plan) {
    let targets: Vec<String> = plan.spec.targets.iter().map(Target::to_string).collect();
    println!(
        "{}: {} modules, default targets {}",
        plan.spec.path.display(),
        plan.spec.modules.len(),
        targets.join(" ")
    );
    println!(
        "{} jobs; nvcc {} ({}), host compiler: {}",
        plan.jobs.len(),
        plan.toolkit.identity.nvcc,
        plan.toolkit.identity.source,
        plan.host.version
    );
    for j in &plan.jobs {
        let m = &plan.spec.modules[j.module];
        println!(
            "{:<12} {:<11} {:<5} {}  {}",
            m.name.as_str(),
            j.target.to_string(),
            j.kind.to_string(),
            m.source,
            j.flags.join(" ")
        );
    }
}

fn print_report(r: &BuildReport) {
    println!(
        "{:<12} {:<11} {:<5} {:>8}  {:<14} result",
        "module", "target", "kind", "bytes", "digest"
    );
    for b in &r.modules {
        let id = &b.manifest.identity;
        let kind = match id.kind {
            Kind::Cubin => "cubin".to_string(),
            Kind::Ptx => "ptx (compatibility mode)".to_string(),
        };
        println!(
            "{:<12} {:<11} {:<5} {:>8}  {:<14} {}",
            id.module.as_str(),
            id.sm.to_string(),
            kind,
            b.manifest.size,
            b.manifest.module_digest.short(),
            if b.cached { "cached" } else { "built" }
        );
    }
    let cached = r.modules.iter().filter(|b| b.cached).count();
    println!(
        "{} blobs: {} compiled ({} nvcc runs), {} from cache, in {:.2} s; nvcc {} ({}); output {}",
        r.modules.len(),
        r.modules.len() - cached,
        r.nvcc_runs,
        cached,
        r.wall.as_secs_f64(),
        r.toolkit.nvcc,
        r.toolkit.source,
        r.out.display()
    );
    if !r.removed.is_empty() {
        println!(
            "removed {} stale file(s) of earlier builds",
            r.removed.len()
        );
    }
}

/// The `--report-json` document.
#[derive(Serialize)]
struct JsonReport<'a> {
    out: &'a Path,
    nvcc_runs: usize,
    wall_ms: u128,
    removed: &'a [PathBuf],
    modules: Vec<JsonModule<'a>>,
}

#[derive(Serialize)]
struct JsonModule<'a> {
    module: &'a ModuleName,
    target: Target,
    kind: Kind,
    cached: bool,
    blob: &'a Path,
    manifest_path: &'a Path,
    identity_digest: Digest,
    module_digest: Digest,
    size: u64,
}

impl<'a> JsonReport<'a> {
    fn of(r: &'a BuildReport) -> Self {
        JsonReport {
            out: &r.out,
            nvcc_runs: r.nvcc_runs,
            wall_ms: r.wall.as_millis(),
            removed: &r.removed,
            modules: r
                .modules
                .iter()
                .map(|b| JsonModule {
                    module: &b.manifest.identity.module,
                    target: b.manifest.identity.sm,
                    kind: b.manifest.identity.kind,
                    cached: b.cached,
                    blob: &b.blob,
                    manifest_path: &b.manifest_path,
                    identity_digest: b.manifest.identity.digest(),
                    module_digest: b.manifest.module_digest,
                    size: b.manifest.size,
                })
                .collect(),
        }
    }
}
