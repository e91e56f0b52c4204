//! `cargo xtask build`: compiles every (module, target) of the release spec with the pinned
//! nvcc, in parallel, through a content-addressed cache, into per-SM cubins (and opted-in
//! PTX) with unsigned manifests. A failed build writes nothing: not to the output folder,
//! not to the cache.
//!
//! The library-ish entry points for other tasks are [`run_build`] and [`plan`].

pub mod atomic;
mod cache;
mod nvcc;
mod output;
pub mod spec;

use anyhow::{Context, Result, anyhow};
use cuda_aot::{
    Channel, Digest, Function, FunctionName, Identity, Kind, Manifest, ModuleName, Target,
};
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
use cache::{Cache, DepFile, DepRecord, FileDigests, Names};
pub use nvcc::HostCompiler;
pub use spec::{Job, ModuleSpec, ReleaseSpec};

/// Arguments of `cargo xtask build`.
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
    let build_start = SystemTime::now();
    let plan = plan(opts)?;
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
        let (blob_path, manifest_path) = output::write_module(&opts.out, &manifest, &blob)?;
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

/// The outcome of one job.
enum Done {
    /// Found intact in the cache.
    Cached { manifest: Manifest, blob: Vec<u8> },
    /// Compiled now (committed to the cache only if the whole build succeeds).
    Compiled {
        manifest: Manifest,
        blob: Vec<u8>,
        deps: DepRecord,
    },
}

/// Shared state of one build's jobs.
struct Ctx<'a> {
    plan: &'a Plan,
    cache: &'a Cache,
    names: Names,
    digests: FileDigests,
    nvcc_runs: AtomicUsize,
    build_start: SystemTime,
}

impl Plan {
    fn label(&self, job: &Job) -> String {
        let m = &self.spec.modules[job.module];
        match job.kind {
            Kind::Cubin => format!("module `{}` target {}", m.name, job.target),
            Kind::Ptx => format!(
                "module `{}` target {} (ptx, compatibility mode)",
                m.name, job.target
            ),
        }
    }
}

