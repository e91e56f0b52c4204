//! What a compile read, as the cache sees it: stable names for dependency paths, content
//! digests computed once per build, and whether a stored dependency record still describes
//! the files on disk (its shared header set checked once per build, not once per job).

use cuda_aot::Digest;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::cache::{Cache, DepFile, DepRecord, StoredRecord};

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

    /// The path a line table records for `path` (absolute or relative to the sources
    /// folder) in a `-lineinfo` build: a project file relative to the spec file, as the
    /// spec names its folders (`src/field_ops.cu` for `build.sources = "src"`,
    /// `include/foreign/launch.cuh` for `include_dirs = ["include"]`; `sources_rel` is
    /// `build.sources` as written), a toolkit header under `cuda-toolkit/`
    /// (`cuda-toolkit/include/cuda_runtime.h`), anything else (the host compiler's headers)
    /// as its absolute path. None depends on where the checkout, a copy of its sources
    /// (`repro`), the cache or the toolkit is.
    pub fn portable(&self, path: &Path, sources_rel: &str) -> String {
        let abs = normalise(&self.sources.join(path));
        let under = |dir: &str, rel: &Path| {
            normalise(&Path::new(dir).join(rel))
                .to_string_lossy()
                .replace('\\', "/")
        };
        if let Ok(rel) = abs.strip_prefix(&self.sources) {
            return under(sources_rel, rel);
        }
        for (dir, root) in &self.includes {
            if let Ok(rel) = abs.strip_prefix(root) {
                return under(dir, rel);
            }
        }
        if let Ok(rel) = abs.strip_prefix(&self.toolkit) {
            return format!("cuda-toolkit/{}", rel.display());
        }
        abs.display().to_string()
    }

    /// Whether a name from a shared cache's record stays where a build's inputs live: a
    /// project name (`src:`, `include:` of one of this build's include folders, `toolkit:`)
    /// whose relative part never climbs out (`..`) or starts over (`/`), or an absolute
    /// path (already normal) inside one of `system`, the host compiler's include folders.
    /// Anything else is a path the store's writer chose, which a build never reads.
    pub fn confined(&self, name: &str, system: &[PathBuf]) -> bool {
        let inside = |rel: &str| {
            let p = Path::new(rel);
            !rel.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
        };
        if let Some(rel) = name.strip_prefix("src:") {
            inside(rel)
        } else if let Some(rest) = name.strip_prefix("include:") {
            rest.split_once("::").is_some_and(|(dir, rel)| {
                self.includes.iter().any(|(d, _)| d == dir) && inside(rel)
            })
        } else if let Some(rel) = name.strip_prefix("toolkit:") {
            inside(rel)
        } else {
            let p = Path::new(name);
            p.is_absolute() && normalise(p) == p && system.iter().any(|d| p.starts_with(d))
        }
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

/// The largest input file the build hashes (a source, a header): a bigger one counts as
/// unreadable, so a record naming it never matches and the job compiles (nvcc then reads
/// what it reads). No real header comes near it.
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// blake3 of the file at `path`, or `None` when it cannot be read as an input: it is
/// opened without following a link and without blocking (a FIFO never hangs the build),
/// must be a regular file of at most [`MAX_INPUT_BYTES`], and is hashed as it streams
/// (memory stays constant whatever a dependency record names).
pub fn digest_file(path: &Path) -> Option<Digest> {
    use std::io::Read as _;
    let mut file = cuda_aot::fs::open_regular(path).ok()??;
    if file.metadata().ok()?.len() > MAX_INPUT_BYTES {
        return None;
    }
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if total > MAX_INPUT_BYTES {
            return None; // grew while being read
        }
        hasher.update(&buf[..n]);
    }
    Some(Digest(*hasher.finalize().as_bytes()))
}

/// Lexical normalisation: drops `.` and empty components and folds `..` (nvcc reports
/// toolkit headers as `<root>/bin/..//include/...`).
pub fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            // `a/..` folds; `..` at the start of a relative path stays (`../../a`); `/..`
            // is `/`.
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(".."),
            },
            c => out.push(c.as_os_str()),
        }
    }
    out
}

