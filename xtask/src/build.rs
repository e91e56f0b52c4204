//! `cargo xtask build`: compiles every (module, target) of the release spec with the pinned
//! nvcc, in parallel, through a content-addressed cache, into per-SM cubins (and opted-in
//! PTX) with unsigned manifests. A failed build writes nothing: not to the output folder,
//! not to the cache.
//!
//! The library-ish entry points for other tasks are [`run_build`] and [`plan`]. Submodules:
//! `spec` (the release spec), `job` (one job: cache hit or nvcc), `nvcc`, `kernels` (entry
//! points), `cache` (entries and dependency records), `inputs` (file names and digests),
//! `explain` (why a job compiled), `evict` (the size bound), `report` (what is printed).

mod cache;
mod evict;
mod explain;
mod inputs;
mod job;
mod kernels;
mod nvcc;
pub mod provenance;
mod remote;
mod report;
pub mod spec;

use anyhow::{Context, Result};
use cuda_aot::{Channel, Digest, Manifest, ModuleName, Target};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
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
use cache::{Cache, DepFile, DepRecord, LastBuild, StoredRecord};
pub use evict::DEFAULT_MAX_SIZE;
use evict::{Eviction, Protected};
pub use explain::Change;
use inputs::{Inputs, Names};
use job::{Ctx, Done, UnitDone, UnitHow};
pub use nvcc::HostCompiler;
pub use remote::{Remote, RemoteOptions, check_url as remote_check_url};
pub use report::JsonReport;
use report::{emit_json, emit_plan, print_plan, print_report};
pub use spec::{Job, ModuleSpec, ReleaseSpec};

/// Compile every module for every target SM into cubins and unsigned manifests.
///
/// Compiles each module of manifests/release.toml for each target SM with one nvcc run per
/// (module, target), in parallel, and writes `<out>/<module>/<target>.cubin` plus
/// `<out>/<module>/<target>.cubin.manifest.json` (an unsigned manifest) for each; PTX that a
/// module opts into lands beside them as `<target>.ptx`. Results come from the build cache
/// (.cuda-aot/cache) when every input is unchanged: toolkit, host compiler, flags, sources
/// and every header they include. A rebuild with nothing changed runs no nvcc at all, and
/// neither does one after a change was reverted (each job keeps several dependency records).
/// --explain says, for every job that ran nvcc, which input changed.
#[derive(clap::Args)]
#[command(after_long_help = "\
Outputs (read by `cargo xtask sign` and `publish`):
  <out>/<module>/<target>.cubin                 one per module and target SM
  <out>/<module>/<target>.cubin.manifest.json   its unsigned manifest (identity, digests, entry points)
  <out>/<module>/<target>.ptx[.manifest.json]   only for modules that opt into PTX (compatibility mode)

A failed build changes nothing: not the output folder, not the cache. An interrupted one (Ctrl-C)
stops nvcc, keeps every finished job in the cache (the rerun compiles only the rest), removes its
temporary folders and exits 130. Without a terminal (CI logs) progress is printed line by line on
stderr. The summary counts cache hits and misses (and the kinds of input behind the misses);
--explain names, for each job that compiled, what changed: its source, a header, a flag, the
toolkit, the host compiler, a spec value, or that the cache had nothing for it. The cache is
bounded (--cache-max-size): after a build that added to it, the least recently used entries
that this build does not use are removed. docs/build.md explains the toolkit, the identity,
the cache key and reproducibility; docs/json.md the --json messages.

Examples:
  cargo xtask build                                    the release set, one job per core
  cargo xtask build --module ntt --target sm_90 -j 4
  cargo xtask build --spec ../prover/gpu/kernels.toml  a spec kept anywhere; .cuda-aot/ beside it
  cargo xtask build --dry-run                          the jobs and their exact nvcc flags
  cargo xtask build --explain                          why each compiled job compiled")]
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
    /// For every job that ran nvcc, say which input changed since the cache last built it
    /// (source, header, flag, toolkit, host compiler, spec value), or that the cache had
    /// nothing for it.
    #[arg(long)]
    explain: bool,
    /// Also write the build summary to FILE as one JSON document (the `build-finished`
    /// message of docs/json.md).
    #[arg(long, value_name = "FILE")]
    report_json: Option<PathBuf>,
    /// Build only part K of N of the jobs, for N machines building one release together:
    /// a deterministic split, balanced by the compile times the shared cache recorded at
    /// its last whole read-write build (in spec order where it has none), the same on every
    /// machine of one run. Needs a read-write --remote-cache, where the final build finds
    /// every part (docs/build.md, "Sharded builds").
    #[arg(long, value_name = "K/N", value_parser = parse_shard)]
    shard: Option<Shard>,
    #[command(flatten)]
    pub(crate) format: FormatArgs,
}

