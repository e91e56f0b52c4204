//! One job: a (module, target) taken from the cache when one of its dependency records
//! proves every input unchanged, otherwise compiled by nvcc into a staging folder, with the
//! entry-point and ELF SM checks on every blob either way.

use anyhow::{Context, Result};
use cuda_aot::{Channel, Digest, Identity, Kind, Manifest};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Instant, SystemTime};

use super::cache::{Cache, DepFile, DepRecord, StoredRecord};
use super::explain::Change;
use super::inputs::{self, Inputs};
use super::{Job, Plan, extern_check, fail, kernels, nvcc};
use crate::files;

mod failure;

/// The outcome of one job.
pub(super) enum Done {
    /// Found intact in the cache.
    Cached {
        manifest: Manifest,
        blob: Vec<u8>,
        /// Which of the job's dependency records matched (0: the most recent).
        record: usize,
        /// When the entry was last used before.
        last_used: SystemTime,
        /// nvcc's warnings when the entry was built.
        warnings: Vec<String>,
        /// Taken from the shared build cache (verified; not yet in the local cache).
        shared: bool,
    },
    /// Compiled now (committed to the cache only if the whole build succeeds).
    Compiled {
        manifest: Manifest,
        blob: Vec<u8>,
        deps: DepRecord,
        /// Why it compiled.
        changes: Vec<Change>,
        /// nvcc's warnings.
        warnings: Vec<String>,
        /// A module of several sources: each file's relocatable cubin, compiled now or
        /// taken from the cache.
        units: Vec<UnitDone>,
    },
}

/// One file of a module of several, as the job's link used it.
#[derive(Debug)]
pub(super) struct UnitDone {
    /// Its dependency key ([`Ctx::unit_key`]).
    pub(super) key: Digest,
    /// Its dependency records as they were before this build.
    pub(super) records: Vec<StoredRecord>,
    /// `src:<file>`.
    pub(super) source: String,
    /// What it is stored under ([`super::cache::unit_id`]).
    pub(super) id: Digest,
    /// Compiled now: what it read, the relocatable cubin and nvcc's warnings; or taken
    /// from the cache through record `record`, last used at `last_used`.
    pub(super) how: UnitHow,
}

/// How a unit of a linked job came to be.
#[derive(Debug)]
pub(super) enum UnitHow {
    /// Compiled by this build.
    Compiled {
        deps: DepRecord,
        object: Vec<u8>,
        warnings: Vec<String>,
    },
    /// Found intact in the cache through the job's record `record`.
    Cached {
        record: usize,
        last_used: SystemTime,
    },
    /// Taken from the shared cache (signed for its id, checked) through record `record`;
    /// not yet in the local cache.
    Shared { record: usize, object: Vec<u8> },
}

/// Shared state of one build's jobs.
pub(super) struct Ctx<'a> {
    pub(super) plan: &'a Plan,
    pub(super) cache: &'a Cache,
    pub(super) inputs: Inputs<'a>,
    pub(super) nvcc_runs: AtomicUsize,
    pub(super) build_start: SystemTime,
    /// The shared build cache, when the build uses one.
    pub(super) remote: Option<&'a super::shared_cache::Remote>,
    /// Where the toolkit runs happen.
    pub(super) executor: &'a dyn crate::executor::Executor,
}

