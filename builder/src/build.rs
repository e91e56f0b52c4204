//! The build: compiles every (module, target) of a release spec with the pinned nvcc, in
//! parallel, through a content-addressed cache, into per-SM cubins (and opted-in PTX) with
//! unsigned manifests. A failed build writes nothing: not to the output folder, not to the
//! cache.
//!
//! The entry points are [`run_build`] and [`plan`]. Submodules: `spec` (the release spec),
//! `job` (one job: cache hit or nvcc), `nvcc` (command lines and what nvcc prints),
//! `extern_check` (an `extern` no file defines, nvcc's #20044-D),
//! `kernels` (entry points), `cache` (entries and dependency records), `inputs` (file names
//! and digests), `explain` (why a job compiled), `evict` (the size bound), `shared_cache`
//! (the signed cache several machines share), `report` (what is printed).

mod cache;
mod commit;
mod evict;
mod explain;
mod extern_check;
mod inputs;
mod job;
mod kernels;
pub(crate) mod nvcc;
pub mod provenance;
mod records;
mod report;
mod schedule;
mod shared_cache;
pub mod spec;

use anyhow::Result;
use cuda_aot::{Channel, Digest, Manifest, ModuleName, Target};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

// `fail` and `Advise` are imported here for the submodules (`super::fail`) too.
use crate::advice::{Advise, fail};
use crate::executor::{Executor, Local};
use crate::process;
use crate::toolchain::{self, ToolchainOptions, ToolkitChoice, ToolkitInfo};
use crate::{message::Progress, paths};
use cache::{Cache, StoredRecord};
pub use evict::DEFAULT_MAX_SIZE;
use evict::Eviction;
pub use explain::Change;
use inputs::{Inputs, Names};
use job::Ctx;
pub use nvcc::HostCompiler;
pub use report::{JsonReport, emit_json, emit_plan, print_plan, print_report};
#[cfg(feature = "net")]
pub use shared_cache::oci_options;
pub use shared_cache::{
    NeedsNet, Refusal, Remote, RemoteOptions, SharedCacheMode, check_url as remote_check_url,
};
pub use spec::{Job, ModuleSpec, ReleaseSpec};

/// Part `index` (1-based) of `count`: `--shard K/N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// K, from 1.
    pub index: usize,
    /// N.
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;

    /// `K/N` with 1 <= K <= N.
    fn from_str(s: &str) -> std::result::Result<Shard, String> {
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
    pub remote: Option<RemoteOptions>,
    /// Build only this part of the jobs (`--shard K/N`).
    pub shard: Option<Shard>,
    /// Where the toolkit runs (compiles, links) happen: [`Local`] by default.
    pub executor: Arc<dyn Executor>,
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
            executor: Arc::new(Local),
        }
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
    pub modules: Vec<JobOutput>,
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
    pub refused: Vec<Refusal>,
    /// Entries this build added to it (read-write).
    pub added: usize,
    /// Why adding stopped, when the store failed (the build's own output is complete).
    pub add_failed: Option<String>,
    /// The first failure to read the store (its jobs then compiled), if any.
    pub read_failed: Option<String>,
}