/// Part `index` (1-based) of `count`: `--shard K/N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// K, from 1.
    pub index: usize,
    /// N.
    pub count: usize,
}

/// `K/N` with 1 <= K <= N.
fn parse_shard(s: &str) -> std::result::Result<Shard, String> {
    let (k, n) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not K/N (e.g. 2/4: the second of four parts)"))?;
    let num = |v: &str| {
        v.trim()
            .parse::<usize>()
            .map_err(|_| format!("{s:?} is not K/N with whole numbers"))
    };
    let (index, count) = (num(k)?, num(n)?);
    if count == 0 || index == 0 || index > count {
        return Err(format!(
            "{s:?}: K must be between 1 and N, and N at least 1"
        ));
    }
    Ok(Shard { index, count })
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
        if let Some(shard) = self.shard {
            if !opts
                .remote
                .as_ref()
                .is_some_and(|r| r.mode == crate::args::RemoteCacheMode::ReadWrite)
            {
                return Err(fail(
                    format!(
                        "--shard {}/{} builds only part of the release, and nothing would carry it to the final build",
                        shard.index, shard.count
                    ),
                    "give the shared cache every part is added to: --remote-cache URL --remote-cache-mode read-write (docs/build.md, \"Sharded builds\")",
                ));
            }
            opts.shard = Some(shard);
        }
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
            print_report(&report, self.explain);
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
    /// The cache's bound in bytes (least recently used entries go first).
    pub cache_max: u64,
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
    /// A shared build cache, taken from after the local one and (read-write) added to.
    pub remote: Option<remote::RemoteOptions>,
    /// Build only this part of the jobs (`--shard K/N`).
    pub shard: Option<Shard>,
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
            cache_max: DEFAULT_MAX_SIZE,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            modules: Vec::new(),
            targets: Vec::new(),
            toolkit: ToolchainOptions::new(ToolkitChoice::Pinned),
            channel: Channel::Dev,
            progress: true,
            remote: None,
            shard: None,
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
        if let Some(m) = cache.cache_max_size {
            o.cache_max = m;
        }
        o.remote = cache.remote.options();
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
    /// The cache's size bound at work (after a build that added to the cache).
    pub eviction: Option<Eviction>,
    /// What the shared build cache gave and took, when one was used.
    pub shared: Option<SharedCache>,
}

