//! One job: a (module, target) taken from the cache when one of its dependency records
//! proves every input unchanged, otherwise compiled by nvcc into a staging folder, with the
//! entry-point and ELF SM checks on every blob either way.

use anyhow::{Context, Result};
use cuda_aot::{Channel, Digest, Identity, Kind, Manifest};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Instant, SystemTime};

use super::cache::{Cache, DepFile, DepRecord, StoredRecord};
use super::explain::Change;
use super::inputs::{self, Inputs};
use super::{Job, Plan, fail, kernels, nvcc};

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
    },
}

/// Shared state of one build's jobs.
pub(super) struct Ctx<'a> {
    pub(super) plan: &'a Plan,
    pub(super) cache: &'a Cache,
    pub(super) inputs: Inputs<'a>,
    pub(super) nvcc_runs: AtomicUsize,
    pub(super) build_start: SystemTime,
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

impl Ctx<'_> {
    /// The key of a job's dependency record: what decides which files nvcc reads.
    pub(super) fn dep_key(&self, job: &Job) -> Digest {
        let m = &self.plan.spec.modules[job.module];
        let key = serde_json::json!({
            "source": format!("src:{}", m.source),
            "flags": job.flags,
            "include_dirs": m.include_dirs.iter().map(|d| &d.rel).collect::<Vec<_>>(),
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
            include_dirs: m.include_dirs.iter().map(|d| d.rel.clone()).collect(),
            source_digest,
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
                });
            }
            matched.get_or_insert(id);
        }
        let changes = self.explain(job, records, matched.as_ref());
        self.compile(job, changes)
    }

    fn compile(&self, job: &Job, changes: Vec<Change>) -> Result<Done> {
        let plan = self.plan;
        let m = &plan.spec.modules[job.module];
        let label = plan.label(job);
        let stage = self.cache.staging()?;
        let output = stage.path().join(format!("{}.{}", job.target, job.kind));
        let depfile = stage.path().join("deps.d");
        // nvcc runs in the sources folder and gets the source and include folders as paths
        // relative to it: `__FILE__` (which device assert() embeds in the cubin) must not
        // carry this checkout's location.
        let source = Path::new(&m.source);
        let inv = nvcc::Invocation {
            nvcc: &plan.toolkit.nvcc,
            flags: &job.flags,
            ccbin: &plan.host.path,
            source,
            includes: &m.include_dirs,
            cwd: &plan.spec.sources,
            output: &output,
            depfile: &depfile,
        };
        let t = Instant::now();
        self.nvcc_runs.fetch_add(1, Ordering::Relaxed);
        let said = match inv.run() {
            Ok(said) => said,
            Err(f) => return Err(self.failure(job, m, &plan.spec.sources.join(source), f)),
        };
        // No signed blob may carry a silently zero-filled extern.
        let undefined = nvcc::undefined_externs(&said);
        if !undefined.is_empty() {
            let list: Vec<String> = undefined
                .iter()
                .map(|(symbol, at)| format!("`{symbol}` (declared extern at {at})"))
                .collect();
            return Err(fail(
                format!(
                    "{label}: {} no file of the module defines: nvcc compiled each as a private, zero-filled copy (warning #20044-D), so the kernels would read zeros; nothing was built\nnvcc output:\n{}",
                    list.join(", "),
                    said.trim_end()
                        .lines()
                        .map(|l| format!("    {l}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
                format!(
                    "define {} in {} (with its initial values), or remove `extern` from the declaration; a module is one source file compiled whole, so a table defined in another file of the project is not linked in",
                    undefined
                        .iter()
                        .map(|(s, _)| format!("`{s}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    m.source
                ),
            ));
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
            let digest = self.inputs.digests.get(&abs, remember).with_context(|| {
                format!(
                    "{label}: reading {}, a dependency nvcc reported",
                    abs.display()
                )
            })?;
            files.push(DepFile { name, digest });
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
            changes,
            warnings: nvcc::warnings(&said),
        })
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

    fn failure(
        &self,
        job: &Job,
        m: &super::ModuleSpec,
        source: &Path,
        f: nvcc::Failure,
    ) -> anyhow::Error {
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
        if let Some(killed) = &f.killed {
            return fail(
                format!("{label}: {killed}, so nothing was built\n{detail}"),
                "nothing in the sources is at fault: nvcc was stopped from outside (Ctrl-C, a CI \
                 time limit, the out-of-memory killer); rerun the build, with fewer jobs (-j) if \
                 memory ran out",
            );
        }
        match nvcc::missing_header(&f.output) {
            Some((header, from)) => {
                let from_dir = Path::new(&from)
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .map_or_else(
                        || self.plan.spec.sources.clone(),
                        |p| self.plan.spec.sources.join(p),
                    );
                let mut searched = vec![format!(
                    "{} (the including file's folder)",
                    from_dir.display()
                )];
                searched.extend(
                    m.include_dirs
                        .iter()
                        .map(|d| format!("{} (include_dirs `{}`)", d.abs.display(), d.rel)),
                );
                searched.push("the toolkit's and the host compiler's include folders".into());
                fail(
                    format!(
                        "{label}: header `{header}` not found (included from {from}); nvcc failed ({})\nsearched:\n{}\n{detail}",
                        f.status,
                        searched
                            .iter()
                            .map(|s| format!("    {s}"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    ),
                    format!(
                        "add the folder that holds `{header}` to include_dirs (build-wide or the module's; relative to {}), or fix the #include in {from}",
                        self.plan.spec.path.display()
                    ),
                )
            }
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
