//! `cargo xtask build`: compiles every (module, target) of the release spec with the pinned
//! nvcc, in parallel, through a content-addressed cache, into per-SM cubins (and opted-in
//! PTX) with unsigned manifests. A failed build writes nothing: not to the output folder,
//! not to the cache.
//!
//! The library-ish entry points for other tasks are [`run_build`] and [`plan`].

mod cache;
mod job;
mod kernels;
mod nvcc;
pub mod spec;

use anyhow::Result;
use cuda_aot::{Channel, Digest, Kind, Manifest, ModuleName, Target};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

// `fail` and `Advise` are imported here for the submodules (`super::fail`) too.
use crate::advice::{Advise, Subject, fail};
use crate::args::{CacheArgs, ChannelArg, FormatArgs, SelectArgs, ToolkitChoice};
use crate::message::{self, Progress};
use crate::process::{self, Interrupted};
use crate::toolchain::{self, ToolchainOptions, ToolkitInfo};
use crate::{files, outdir, paths};
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

A failed build changes nothing: not the output folder, not the cache. An interrupted one (Ctrl-C)
stops nvcc, keeps every finished job in the cache (the rerun compiles only the rest), removes its
temporary folders and exits 130. Without a terminal (CI logs) progress is printed line by line on
stderr. docs/build.md explains the toolkit, the identity, the cache key and reproducibility;
docs/json.md the --json messages.

Examples:
  cargo xtask build                                    the release set, one job per core
  cargo xtask build --module ntt --target sm_90 -j 4
  cargo xtask build --spec ../prover/gpu/kernels.toml  a spec kept anywhere; .cuda-aot/ beside it
  cargo xtask build --dry-run                          the jobs and their exact nvcc flags")]
pub struct Args {
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten)]
    cache: CacheArgs,
    /// Output folder; files of earlier builds that this build does not produce are removed
    /// [default: .cuda-aot/build of the project].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The channel written into every manifest.
    #[arg(long, value_enum, value_name = "CHANNEL", default_value_t = ChannelArg::Dev)]
    channel: ChannelArg,
    /// Take module sources from this folder instead of the spec's `build.sources`.
    #[arg(long, value_name = "DIR")]
    sources: Option<PathBuf>,
    /// Print the jobs (module, target, exact nvcc flags) and compile nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also write the build summary to FILE as one JSON document (the `build-finished`
    /// message of docs/json.md).
    #[arg(long, value_name = "FILE")]
    report_json: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) format: FormatArgs,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        self.select.select_project()?;
        let mut opts = BuildOptions::from_select(&self.select, &self.cache);
        if let Some(o) = self.out {
            opts.out = o;
        }
        opts.sources = self.sources;
        opts.channel = self.channel.into();
        if self.dry_run {
            let plan = plan(&opts)?;
            if message::json() {
                emit_plan(&plan);
            } else {
                print_plan(&plan);
            }
            return Ok(());
        }
        let report = run_build(&opts)?;
        if message::json() {
            emit_json(&report);
        } else {
            print_report(&report);
        }
        if let Some(p) = self.report_json {
            files::write(&p, &serde_json::to_vec_pretty(&JsonReport::of(&report))?)?;
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
    /// The project's release set: manifests/release.toml, pinned toolkit, dev channel,
    /// `.cuda-aot/build` and `.cuda-aot/cache`, one job per available core.
    fn default() -> Self {
        BuildOptions {
            spec: paths::default_spec(),
            sources: None,
            out: paths::default_build_out(),
            cache: paths::default_build_cache(),
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            modules: Vec::new(),
            targets: Vec::new(),
            toolkit: ToolchainOptions::new(ToolkitChoice::Pinned),
            channel: Channel::Dev,
            progress: true,
        }
    }
}

impl BuildOptions {
    /// The options that the shared build arguments select (after
    /// [`SelectArgs::select_project`]): spec, modules, targets, jobs, cache and toolkit.
    pub fn from_select(a: &SelectArgs, cache: &CacheArgs) -> Self {
        let mut o = BuildOptions::default();
        if let Some(s) = &a.spec {
            o.spec = s.clone();
        }
        if let Some(j) = a.jobs {
            o.jobs = j.max(1);
        }
        if let Some(c) = &cache.cache_dir {
            o.cache = c.clone();
        }
        o.modules = a.modules.clone();
        o.targets = a.targets.clone();
        o.toolkit = ToolchainOptions::from_args(&a.toolkit);
        o
    }
}