/// What a build did with the shared build cache (`--remote-cache`).
#[derive(Debug, Clone)]
pub struct SharedCache {
    /// Its URL.
    pub url: String,
    /// Jobs taken from it (verified, then stored in the local cache).
    pub taken: usize,
    /// Entries it had that the build refused (each job then compiled), with why.
    pub refused: Vec<remote::Refusal>,
    /// Entries this build added to it (read-write).
    pub added: usize,
    /// Why adding stopped, when the store failed (the build's own output is complete).
    pub add_failed: Option<String>,
    /// The first failure to read the store (its jobs then compiled), if any.
    pub read_failed: Option<String>,
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
    /// Why it compiled (empty for a cache hit).
    pub changes: Vec<Change>,
    /// What nvcc printed building it (its warnings; a cache hit keeps the build's).
    pub warnings: Vec<String>,
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
    if let Some(r) = &opts.remote {
        remote::check_url(&r.url)?;
    }
    let t0 = Instant::now();
    let started = cuda_aot::metadata::Time::now();
    let mut plan = plan(opts)?;
    paths::prepare(&opts.out)?;
    paths::prepare(&opts.cache)?;
    // Noted after the plan: planning may unpack the toolkit, whose headers are inputs of
    // every job; only a change after this point is a change "while the build was running".
    let build_start = SystemTime::now();
    let cache = Cache::new(&opts.cache);
    let remote = opts.remote.as_ref().map(remote::Remote::open).transpose()?;
    let names = Names::new(
        &plan.spec.sources,
        &plan.toolkit.root,
        plan.spec
            .modules
            .iter()
            .flat_map(|m| &m.include_dirs)
            .map(|d| (d.rel.clone(), d.abs.clone())),
    );
    // Each job's dependency records (read on the workers: parsing them is much of the work
    // of a no-op rebuild).
    let keyed: Vec<(Digest, Vec<StoredRecord>)> =
        cuda_aot::parallel::try_map(&plan.jobs, opts.jobs, |j| {
            let k = plan.dep_key(j);
            let mut recs = cache.records(&k);
            if let Some(r) = &remote {
                recs = remote::merge_records(r, &cache, &k, recs);
            }
            Ok::<_, std::convert::Infallible>((k, recs))
        })
        .unwrap_or_else(|never| match never {});
    // One part of a sharded build: the same split on every machine that sees the same
    // records.
    let keyed = match opts.shard {
        Some(shard) => {
            // Split by the shared cache's timings, which only a whole build writes: every
            // shard of one run sees the same (local records differ between machines).
            let keys: Vec<Digest> = keyed.iter().map(|(k, _)| *k).collect();
            let weights = remote
                .as_ref()
                .map_or_else(|| vec![None; keys.len()], |r| r.timings(&keys));
            let mine = shard_split(&weights, shard);
            plan.jobs = mine.iter().map(|&i| plan.jobs[i].clone()).collect();
            eprintln!(
                "build: shard {}/{}: {} job(s): {}",
                shard.index,
                shard.count,
                plan.jobs.len(),
                plan.jobs
                    .iter()
                    .map(|j| format!("{} {}", plan.spec.modules[j.module].name, j.target))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            if plan.jobs.is_empty() {
                eprintln!(
                    "build: shard {}/{} has no job: the release has fewer jobs than parts",
                    shard.index, shard.count
                );
                return Ok(BuildReport {
                    spec: plan.spec.path.clone(),
                    out: opts.out.clone(),
                    modules: Vec::new(),
                    nvcc_runs: 0,
                    wall: t0.elapsed(),
                    toolkit: plan.toolkit.identity.clone(),
                    removed: Vec::new(),
                    eviction: None,
                    shared: None,
                });
            }
            mine.iter().map(|&i| keyed[i].clone()).collect()
        }
        None => keyed,
    };
    let ctx = Ctx {
        plan: &plan,
        cache: &cache,
        inputs: Inputs::new(&cache, names),
        nvcc_runs: AtomicUsize::new(0),
        build_start,
        remote: remote.as_ref(),
    };
    let n = plan.jobs.len();
    // Longest first (unknown counts as longest): the last job to start is a short one.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| Reverse(keyed[i].1.first().map_or(u64::MAX, |r| r.compile_ms)));

    let results: Vec<Mutex<Option<Result<Done>>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let progress = Progress::new("build", n, opts.progress);
    let fresh = keyed.iter().filter(|k| !k.1.is_empty()).count();
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
                    let likely_hit = !keyed[i].1.is_empty();
                    progress.start(&what, !likely_hit);
                    let t = Instant::now();
                    let r = ctx.run_job(job, &keyed[i].1);
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
                    let warnings = match &r {
                        Ok(Done::Cached { warnings, .. }) | Ok(Done::Compiled { warnings, .. }) => {
                            warnings.clone()
                        }
                        Err(_) => Vec::new(),
                    };
                    *results[i].lock().expect("result slot") = Some(r);
                    progress.finish(&what, outcome.as_deref());
                    // nvcc's warnings, once per (module, target), on a cache hit too.
                    if !warnings.is_empty() {
                        progress.warn(&format!(
                            "{} nvcc warning(s) for {}:\n{}",
                            warnings.iter().filter(|l| l.contains("warning")).count(),
                            plan.label(job),
                            nvcc::indent(&warnings.join("\n"))
                        ));
                    }
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
        return Err(keep_finished(&cache, &plan, &keyed, results, i));
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
            // A module of several sources: the message names the file at fault.
            file: match plan.spec.modules[job.module].sources.as_slice() {
                [one] => Some(plan.spec.sources.join(one)),
                _ => None,
            },
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
    let mut protected = Protected::default();
    let mut added = false;
    let mut shared_taken = 0;
    // Every project file a job read, for the provenance.
    let mut read = BTreeMap::new();
    for (i, r) in results.into_iter().enumerate() {
        let done = r.expect("every job ran").expect("every job succeeded");
        let job = &plan.jobs[i];
        let (key, records) = &keyed[i];
        let (mut manifest, blob, cached, changes, set, warnings) = match done {
            Done::Cached {
                manifest,
                blob,
                record,
                last_used,
                warnings,
                shared,
            } => {
                let id = manifest.identity.digest();
                if shared {
                    // Verified when it was taken; now it is in the local cache too, with
                    // the record that found it.
                    cache.commit(&manifest, &blob, &warnings)?;
                    added = true;
                    shared_taken += 1;
                } else {
                    cache.touch(&id, last_used);
                }
                // A hit through an older record (a revert), or a shared one: it becomes the
                // newest.
                if cache.promote_record(key, records, record, id, shared)? {
                    note_last(&cache, &plan, job, key, &manifest)?;
                }
                note_read(&mut read, &ctx.inputs.names, &records[record].files);
                (
                    manifest,
                    blob,
                    true,
                    Vec::new(),
                    records[record].set,
                    warnings,
                )
            }
            Done::Compiled {
                manifest,
                blob,
                deps,
                changes,
                warnings,
                units,
            } => {
                commit_units(&cache, &units, &mut protected)?;
                note_read(&mut read, &ctx.inputs.names, &deps.files);
                let set = commit_compiled(
                    &cache, &plan, job, key, records, &manifest, &blob, &deps, &warnings,
                )?;
                added = true;
                (manifest, blob, false, changes, set, warnings)
            }
        };
        protected.objects.insert(manifest.identity.digest());
        protected.deps.insert(*key);
        protected.sets.extend(set);
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
            changes,
            warnings,
        });
    }
    // The shared cache, read-write: every job's entry, records and sets it lacks.
    let shared = match &remote {
        Some(r) => {
            let mut uploaded = 0;
            let mut add_failed = None;
            if r.writes() {
                for (m, (key, _)) in modules.iter().zip(&keyed) {
                    // The manifest as written beside the blob: a reader checks its bytes
                    // against the signed digest and takes it whatever its channel (the
                    // reader's build sets its own).
                    let blob = std::fs::read(&m.blob)
                        .with_context(|| format!("reading {}", m.blob.display()))?;
                    match r.add(&cache, key, &m.manifest, &blob) {
                        Ok(true) => uploaded += 1,
                        Ok(false) => {}
                        // A shard's whole purpose is its upload: without it the final
                        // build would compile this part again.
                        Err(e) if opts.shard.is_some() => {
                            return Err(e.context(format!(
                                "built, but adding {} to the shared cache {} failed (the local cache and {} are complete); run the shard again",
                                m.manifest.label(),
                                r.url(),
                                opts.out.display()
                            )));
                        }
                        Err(e) => {
                            add_failed = Some(format!(
                                "adding {} failed, the rest not tried: {e:#}",
                                m.manifest.label()
                            ));
                            break;
                        }
                    }
                }
            }
            if r.writes() && opts.shard.is_none() && add_failed.is_none() {
                let times: Vec<(Digest, u64)> = keyed
                    .iter()
                    .filter_map(|(k, _)| cache.records(k).first().map(|r| (*k, r.compile_ms)))
                    .collect();
                if let Err(e) = r.put_timings(&times) {
                    add_failed = Some(format!("writing the shard timings failed: {e:#}"));
                }
            }
            if let Some(why) = &add_failed {
                progress.warn(&format!(
                    "shared cache {}: {why}. This build's output and local cache are complete and verified; the shared cache only misses what was not added (an entry is visible to readers only once its signed entry.json is written, so nothing half-added is taken). Fix: check the store, then build again with --remote-cache-mode read-write: the build is a no-op and adds what is missing",
                    r.url()
                ));
            }
            let read_failed = r.read_failed();
            if let Some(why) = &read_failed {
                let after = match r.down() {
                    Some(_) => " and was asked nothing more in this build",
                    None => "",
                };
                progress.warn(&format!(
                    "shared cache {} could not be read ({why}){after}; the jobs it might have given were compiled instead. Fix: check the store's address and credentials (--remote-cache-timeout-secs N if it is only slow)",
                    r.url()
                ));
            }
            let refused = r.refused();
            for f in &refused {
                progress.warn(&format!(
                    "shared cache {}: refused the entry for {}: {}; compiled it instead",
                    r.url(),
                    f.what,
                    f.reason
                ));
            }
            progress.note(&format!(
                "shared cache {}: {shared_taken} job(s) taken, {} refused, {uploaded} added",
                r.url(),
                refused.len()
            ));
            Some(SharedCache {
                url: r.url().to_string(),
                taken: shared_taken,
                refused,
                added: uploaded,
                add_failed,
                read_failed,
            })
        }
        None => None,
    };
    // The size bound, once the cache grew: least recently used entries first, never one
    // this build uses.
    let eviction = if added {
        Some(cache.evict(opts.cache_max, &protected)?)
    } else {
        None
    };
    let removed = outdir::remove_stale(&opts.out, &keep)?;
    // What the build read, for the build statement: from the spec's own sources folder
    // only (a rebuilder finds the sources where the spec says).
    if opts.sources.is_none() {
        changed |= provenance::write(opts, &plan, &read, started)?;
    } else {
        changed |= outdir::remove_provenance(&opts.out)?;
    }
    if changed || !removed.is_empty() {
        // The builder's statement covers the previous set of manifests: sign again.
        outdir::remove_statement(&opts.out)?;
    }
    ctx.inputs.digests.save();
    let swept = cache.tidy();
    if swept > 0 && opts.progress {
        eprintln!(
            "build: removed {swept} leftover(s) of killed builds from the cache {}",
            cache.root().display()
        );
    }
    Ok(BuildReport {
        spec: plan.spec.path.clone(),
        out: opts.out.clone(),
        modules,
        nvcc_runs: ctx.nvcc_runs.load(Ordering::Relaxed),
        wall: t0.elapsed(),
        toolkit: plan.toolkit.identity.clone(),
        removed,
        eviction,
        shared,
    })
}