/// What `stat` says about a file: if all of it is unchanged, so is the content. The
/// change time cannot be set from user space and moves on every write, rename or
/// replacement, so a file restored with an old modification time still differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl StatKey {
    #[cfg(unix)]
    fn of(m: &std::fs::Metadata) -> Option<StatKey> {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Some(StatKey {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        })
    }

    #[cfg(not(unix))]
    fn of(_: &std::fs::Metadata) -> Option<StatKey> {
        None
    }

    /// Whether the file was last changed at least [`SETTLED_NS`] before `now_ns`: only
    /// then is its digest remembered (a file written moments ago may change again within
    /// the clock's resolution).
    fn settled(&self, now_ns: i128, settle_ns: i128) -> bool {
        self.mtime_ns.max(self.ctime_ns) <= now_ns - settle_ns
    }
}

/// How old a file's last change must be for its digest to be remembered by its stat data.
const SETTLED_NS: i128 = 2_000_000_000;
const STAT_SCHEMA: &str = "cuda-aot/build-stat/v1";

/// Remembered digests: `<cache>/stat.json`, absolute path -> (stat data, blake3).
#[derive(Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatFile {
    schema: String,
    files: BTreeMap<PathBuf, (StatKey, Digest)>,
}

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// Content digests of files, computed once per build and shared by every job. A toolkit or
/// system header whose stat data (device, inode, size, modification and change time) is
/// what it was when it was last hashed, as git's index and ccache's inode cache tell, is not
/// read again: a no-op build only stats them.
#[derive(Default)]
pub struct FileDigests {
    memo: Mutex<HashMap<PathBuf, Option<Digest>>>,
    known: BTreeMap<PathBuf, (StatKey, Digest)>,
    fresh: Mutex<BTreeMap<PathBuf, (StatKey, Digest)>>,
    store: Option<PathBuf>,
    settle_ns: i128,
}

impl FileDigests {
    /// Digests remembered in the stat file `store` (none if it is missing or unreadable).
    pub fn with_store(store: PathBuf) -> Self {
        let known = std::fs::read(&store)
            .ok()
            .and_then(|b| cuda_aot::json::parse::<StatFile>(&b, 16 << 20, "stat memo").ok())
            .filter(|f| f.schema == STAT_SCHEMA)
            .map(|f| f.files)
            .unwrap_or_default();
        FileDigests {
            known,
            store: Some(store),
            settle_ns: SETTLED_NS,
            ..FileDigests::default()
        }
    }

    /// blake3 of the file's content, or `None` when it cannot be read. `remember`: look
    /// it up and keep it by stat data (the toolkit's and the system's headers; the
    /// project's own files, few and often edited, are always read).
    pub fn get(&self, path: &Path, remember: bool) -> Option<Digest> {
        if let Some(d) = self.memo.lock().expect("digest memo").get(path) {
            return *d;
        }
        let d = if remember {
            self.digest(path)
        } else {
            digest_file(path)
        };
        self.memo
            .lock()
            .expect("digest memo")
            .insert(path.to_path_buf(), d);
        d
    }

    fn digest(&self, path: &Path) -> Option<Digest> {
        let key = std::fs::metadata(path).ok().and_then(|m| StatKey::of(&m));
        if let (Some(key), Some((k, d))) = (key, self.known.get(path))
            && key == *k
        {
            self.fresh
                .lock()
                .expect("stat memo")
                .insert(path.to_path_buf(), (key, *d));
            return Some(*d);
        }
        let d = digest_file(path)?;
        if let Some(key) = key.filter(|k| k.settled(now_ns(), self.settle_ns)) {
            self.fresh
                .lock()
                .expect("stat memo")
                .insert(path.to_path_buf(), (key, d));
        }
        Some(d)
    }

    /// Saves what this build hashed or confirmed for the next build (best effort: without
    /// it the next build reads the files again). Entries of files this build did not look
    /// at are kept while the file still exists.
    pub fn save(&self) {
        let Some(store) = &self.store else { return };
        let fresh = self.fresh.lock().expect("stat memo");
        let mut files = fresh.clone();
        for (p, e) in &self.known {
            if !files.contains_key(p) && p.exists() {
                files.insert(p.clone(), *e);
            }
        }
        if files == self.known {
            return;
        }
        let f = StatFile {
            schema: STAT_SCHEMA.into(),
            files,
        };
        let _ = crate::files::write(store, &cuda_aot::json::to_vec(&f));
    }

