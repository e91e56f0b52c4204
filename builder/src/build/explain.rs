//! Why a job ran nvcc (`cargo xtask build --explain`): which input changed since the cache
//! last saw the job — its source, a header, a flag, the toolkit, the host compiler, a
//! spec value of the identity — or that the cache had nothing for it.

use cuda_aot::{Identity, Kind};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

use super::Job;
use super::cache::{DepFile, StoredRecord};
use super::inputs::Match;
use super::job::Ctx;

/// One reason a job compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The cache has never built this (module, target, kind).
    New,
    /// The module's source file changed (or is gone).
    Source {
        /// Its stable name (`src:<path>`).
        name: String,
    },
    /// The module's source is another file than in the last build.
    SourcePath {
        /// The last build's source.
        from: String,
        /// This build's.
        to: String,
    },
    /// A header of the project (sources folder, include folders) changed.
    Header {
        /// Its stable name.
        name: String,
    },
    /// A header of the toolkit changed.
    ToolkitHeader {
        /// Its stable name (`toolkit:<path>`).
        name: String,
    },
    /// A header of the host compiler or the system changed.
    SystemHeader {
        /// Its absolute path.
        name: String,
    },
    /// nvcc flags were removed or added (geometry values and include folders included).
    Flags {
        /// Flags the last build had and this one has not.
        removed: Vec<String>,
        /// Flags this build has and the last one had not.
        added: Vec<String>,
    },
    /// Another toolkit (nvcc version, digest or source).
    Toolkit {
        /// The last build's.
        from: String,
        /// This build's.
        to: String,
    },
    /// Another host compiler.
    HostCompiler {
        /// The last build's.
        from: String,
        /// This build's.
        to: String,
    },
    /// A value of the spec that is part of the identity (protocol, schedule version,
    /// geometry) changed.
    Spec {
        /// Which field.
        field: &'static str,
        /// The last build's value.
        from: String,
        /// This build's.
        to: String,
    },
    /// Every input is as recorded, but the entry is no longer in the cache (evicted, or
    /// removed by hand).
    Evicted,
    /// Every input is as recorded, but the entry failed its checks and is rebuilt.
    Damaged,
    /// The job's dependency records are gone (evicted) while its inputs look unchanged.
    NoRecord,
    /// The header set the record refers to is gone from the cache.
    SetMissing,
    /// The shared cache had an entry for this identity, and it was refused.
    SharedRefused {
        /// What was wrong with it.
        reason: String,
    },
}

impl Change {
    /// The kind of input: `source`, `header`, `flag`, `toolkit`, `host_compiler`, `spec`,
    /// `cache` (nothing changed, the cache had nothing usable) or `shared_cache` (its entry
    /// was refused).
    pub fn input(&self) -> &'static str {
        match self {
            Change::Source { .. } | Change::SourcePath { .. } => "source",
            Change::Header { .. } => "header",
            Change::Flags { .. } => "flag",
            Change::Toolkit { .. } | Change::ToolkitHeader { .. } => "toolkit",
            Change::HostCompiler { .. } | Change::SystemHeader { .. } => "host_compiler",
            Change::Spec { .. } => "spec",
            Change::New
            | Change::Evicted
            | Change::Damaged
            | Change::NoRecord
            | Change::SetMissing => "cache",
            Change::SharedRefused { .. } => "shared_cache",
        }
    }
}

fn shown(name: &str) -> &str {
    name.strip_prefix("src:")
        .or_else(|| name.strip_prefix("toolkit:"))
        .unwrap_or(name)
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::New => write!(f, "first build: the cache has no earlier build of this job"),
            Change::Source { name } => write!(f, "source `{}` changed", shown(name)),
            Change::SourcePath { from, to } => {
                write!(f, "source is `{}`, was `{}`", shown(to), shown(from))
            }
            Change::Header { name } => write!(f, "header `{}` changed", shown(name)),
            Change::ToolkitHeader { name } => {
                write!(f, "toolkit header `{}` changed", shown(name))
            }
            Change::SystemHeader { name } => {
                write!(f, "host compiler header `{name}` changed")
            }
            Change::Flags { removed, added } => {
                let mut parts = Vec::new();
                if !removed.is_empty() {
                    parts.push(format!("removed {}", removed.join(" ")));
                }
                if !added.is_empty() {
                    parts.push(format!("added {}", added.join(" ")));
                }
                if parts.is_empty() {
                    parts.push("reordered".into());
                }
                write!(f, "flags changed: {}", parts.join(", "))
            }
            Change::Toolkit { from, to } => write!(f, "toolkit changed: {from} -> {to}"),
            Change::HostCompiler { from, to } => {
                write!(f, "host compiler changed: {from} -> {to}")
            }
            Change::Spec { field, from, to } => write!(f, "{field} changed: {from} -> {to}"),
            Change::Evicted => write!(
                f,
                "inputs unchanged, but the cache entry is gone (evicted, or removed)"
            ),
            Change::Damaged => write!(
                f,
                "inputs unchanged, but the cache entry failed its checks (damaged): rebuilt"
            ),
            Change::NoRecord => write!(
                f,
                "no dependency record for these inputs (evicted, or removed)"
            ),
            Change::SetMissing => write!(
                f,
                "the record's header set is gone from the cache (evicted, or removed)"
            ),
            Change::SharedRefused { reason } => {
                write!(f, "the shared cache's entry was refused: {reason}")
            }
        }
    }
}

