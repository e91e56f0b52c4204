//! The build cache's size bound: after a build that added to the cache, entries are removed
//! least recently used first until the cache is back under 90 % of its bound, never one
//! that the current build uses; then the records, header sets and last-build notes that
//! only described removed entries go too.

use anyhow::{Context, Result};
use cuda_aot::Digest;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use super::cache::{Cache, TOUCH_AFTER};

/// The default bound of a build cache: 2 GiB (about 50 000 cubins of the release set's size).
pub const DEFAULT_MAX_SIZE: u64 = 2 << 30;

/// What the current build uses: never evicted.
#[derive(Debug, Default)]
pub struct Protected {
    /// Identity digests of its entries.
    pub objects: HashSet<Digest>,
    /// Its dependency keys.
    pub deps: HashSet<Digest>,
    /// The header sets its records refer to.
    pub sets: HashSet<Digest>,
}

/// What an eviction pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eviction {
    /// Bytes in the cache before.
    pub before: u64,
    /// Bytes after.
    pub after: u64,
    /// Entries removed.
    pub entries: usize,
    /// The bound.
    pub max: u64,
}

impl Eviction {
    /// Whether the cache is still over its bound (what the current build uses is larger).
    pub fn over(&self) -> bool {
        self.after > self.max
    }
}

struct Object {
    path: PathBuf,
    id: Option<Digest>,
    size: u64,
    last_used: SystemTime,
}

fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

fn parse_hex(name: &str) -> Option<Digest> {
    let mut d = [0u8; 32];
    hex::decode_to_slice(name, &mut d).ok()?;
    Some(Digest(d))
}

/// The regular files of `dir` (not recursive): path, size, mtime.
fn files_of(dir: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            m.is_file().then(|| {
                (
                    e.path(),
                    m.len(),
                    m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                )
            })
        })
        .collect()
}