    /// The files of `files` whose content is no longer the recorded one (or that are gone).
    pub fn changed<'a>(&self, names: &Names, files: &'a [DepFile]) -> Vec<&'a DepFile> {
        files
            .iter()
            .filter(|f| self.get(&names.resolve(&f.name), !f.is_project()) != Some(f.digest))
            .collect()
    }

    /// Whether every file of `files` still has its recorded content.
    pub fn all_match(&self, names: &Names, files: &[DepFile]) -> bool {
        files
            .iter()
            .all(|f| self.get(&names.resolve(&f.name), !f.is_project()) == Some(f.digest))
    }
}

/// A stored file set, read and checked against the disk once per build.
pub struct CheckedSet {
    /// Its files.
    pub files: Vec<DepFile>,
    /// Whether every one still has its recorded content.
    pub unchanged: bool,
}

/// Everything a build needs to match stored records against the disk: the names, the
/// content digests and the file sets checked so far.
pub struct Inputs<'a> {
    cache: &'a Cache,
    /// Stable names of this build's folders.
    pub names: Names,
    /// Content digests, shared by every job.
    pub digests: FileDigests,
    sets: Mutex<HashMap<Digest, SetCell>>,
}

/// A set's check, done by the first job that needs it (the others wait for it).
type SetCell = Arc<OnceLock<Option<Arc<CheckedSet>>>>;

/// How a stored record compares with the disk.
pub enum Match {
    /// Every file it names is unchanged.
    Unchanged,
    /// Some files changed (or are gone), or its file set is missing from the cache.
    Changed {
        /// The changed files (project files and headers alike).
        files: Vec<DepFile>,
        /// Its file set could not be read.
        set_missing: bool,
    },
}

impl<'a> Inputs<'a> {
    /// Inputs of a build reading records (and remembered digests) from `cache`.
    pub fn new(cache: &'a Cache, names: Names) -> Self {
        Inputs {
            cache,
            names,
            digests: FileDigests::with_store(cache.stat_path()),
            sets: Mutex::default(),
        }
    }

    /// The stored set `id`, checked against the disk (once per build).
    pub fn set(&self, id: &Digest) -> Option<Arc<CheckedSet>> {
        let cell = self
            .sets
            .lock()
            .expect("set memo")
            .entry(*id)
            .or_default()
            .clone();
        cell.get_or_init(|| {
            self.cache.set(id).map(|s| {
                let unchanged = self.digests.all_match(&self.names, &s.files);
                Arc::new(CheckedSet {
                    files: s.files,
                    unchanged,
                })
            })
        })
        .clone()
    }

    /// The full record of `rec` when every file it names is unchanged, else `None`. The
    /// cheap test: it stops at the first changed file.
    pub fn unchanged(&self, rec: &StoredRecord) -> Option<DepRecord> {
        if !self.digests.all_match(&self.names, &rec.files) {
            return None;
        }
        let mut files = rec.files.clone();
        if let Some(id) = &rec.set {
            let set = self.set(id)?;
            if !set.unchanged {
                return None;
            }
            files.extend(set.files.iter().cloned());
        }
        Some(DepRecord::new(files, rec.compile_ms))
    }