impl Ctx<'_> {
    /// The key of a job's dependency record: what decides which files nvcc reads.
    fn dep_key(&self, job: &Job) -> Digest {
        let m = &self.plan.spec.modules[job.module];
        let key = serde_json::json!({
            "source": format!("src:{}", m.source),
            "flags": job.flags,
            "toolkit": self.plan.toolkit.identity,
            "host": self.plan.host.version,
        });
        let mut h = blake3::Hasher::new();
        h.update(b"cuda-aot deps key v1\n");
        h.update(&cuda_aot::json::to_canonical(&key));
        Digest(*h.finalize().as_bytes())
    }

    fn identity(&self, job: &Job, source_digest: Digest) -> Result<Identity> {
        let m = &self.plan.spec.modules[job.module];
        Ok(Identity {
            module: m.name.clone(),
            sm: job.target,
            kind: job.kind,
            toolkit: self.plan.toolkit.identity.clone(),
            driver_floor: self.plan.toolkit.driver_floor(job.kind)?,
            host_toolchain: self.plan.host.version.clone(),
            flags: job.flags.clone(),
            source_digest,
            protocol: m.protocol.clone(),
            geometry: m.geometry.clone(),
            schedule_version: m.schedule_version,
        })
    }

    /// A cache hit when the job's recorded dependencies are unchanged and the entry for
    /// the resulting identity is intact; otherwise a compile.
    fn run_job(&self, job: &Job, rec: Option<&DepRecord>) -> Result<Done> {
        let hit = rec
            .filter(|r| self.digests.still_match(&self.names, r))
            .map(|r| self.identity(job, r.source_digest()))
            .transpose()?
            .and_then(|id| self.cache.lookup(&id));
        if let Some(e) = hit {
            // Entry points are declared in the spec, not part of the identity: check them
            // on every use of a cached blob too.
            let found: Vec<(String, Option<u32>)> = e
                .manifest
                .functions
                .iter()
                .map(|f| (f.name.to_string(), f.param_bytes))
                .collect();
            check_entry_points(
                &self.plan.label(job),
                &self.plan.spec.modules[job.module],
                &found,
            )?;
            return Ok(Done::Cached {
                manifest: e.manifest,
                blob: e.blob,
            });
        }
        self.compile(job)
    }

    fn compile(&self, job: &Job) -> Result<Done> {
        let plan = self.plan;
        let m = &plan.spec.modules[job.module];
        let label = plan.label(job);
        let stage = self.cache.staging()?;
        let output = stage.path().join(format!("{}.{}", job.target, job.kind));
        let depfile = stage.path().join("deps.d");
        let source = plan.spec.sources.join(&m.source);
        let inv = nvcc::Invocation {
            nvcc: &plan.toolkit.nvcc,
            flags: &job.flags,
            ccbin: &plan.host.path,
            source: &source,
            cwd: &plan.spec.sources,
            output: &output,
            depfile: &depfile,
        };
        let t = Instant::now();
        self.nvcc_runs.fetch_add(1, Ordering::Relaxed);
        if let Err(f) = inv.run() {
            return Err(self.failure(job, &source, f));
        }
        let compile_ms = t.elapsed().as_millis() as u64;
        let text = std::fs::read_to_string(&depfile).with_context(|| {
            format!(
                "{label}: reading nvcc's dependency list {}",
                depfile.display()
            )
        })?;
        let mut files = Vec::new();
        for dep in nvcc::parse_depfile(&text)
            .with_context(|| format!("{label}: parsing {}", depfile.display()))?
        {
            let abs = cache::normalise(&plan.spec.sources.join(&dep));
            let changed = std::fs::metadata(&abs)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t > self.build_start);
            if changed {
                return Err(fail(
                    format!(
                        "{label}: {} changed while the build was running",
                        abs.display()
                    ),
                    "rerun the build once the file is saved (if its timestamp lies in the future, `touch` it)",
                ));
            }
            let digest = self.digests.get(&abs).with_context(|| {
                format!(
                    "{label}: reading {}, a dependency nvcc reported",
                    abs.display()
                )
            })?;
            files.push(DepFile {
                name: self.names.name(&abs),
                digest,
            });
        }
        let deps = DepRecord::new(files, compile_ms);
        let identity = self.identity(job, deps.source_digest())?;
        let blob = std::fs::read(&output)
            .with_context(|| format!("{label}: reading {}", output.display()))?;
        let manifest = self.manifest(job, identity, &blob)?;
        Ok(Done::Compiled {
            manifest,
            blob,
            deps,
        })
    }

    /// The manifest of a freshly built blob, after the entry-point and ELF SM checks.
    fn manifest(&self, job: &Job, identity: Identity, blob: &[u8]) -> Result<Manifest> {
        let m = &self.plan.spec.modules[job.module];
        let label = self.plan.label(job);
        let found: Vec<(String, Option<u32>)> = match job.kind {
            Kind::Cubin => {
                cuda_aot::elf::inspect(blob)
                    .map_err(|e| anyhow!("{label}: nvcc wrote a cubin this tool cannot read: {e}"))?
                    .functions
            }
            Kind::Ptx => nvcc::ptx_entries(
                std::str::from_utf8(blob)
                    .map_err(|_| anyhow!("{label}: nvcc wrote PTX that is not UTF-8"))?,
            ),
        };
        check_entry_points(&label, m, &found)?;
        let functions = found
            .into_iter()
            .map(|(name, param_bytes)| {
                Ok(Function {
                    name: FunctionName::new(&name).map_err(anyhow::Error::new)?,
                    param_bytes,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let manifest = Manifest {
            schema: Manifest::SCHEMA.into(),
            identity,
            module_digest: Digest::of(blob),
            size: blob.len() as u64,
            functions,
            channel: Channel::Dev,
        };
        if job.kind == Kind::Cubin {
            // The ELF header must record exactly the SM (and `a` variant) the job targets.
            cuda_aot::verify::check_elf_sm(&manifest, blob)
                .map_err(anyhow::Error::new)
                .with_context(|| format!("{label}: the cubin nvcc wrote is not for its target"))?;
        }
        Ok(manifest)
    }

    fn failure(&self, job: &Job, source: &Path, f: nvcc::Failure) -> anyhow::Error {
        let label = self.plan.label(job);
        let detail = format!(
            "command: {}\nnvcc output:\n{}",
            f.command,
            f.output
                .trim_end()
                .lines()
                .map(|l| format!("    {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        match nvcc::missing_header(&f.output) {
            Some((header, from)) => fail(
                format!(
                    "{label}: header `{header}` not found (included from {from}); nvcc failed ({})\n{detail}",
                    f.status
                ),
                format!(
                    "create `{header}` beside the file that includes it, or fix the #include in {from}"
                ),
            ),
            None => fail(
                format!(
                    "{label}: nvcc failed ({}) compiling {}\n{detail}",
                    f.status,
                    source.display()
                ),
                format!(
                    "fix the error nvcc reports above in {} (or in a header it includes), then rebuild",
                    source.display()
                ),
            ),
        }
    }
}

/// The blob must hold exactly the declared entry points.
fn check_entry_points(label: &str, m: &ModuleSpec, found: &[(String, Option<u32>)]) -> Result<()> {
    let have: BTreeSet<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
    let want: BTreeSet<&str> = m.entry_points.iter().map(FunctionName::as_str).collect();
    let missing: Vec<&str> = want.difference(&have).copied().collect();
    let extra: Vec<&str> = have.difference(&want).copied().collect();
    if !missing.is_empty() {
        return Err(fail(
            format!(
                "{label}: declared entry point(s) {} missing from the built blob (it has: {})",
                missing.join(", "),
                have.iter().copied().collect::<Vec<_>>().join(", ")
            ),
            "declare exactly the module's kernels in entry_points; kernels must be extern \"C\" __global__ so their symbol is the plain name",
        ));
    }
    if !extra.is_empty() {
        return Err(fail(
            format!(
                "{label}: the built blob has undeclared entry point(s) {}",
                extra.join(", ")
            ),
            "add them to the module's entry_points in the release spec (or make them non-__global__)",
        ));
    }
    Ok(())
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