impl Cache {
    fn objects(&self) -> Vec<Object> {
        let Ok(rd) = std::fs::read_dir(self.objects_dir()) else {
            return Vec::new();
        };
        rd.flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| {
                let path = e.path();
                // An entry's manifest, or a unit's note (one file of a module of several).
                let manifest = std::fs::metadata(path.join("manifest.json"))
                    .or_else(|_| std::fs::metadata(path.join("unit.json")))
                    .ok();
                let last_used = manifest
                    .as_ref()
                    .and_then(|m| m.modified().ok())
                    .or_else(|| e.metadata().and_then(|m| m.modified()).ok())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                Object {
                    id: e.file_name().to_str().and_then(parse_hex),
                    size: manifest.map_or(0, |m| m.len()) + file_size(&path.join("blob")),
                    last_used,
                    path,
                }
            })
            .collect()
    }

    /// The cache's size in bytes: entries, records, header sets, last-build notes and
    /// remembered digests.
    pub fn size(&self) -> u64 {
        let meta: u64 = [self.deps_dir(), self.sets_dir(), self.last_dir()]
            .iter()
            .flat_map(|d| files_of(d))
            .map(|f| f.1)
            .sum();
        meta + file_size(&self.stat_path()) + self.objects().iter().map(|o| o.size).sum::<u64>()
    }

    /// Removes an entry folder: renamed into `tmp/` first, so a reader sees the whole
    /// entry or none of it.
    fn remove_object(&self, path: &Path) -> Result<()> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let tmp = self.root().join("tmp");
        std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let doomed = tmp.join(format!(
            "evict-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        match std::fs::rename(path, &doomed) {
            Ok(()) => std::fs::remove_dir_all(&doomed)
                .with_context(|| format!("removing the evicted entry {}", doomed.display())),
            // Another build removed it first.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("evicting {}", path.display())),
        }
    }

    /// Keeps the cache under `max` bytes: when it is over, removes the least recently used
    /// entries not in `keep` until it is under 90 % of `max`, then the records, sets and
    /// notes that only described removed entries.
    pub fn evict(&self, max: u64, keep: &Protected) -> Result<Eviction> {
        let before = self.size();
        let mut ev = Eviction {
            before,
            after: before,
            entries: 0,
            max,
        };
        if before <= max {
            return Ok(ev);
        }
        let low_water = max / 10 * 9;
        let mut objects = self.objects();
        objects.sort_by_key(|o| o.last_used);
        let mut total = before;
        let mut remaining: HashSet<Digest> = objects.iter().filter_map(|o| o.id).collect();
        for o in &objects {
            if total <= low_water {
                break;
            }
            if o.id.is_some_and(|id| keep.objects.contains(&id)) {
                continue;
            }
            self.remove_object(&o.path)?;
            total = total.saturating_sub(o.size);
            ev.entries += 1;
            if let Some(id) = o.id {
                remaining.remove(&id);
            }
        }
        if ev.entries > 0 {
            self.prune_metadata(&remaining, keep)?;
        }
        ev.after = self.size();
        Ok(ev)
    }

    /// Drops records whose entry is gone (a file left without records goes), header sets
    /// no record refers to, and last-build notes of removed entries.
    fn prune_metadata(&self, remaining: &HashSet<Digest>, keep: &Protected) -> Result<()> {
        let recent =
            |t: SystemTime| SystemTime::now().duration_since(t).unwrap_or_default() < TOUCH_AFTER;
        let mut sets: HashSet<Digest> = keep.sets.clone();
        for (path, _, _) in files_of(&self.deps_dir()) {
            let key = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(parse_hex);
            let protected = key.is_some_and(|k| keep.deps.contains(&k));
            let records = self.read_records(&path).unwrap_or_default();
            let kept: Vec<_> = records
                .iter()
                .filter(|r| remaining.contains(&r.identity))
                .cloned()
                .collect();
            sets.extend(kept.iter().filter_map(|r| r.set));
            if protected {
                sets.extend(records.iter().filter_map(|r| r.set));
                continue;
            }
            if kept.len() != records.len() || records.is_empty() {
                self.write_records(&path, &kept)?;
            }
        }
        for (path, _, modified) in files_of(&self.sets_dir()) {
            let id = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(parse_hex);
            // A set written moments ago may belong to a build still running beside this one.
            if id.is_some_and(|id| !sets.contains(&id)) && !recent(modified) {
                let _ = std::fs::remove_file(&path);
            }
        }
        for (path, _, _) in files_of(&self.last_dir()) {
            let gone = self
                .read_last(&path)
                .is_none_or(|l| !remaining.contains(&l.identity.digest()));
            if gone {
                let _ = std::fs::remove_file(&path);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn fake_entry(cache: &Cache, name: &[u8], bytes: usize, age_h: u64) -> Digest {
        let id = Digest::of(name);
        let dir = cache.object_dir(&id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("blob"), vec![0u8; bytes]).unwrap();
        std::fs::write(dir.join("manifest.json"), b"{}").unwrap();
        let f = std::fs::File::options()
            .append(true)
            .open(dir.join("manifest.json"))
            .unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(age_h * 3600))
            .unwrap();
        id
    }

    #[test]
    fn evicts_least_recently_used_first_and_never_what_the_build_uses() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let oldest = fake_entry(&cache, b"oldest", 1000, 30);
        let old = fake_entry(&cache, b"old", 1000, 20);
        let used = fake_entry(&cache, b"used-by-this-build", 1000, 40);
        let fresh = fake_entry(&cache, b"fresh", 1000, 1);
        let mut keep = Protected::default();
        keep.objects.insert(used);

        // Under the bound: nothing happens.
        let ev = cache.evict(10_000, &keep).unwrap();
        assert_eq!(ev.entries, 0);
        assert_eq!(ev.before, 4 * 1002);

        // Over it: the least recently used entries go, the protected one stays although it
        // is the oldest of all.
        let ev = cache.evict(3000, &keep).unwrap();
        assert_eq!(ev.entries, 2);
        assert!(!ev.over());
        assert!(ev.after <= 3000 / 10 * 9, "{ev:?}");
        assert!(!cache.has_object(&oldest));
        assert!(!cache.has_object(&old));
        assert!(cache.has_object(&used));
        assert!(cache.has_object(&fresh));
        assert_eq!(cache.size(), ev.after);

        // A bound below what the build uses: it keeps its entries and says it is over.
        let mut keep_all = Protected::default();
        keep_all.objects.extend([used, fresh]);
        let ev = cache.evict(100, &keep_all).unwrap();
        assert_eq!(ev.entries, 0);
        assert!(ev.over());
        assert!(cache.has_object(&used) && cache.has_object(&fresh));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("tmp")).unwrap().collect();
        assert!(leftovers.is_empty(), "evicted entries left in tmp/");
    }
}