    /// How `rec` compares with the disk, naming every changed file (for `--explain`).
    pub fn compare(&self, rec: &StoredRecord) -> Match {
        let mut files: Vec<DepFile> = self
            .digests
            .changed(&self.names, &rec.files)
            .into_iter()
            .cloned()
            .collect();
        let mut set_missing = false;
        if let Some(id) = &rec.set {
            match self.set(id) {
                Some(s) if !s.unchanged => files.extend(
                    self.digests
                        .changed(&self.names, &s.files)
                        .into_iter()
                        .cloned(),
                ),
                Some(_) => {}
                None => set_missing = true,
            }
        }
        if files.is_empty() && !set_missing {
            return Match::Unchanged;
        }
        Match::Changed { files, set_missing }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_folds_only_what_it_can() {
        let n = |s: &str| normalise(Path::new(s)).display().to_string();
        assert_eq!(n("a/./b/../c"), "a/c");
        assert_eq!(n("../../a"), "../../a");
        assert_eq!(n("../k/../../x"), "../../x");
        assert_eq!(n("/tk/bin/..//include/x.h"), "/tk/include/x.h");
        assert_eq!(n("/.."), "/");
    }

    #[test]
    fn line_tables_name_project_files_as_the_spec_does() {
        let names = Names::new(
            Path::new("/w/spec/../kernels/src"),
            Path::new("/tk"),
            [("../include".to_string(), PathBuf::from("/w/include"))],
        );
        let p = |s: &str| names.portable(Path::new(s), "../kernels/src");
        assert_eq!(p("ntt.cu"), "../kernels/src/ntt.cu");
        assert_eq!(p("/w/kernels/src/sub/a.cuh"), "../kernels/src/sub/a.cuh");
        assert_eq!(p("../../include/f/launch.cuh"), "../include/f/launch.cuh");
        assert_eq!(
            p("/tk/bin/..//include/cuda.h"),
            "cuda-toolkit/include/cuda.h"
        );
        assert_eq!(p("/usr/include/stdio.h"), "/usr/include/stdio.h");
    }

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
    fn remembered_digests_hold_while_the_stat_data_does() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("stat.json");
        let h = dir.path().join("h.h");
        std::fs::write(&h, "one").unwrap();
        let settled = |store: &Path| FileDigests {
            settle_ns: 0,
            ..FileDigests::with_store(store.to_path_buf())
        };
        let first = settled(&store);
        assert_eq!(first.get(&h, true), Some(Digest::of(b"one")));
        first.save();
        // Unchanged stat data: the remembered digest is used, the file is not read (a
        // digest planted in the memo shows through).
        let text = std::fs::read_to_string(&store)
            .unwrap()
            .replace(&Digest::of(b"one").hex(), &Digest::of(b"planted").hex());
        std::fs::write(&store, text).unwrap();
        assert_eq!(settled(&store).get(&h, true), Some(Digest::of(b"planted")));
        // Not remembered for the project's files.
        assert_eq!(settled(&store).get(&h, false), Some(Digest::of(b"one")));
        // Same size, the old modification time put back: the change time moved, so the
        // file is read again.
        let mtime = std::fs::metadata(&h).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&h, "two").unwrap();
        std::fs::File::options()
            .append(true)
            .open(&h)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_eq!(settled(&store).get(&h, true), Some(Digest::of(b"two")));
        // A file changed moments ago is not remembered with the default settling time.
        let fresh = FileDigests::with_store(dir.path().join("other.json"));
        fresh.get(&h, true);
        fresh.save();
        assert!(!dir.path().join("other.json").exists());
    }

    #[test]
    fn a_record_matches_until_a_project_file_or_a_header_of_its_set_changes() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        let sys = dir.path().join("sys");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&sys).unwrap();
        std::fs::write(src.join("a.cu"), "a").unwrap();
        std::fs::write(sys.join("s.h"), "s").unwrap();
        let cache = Cache::new(&dir.path().join("cache"));
        let names = Names::new(&src, &dir.path().join("tk"), []);
        let file = |n: &str, c: &[u8]| DepFile {
            name: n.into(),
            digest: Digest::of(c),
        };
        let sys_name = sys.join("s.h").display().to_string();
        let rec = DepRecord::new(vec![file("src:a.cu", b"a"), file(&sys_name, b"s")], 1);
        let (stored, set) = super::super::cache::split(&rec, Digest::of(b"id"));
        cache.put_set(&set.unwrap()).unwrap();

        let inputs = Inputs::new(&cache, names.clone());
        let full = inputs.unchanged(&stored).expect("unchanged");
        assert_eq!(full.source_digest(), rec.source_digest());

        // A header of the shared set changes: the record no longer matches, and the
        // comparison names that header.
        std::fs::write(sys.join("s.h"), "S").unwrap();
        let inputs = Inputs::new(&cache, names.clone());
        assert!(inputs.unchanged(&stored).is_none());
        match inputs.compare(&stored) {
            Match::Changed { files, set_missing } => {
                assert!(!set_missing);
                assert_eq!(
                    files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
                    [sys_name.as_str()]
                );
            }
            Match::Unchanged => panic!("a changed header matched"),
        }
        // Its set gone from the cache: no match either.
        std::fs::write(sys.join("s.h"), "s").unwrap();
        std::fs::remove_dir_all(cache.sets_dir()).unwrap();
        let inputs = Inputs::new(&cache, names);
        assert!(inputs.unchanged(&stored).is_none());
        assert!(matches!(
            inputs.compare(&stored),
            Match::Changed {
                set_missing: true,
                ..
            }
        ));
    }
}