/// Adds the project files of a dependency record to `read` (path → the blake3 recorded).
fn note_read(read: &mut BTreeMap<PathBuf, Digest>, names: &Names, files: &[DepFile]) {
    for f in files.iter().filter(|f| f.is_project()) {
        read.insert(names.resolve(&f.name), f.digest);
    }
}

/// Positions of part `shard` when jobs of these weights (compile times; `None`: unknown)
/// are split into `shard.count` parts: known weights longest first, then the unknown in
/// order (each counted as the mean known weight, 1 when none is known), each job given to
/// the part with the least weight so far (the lowest-numbered on a tie). Deterministic, so
/// every machine that sees the same weights makes the same split; the parts cover every
/// job exactly once.
fn shard_split(weights: &[Option<u64>], shard: Shard) -> Vec<usize> {
    let weight = |i: usize| weights[i].map(|w| w.max(1));
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| (weight(i).is_none(), Reverse(weight(i).unwrap_or(0)), i));
    let known: Vec<u64> = (0..weights.len()).filter_map(weight).collect();
    let mean = if known.is_empty() {
        1
    } else {
        (known.iter().sum::<u64>() / known.len() as u64).max(1)
    };
    let mut load = vec![0u64; shard.count];
    let mut mine = Vec::new();
    for i in order {
        let part = (0..shard.count)
            .min_by_key(|&p| (load[p], p))
            .expect("at least one part");
        load[part] += weight(i).unwrap_or(mean);
        if part + 1 == shard.index {
            mine.push(i);
        }
    }
    mine.sort_unstable();
    mine
}

