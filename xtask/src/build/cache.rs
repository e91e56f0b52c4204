//! The content-addressed build cache (`.cuda-aot/cache/`): built blobs keyed by their
//! identity digest, and per-job dependency records that let a rebuild know its source
//! digest without running nvcc.
//!
//! ```text
//! objects/<identity hex>/blob            the cubin or PTX
//! objects/<identity hex>/manifest.json   its unsigned manifest
//! deps/<dependency key hex>.json         the files the last compile read, with digests
//! tmp/                                   staging (same file system, so commits are renames)
//! ```
//!
//! Nothing is written here until a whole build succeeded; every entry is checked (digest,
//! size, identity, content) each time it is used, and a damaged one is rebuilt.

use anyhow::{Context, Result};
use cuda_aot::{Digest, Identity, Manifest};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use crate::files;

const DEPS_SCHEMA: &str = "cuda-aot/build-deps/v1";
const MANIFEST_LIMIT: u64 = 1 << 20;

/// A build cache folder.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

/// A usable cache entry.
pub struct Entry {
    /// Its manifest (channel as stored; the caller sets its own).
    pub manifest: Manifest,
    /// The blob bytes, checked against the manifest.
    pub blob: Vec<u8>,
}

/// What a compile read: every file nvcc reported, by stable name, with its digest.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DepRecord {
    schema: String,
    /// Sorted by name, no duplicates.
    pub files: Vec<DepFile>,
    /// How long the compile took (schedules long jobs first next time).
    pub compile_ms: u64,
}

/// One dependency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DepFile {
    /// `src:<path under the sources folder>`, `toolkit:<path under the toolkit root>`, or
    /// an absolute path (system headers).
    pub name: String,
    /// blake3 of its content.
    pub digest: Digest,
}

impl DepRecord {
    /// A record of `files` (sorted and deduplicated here).
    pub fn new(mut files: Vec<DepFile>, compile_ms: u64) -> Self {
        files.sort_by(|a, b| a.name.cmp(&b.name));
        files.dedup_by(|a, b| a.name == b.name);
        DepRecord {
            schema: DEPS_SCHEMA.into(),
            files,
            compile_ms,
        }
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

impl Cache {
    /// The cache at `root` (created on the first commit).
    pub fn new(root: &Path) -> Self {
        Cache {
            root: root.to_path_buf(),
        }
    }

    /// The cache folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn object_dir(&self, id: &Digest) -> PathBuf {
        self.root.join("objects").join(id.hex())
    }

    fn dep_path(&self, key: &Digest) -> PathBuf {
        self.root.join("deps").join(format!("{}.json", key.hex()))
    }

    /// The entry for `identity`, if present and intact: the stored manifest must carry
    /// exactly this identity, the blob its size and digest, and pass the content check
    /// (target and kernels).
    pub fn lookup(&self, identity: &Identity) -> Option<Entry> {
        let dir = self.object_dir(&identity.digest());
        let bytes = std::fs::read(dir.join("manifest.json")).ok()?;
        let manifest: Manifest =
            cuda_aot::json::parse(&bytes, MANIFEST_LIMIT, "cached manifest").ok()?;
        if &manifest.identity != identity {
            return None;
        }
        let blob = std::fs::read(dir.join("blob")).ok()?;
        if blob.len() as u64 != manifest.size || Digest::of(&blob) != manifest.module_digest {
            return None;
        }
        if cuda_aot::content::check(&manifest, &blob).is_err() {
            return None;
        }
        Some(Entry { manifest, blob })
    }

    /// A fresh staging folder inside the cache (removed when dropped).
    pub fn staging(&self) -> Result<tempfile::TempDir> {
        let tmp = self.root.join("tmp");
        std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        tempfile::Builder::new()
            .prefix("job-")
            .tempdir_in(&tmp)
            .with_context(|| format!("creating a staging folder in {}", tmp.display()))
    }

    /// Stores a built blob and its manifest under the identity digest: written into a
    /// staging folder, then renamed into place (replacing a damaged entry, if any).
    pub fn commit(&self, manifest: &Manifest, blob: &[u8]) -> Result<()> {
        let dest = self.object_dir(&manifest.identity.digest());
        if self
            .lookup(&manifest.identity)
            .is_some_and(|e| e.blob == blob)
        {
            return Ok(());
        }
        let stage = self.staging()?;
        files::write(&stage.path().join("blob"), blob)?;
        files::write(
            &stage.path().join("manifest.json"),
            &cuda_aot::json::to_vec(manifest),
        )?;
        let parent = dest.parent().expect("objects/<hex>");
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
        if dest.exists() {
            std::fs::remove_dir_all(&dest)
                .with_context(|| format!("replacing the damaged cache entry {}", dest.display()))?;
        }
        let staged = stage.keep();
        match std::fs::rename(&staged, &dest) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staged);
                // Another build sharing this cache may have committed the same entry first.
                if self.lookup(&manifest.identity).is_some() {
                    return Ok(());
                }
                Err(e).with_context(|| format!("committing the cache entry {}", dest.display()))
            }
        }
    }

    /// The dependency record stored under `key`, if any.
    pub fn deps(&self, key: &Digest) -> Option<DepRecord> {
        let bytes = std::fs::read(self.dep_path(key)).ok()?;
        let rec: DepRecord = cuda_aot::json::parse(&bytes, 4 << 20, "dependency record").ok()?;
        (rec.schema == DEPS_SCHEMA).then_some(rec)
    }

    /// Stores a dependency record.
    pub fn put_deps(&self, key: &Digest, rec: &DepRecord) -> Result<()> {
        files::write(&self.dep_path(key), &cuda_aot::json::to_vec(rec))
    }

    /// Removes the staging folder, and the cache folder itself, where empty (best effort;
    /// another build may be using them): a failed first build leaves no trace.
    pub fn tidy(&self) {
        let _ = std::fs::remove_dir(self.root.join("tmp"));
        let _ = std::fs::remove_dir(&self.root);
    }
}

