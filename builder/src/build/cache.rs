//! The content-addressed build cache (`.cuda-aot/cache/`): built blobs keyed by their
//! identity digest, and per-job dependency records that let a rebuild know its source
//! digest without running nvcc — several records per job, as ccache's direct mode keeps
//! them, so reverting a change (or switching branches back) finds the earlier inputs again.
//!
//! ```text
//! objects/<identity hex>/blob            the cubin or PTX
//! objects/<identity hex>/manifest.json   its unsigned manifest; its mtime is the entry's last use
//! objects/<unit hex>/blob                 a relocatable cubin of one file of a module of several
//! objects/<unit hex>/unit.json            what it is (file, digest, size); its mtime is its last use
//! deps/<dependency key hex>.json         up to MAX_RECORDS records, most recently used first
//! sets/<set hex>.json                    toolkit and system headers, shared by many records
//! last/<job hex>.json                    what the job's latest build was (for `--explain`)
//! stat.json                              file digests by stat data (not re-read while unchanged)
//! tmp/                                   staging (same file system, so commits are renames)
//! ```
//!
//! Nothing is written here until a whole build succeeded; every entry is checked (digest,
//! size, identity, content) each time it is used, and a damaged one is rebuilt. The cache's
//! size is bounded: `evict` (in `build/evict.rs`) removes the least recently used entries.

use anyhow::{Context, Result};
use cuda_aot::{Digest, Identity, Manifest};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::records::{
    DEPS_SCHEMA, DEPS_SCHEMA_V1, DepsFile, DepsFileV1, LAST_SCHEMA, MAX_RECORDS, SET_SCHEMA,
};
pub use super::records::{
    DepFile, DepRecord, FileSet, LastBuild, StoredRecord, job_key, split, unit_id,
};
use crate::files;

const UNIT_SCHEMA: &str = "cuda-aot/build-unit/v1";
const MANIFEST_LIMIT: u64 = 1 << 20;
const RECORD_LIMIT: u64 = 4 << 20;

/// An entry's last use is refreshed when it is older than this: a no-op rebuild does not
/// write to the cache at all, and least-recently-used order is kept to the hour.
pub const TOUCH_AFTER: Duration = Duration::from_secs(3600);

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
    /// When it was last used (or committed).
    pub last_used: SystemTime,
    /// What nvcc printed when it built the entry (its warnings), shown again on every hit.
    pub warnings: Vec<String>,
}

/// What a stored unit is (`objects/<unit hex>/unit.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UnitMeta {
    schema: String,
    /// `src:<file>` of the unit's source.
    source: String,
    /// The relocatable cubin's size in bytes.
    size: u64,
    /// blake3 of the relocatable cubin.
    digest: Digest,
}

/// A usable unit: a relocatable cubin, checked against its record.
pub struct Unit {
    /// The relocatable cubin.
    pub object: Vec<u8>,
    /// When it was last used (or committed).
    pub last_used: SystemTime,
    /// What nvcc printed when it compiled the unit, shown again on every use.
    pub warnings: Vec<String>,
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

    pub(super) fn objects_dir(&self) -> PathBuf {
        self.root.join("objects")
    }

    pub(super) fn object_dir(&self, id: &Digest) -> PathBuf {
        self.objects_dir().join(id.hex())
    }

    pub(super) fn deps_dir(&self) -> PathBuf {
        self.root.join("deps")
    }

    pub(super) fn sets_dir(&self) -> PathBuf {
        self.root.join("sets")
    }

    pub(super) fn last_dir(&self) -> PathBuf {
        self.root.join("last")
    }

    /// The remembered file digests (`stat.json`, see `inputs::FileDigests`).
    pub(super) fn stat_path(&self) -> PathBuf {
        self.root.join("stat.json")
    }

    fn dep_path(&self, key: &Digest) -> PathBuf {
        self.deps_dir().join(format!("{}.json", key.hex()))
    }

    fn set_path(&self, id: &Digest) -> PathBuf {
        self.sets_dir().join(format!("{}.json", id.hex()))
    }