/// Commits a compiled job: its entry, its dependency record (newest first, beside the
/// older ones) and its last-build note. Returns the record's header set.
#[allow(clippy::too_many_arguments)]
fn commit_compiled(
    cache: &Cache,
    plan: &Plan,
    job: &Job,
    key: &Digest,
    records: &[StoredRecord],
    manifest: &Manifest,
    blob: &[u8],
    deps: &DepRecord,
    warnings: &[String],
) -> Result<Option<Digest>> {
    cache.commit(manifest, blob, warnings)?;
    let id = manifest.identity.digest();
    cache.add_record(key, records, deps, id)?;
    note_last(cache, plan, job, key, manifest)?;
    Ok(cache::split(deps, id).0.set)
}

/// Commits the units of a linked job (the relocatable cubin of each file compiled now, with
/// its dependency record; a unit found through an older record makes that record the
/// newest), and marks them as used by this build.
fn commit_units(cache: &Cache, units: &[UnitDone], protected: &mut Protected) -> Result<()> {
    for u in units {
        match &u.how {
            UnitHow::Compiled {
                deps,
                object,
                warnings,
            } => {
                cache.commit_unit(&u.id, &u.source, object, warnings)?;
                cache.add_record(&u.key, &u.records, deps, u.id)?;
                protected.sets.extend(cache::split(deps, u.id).0.set);
            }
            UnitHow::Cached { record, last_used } => {
                cache.touch(&u.id, *last_used);
                cache.promote_record(&u.key, &u.records, *record, u.id, false)?;
                protected.sets.extend(u.records[*record].set);
            }
        }
        protected.objects.insert(u.id);
        protected.deps.insert(u.key);
    }
    Ok(())
}