/// What one job left in the output folder: one built (module, target).
#[derive(Debug, Clone)]
pub struct JobOutput {
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

impl Plan {
    /// The key of the dependency records of `file`, one source of a linked job's module:
    /// what decides which files its compile reads (flags, include folders, toolkit, host
    /// compiler), without the files' content.
    pub(crate) fn unit_key(&self, job: &Job, file: &str) -> Digest {
        let m = &self.spec.modules[job.module];
        let key = serde_json::json!({
            "unit": format!("src:{file}"),
            "flags": job.unit_flags(file),
            "include_dirs": m.include_dirs.iter().map(|d| &d.rel).collect::<Vec<_>>(),
            "toolkit": self.toolkit.identity,
            "host": self.host.version,
        });
        let mut h = blake3::Hasher::new();
        h.update(b"cuda-aot unit deps key v1\n");
        h.update(&cuda_aot::json::to_canonical(&key));
        Digest(*h.finalize().as_bytes())
    }
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

/// Each job's dependency key and records (the local cache's, merged with the shared
/// cache's), in job order.
type Keyed = Vec<(Digest, Vec<StoredRecord>)>;

/// Builds everything `opts` selects. On success the output folder holds exactly this
/// build's files and the cache holds every result; on any failure neither was changed.
pub fn run_build(opts: &BuildOptions) -> Result<BuildReport> {
    if let Some(r) = &opts.remote {
        shared_cache::check_url(&r.url)?;
    }
    let t0 = Instant::now();
    let started = cuda_aot::metadata::Time::now();
    // 1. The plan (spec, jobs, toolkit, host compiler), the folders and the caches.
    let mut plan = plan(opts)?;
    paths::prepare(&opts.out)?;
    paths::prepare(&opts.cache)?;
    // Noted after the plan: planning may unpack the toolkit, whose headers are inputs of
    // every job; only a change after this point is a change "while the build was running".
    let build_start = SystemTime::now();
    let cache = Cache::new(&opts.cache);
    let remote = opts
        .remote
        .as_ref()
        .map(shared_cache::Remote::open)
        .transpose()?;
    // 2. Each job's dependency records.
    let mut keyed = read_records(&plan, &cache, remote.as_ref(), opts.jobs);
    // 3. One part of a sharded build: the same split on every machine of one run.
    if let Some(shard) = opts.shard {
        keyed = schedule::take_shard(&mut plan, keyed, remote.as_ref(), shard);
        if plan.jobs.is_empty() {
            return Ok(BuildReport::nothing(opts, &plan, t0));
        }
    }
    // 4. Every job, longest first: a cache hit, or the executor's toolkit runs (which
    //    must use the host compiler the identities record).
    opts.executor
        .expect_host_compiler(&plan.host.path, &plan.host.version);
    let ctx = Ctx {
        plan: &plan,
        cache: &cache,
        inputs: Inputs::new(&cache, names_of(&plan)),
        nvcc_runs: AtomicUsize::new(0),
        build_start,
        remote: remote.as_ref(),
        executor: opts.executor.as_ref(),
    };
    let progress = Progress::new("build", plan.jobs.len(), opts.progress);
    let results = schedule::run_jobs(&ctx, &keyed, opts.jobs, &progress);
    // 5. Nothing is written after an interrupt or a failed job (an interrupt keeps the
    //    finished jobs in the cache).
    let done = commit::check_results(&ctx, &keyed, results, &opts.out)?;
    // 6. Every job succeeded: commit to the cache, then write the output folder.
    let mut written = commit::commit_all(&ctx, &keyed, done, opts)?;
    // 7. The shared cache: what it gave and refused; read-write, what it lacks.
    let shared = match &remote {
        Some(r) => Some(r.share(&plan, &cache, &written, &keyed, opts, &progress)?),
        None => None,
    };
    // 8. The cache's bound, stale outputs, the record of what the build read.
    let (eviction, removed) = commit::finish(&ctx, &mut written, opts, started)?;
    Ok(BuildReport {
        spec: plan.spec.path.clone(),
        out: opts.out.clone(),
        modules: written.modules,
        nvcc_runs: ctx.nvcc_runs.load(Ordering::Relaxed),
        wall: t0.elapsed(),
        toolkit: plan.toolkit.identity.clone(),
        removed,
        eviction,
        shared,
    })
}

impl BuildReport {
    /// The report of a build that had no job to run (a shard of a release with fewer jobs
    /// than parts).
    fn nothing(opts: &BuildOptions, plan: &Plan, t0: Instant) -> BuildReport {
        BuildReport {
            spec: plan.spec.path.clone(),
            out: opts.out.clone(),
            modules: Vec::new(),
            nvcc_runs: 0,
            wall: t0.elapsed(),
            toolkit: plan.toolkit.identity.clone(),
            removed: Vec::new(),
            eviction: None,
            shared: None,
        }
    }
}

/// How the build names the files it reads: relative to the sources folder, the toolkit,
/// or an include folder of the spec.
fn names_of(plan: &Plan) -> Names {
    Names::new(
        &plan.spec.sources,
        &plan.toolkit.root,
        plan.spec
            .modules
            .iter()
            .flat_map(|m| &m.include_dirs)
            .map(|d| (d.rel.clone(), d.abs.clone())),
    )
}

/// Each job's dependency records, read on `workers` threads (parsing them is much of the
/// work of a no-op rebuild), the shared cache's merged in.
fn read_records(plan: &Plan, cache: &Cache, remote: Option<&Remote>, workers: usize) -> Keyed {
    // What a shared record may name besides the project and the toolkit.
    let names = names_of(plan);
    let system = match remote {
        Some(r) => r.system_dirs(&plan.host.path),
        None => &[],
    };
    cuda_aot::parallel::try_map(&plan.jobs, workers, |j| {
        let k = plan.dep_key(j);
        let mut recs = cache.records(&k);
        if let Some(r) = remote {
            recs = shared_cache::merge_records(r, cache, &k, recs, &names, system);
        }
        Ok::<_, std::convert::Infallible>((k, recs))
    })
    .unwrap_or_else(|never| match never {})
}