    fn last_path(&self, job: &Digest) -> PathBuf {
        self.last_dir().join(format!("{}.json", job.hex()))
    }

    /// Whether an entry folder exists for `id` (intact or not).
    pub fn has_object(&self, id: &Digest) -> bool {
        self.object_dir(id).is_dir()
    }

    /// The entry for `identity`, if present and intact: the stored manifest must carry
    /// exactly this identity, the blob its size and digest, and pass the content check
    /// (target and kernels).
    pub fn lookup(&self, identity: &Identity) -> Option<Entry> {
        let dir = self.object_dir(&identity.digest());
        let mut file = std::fs::File::open(dir.join("manifest.json")).ok()?;
        let last_used = file.metadata().and_then(|m| m.modified()).ok()?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).ok()?;
        let manifest: Manifest =
            cuda_aot::json::parse(&bytes, MANIFEST_LIMIT, "cached manifest").ok()?;
        // An entry written before the current schema (v1: no signed globals) is rebuilt.
        if &manifest.identity != identity || manifest.schema != Manifest::SCHEMA {
            return None;
        }
        let blob = std::fs::read(dir.join("blob")).ok()?;
        if blob.len() as u64 != manifest.size || Digest::of(&blob) != manifest.module_digest {
            return None;
        }
        if cuda_aot::content::check(&manifest, &blob).is_err() {
            return None;
        }
        Some(Entry {
            manifest,
            blob,
            last_used,
            warnings: read_warnings(&dir),
        })
    }

    /// The unit `id` (see [`unit_id`]), if stored and intact: its blob must have the
    /// recorded size and digest and be a whole ELF file (or, for link-time optimisation,
    /// a fatbin of LTO IR, which only nvlink reads).
    pub fn unit(&self, id: &Digest) -> Option<Unit> {
        let dir = self.object_dir(id);
        let mut file = std::fs::File::open(dir.join("unit.json")).ok()?;
        let last_used = file.metadata().and_then(|m| m.modified()).ok()?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).ok()?;
        let meta: UnitMeta = cuda_aot::json::parse(&bytes, MANIFEST_LIMIT, "cached unit").ok()?;
        if meta.schema != UNIT_SCHEMA {
            return None;
        }
        let object = std::fs::read(dir.join("blob")).ok()?;
        if object.len() as u64 != meta.size || Digest::of(&object) != meta.digest {
            return None;
        }
        if !cuda_aot::elf::is_fatbin(&object) {
            cuda_aot::elf::check_structure(&object).ok()?;
        }
        Some(Unit {
            object,
            last_used,
            warnings: read_warnings(&dir),
        })
    }

    /// Stores a unit's relocatable cubin under `id`, as [`Cache::commit`] stores an entry.
    pub fn commit_unit(
        &self,
        id: &Digest,
        source: &str,
        object: &[u8],
        warnings: &[String],
    ) -> Result<()> {
        if let Some(u) = self.unit(id).filter(|u| u.object == object) {
            self.touch(id, u.last_used);
            return Ok(());
        }
        let meta = UnitMeta {
            schema: UNIT_SCHEMA.into(),
            source: source.to_string(),
            size: object.len() as u64,
            digest: Digest::of(object),
        };
        self.commit_dir(
            id,
            object,
            warnings,
            ("unit.json", &cuda_aot::json::to_vec(&meta)),
            || self.unit(id).is_some(),
        )
    }

    /// Records a use of the entry `id` last used at `last_used` (its manifest's mtime),
    /// when that is older than [`TOUCH_AFTER`]. Best effort: a read-only cache still works.
    pub fn touch(&self, id: &Digest, last_used: SystemTime) {
        let now = SystemTime::now();
        if now.duration_since(last_used).unwrap_or_default() < TOUCH_AFTER {
            return;
        }
        let dir = self.object_dir(id);
        for meta in ["manifest.json", "unit.json"] {
            if let Ok(f) = std::fs::File::options().append(true).open(dir.join(meta)) {
                let _ = f.set_modified(now);
            }
        }
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
    pub fn commit(&self, manifest: &Manifest, blob: &[u8], warnings: &[String]) -> Result<()> {
        let id = manifest.identity.digest();
        if let Some(e) = self.lookup(&manifest.identity).filter(|e| e.blob == blob) {
            self.touch(&id, e.last_used);
            return Ok(());
        }
        self.commit_dir(
            &id,
            blob,
            warnings,
            ("manifest.json", &cuda_aot::json::to_vec(manifest)),
            || self.lookup(&manifest.identity).is_some(),
        )
    }

    /// Writes `objects/<id>/` (the blob, the warnings, then the file that says what the
    /// blob is, whose mtime is its last use) into a staging folder and renames it into
    /// place, replacing a damaged one; `intact` says whether another build committed the
    /// same one first when the rename fails.
    fn commit_dir(
        &self,
        id: &Digest,
        blob: &[u8],
        warnings: &[String],
        (meta_name, meta): (&str, &[u8]),
        intact: impl Fn() -> bool,
    ) -> Result<()> {
        let dest = self.object_dir(id);
        let stage = self.staging()?;
        files::write(&stage.path().join("blob"), blob)?;
        if !warnings.is_empty() {
            let mut text = warnings.join("\n");
            text.push('\n');
            files::write(&stage.path().join("warnings.txt"), text.as_bytes())?;
        }
        files::write(&stage.path().join(meta_name), meta)?;
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
                if intact() {
                    return Ok(());
                }
                Err(e).with_context(|| format!("committing the cache entry {}", dest.display()))
            }
        }
    }

    /// The dependency records stored under `key`, most recently used first (none when the
    /// file is missing, unreadable or of another schema: the job then compiles).
    pub fn records(&self, key: &Digest) -> Vec<StoredRecord> {
        self.read_records(&self.dep_path(key)).unwrap_or_default()
    }

    pub(super) fn read_records(&self, path: &Path) -> Option<Vec<StoredRecord>> {
        Self::parse_records(&std::fs::read(path).ok()?)
    }

    /// The dependency records in the bytes of a `deps/` file (this format or the previous
    /// one), or `None` for anything else.
    pub fn parse_records(bytes: &[u8]) -> Option<Vec<StoredRecord>> {
        if let Ok(f) = cuda_aot::json::parse::<DepsFile>(bytes, RECORD_LIMIT, "dependency records")
        {
            return (f.schema == DEPS_SCHEMA).then_some(f.records);
        }
        // A record of the previous format (one per job, every file listed): still usable,
        // so a cache from before several records were kept needs no rebuild. Its identity is
        // unknown until it is used (then it is stored in the current format).
        let old: DepsFileV1 =
            cuda_aot::json::parse(bytes, RECORD_LIMIT, "dependency record").ok()?;
        (old.schema == DEPS_SCHEMA_V1).then(|| {
            vec![StoredRecord {
                files: DepRecord::new(old.files, old.compile_ms).files,
                set: None,
                identity: Digest([0; 32]),
                compile_ms: old.compile_ms,
            }]
        })
    }

    /// Stores the records of `key` (at most [`MAX_RECORDS`]; an empty list removes the file).
    pub fn put_records(&self, key: &Digest, records: &[StoredRecord]) -> Result<()> {
        self.write_records(&self.dep_path(key), records)
    }

    pub(super) fn write_records(&self, path: &Path, records: &[StoredRecord]) -> Result<()> {
        if records.is_empty() {
            return match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(e).with_context(|| format!("removing {}", path.display()))
                }
                _ => Ok(()),
            };
        }
        files::write(path, &Self::records_file(records))
    }

    /// The bytes of a `deps/` file holding `records` (at most [`MAX_RECORDS`]).
    pub fn records_file(records: &[StoredRecord]) -> Vec<u8> {
        cuda_aot::json::to_vec(&DepsFile {
            schema: DEPS_SCHEMA.into(),
            records: records.iter().take(MAX_RECORDS).cloned().collect(),
        })
    }

    /// The file set `id`, if stored and intact (its content must hash to its name).
    pub fn set(&self, id: &Digest) -> Option<FileSet> {
        Self::parse_set(&std::fs::read(self.set_path(id)).ok()?, id)
    }

    /// The file set in `bytes`, if it is one and its content hashes to `id`.
    pub fn parse_set(bytes: &[u8], id: &Digest) -> Option<FileSet> {
        let set: FileSet = cuda_aot::json::parse(bytes, RECORD_LIMIT, "file set").ok()?;
        (set.schema == SET_SCHEMA && FileSet::digest(&set.files) == *id).then_some(set)
    }

    /// Stores a file set under its digest (unless already there).
    pub fn put_set(&self, set: &FileSet) -> Result<()> {
        let id = FileSet::digest(&set.files);
        if self.set(&id).is_some() {
            return Ok(());
        }
        files::write(&self.set_path(&id), &cuda_aot::json::to_vec(set))
    }

    /// The latest build of the job `job` (see [`job_key`]), if recorded.
    pub fn last(&self, job: &Digest) -> Option<LastBuild> {
        self.read_last(&self.last_path(job))
    }

    pub(super) fn read_last(&self, path: &Path) -> Option<LastBuild> {
        let bytes = std::fs::read(path).ok()?;
        let last: LastBuild = cuda_aot::json::parse(&bytes, RECORD_LIMIT, "last build").ok()?;
        (last.schema == LAST_SCHEMA).then_some(last)
    }

    /// Records the latest build of a job.
    pub fn put_last(&self, job: &Digest, last: &LastBuild) -> Result<()> {
        files::write_if_changed(&self.last_path(job), &cuda_aot::json::to_vec(last)).map(|_| ())
    }

    /// Stores the records of `key` after a compile: `fresh` first, then the older records
    /// with other inputs (a record with the same inputs is replaced), at most
    /// [`MAX_RECORDS`]. Writes the record's file set too.
    pub fn add_record(
        &self,
        key: &Digest,
        older: &[StoredRecord],
        fresh: &DepRecord,
        identity: Digest,
    ) -> Result<()> {
        let (stored, set) = split(fresh, identity);
        if let Some(set) = &set {
            self.put_set(set)?;
        }
        let mut records = vec![stored.clone()];
        records.extend(
            older
                .iter()
                .filter(|r| (&r.files, r.set) != (&stored.files, stored.set))
                .cloned(),
        );
        self.put_records(key, &records)
    }

    /// Moves the record at `used` to the front, with the identity it gave now (a cache hit
    /// through an older record: a revert, a branch switched back). Writes nothing when it
    /// already is the first with that identity, unless `always` (the records came partly
    /// from a shared cache, so the local file may lack them).
    pub fn promote_record(
        &self,
        key: &Digest,
        records: &[StoredRecord],
        used: usize,
        identity: Digest,
        always: bool,
    ) -> Result<bool> {
        if !always && used == 0 && records.first().is_some_and(|r| r.identity == identity) {
            return Ok(false);
        }
        let Some(rec) = records.get(used) else {
            return Ok(false);
        };
        let mut out = vec![StoredRecord {
            identity,
            ..rec.clone()
        }];
        out.extend(
            records
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != used)
                .map(|(_, r)| r.clone()),
        );
        self.put_records(key, &out)?;
        Ok(true)
    }

    /// Removes what killed builds left: staging folders untouched for [`STALE_STAGING`], and
    /// temporary files of atomic writes (`cuda_aot::fs`) untouched for [`STALE_TEMP`]; then
    /// the staging folder and the cache folder itself where empty. Best effort, and by age
    /// only: a build in another container may share the cache, and its process ids mean
    /// nothing here, but no live write leaves its files untouched that long. Returns how
    /// many leftovers went.
    pub fn tidy(&self) -> usize {
        let now = SystemTime::now();
        let older_than = |m: &std::fs::Metadata, limit: Duration| {
            m.modified()
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age > limit)
        };
        let mut removed = 0;
        let staging = self.root.join("tmp");
        for e in std::fs::read_dir(&staging).into_iter().flatten().flatten() {
            if e.metadata().is_ok_and(|m| older_than(&m, STALE_STAGING))
                && std::fs::remove_dir_all(e.path()).is_ok()
            {
                removed += 1;
            }
        }
        for dir in [
            self.root.clone(),
            self.deps_dir(),
            self.sets_dir(),
            self.last_dir(),
        ] {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let temp = e.file_name().to_str().is_some_and(is_temp_file);
                if temp
                    && e.metadata()
                        .is_ok_and(|m| m.is_file() && older_than(&m, STALE_TEMP))
                    && std::fs::remove_file(e.path()).is_ok()
                {
                    removed += 1;
                }
            }
        }
        let _ = std::fs::remove_dir(&staging);
        let _ = std::fs::remove_dir(&self.root);
        removed
    }
}