/// Notes what the job's latest build was (`--explain` compares the next miss against it).
fn note_last(cache: &Cache, plan: &Plan, job: &Job, key: &Digest, m: &Manifest) -> Result<()> {
    let spec = &plan.spec.modules[job.module];
    cache.put_last(
        &cache::job_key(&spec.name, &job.target, job.kind),
        &LastBuild::new(spec.source_key(), *key, m.identity.clone()),
    )
}

/// After an interrupt: commits every job that compiled to the cache (a rerun compiles only
/// the others), leaves the output folder alone, and removes the staging folder.
fn keep_finished(
    cache: &Cache,
    plan: &Plan,
    keyed: &[(Digest, Vec<StoredRecord>)],
    results: Vec<Option<Result<Done>>>,
    interrupt: Interrupted,
) -> anyhow::Error {
    let mut kept = 0;
    for (i, r) in results.into_iter().enumerate() {
        if let Some(Ok(Done::Compiled {
            manifest,
            blob,
            deps,
            warnings,
            units,
            ..
        })) = r
        {
            let (key, records) = &keyed[i];
            let committed = commit_units(cache, &units, &mut Protected::default()).and_then(|()| {
                commit_compiled(
                    cache,
                    plan,
                    &plan.jobs[i],
                    key,
                    records,
                    &manifest,
                    &blob,
                    &deps,
                    &warnings,
                )
            });
            match committed {
                Ok(_) => kept += 1,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(weights: &[Option<u64>], n: usize) -> Vec<Vec<usize>> {
        (1..=n)
            .map(|index| shard_split(weights, Shard { index, count: n }))
            .collect()
    }

    #[test]
    fn shards_cover_every_job_once_and_balance_known_compile_times() {
        let w = [Some(100), Some(10), Some(90), Some(20), Some(80), Some(30)];
        let p = parts(&w, 2);
        let mut all: Vec<usize> = p.concat();
        all.sort_unstable();
        assert_eq!(all, (0..6).collect::<Vec<_>>());
        let load = |part: &[usize]| part.iter().map(|&i| w[i].unwrap()).sum::<u64>();
        // 330 in all: longest first gives 160 and 170, not the 220/110 of halving in order.
        assert_eq!((load(&p[0]), load(&p[1])), (160, 170));
        assert_eq!(p, parts(&w, 2), "deterministic");
    }

    #[test]
    fn unknown_compile_times_spread_evenly_and_more_parts_than_jobs_leave_some_empty() {
        let p = parts(&[None; 5], 2);
        assert_eq!(p, vec![vec![0, 2, 4], vec![1, 3]]);
        let p = parts(&[Some(5), None, None], 4);
        assert_eq!(p.iter().filter(|x| x.is_empty()).count(), 1);
        assert_eq!(p.concat().len(), 3);
        assert_eq!(parse_shard("2/4"), Ok(Shard { index: 2, count: 4 }));
        for bad in ["0/4", "5/4", "1/0", "2", "a/b"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }
}
