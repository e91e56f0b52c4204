//! The documents the build cache keeps about its jobs: dependency records (every file a
//! compile read, by stable name and digest; several per job, most recently used first),
//! the shared sets of toolkit and system headers they point to, and each job's last
//! build for `--explain`; and the keys derived from them (a job's, a unit's).

use cuda_aot::{Digest, Identity, Kind, ModuleName, Target};
use serde::{Deserialize, Serialize};

pub(super) const DEPS_SCHEMA: &str = "cuda-aot/build-deps/v2";
pub(super) const DEPS_SCHEMA_V1: &str = "cuda-aot/build-deps/v1";
pub(super) const SET_SCHEMA: &str = "cuda-aot/build-file-set/v1";
pub(super) const LAST_SCHEMA: &str = "cuda-aot/build-last/v1";

/// How many dependency records a job keeps: one per distinct set of inputs it was built
/// from (a branch, a header edit and its revert), most recently used first.
pub const MAX_RECORDS: usize = 16;

/// One dependency: a file a compile read, by stable name (see `inputs::Names`), with the
/// blake3 of its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DepFile {
    /// `src:<path>`, `include:<folder>::<path>`, `toolkit:<path>` or an absolute path.
    pub name: String,
    /// blake3 of its content.
    pub digest: Digest,
}

impl DepFile {
    /// A file of the project (the sources folder or an include folder of the spec), as
    /// opposed to the toolkit's and the host compiler's headers.
    pub fn is_project(&self) -> bool {
        Self::name_is_project(&self.name)
    }

    /// Whether a stable name (see `inputs::Names`) names a file of the project.
    pub fn name_is_project(name: &str) -> bool {
        name.starts_with("src:") || name.starts_with("include:")
    }
}

/// What a fresh compile read: every file nvcc reported, sorted by name, without duplicates.
#[derive(Debug, Clone)]
pub struct DepRecord {
    /// Sorted by name, no duplicates.
    pub files: Vec<DepFile>,
    /// How long the compile took (schedules long jobs first next time).
    pub compile_ms: u64,
}

impl DepRecord {
    /// A record of `files` (sorted and deduplicated here).
    pub fn new(mut files: Vec<DepFile>, compile_ms: u64) -> Self {
        files.sort_by(|a, b| a.name.cmp(&b.name));
        files.dedup_by(|a, b| a.name == b.name);
        DepRecord { files, compile_ms }
    }

    /// The source digest: blake3 over every (name, content digest), in name order.
    pub fn source_digest(&self) -> Digest {
        let mut h = blake3::Hasher::new();
        h.update(b"cuda-aot source v1\n");
        for f in &self.files {
            h.update(f.name.as_bytes());
            h.update(&[0]);
            h.update(&f.digest.0);
        }
        Digest(*h.finalize().as_bytes())
    }
}

/// A dependency record as stored: the project files it read, the shared set of toolkit and
/// system headers it read, and the identity it produced when last used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredRecord {
    /// The project's files (sources folder, include folders), sorted by name.
    pub files: Vec<DepFile>,
    /// The set of the toolkit's and the host compiler's headers (`sets/<hex>.json`).
    pub set: Option<Digest>,
    /// The identity digest these inputs gave when the record was last used.
    pub identity: Digest,
    /// How long the compile took.
    pub compile_ms: u64,
}

/// The one record per job that `cuda-aot/build-deps/v1` kept.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DepsFileV1 {
    pub(super) schema: String,
    pub(super) files: Vec<DepFile>,
    pub(super) compile_ms: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DepsFile {
    pub(super) schema: String,
    pub(super) records: Vec<StoredRecord>,
}

/// The toolkit's and the host compiler's headers that one or more compiles read: the same
/// few hundred files for most jobs of a build, stored once and checked once per build.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSet {
    pub(super) schema: String,
    /// Sorted by name, no duplicates.
    pub files: Vec<DepFile>,
}

impl FileSet {
    /// The set's name: blake3 over its (name, digest) pairs in order.
    pub fn digest(files: &[DepFile]) -> Digest {
        let mut h = blake3::Hasher::new();
        h.update(b"cuda-aot file set v1\n");
        for f in files {
            h.update(f.name.as_bytes());
            h.update(&[0]);
            h.update(&f.digest.0);
        }
        Digest(*h.finalize().as_bytes())
    }
}

/// What a job's latest build was: the source path as the spec gave it, the key of its
/// dependency records and the identity. `--explain` compares a miss against it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LastBuild {
    pub(super) schema: String,
    /// `src:<path>` of the module's source.
    pub source: String,
    /// The dependency key the job had.
    pub dep_key: Digest,
    /// The identity it produced.
    pub identity: Identity,
}

impl LastBuild {
    /// A record of the job's latest build.
    pub fn new(source: String, dep_key: Digest, identity: Identity) -> Self {
        LastBuild {
            schema: LAST_SCHEMA.into(),
            source,
            dep_key,
            identity,
        }
    }
}

/// Names a (module, target, kind): the key of its [`LastBuild`].
pub fn job_key(module: &ModuleName, target: &Target, kind: Kind) -> Digest {
    let mut h = blake3::Hasher::new();
    h.update(b"cuda-aot job v1\n");
    for part in [module.to_string(), target.to_string(), kind.to_string()] {
        h.update(part.as_bytes());
        h.update(&[0]);
    }
    Digest(*h.finalize().as_bytes())
}

/// The digest a unit (one file of a module of several, compiled to relocatable device
/// code) is stored under: its dependency key (file, flags, include folders, toolkit, host
/// compiler) and the digest of every file its compile read.
pub fn unit_id(key: &Digest, source_digest: &Digest) -> Digest {
    let mut h = blake3::Hasher::new();
    h.update(b"cuda-aot unit v1\n");
    h.update(&key.0);
    h.update(&source_digest.0);
    Digest(*h.finalize().as_bytes())
}

/// Splits a fresh record into its stored form and its shared set (if it read any file
/// outside the project).
pub fn split(rec: &DepRecord, identity: Digest) -> (StoredRecord, Option<FileSet>) {
    let (project, env): (Vec<DepFile>, Vec<DepFile>) =
        rec.files.iter().cloned().partition(DepFile::is_project);
    let set = (!env.is_empty()).then(|| FileSet {
        schema: SET_SCHEMA.into(),
        files: env,
    });
    let stored = StoredRecord {
        files: project,
        set: set.as_ref().map(|s| FileSet::digest(&s.files)),
        identity,
        compile_ms: rec.compile_ms,
    };
    (stored, set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(n: &str, c: &[u8]) -> DepFile {
        DepFile {
            name: n.into(),
            digest: Digest::of(c),
        }
    }

    #[test]
    fn source_digest_covers_names_and_contents() {
        let a = DepRecord::new(vec![f("src:b.cuh", b"1"), f("src:a.cu", b"2")], 0);
        let same = DepRecord::new(
            vec![
                f("src:a.cu", b"2"),
                f("src:b.cuh", b"1"),
                f("src:a.cu", b"2"),
            ],
            9,
        );
        assert_eq!(a.source_digest(), same.source_digest());
        let changed = DepRecord::new(vec![f("src:a.cu", b"2"), f("src:b.cuh", b"x")], 0);
        let renamed = DepRecord::new(vec![f("src:a.cu", b"2"), f("src:c.cuh", b"1")], 0);
        assert_ne!(a.source_digest(), changed.source_digest());
        assert_ne!(a.source_digest(), renamed.source_digest());
    }
}