/// Stable names for dependency paths, so records and source digests do not depend on where
/// the checkout, the include folders or the toolkit live.
#[derive(Debug, Clone)]
pub struct Names {
    sources: PathBuf,
    /// Include folders: (as written in the spec, absolute), longest absolute path first so
    /// a nested folder names its own files.
    includes: Vec<(String, PathBuf)>,
    toolkit: PathBuf,
}

impl Names {
    /// Names relative to the sources folder, the include folders (keyed by the relative
    /// path the spec gives them) and the toolkit root.
    pub fn new(
        sources: &Path,
        toolkit: &Path,
        includes: impl IntoIterator<Item = (String, PathBuf)>,
    ) -> Self {
        let mut includes: Vec<(String, PathBuf)> = includes
            .into_iter()
            .map(|(rel, abs)| (rel, normalise(&abs)))
            .collect();
        includes.sort_by(|a, b| {
            b.1.as_os_str()
                .len()
                .cmp(&a.1.as_os_str().len())
                .then(a.0.cmp(&b.0))
        });
        includes.dedup_by(|a, b| a.0 == b.0);
        Names {
            sources: normalise(sources),
            includes,
            toolkit: normalise(toolkit),
        }
    }

    /// `src:<rel>`, `include:<folder as in the spec>::<rel>`, `toolkit:<rel>`, or the
    /// normalised absolute path. `path` is absolute or relative to the sources folder
    /// (nvcc's working folder).
    pub fn name(&self, path: &Path) -> String {
        let abs = normalise(&self.sources.join(path));
        if let Ok(rel) = abs.strip_prefix(&self.sources) {
            return format!("src:{}", rel.display());
        }
        for (dir, root) in &self.includes {
            if let Ok(rel) = abs.strip_prefix(root) {
                return format!("include:{dir}::{}", rel.display());
            }
        }
        if let Ok(rel) = abs.strip_prefix(&self.toolkit) {
            return format!("toolkit:{}", rel.display());
        }
        abs.display().to_string()
    }