/// What a build produced.
#[derive(Debug, Clone)]
pub struct BuildReport {
    /// The release spec.
    pub spec: PathBuf,
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
    process::check_interrupt()?;
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
    paths::prepare(&opts.out)?;
    paths::prepare(&opts.cache)?;
    // Noted after the plan: planning may unpack the toolkit, whose headers are inputs of
    // every job; only a change after this point is a change "while the build was running".
    let build_start = SystemTime::now();
    let cache = Cache::new(&opts.cache);
    let ctx = Ctx {
        plan: &plan,
        cache: &cache,
        names: Names::new(
            &plan.spec.sources,
            &plan.toolkit.root,
            plan.spec
                .modules
                .iter()
                .flat_map(|m| &m.include_dirs)
                .map(|d| (d.rel.clone(), d.abs.clone())),
        ),
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
    let progress = Progress::new("build", n, opts.progress);
    let fresh = keyed.iter().filter(|k| k.1.is_some()).count();
    progress.note(&format!(
        "{n} job(s) of {}, up to {} in parallel ({fresh} with a dependency record from an earlier build)",
        paths::shown(&plan.spec.path),
        opts.jobs.clamp(1, n)
    ));
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.clamp(1, n) {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) && process::interrupted().is_none() {
                    let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    let job = &plan.jobs[i];
                    let what = format!(
                        "{} {} ({})",
                        plan.spec.modules[job.module].name, job.target, job.kind
                    );
                    // A job with a dependency record is most likely a cache hit: only
                    // compiles are announced line by line.
                    let likely_hit = keyed[i].1.is_some();
                    progress.start(&what, !likely_hit);
                    let t = Instant::now();
                    let r = ctx.run_job(job, keyed[i].1.as_ref());
                    let outcome = match &r {
                        Ok(Done::Cached { .. }) => None,
                        Ok(Done::Compiled { .. }) => {
                            Some(format!("compiled in {:.2} s", t.elapsed().as_secs_f64()))
                        }
                        Err(_) if process::interrupted().is_some() => {
                            Some("interrupted".to_string())
                        }
                        Err(_) => Some("FAILED".to_string()),
                    };
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    *results[i].lock().expect("result slot") = Some(r);
                    progress.finish(&what, outcome.as_deref());
                }
            });
        }
    });
    progress.finish_and_clear();
    let hits = results
        .iter()
        .filter(|r| {
            matches!(
                *r.lock().expect("result slot"),
                Some(Ok(Done::Cached { .. }))
            )
        })
        .count();
    if hits > 0 {
        progress.note(&format!("{hits} of {n} job(s) taken from the build cache"));
    }

    let results: Vec<Option<Result<Done>>> = results
        .into_iter()
        .map(|m| m.into_inner().expect("result slot"))
        .collect();
    if let Some(i) = process::interrupted() {
        return Err(keep_finished(&cache, &keyed, results, i));
    }
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
        let job = &plan.jobs[first];
        let subject = Subject {
            module: Some(plan.spec.modules[job.module].name.to_string()),
            target: Some(job.target.to_string()),
            file: Some(
                plan.spec
                    .sources
                    .join(&plan.spec.modules[job.module].source),
            ),
        };
        return Err(subject.attach(e).context(format!(
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
            outdir::write_module(&opts.out, &manifest, &blob)?;
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
    let removed = outdir::remove_stale(&opts.out, &keep)?;
    if changed || !removed.is_empty() {
        // The builder's statement covers the previous set of manifests: sign again.
        outdir::remove_statement(&opts.out)?;
    }
    cache.tidy();
    Ok(BuildReport {
        spec: plan.spec.path.clone(),
        out: opts.out.clone(),
        modules,
        nvcc_runs: ctx.nvcc_runs.load(Ordering::Relaxed),
        wall: t0.elapsed(),
        toolkit: plan.toolkit.identity.clone(),
        removed,
    })
}

/// After an interrupt: commits every job that compiled to the cache (a rerun compiles only
/// the others), leaves the output folder alone, and removes the staging folder.
fn keep_finished(
    cache: &Cache,
    keyed: &[(Digest, Option<DepRecord>)],
    results: Vec<Option<Result<Done>>>,
    interrupt: Interrupted,
) -> anyhow::Error {
    let mut kept = 0;
    for (i, r) in results.into_iter().enumerate() {
        if let Some(Ok(Done::Compiled {
            manifest,
            blob,
            deps,
        })) = r
        {
            let committed = cache
                .commit(&manifest, &blob)
                .and_then(|()| cache.put_deps(&keyed[i].0, &deps));
            match committed {
                Ok(()) => kept += 1,
                Err(e) => eprintln!("build: could not keep {}: {e:#}", manifest.label()),
            }
        }
    }
    cache.tidy();
    eprintln!(
        "build: interrupted; {kept} finished job(s) kept in the build cache {}, the output folder left as it was",
        paths::shown(cache.root())
    );
    anyhow::Error::new(interrupt)
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

/// Prints the `build-plan` JSON message of `--dry-run`.
fn emit_plan(plan: &Plan) {
    let jobs: Vec<serde_json::Value> = plan
        .jobs
        .iter()
        .map(|j| {
            let m = &plan.spec.modules[j.module];
            serde_json::json!({
                "module": m.name,
                "target": j.target,
                "kind": j.kind,
                "source": plan.spec.sources.join(&m.source),
                "flags": j.flags,
            })
        })
        .collect();
    message::emit(
        "build-plan",
        serde_json::json!({
            "spec": plan.spec.path,
            "toolkit": plan.toolkit.identity,
            "host_toolchain": plan.host.version,
            "jobs": jobs,
        }),
    );
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

/// Prints the `build-finished` JSON message.
fn emit_json(r: &BuildReport) {
    message::emit(
        "build-finished",
        serde_json::to_value(JsonReport::of(r)).expect("serialisable"),
    );
}

/// The build summary of docs/json.md: the `build-finished` message (and the
/// `--report-json` document; `release --json` carries it as its `build` field).
#[derive(Serialize)]
pub struct JsonReport<'a> {
    spec: &'a Path,
    out: &'a Path,
    toolkit: &'a cuda_aot::Toolkit,
    nvcc_runs: usize,
    compiled: usize,
    cached: usize,
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
    /// The summary of `r`.
    pub fn of(r: &'a BuildReport) -> Self {
        let cached = r.modules.iter().filter(|b| b.cached).count();
        JsonReport {
            spec: &r.spec,
            out: &r.out,
            toolkit: &r.toolkit,
            nvcc_runs: r.nvcc_runs,
            compiled: r.modules.len() - cached,
            cached,
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