/// The `changed` entry of a module in the `build-finished` JSON message.
#[derive(Debug, Clone, Serialize)]
pub struct JsonChange {
    input: &'static str,
    detail: String,
}

impl From<&Change> for JsonChange {
    fn from(c: &Change) -> Self {
        JsonChange {
            input: c.input(),
            detail: c.to_string(),
        }
    }
}

/// How many compiled jobs each kind of input accounts for (a job counts once per kind).
pub fn count_by_input<'a>(
    jobs: impl IntoIterator<Item = &'a [Change]>,
) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for changes in jobs {
        let mut kinds: Vec<&'static str> = changes.iter().map(Change::input).collect();
        kinds.sort_unstable();
        kinds.dedup();
        for k in kinds {
            *out.entry(k).or_default() += 1;
        }
    }
    out
}

/// One line for a compiled job: at most three changes, then how many more.
pub fn summary(changes: &[Change]) -> String {
    const SHOWN: usize = 3;
    let mut parts: Vec<String> = changes.iter().take(SHOWN).map(Change::to_string).collect();
    if changes.len() > SHOWN {
        parts.push(format!("and {} more", changes.len() - SHOWN));
    }
    parts.join("; ")
}

impl Ctx<'_> {
    /// Why `job` must compile: `records` are its dependency records (none of which led to
    /// a usable entry), `matched` the identity of the first that still matches the disk.
    pub(super) fn explain(
        &self,
        job: &Job,
        records: &[StoredRecord],
        matched: Option<&Identity>,
    ) -> Vec<Change> {
        let m = &self.plan.spec.modules[job.module];
        let source = m.source_key();
        let last = self
            .cache
            .last(&super::cache::job_key(&m.name, &job.target, job.kind));
        if let Some(id) = matched {
            if self.cache.has_object(&id.digest()) {
                return vec![Change::Damaged];
            }
            let spec = last
                .as_ref()
                .map(|l| spec_changes(&l.identity, id))
                .unwrap_or_default();
            return if spec.is_empty() {
                vec![Change::Evicted]
            } else {
                spec
            };
        }
        // What decides the job's key (source path, flags, include folders, toolkit, host
        // compiler) against its last build, when that build had another key.
        let key = self.dep_key(job);
        let mut out = match &last {
            Some(l) if l.dep_key != key => self.key_changes(job, &l.source, &l.identity),
            _ => Vec::new(),
        };
        if let Some(newest) = records.first() {
            // These inputs were built before: the files that changed since.
            match self.inputs.compare(newest) {
                Match::Changed { files, set_missing } => {
                    out.extend(files.iter().map(|f| file_change(f, &source)));
                    if set_missing {
                        let refused = newest
                            .set
                            .as_ref()
                            .and_then(|id| self.remote.and_then(|r| r.set_refused(id)));
                        out.push(match refused {
                            Some(reason) => Change::SharedRefused { reason },
                            None => Change::SetMissing,
                        });
                    }
                }
                // Unreachable in practice (the caller found no match): say what is known.
                Match::Unchanged => out.push(Change::Evicted),
            }
            return out;
        }
        let Some(last) = last else {
            return vec![Change::New];
        };
        // No record under this key: also the spec's identity values, and the files that
        // changed since, as far as the last key's newest record tells.
        out.extend(spec_changes_of(&last.identity, m, job.kind));
        if let Some(rec) = self.cache.records(&last.dep_key).first()
            && let Match::Changed { files, .. } = self.inputs.compare(rec)
        {
            out.extend(files.iter().map(|f| file_change(f, &source)));
        }
        if out.is_empty() {
            out.push(Change::NoRecord);
        }
        out
    }

    /// Source path, toolkit, host compiler and flags (include folders among them) of `job`
    /// against a last build from `source` with identity `was`.
    fn key_changes(&self, job: &Job, source: &str, was: &Identity) -> Vec<Change> {
        let m = &self.plan.spec.modules[job.module];
        let now_source = m.source_key();
        let mut out = Vec::new();
        if source != now_source {
            out.push(Change::SourcePath {
                from: source.to_string(),
                to: now_source,
            });
        }
        let tk = &self.plan.toolkit.identity;
        if was.toolkit != *tk {
            out.push(Change::Toolkit {
                from: format!(
                    "nvcc {} ({}, {})",
                    was.toolkit.nvcc,
                    was.toolkit.source,
                    was.toolkit.digest.short()
                ),
                to: format!("nvcc {} ({}, {})", tk.nvcc, tk.source, tk.digest.short()),
            });
        }
        if was.host_toolchain != self.plan.host.version {
            out.push(Change::HostCompiler {
                from: was.host_toolchain.clone(),
                to: self.plan.host.version.clone(),
            });
        }
        let dirs: Vec<String> = m.include_dirs.iter().map(|d| d.rel.clone()).collect();
        let (removed, added) = list_diff(
            &[was.flags.clone(), prefixed("-I", &was.include_dirs)].concat(),
            &[job.flags.clone(), prefixed("-I", &dirs)].concat(),
        );
        if !removed.is_empty() || !added.is_empty() || was.flags != job.flags {
            out.push(Change::Flags { removed, added });
        }
        out
    }
}