    /// The file a name stands for.
    pub fn resolve(&self, name: &str) -> PathBuf {
        if let Some(rel) = name.strip_prefix("src:") {
            self.sources.join(rel)
        } else if let Some((dir, rel)) = name
            .strip_prefix("include:")
            .and_then(|r| r.split_once("::"))
        {
            match self.includes.iter().find(|(d, _)| d == dir) {
                Some((_, root)) => root.join(rel),
                // An include folder this build does not have: a path that does not exist,
                // so the record does not match and the job compiles.
                None => PathBuf::from(format!("/nonexistent/cuda-aot/{dir}/{rel}")),
            }
        } else if let Some(rel) = name.strip_prefix("toolkit:") {
            self.toolkit.join(rel)
        } else {
            PathBuf::from(name)
        }
    }
}

/// Lexical normalisation: drops `.` and empty components and folds `..` (nvcc reports
/// toolkit headers as `<root>/bin/..//include/...`).
pub fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            c => out.push(c.as_os_str()),
        }
    }
    out
}

/// Content digests of files, computed once per build and shared by every job.
#[derive(Default)]
pub struct FileDigests {
    memo: Mutex<HashMap<PathBuf, Option<Digest>>>,
}

impl FileDigests {
    /// blake3 of the file's content, or `None` when it cannot be read.
    pub fn get(&self, path: &Path) -> Option<Digest> {
        if let Some(d) = self.memo.lock().expect("digest memo").get(path) {
            return *d;
        }
        let d = std::fs::read(path).ok().map(|b| Digest::of(&b));
        self.memo
            .lock()
            .expect("digest memo")
            .insert(path.to_path_buf(), d);
        d
    }

    /// Whether every file of `rec` still has its recorded content.
    pub fn still_match(&self, names: &Names, rec: &DepRecord) -> bool {
        rec.files
            .iter()
            .all(|f| self.get(&names.resolve(&f.name)) == Some(f.digest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_across_checkouts() {
        let n = Names::new(
            Path::new("/a/repo/kernels/cuda"),
            Path::new("/a/tk/nvidia/cu13"),
            [
                ("../inc".to_string(), PathBuf::from("/a/repo/kernels/inc")),
                (
                    "../inc/sub".to_string(),
                    PathBuf::from("/a/repo/kernels/inc/sub"),
                ),
            ],
        );
        assert_eq!(
            n.name(Path::new("/a/repo/kernels/inc/f.cuh")),
            "include:../inc::f.cuh"
        );
        assert_eq!(
            n.name(Path::new("/a/repo/kernels/inc/sub/g.cuh")),
            "include:../inc/sub::g.cuh"
        );
        assert_eq!(
            n.resolve("include:../inc::f.cuh"),
            Path::new("/a/repo/kernels/inc/f.cuh")
        );
        assert!(!n.resolve("include:../gone::f.cuh").exists());
        assert_eq!(n.name(Path::new("ntt.cu")), "src:ntt.cu");
        assert_eq!(
            n.name(Path::new("/a/repo/kernels/cuda/./sub/../g.cuh")),
            "src:g.cuh"
        );
        assert_eq!(
            n.name(Path::new(
                "/a/tk/nvidia/cu13/bin/..//include/cuda_runtime.h"
            )),
            "toolkit:include/cuda_runtime.h"
        );
        assert_eq!(
            n.name(Path::new("/usr/include/stdio.h")),
            "/usr/include/stdio.h"
        );
        assert_eq!(
            n.resolve("src:g.cuh"),
            Path::new("/a/repo/kernels/cuda/g.cuh")
        );
        assert_eq!(
            n.resolve("toolkit:include/x.h"),
            Path::new("/a/tk/nvidia/cu13/include/x.h")
        );
        let other = Names::new(Path::new("/b/kernels/cuda"), Path::new("/b/tk"), []);
        assert_eq!(
            other.name(Path::new("/b/kernels/cuda/ntt.cu")),
            "src:ntt.cu"
        );
    }

    #[test]
    fn source_digest_covers_names_and_contents() {
        let f = |n: &str, c: &[u8]| DepFile {
            name: n.into(),
            digest: Digest::of(c),
        };
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
