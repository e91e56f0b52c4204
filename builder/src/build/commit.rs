//! What a build keeps: the check that every job succeeded (after an interrupt, the jobs
//! that finished go into the cache and nothing else is written), the commit of every result
//! to the local cache, the output folder written from it, and the closing steps (the
//! cache's size bound, stale outputs, the record of what the build read).

use anyhow::Result;
use cuda_aot::{Digest, Manifest};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::cache::{self, Cache, DepFile, DepRecord, LastBuild, StoredRecord};
use super::evict::{Eviction, Protected};
use super::inputs::Names;
use super::job::{Ctx, Done, UnitDone, UnitHow};
use super::{BuildOptions, Job, JobOutput, Keyed, Plan, provenance};
use crate::advice::Subject;
use crate::process::{self, Interrupted};
use crate::{outdir, paths};

/// What committing a build's results wrote and used, for its closing steps.
#[derive(Default)]
pub(super) struct Written {
    /// One entry per job, in job order.
    pub(super) modules: Vec<JobOutput>,
    /// The output files this build wrote or found identical.
    keep: BTreeSet<PathBuf>,
    /// Whether any output file changed.
    changed: bool,
    /// What the cache's size bound must not remove.
    protected: Protected,
    /// Whether the local cache grew.
    added: bool,
    /// Jobs taken from the shared cache.
    pub(super) shared_taken: usize,
    /// The project files the build read (path → blake3), for its provenance.
    read: BTreeMap<PathBuf, Digest>,
}

/// The jobs' results, once every job succeeded. After an interrupt, the jobs that finished
/// are kept in the cache (a rerun compiles only the others) and the interrupt is returned;
/// after a failure, the first failed job's error, naming every failed one. Either way the
/// output folder is left as it was.
pub(super) fn check_results(
    ctx: &Ctx,
    keyed: &Keyed,
    results: Vec<Option<Result<Done>>>,
    out: &Path,
) -> Result<Vec<Done>> {
    let plan = ctx.plan;
    let n = results.len();
    if let Some(i) = process::interrupted() {
        return Err(keep_finished(ctx.cache, plan, keyed, results, i));
    }
    let failed: Vec<usize> = (0..n)
        .filter(|&i| matches!(results[i], Some(Err(_))))
        .collect();
    if let Some(&first) = failed.first() {
        ctx.cache.tidy();
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
            out.display()
        )));
    }

    Ok(results
        .into_iter()
        .map(|r| r.expect("every job ran").expect("every job succeeded"))
        .collect())
}

/// Commits every job to the cache (a compiled one's entry and records, a hit's use), then
/// writes the output folder, the manifests with the build's channel.
pub(super) fn commit_all(
    ctx: &Ctx,
    keyed: &Keyed,
    done: Vec<Done>,
    opts: &BuildOptions,
) -> Result<Written> {
    let plan = ctx.plan;
    let mut w = Written {
        modules: Vec::with_capacity(done.len()),
        ..Written::default()
    };
    for (i, done) in done.into_iter().enumerate() {
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
                    ctx.cache.commit(&manifest, &blob, &warnings)?;
                    w.added = true;
                    w.shared_taken += 1;
                } else {
                    ctx.cache.touch(&id, last_used);
                }
                // A hit through an older record (a revert), or a shared one: it becomes the
                // newest.
                if ctx.cache.promote_record(key, records, record, id, shared)? {
                    note_last(ctx.cache, plan, job, key, &manifest)?;
                }
                note_read(&mut w.read, &ctx.inputs.names, &records[record].files);
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
                commit_units(ctx.cache, &units, &mut w.protected)?;
                note_read(&mut w.read, &ctx.inputs.names, &deps.files);
                let set = commit_compiled(
                    ctx.cache, plan, job, key, records, &manifest, &blob, &deps, &warnings,
                )?;
                w.added = true;
                (manifest, blob, false, changes, set, warnings)
            }
        };
        w.protected.objects.insert(manifest.identity.digest());
        w.protected.deps.insert(*key);
        w.protected.sets.extend(set);
        manifest.channel = opts.channel;
        let ([blob_path, manifest_path], wrote) =
            outdir::write_module(&opts.out, &manifest, &blob)?;
        w.changed |= wrote;
        w.keep.insert(blob_path.clone());
        w.keep.insert(manifest_path.clone());
        w.modules.push(JobOutput {
            manifest,
            blob: blob_path,
            manifest_path,
            cached,
            changes,
            warnings,
        });
    }
    Ok(w)
}