impl Plan {
    /// `module `m` target t`, marked when it is PTX.
    pub(super) fn label(&self, job: &Job) -> String {
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

impl Plan {
    /// The key of a job's dependency record: what decides which files nvcc reads.
    pub(super) fn dep_key(&self, job: &Job) -> Digest {
        let m = &self.spec.modules[job.module];
        let mut key = serde_json::json!({
            "source": m.source_key(),
            "flags": job.flags,
            "include_dirs": m.include_dirs.iter().map(|d| &d.rel).collect::<Vec<_>>(),
            "toolkit": self.toolkit.identity,
            "host": self.host.version,
        });
        if m.is_linked() {
            key["link"] = serde_json::json!(job.link);
        }
        let mut h = blake3::Hasher::new();
        h.update(b"cuda-aot deps key v1\n");
        h.update(&cuda_aot::json::to_canonical(&key));
        Digest(*h.finalize().as_bytes())
    }
}

impl Ctx<'_> {
    /// [`Plan::dep_key`] of this build's plan.
    pub(super) fn dep_key(&self, job: &Job) -> Digest {
        self.plan.dep_key(job)
    }

    /// The key of the dependency records of `file`, one source of a linked job's module
    /// ([`Plan::unit_key`]).
    pub(super) fn unit_key(&self, job: &Job, file: &str) -> Digest {
        self.plan.unit_key(job, file)
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
            include_dirs: m.include_dirs.iter().map(|d| d.rel.clone()).collect(),
            source_digest,
            sources: if m.is_linked() {
                m.sources.clone()
            } else {
                Vec::new()
            },
            link_flags: job.link.clone(),
            protocol: m.protocol.clone(),
            geometry: m.geometry.clone(),
            schedule_version: m.schedule_version,
        })
    }

    /// A cache hit when one of the job's dependency records (most recent first) has every
    /// file unchanged and the entry for the resulting identity is intact; otherwise a
    /// compile, with the reason it was needed.
    pub(super) fn run_job(&self, job: &Job, records: &[StoredRecord]) -> Result<Done> {
        let mut matched: Option<Identity> = None;
        // Why the shared cache's entry was refused, when it had one.
        let mut refused: Option<String> = None;
        for (i, rec) in records.iter().enumerate() {
            let Some(full) = self.inputs.unchanged(rec) else {
                continue;
            };
            let id = self.identity(job, full.source_digest())?;
            if let Some(e) = self.cache.lookup(&id) {
                // Entry points are declared in the spec, not part of the identity: check
                // them on every use of a cached blob too.
                kernels::check_entry_points(
                    &self.plan.label(job),
                    &self.plan.spec.modules[job.module].entry_points,
                    &e.manifest.functions,
                )?;
                return Ok(Done::Cached {
                    manifest: e.manifest,
                    blob: e.blob,
                    record: i,
                    last_used: e.last_used,
                    warnings: e.warnings,
                    shared: false,
                });
            }
            let shared = match self.remote.map(|r| r.fetch(&id, &self.plan.label(job))) {
                Some(Ok(taken)) => taken,
                Some(Err(reason)) => {
                    refused.get_or_insert(reason);
                    None
                }
                None => None,
            };
            if let Some(t) = shared {
                kernels::check_entry_points(
                    &self.plan.label(job),
                    &self.plan.spec.modules[job.module].entry_points,
                    &t.manifest.functions,
                )?;
                return Ok(Done::Cached {
                    manifest: t.manifest,
                    blob: t.blob,
                    record: i,
                    last_used: SystemTime::now(),
                    warnings: Vec::new(),
                    shared: true,
                });
            }
            matched.get_or_insert(id);
        }
        let mut changes = self.explain(job, records, matched.as_ref());
        if let Some(reason) = refused {
            changes.insert(0, Change::SharedRefused { reason });
        }
        self.compile(job, changes)
    }

    /// Compiles the job through the executor. A result an executor took from its cache is
    /// never trusted more than a fresh one: when the job's outputs fail a check (or its run
    /// failed) and the executor answered any of its actions from a cache, those cached
    /// results are refused, named on stderr, and the job runs once more with them run
    /// afresh.
    fn compile(&self, job: &Job, changes: Vec<Change>) -> Result<Done> {
        self.executor.begin_job();
        match self.compile_once(job, changes.clone()) {
            Err(e) => {
                let refused = self.executor.refuse_cached();
                if refused.is_empty() {
                    return Err(e);
                }
                eprintln!(
                    "build: warning: {}: refused {} result(s) the executor took from its cache (action {}): {}; running again",
                    self.plan.label(job),
                    refused.len(),
                    refused.join(", "),
                    format!("{e:#}").lines().next().unwrap_or_default()
                );
                self.executor.begin_job();
                self.compile_once(job, changes)
            }
            done => done,
        }
    }

    fn compile_once(&self, job: &Job, changes: Vec<Change>) -> Result<Done> {
        let plan = self.plan;
        let m = &plan.spec.modules[job.module];
        let stage = self.cache.staging()?;
        if m.is_linked() {
            return self.compile_linked(job, changes, stage.path());
        }
        let output = stage.path().join(format!("{}.{}", job.target, job.kind));
        let (said, files, compile_ms) =
            self.run_nvcc(job, &m.sources[0], &job.flags, &output, stage.path())?;
        // No signed blob may carry a silently zero-filled extern (nvcc's warning form;
        // EXTERN_CHECK makes it an error, which `failure` reads).
        let undefined = extern_check::undefined_externs(&said);
        if !undefined.is_empty() {
            let label = plan.label(job);
            return Err(extern_check::refusal(&label, job, m, &undefined, &said));
        }
        let deps = DepRecord::new(files, compile_ms);
        self.finish(
            job,
            &output,
            deps,
            changes,
            nvcc::warnings(&said),
            Vec::new(),
        )
    }

    /// A compiled job's result: its identity from what the compiles read, the blob nvcc
    /// wrote at `output`, and its manifest after the entry-point and content checks.
    fn finish(
        &self,
        job: &Job,
        output: &Path,
        deps: DepRecord,
        changes: Vec<Change>,
        warnings: Vec<String>,
        units: Vec<UnitDone>,
    ) -> Result<Done> {
        let identity = self.identity(job, deps.source_digest())?;
        let blob = std::fs::read(output)
            .with_context(|| format!("{}: reading {}", self.plan.label(job), output.display()))?;
        let manifest = self.manifest(job, identity, &blob)?;
        Ok(Done::Compiled {
            manifest,
            blob,
            deps,
            changes,
            warnings,
            units,
        })
    }

    /// Runs nvcc on `source` (relative to the sources folder) with `flags`, writing
    /// `output`: what it printed, every file it read (with its digest) and how long it took.
    ///
    /// With line info (`-lineinfo`), a cubin is made in two steps: nvcc compiles to PTX,
    /// the PTX's `.file` paths are made portable (`Names::portable`: relative to the spec
    /// file, the toolkit's under `cuda-toolkit/`, no file times), and nvcc assembles that
    /// PTX in the staging folder, where none of those paths exists (ptxas records a file's
    /// modification time when it can find the file). The code is what a one-step build
    /// makes; only the line table's paths differ, and they do not depend on the checkout.
    fn run_nvcc(
        &self,
        job: &Job,
        source: &str,
        flags: &[String],
        output: &Path,
        stage: &Path,
    ) -> Result<(String, Vec<DepFile>, u64)> {
        if !job.line_info() {
            return self.run_nvcc_once(job, source, flags, output);
        }
        let label = self.plan.label(job);
        let portable = |ptx: &str| {
            nvcc::portable_line_files(ptx, |p| {
                self.inputs
                    .names
                    .portable(Path::new(p), &self.plan.spec.sources_rel)
            })
        };
        if job.kind == Kind::Ptx {
            let (said, files, ms) = self.run_nvcc_once(job, source, flags, output)?;
            let ptx = std::fs::read_to_string(output)
                .with_context(|| format!("{label}: reading {}", output.display()))?;
            files::write(output, portable(&ptx).as_bytes())?;
            return Ok((said, files, ms));
        }
        let ptx_out = output.with_extension("lineinfo.ptx");
        let to_ptx: Vec<String> = flags
            .iter()
            .map(|f| {
                if f == "-cubin" {
                    "-ptx".into()
                } else {
                    f.clone()
                }
            })
            .collect();
        let (mut said, files, mut ms) = self.run_nvcc_once(job, source, &to_ptx, &ptx_out)?;
        let ptx = std::fs::read_to_string(&ptx_out)
            .with_context(|| format!("{label}: reading {}", ptx_out.display()))?;
        let name = PathBuf::from(
            output
                .with_extension("portable.ptx")
                .file_name()
                .expect("a file name"),
        );
        files::write(&stage.join(&name), portable(&ptx).as_bytes())?;
        let assemble = nvcc::Stage {
            tool: &self.plan.toolkit.nvcc,
            toolkit: &self.plan.toolkit.root,
            flags,
            ccbin: Some(&self.plan.host.path),
            inputs: std::slice::from_ref(&name),
            cwd: stage,
            output,
        };
        let t = Instant::now();
        self.nvcc_runs.fetch_add(1, Ordering::Relaxed);
        match assemble.run(self.executor) {
            Ok(more) => said.push_str(&more),
            Err(f) => {
                let m = &self.plan.spec.modules[job.module];
                return Err(self.failure(job, m, &self.plan.spec.sources.join(source), f));
            }
        }
        ms += t.elapsed().as_millis() as u64;
        Ok((said, files, ms))
    }

    /// One nvcc run of [`Ctx::run_nvcc`].
    fn run_nvcc_once(
        &self,
        job: &Job,
        source: &str,
        flags: &[String],
        output: &Path,
    ) -> Result<(String, Vec<DepFile>, u64)> {
        let plan = self.plan;
        let m = &plan.spec.modules[job.module];
        let label = plan.label(job);
        let depfile = output.with_extension("d");
        // nvcc runs in the sources folder and gets the source and include folders as paths
        // relative to it: `__FILE__` (which device assert() embeds in the cubin) must not
        // carry this checkout's location.
        let inv = nvcc::Invocation {
            nvcc: &plan.toolkit.nvcc,
            toolkit: &plan.toolkit.root,
            flags,
            ccbin: &plan.host.path,
            source: Path::new(source),
            includes: &m.include_dirs,
            cwd: &plan.spec.sources,
            output,
            depfile: &depfile,
        };
        let t = Instant::now();
        self.nvcc_runs.fetch_add(1, Ordering::Relaxed);
        let said = match inv.run(self.executor) {
            Ok(said) => said,
            Err(f) => return Err(self.failure(job, m, &plan.spec.sources.join(source), f)),
        };
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
            let abs = inputs::normalise(&plan.spec.sources.join(&dep));
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
            let name = self.inputs.names.name(&abs);
            let remember = !DepFile::name_is_project(&name);
            if !remember && !m.is_linked() {
                extern_check::refuse_pragma(&label, &abs)?;
            }
            let digest = self.inputs.digests.get(&abs, remember).with_context(|| {
                format!(
                    "{label}: reading {}, a dependency nvcc reported",
                    abs.display()
                )
            })?;
            files.push(DepFile { name, digest });
        }
        Ok((said, files, compile_ms))
    }

    /// A module of several sources: each file compiled to relocatable device code (or
    /// taken from the cache when every file it read is unchanged), then device-linked into
    /// one cubin. An `extern` no file defines fails the link, and the build.
    fn compile_linked(&self, job: &Job, changes: Vec<Change>, stage: &Path) -> Result<Done> {
        let plan = self.plan;
        let m = &plan.spec.modules[job.module];
        let label = plan.label(job);
        let mut units = Vec::with_capacity(m.sources.len());
        let mut objects = Vec::with_capacity(m.sources.len());
        let mut unit_objects: Vec<Vec<u8>> = Vec::with_capacity(m.sources.len());
        let mut all_files = Vec::new();
        let mut warnings = Vec::new();
        let mut compile_ms = 0;
        for (i, file) in m.sources.iter().enumerate() {
            let key = self.unit_key(job, file);
            let mut records = self.cache.records(&key);
            if let Some(r) = self.remote {
                let system = r.system_dirs(&plan.host.path);
                records = super::shared_cache::merge_records(
                    r,
                    self.cache,
                    &key,
                    records,
                    &self.inputs.names,
                    system,
                );
            }
            // The local cache's unit, else the shared cache's (signed for exactly this id).
            let hit = records.iter().enumerate().find_map(|(r, rec)| {
                let full = self.inputs.unchanged(rec)?;
                let id = super::cache::unit_id(&key, &full.source_digest());
                let found = match self.cache.unit(&id) {
                    Some(unit) => Ok(unit),
                    None => Err(self.remote?.fetch_unit(&id)?),
                };
                Some((r, full, id, found))
            });
            let (id, object, how) = match hit {
                Some((record, full, id, Ok(unit))) => {
                    all_files.extend(full.files);
                    warnings.extend(unit.warnings);
                    let how = UnitHow::Cached {
                        record,
                        last_used: unit.last_used,
                    };
                    (id, unit.object, how)
                }
                Some((record, full, id, Err(object))) => {
                    all_files.extend(full.files);
                    let how = UnitHow::Shared {
                        record,
                        object: object.clone(),
                    };
                    (id, object, how)
                }
                None => {
                    // An interrupt between files, or one that killed this file's nvcc,
                    // keeps the files that finished (`InterruptedUnits`).
                    let stopped = |units: Vec<UnitDone>| {
                        anyhow::Error::new(super::commit::InterruptedUnits {
                            label: label.clone(),
                            units,
                        })
                    };
                    if crate::process::interrupted().is_some() {
                        return Err(stopped(units));
                    }
                    let out = stage.join(format!("unit-{i}.o.{}", unit_ext(m)));
                    let (said, files, ms) =
                        match self.run_nvcc(job, file, &job.unit_flags(file), &out, stage) {
                            Ok(r) => r,
                            Err(_) if crate::process::interrupted().is_some() => {
                                return Err(stopped(units));
                            }
                            Err(e) => return Err(e),
                        };
                    compile_ms += ms;
                    let deps = DepRecord::new(files, ms);
                    all_files.extend(deps.files.iter().cloned());
                    let id = super::cache::unit_id(&key, &deps.source_digest());
                    let object = std::fs::read(&out)
                        .with_context(|| format!("{label}: reading {}", out.display()))?;
                    let said = nvcc::warnings(&said);
                    warnings.extend(said.iter().cloned());
                    let how = UnitHow::Compiled {
                        deps,
                        object: object.clone(),
                        warnings: said,
                    };
                    (id, object, how)
                }
            };
            // The link reads the units from the staging folder, by names of its own: what
            // nvlink records of its inputs does not depend on the cache's paths.
            let name = PathBuf::from(format!("unit-{i}.{}", unit_ext(m)));
            files::write(&stage.join(&name), &object)?;
            objects.push(name);
            unit_objects.push(object);
            units.push(UnitDone {
                key,
                records,
                source: format!("src:{file}"),
                id,
                how,
            });
        }
        if m.lto {
            // nvlink optimises with the toolkit's libnvvm: an input of the link, so its
            // digest joins the module's (the toolkit digest covers the executables only).
            all_files.push(self.lto_library(job, stage)?);
        }
        let output = stage.join(format!("{}.{}", job.target, job.kind));
        let nvlink = plan.toolkit.nvcc.with_file_name("nvlink");
        let link = nvcc::Stage {
            tool: &nvlink,
            toolkit: &plan.toolkit.root,
            flags: &job.link,
            ccbin: None,
            inputs: &objects,
            cwd: stage,
            output: &output,
        };
        let t = Instant::now();
        self.nvcc_runs.fetch_add(1, Ordering::Relaxed);
        let said = match link.run(self.executor) {
            Ok(said) => said,
            Err(f) => return Err(self.link_failure(job, m, &unit_objects, f)),
        };
        compile_ms += t.elapsed().as_millis() as u64;
        warnings.extend(nvcc::warnings(&said));
        let deps = DepRecord::new(all_files, compile_ms);
        self.finish(job, &output, deps, changes, warnings, units)
    }

    /// Links the toolkit's libnvvm where `-nvvmpath nvvm` makes nvlink look
    /// (`<stage>/nvvm/lib64/libnvvm.so`; the wheels install it as `lib/libnvvm.so.N`), and
    /// returns it as a dependency of the job.
    fn lto_library(&self, job: &Job, stage: &Path) -> Result<DepFile> {
        let label = self.plan.label(job);
        let lib = self.plan.toolkit.root.join("lib");
        let found = std::fs::read_dir(&lib)
            .ok()
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libnvvm.so"))
            })
            .min();
        let Some(libnvvm) = found else {
            return Err(fail(
                format!(
                    "{label}: link-time optimisation needs the toolkit's libnvvm, and {} has no libnvvm.so*",
                    lib.display()
                ),
                "pin the nvidia-nvvm wheel in manifests/toolchain.toml (the default pins do), or set link_time_optimisation = false",
            ));
        };
        let dir = stage.join("nvvm/lib64");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::os::unix::fs::symlink(&libnvvm, dir.join("libnvvm.so"))
            .with_context(|| format!("{label}: linking {}", libnvvm.display()))?;
        let name = self.inputs.names.name(&libnvvm);
        let digest = self
            .inputs
            .digests
            .get(&libnvvm, true)
            .with_context(|| format!("{label}: reading {}", libnvvm.display()))?;
        Ok(DepFile { name, digest })
    }

    /// The manifest of a freshly built blob, after the entry-point and content checks.
    fn manifest(&self, job: &Job, identity: Identity, blob: &[u8]) -> Result<Manifest> {
        let m = &self.plan.spec.modules[job.module];
        let label = self.plan.label(job);
        let functions =
            kernels::read(job.kind, blob).with_context(|| format!("{label}: reading the blob"))?;
        kernels::check_entry_points(&label, &m.entry_points, &functions)?;
        // Every device global, signed (schema v2); a __managed__ one fails here, with advice.
        let globals = kernels::globals(&label, job.kind, blob)?;
        let manifest = Manifest {
            schema: Manifest::SCHEMA.into(),
            identity,
            module_digest: Digest::of(blob),
            size: blob.len() as u64,
            functions,
            globals: Some(globals),
            channel: Channel::Dev,
        };
        // The same content check the loader runs: a cubin for exactly the job's SM and
        // variant, or PTX for its target, with exactly these kernels and globals.
        cuda_aot::content::check(&manifest, blob)
            .map_err(anyhow::Error::new)
            .with_context(|| format!("{label}: the blob nvcc wrote is not for its target"))?;
        Ok(manifest)
    }
}

/// What a unit of a linked module is: a relocatable cubin, or (link-time optimisation) a
/// fatbin of LTO IR.
fn unit_ext(m: &super::ModuleSpec) -> &'static str {
    if m.lto { "fatbin" } else { "cubin" }
}