fn prefixed(p: &str, items: &[String]) -> Vec<String> {
    items.iter().map(|i| format!("{p}{i}")).collect()
}

/// Flags in `old` but not in `new`, and in `new` but not in `old` (as multisets).
fn list_diff(old: &[String], new: &[String]) -> (Vec<String>, Vec<String>) {
    let mut added: Vec<String> = new.to_vec();
    let mut removed = Vec::new();
    for o in old {
        match added.iter().position(|n| n == o) {
            Some(i) => {
                added.remove(i);
            }
            None => removed.push(o.clone()),
        }
    }
    (removed, added)
}

/// How a changed file is reported; `sources` is the module's `src:` names, comma-separated
/// (`ModuleSpec::source_key`).
fn file_change(f: &DepFile, sources: &str) -> Change {
    let name = f.name.clone();
    if sources.split(',').any(|s| s == f.name) {
        Change::Source { name }
    } else if f.is_project() {
        Change::Header { name }
    } else if f.name.starts_with("toolkit:") {
        Change::ToolkitHeader { name }
    } else {
        Change::SystemHeader { name }
    }
}

/// Identity fields of the spec that differ between two identities of the same job.
fn spec_changes(was: &Identity, now: &Identity) -> Vec<Change> {
    let mut out = Vec::new();
    if was.protocol != now.protocol {
        out.push(Change::Spec {
            field: "protocol",
            from: was.protocol.clone(),
            to: now.protocol.clone(),
        });
    }
    if was.schedule_version != now.schedule_version {
        out.push(Change::Spec {
            field: "schedule_version",
            from: was.schedule_version.to_string(),
            to: now.schedule_version.to_string(),
        });
    }
    if was.geometry != now.geometry {
        out.push(Change::Spec {
            field: "geometry",
            from: format!("{:?}", was.geometry),
            to: format!("{:?}", now.geometry),
        });
    }
    out
}

fn spec_changes_of(was: &Identity, m: &super::ModuleSpec, kind: Kind) -> Vec<Change> {
    let now = Identity {
        protocol: m.protocol.clone(),
        schedule_version: m.schedule_version,
        geometry: m.geometry.clone(),
        kind,
        ..was.clone()
    };
    spec_changes(was, &now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_lists_diff_as_multisets() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let (removed, added) = list_diff(
            &s(&["-O3", "-DCUDA_AOT_BLOCK=128", "-O3"]),
            &s(&["-O3", "-DCUDA_AOT_BLOCK=64"]),
        );
        assert_eq!(removed, s(&["-DCUDA_AOT_BLOCK=128", "-O3"]));
        assert_eq!(added, s(&["-DCUDA_AOT_BLOCK=64"]));
        let c = Change::Flags { removed, added };
        assert_eq!(c.input(), "flag");
        assert_eq!(
            c.to_string(),
            "flags changed: removed -DCUDA_AOT_BLOCK=128 -O3, added -DCUDA_AOT_BLOCK=64"
        );
    }

    #[test]
    fn files_are_classified_by_their_names() {
        let d = |n: &str| DepFile {
            name: n.into(),
            digest: cuda_aot::Digest::of(b""),
        };
        assert_eq!(
            file_change(&d("src:ntt.cu"), "src:ntt.cu").input(),
            "source"
        );
        assert_eq!(
            file_change(&d("src:goldilocks.cuh"), "src:ntt.cu").to_string(),
            "header `goldilocks.cuh` changed"
        );
        assert_eq!(
            file_change(&d("include:../inc::f.cuh"), "src:ntt.cu").input(),
            "header"
        );
        assert_eq!(
            file_change(&d("toolkit:include/cuda.h"), "src:ntt.cu").input(),
            "toolkit"
        );
        assert_eq!(
            file_change(&d("/usr/include/stdio.h"), "src:ntt.cu").input(),
            "host_compiler"
        );
        let counts = count_by_input([
            &[Change::New][..],
            &[
                Change::Header { name: "a".into() },
                Change::Header { name: "b".into() },
            ][..],
            &[Change::Header { name: "a".into() }, Change::Evicted][..],
        ]);
        assert_eq!(
            counts.into_iter().collect::<Vec<_>>(),
            [("cache", 2), ("header", 2)]
        );
    }
}