/// The closing steps of a build that succeeded: the cache's size bound (once it grew; never
/// an entry this build uses), stale outputs removed, the record of what the build read
/// (from the spec's own sources folder only: a rebuilder finds the sources where the spec
/// says), and the builder's statement removed when what it covered changed. Returns the
/// eviction and the removed outputs.
pub(super) fn finish(
    ctx: &Ctx,
    w: &mut Written,
    opts: &BuildOptions,
    started: cuda_aot::metadata::Time,
) -> Result<(Option<Eviction>, Vec<PathBuf>)> {
    let eviction = if w.added {
        Some(ctx.cache.evict(opts.cache_max, &w.protected)?)
    } else {
        None
    };
    let removed = outdir::remove_stale(&opts.out, &w.keep)?;
    if opts.sources.is_none() {
        w.changed |= provenance::write(opts, ctx.plan, &w.read, started)?;
    } else {
        w.changed |= outdir::remove_provenance(&opts.out)?;
    }
    if w.changed || !removed.is_empty() {
        // The builder's statement covers the previous set of manifests: sign again.
        outdir::remove_statement(&opts.out)?;
    }
    ctx.inputs.digests.save();
    let swept = ctx.cache.tidy();
    if swept > 0 && opts.progress {
        eprintln!(
            "build: removed {swept} leftover(s) of killed builds from the cache {}",
            ctx.cache.root().display()
        );
    }
    Ok((eviction, removed))
}

/// Adds the project files of a dependency record to `read` (path → the blake3 recorded).
fn note_read(read: &mut BTreeMap<PathBuf, Digest>, names: &Names, files: &[DepFile]) {
    for f in files.iter().filter(|f| f.is_project()) {
        read.insert(names.resolve(&f.name), f.digest);
    }
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
            UnitHow::Shared { record, object } => {
                cache.commit_unit(&u.id, &u.source, object, &[])?;
                cache.promote_record(&u.key, &u.records, *record, u.id, true)?;
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

/// A linked job stopped by an interrupt after some of its files compiled: the error its
/// job returns, carrying those units, which `keep_finished` keeps in the cache so that the
/// rerun compiles only the files that had not finished (the link runs again; it is cheap).
#[derive(Debug)]
pub(super) struct InterruptedUnits {
    /// The module and target, for messages.
    pub(super) label: String,
    /// The files that finished, in the module's order.
    pub(super) units: Vec<UnitDone>,
}

impl std::fmt::Display for InterruptedUnits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: interrupted after {} of its files compiled",
            self.label,
            self.units.len()
        )
    }
}

impl std::error::Error for InterruptedUnits {}

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
    let mut units_kept = 0;
    for (i, r) in results.into_iter().enumerate() {
        // A linked job stopped between its files: the files that finished.
        if let Some(Err(e)) = &r
            && let Some(stopped) = e.downcast_ref::<InterruptedUnits>()
        {
            match commit_units(cache, &stopped.units, &mut Protected::default()) {
                Ok(()) => units_kept += stopped.units.len(),
                Err(e) => eprintln!(
                    "build: could not keep the files of {}: {e:#}",
                    stopped.label
                ),
            }
            continue;
        }
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
    let units = match units_kept {
        0 => String::new(),
        n => format!(" and {n} compiled file(s) of unfinished device-linked jobs"),
    };
    eprintln!(
        "build: interrupted; {kept} finished job(s){units} kept in the build cache {}, the output folder left as it was",
        paths::shown(cache.root())
    );
    anyhow::Error::new(interrupt)
}