/// How long a staging folder may sit untouched before [`Cache::tidy`] takes it for a killed
/// build's: far longer than any compile.
pub const STALE_STAGING: Duration = Duration::from_secs(24 * 3600);

/// How long an atomic write's temporary file may sit untouched before [`Cache::tidy`] takes
/// it for a killed writer's (a write renames it within moments).
pub const STALE_TEMP: Duration = Duration::from_secs(3600);

/// Whether `name` is an atomic write's temporary file (`.tmp.<pid>.<n>.<name>`,
/// `cuda_aot::fs`).
fn is_temp_file(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(".tmp.") else {
        return false;
    };
    let mut parts = rest.splitn(3, '.');
    let numeric =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    numeric(parts.next()) && numeric(parts.next()) && parts.next().is_some_and(|n| !n.is_empty())
}

/// nvcc's warnings kept beside a blob (absent: nvcc printed nothing); at most 1 MiB is read.
fn read_warnings(dir: &Path) -> Vec<String> {
    cuda_aot::fs::read_at_most(&dir.join("warnings.txt"), 1 << 20)
        .ok()
        .flatten()
        .map(|b| super::nvcc::warnings(&String::from_utf8_lossy(&b)))
        .unwrap_or_default()
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
    fn records_keep_several_inputs_most_recent_first_and_share_sets() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let key = Digest::of(b"key");
        let rec = |header: &[u8]| {
            DepRecord::new(
                vec![
                    f("src:a.cu", b"a"),
                    f("src:h.cuh", header),
                    f("toolkit:include/cuda.h", b"t"),
                    f("/usr/include/stdio.h", b"s"),
                ],
                5,
            )
        };
        let (one, two) = (Digest::of(b"id1"), Digest::of(b"id2"));
        cache.add_record(&key, &[], &rec(b"1"), one).unwrap();
        cache
            .add_record(&key, &cache.records(&key), &rec(b"2"), two)
            .unwrap();
        let got = cache.records(&key);
        assert_eq!(
            got.iter().map(|r| r.identity).collect::<Vec<_>>(),
            [two, one]
        );
        // Both records name one shared set holding the files outside the project.
        assert_eq!(got[0].set, got[1].set);
        let set = cache.set(&got[0].set.unwrap()).unwrap();
        assert_eq!(set.files.len(), 2);
        assert_eq!(got[0].files.len(), 2);
        // The same inputs again replace their record instead of adding one.
        cache
            .add_record(&key, &cache.records(&key), &rec(b"1"), one)
            .unwrap();
        assert_eq!(
            cache
                .records(&key)
                .iter()
                .map(|r| r.identity)
                .collect::<Vec<_>>(),
            [one, two]
        );
        // A hit through the second record moves it to the front.
        assert!(
            cache
                .promote_record(&key, &cache.records(&key), 1, two, false)
                .unwrap()
        );
        assert_eq!(cache.records(&key)[0].identity, two);
        assert!(
            !cache
                .promote_record(&key, &cache.records(&key), 0, two, false)
                .unwrap()
        );
        // At most MAX_RECORDS are kept.
        for i in 0..MAX_RECORDS as u8 + 3 {
            cache
                .add_record(&key, &cache.records(&key), &rec(&[b'x', i]), one)
                .unwrap();
        }
        assert_eq!(cache.records(&key).len(), MAX_RECORDS);
    }

    #[test]
    fn a_record_of_the_previous_format_is_read_as_one_record() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let key = Digest::of(b"key");
        let v1 = serde_json::json!({
            "schema": "cuda-aot/build-deps/v1",
            "files": [f("src:b.cuh", b"1"), f("/usr/include/a.h", b"2")],
            "compile_ms": 7,
        });
        files::write(&cache.dep_path(&key), &cuda_aot::json::to_vec(&v1)).unwrap();
        let recs = cache.records(&key);
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].set, None);
        assert_eq!(
            recs[0]
                .files
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>(),
            ["/usr/include/a.h", "src:b.cuh"]
        );
        // Used once, it is stored in the current format.
        assert!(
            cache
                .promote_record(&key, &recs, 0, Digest::of(b"id"), false)
                .unwrap()
        );
        assert_eq!(cache.records(&key)[0].identity, Digest::of(b"id"));
        assert!(
            std::fs::read_to_string(cache.dep_path(&key))
                .unwrap()
                .contains(DEPS_SCHEMA)
        );
    }

    #[test]
    fn a_tampered_set_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let rec = DepRecord::new(vec![f("/usr/include/a.h", b"1")], 0);
        let (stored, set) = split(&rec, Digest::of(b"id"));
        cache.put_set(&set.unwrap()).unwrap();
        let id = stored.set.unwrap();
        assert!(cache.set(&id).is_some());
        let path = cache.set_path(&id);
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace(&Digest::of(b"1").hex(), &Digest::of(b"2").hex());
        std::fs::write(&path, text).unwrap();
        assert!(cache.set(&id).is_none());
    }

    /// What a killed build leaves (a staging folder, an atomic write's temporary file) goes
    /// at the next tidy once it has sat untouched long enough; a fresh one (a live build's)
    /// and every other file stay.
    #[test]
    fn tidy_removes_what_killed_builds_left_and_nothing_live() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let aged = |p: &Path, by: Duration| {
            let t = SystemTime::now() - by - Duration::from_secs(60);
            std::fs::File::open(p).unwrap().set_modified(t).unwrap();
        };
        let staging = dir.path().join("tmp");
        for d in ["job-killed", "job-running", "job-an-hour-old"] {
            std::fs::create_dir_all(staging.join(d)).unwrap();
            std::fs::write(staging.join(d).join("ntt.cubin"), b"x").unwrap();
        }
        aged(&staging.join("job-killed"), STALE_STAGING);
        aged(&staging.join("job-an-hour-old"), STALE_TEMP);
        let deps = cache.deps_dir();
        std::fs::create_dir_all(&deps).unwrap();
        let files = [
            (".tmp.4242.0.abc.json", true, true),
            (".tmp.4242.1.abc.json", false, false),
            ("abc.json", true, false),
            (".tmp.notapid.0.x", true, false),
        ];
        for (name, old, _) in &files {
            std::fs::write(deps.join(name), b"{}").unwrap();
            if *old {
                aged(&deps.join(name), STALE_TEMP);
            }
        }

        assert_eq!(cache.tidy(), 2);
        assert!(!staging.join("job-killed").exists());
        assert!(staging.join("job-running/ntt.cubin").exists());
        assert!(staging.join("job-an-hour-old/ntt.cubin").exists());
        for (name, _, gone) in &files {
            assert_eq!(!deps.join(name).exists(), *gone, "{name}");
        }
        assert!(is_temp_file(".tmp.42.7.x.json"));
        assert!(!is_temp_file(".tmp.42.x"));
        assert!(!is_temp_file(".tmp.42.7."));
    }
}
