//! Verified sync: copies a registry from a [`Remote`] into a local folder, driven by the
//! verifier. The normal verification (`verify_metadata`, then `complete` for every
//! entry: steps 1-8) runs through a [`RegistrySource`] that fetches each file it is asked for into
//! a staging folder inside the target; only when all of it passed are the staged files
//! moved into place, content-addressed files first, then roots, then the index, then
//! `timestamp.json` last, each atomically. Sync therefore holds no copy of the registry
//! layout: whatever the verifier reads is what a mirror needs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cuda_aot::Digest;
use cuda_aot::source::{DirSource, RegistrySource, layout};
use cuda_aot::state::TrustState;
use cuda_aot::verify::{Options, Select, Verified, rollback_floor, verify_metadata};

use crate::error::{Error, Result};
use crate::oci::{OciOptions, OciRemote};
use crate::remote::{HttpOptions, HttpRemote, Remote, read_capped};

/// The folder inside a sync target that holds the lock and the staged files. Never part
/// of the registry layout (servers refuse dot-folders).
pub const STAGING_DIR: &str = ".cuda-aot-sync";

/// Settings of one sync.
#[derive(Debug, Clone, Default)]
pub struct SyncOptions {
    /// How to verify (clock, skew, byte limits, required channel).
    pub verify: Options,
    /// The versions this machine has seen before (rollback protection). The versions of
    /// the target's current copy are added to it.
    pub seen: TrustState,
}

/// What a sync did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncReport {
    /// Where it synced from.
    pub from: String,
    /// The index version now in the target.
    pub index_version: u64,
    /// The timestamp version now in the target.
    pub timestamp_version: u64,
    /// The trust root version the registry is signed under.
    pub root_version: u64,
    /// Manifests (module × target) verified.
    pub modules: usize,
    /// Files fetched from the remote.
    pub files_fetched: usize,
    /// Bytes received from the remote.
    pub bytes_fetched: u64,
    /// Files already present locally and reused.
    pub files_reused: usize,
    /// Bytes of partial downloads continued with Range requests.
    pub bytes_resumed: u64,
    /// Transient failures retried.
    pub retries: u32,
    /// Files moved into the target (new or changed).
    pub files_committed: usize,
    /// Documents attached to the release (OCI referrers), each checked against the index,
    /// and how the registry listed them; None where the source attaches none.
    pub attestations: Option<(usize, String)>,
    /// The trust state to persist (highest versions seen).
    pub state: TrustState,
}

impl SyncReport {
    /// True when the target already held this exact release.
    pub fn up_to_date(&self) -> bool {
        self.files_committed == 0
    }
}

/// Where the bytes of one path read during verification came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    /// Already in the target. `checked`: its name is its blake3 and it matched.
    Local { checked: bool },
    /// Fetched into the staging folder.
    Staged,
    /// Not on the remote.
    Missing,
}

#[derive(Default)]
struct Record {
    origins: BTreeMap<String, Origin>,
    files_fetched: usize,
    bytes_fetched: u64,
    bytes_resumed: u64,
    retries: u32,
}

/// A [`RegistrySource`] over a [`Remote`] that stages what it fetches, reuses what the
/// target already holds, and records every path the verifier read.
pub struct SyncSource<'a> {
    remote: &'a dyn Remote,
    target: DirSource,
    staging: PathBuf,
    reuse: bool,
    record: Mutex<Record>,
}

impl<'a> SyncSource<'a> {
    /// A source fetching from `remote` into `staging`, reusing files of `target` when
    /// `reuse` is set.
    pub fn new(remote: &'a dyn Remote, target: &Path, staging: &Path, reuse: bool) -> Self {
        SyncSource {
            remote,
            target: DirSource::new(target),
            staging: staging.to_path_buf(),
            reuse,
            record: Mutex::new(Record::default()),
        }
    }

    /// The staged file of a layout path.
    fn staged(&self, path: &str) -> PathBuf {
        self.staging.join(path)
    }

    /// The layout paths read so far, with whether they were found.
    pub fn paths_read(&self) -> Vec<(String, bool)> {
        let r = self.record.lock().expect("sync record");
        r.origins
            .iter()
            .map(|(p, o)| (p.clone(), *o != Origin::Missing))
            .collect()
    }

    fn reused_unchecked(&self) -> bool {
        let r = self.record.lock().expect("sync record");
        r.origins
            .values()
            .any(|o| *o == Origin::Local { checked: false })
    }

    /// The local copy of `path` when it may be reused: a content-addressed file whose bytes
    /// hash to its name, or an immutable file (`root/`, `index/`) the target holds.
    fn local(&self, path: &str, max: u64) -> Option<(Vec<u8>, bool)> {
        if !self.reuse || path == layout::TIMESTAMP {
            return None;
        }
        let bytes = self.target.read_at_most(path, max).ok()??;
        match content_digest(path) {
            Some(d) => (Digest::of(&bytes) == d).then_some((bytes, true)),
            None => Some((bytes, false)),
        }
    }

    fn fetch(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let dest = self.staged(path);
        let named = content_digest(path);
        // A content-addressed file staged complete by an interrupted earlier sync.
        if let Some(d) = named
            && let Ok(b) = read_capped(&dest, max)
            && Digest::of(&b) == d
        {
            self.note(path, Origin::Staged, |_| {});
            return Ok(Some(b));
        }
        // Only content-addressed files resume: anything else may have changed since.
        let resume = named.is_some();
        let mut f = self.remote.fetch(path, max, &dest, resume)?;
        if !f.found {
            self.note(path, Origin::Missing, |r| r.retries += f.retries);
            return Ok(None);
        }
        let mut bytes = read_capped(&dest, max)?;
        if let Some(d) = named
            && f.resumed > 0
            && Digest::of(&bytes) != d
        {
            // The kept part was not a prefix of this file: fetch it whole once.
            let again = self.remote.fetch(path, max, &dest, false)?;
            f.transferred += again.transferred;
            f.retries += again.retries + 1;
            f.resumed = 0;
            if !again.found {
                self.note(path, Origin::Missing, |r| r.retries += f.retries);
                return Ok(None);
            }
            bytes = read_capped(&dest, max)?;
        }
        if named.is_some_and(|d| Digest::of(&bytes) != d) || bytes.len() as u64 > max {
            // Refused below by the verifier; never keep it to be resumed or committed.
            let _ = fs::remove_file(&dest);
        }
        self.note(path, Origin::Staged, |r| {
            r.files_fetched += 1;
            r.bytes_fetched += f.transferred;
            r.bytes_resumed += f.resumed;
            r.retries += f.retries;
        });
        Ok(Some(bytes))
    }

    fn note(&self, path: &str, origin: Origin, f: impl FnOnce(&mut Record)) {
        let mut r = self.record.lock().expect("sync record");
        r.origins.insert(path.to_string(), origin);
        f(&mut r);
    }
}

impl RegistrySource for SyncSource<'_> {
    fn read_at_most(&self, path: &str, max: u64) -> cuda_aot::Result<Option<Vec<u8>>> {
        cuda_aot::source::check_relative(path)?;
        let known = self
            .record
            .lock()
            .expect("sync record")
            .origins
            .get(path)
            .cloned();
        match known {
            Some(Origin::Missing) => return Ok(None),
            Some(Origin::Staged) => {
                return read_capped(&self.staged(path), max)
                    .map(Some)
                    .map_err(|e| match e {
                        Error::Io { path, source } => cuda_aot::Error::Io { path, source },
                        Error::Core(c) => c,
                        other => cuda_aot::Error::Source {
                            path: path.into(),
                            source: Box::new(other),
                        },
                    });
            }
            Some(Origin::Local { .. }) => return self.target.read_at_most(path, max),
            None => {}
        }
        if let Some((bytes, checked)) = self.local(path, max) {
            self.note(path, Origin::Local { checked }, |_| {});
            return Ok(Some(bytes));
        }
        match self.fetch(path, max) {
            Ok(b) => Ok(b),
            Err(Error::Core(c)) => Err(c),
            // The verifier speaks the core error type: the transport error travels whole
            // inside it, and [`sync`] reports it as itself.
            Err(e) => Err(cuda_aot::Error::Source {
                path: path.into(),
                source: Box::new(e),
            }),
        }
    }

    fn describe(&self) -> String {
        self.remote.describe()
    }
}

/// The remote a sync source address names: `oci://HOST/REPO:TAG` (an artifact in an OCI
/// registry, see [`crate::oci`]) or an `http(s)://` URL of the folder holding
/// `timestamp.json`.
pub fn open_remote(from: &str, http: &HttpOptions, oci: &OciOptions) -> Result<Box<dyn Remote>> {
    if from.starts_with("oci://") {
        let mut o = oci.clone();
        o.http = http.clone();
        Ok(Box::new(OciRemote::open(from, o)?))
    } else if from.starts_with("s3://") {
        let opts = crate::s3::S3Options {
            connect_timeout: http.connect_timeout,
            retries: usize::try_from(http.attempts.saturating_sub(1)).unwrap_or(0),
            ..crate::s3::S3Options::default()
        };
        Ok(Box::new(crate::s3::S3Client::open(from, &opts)?))
    } else {
        Ok(Box::new(HttpRemote::new(from, http.clone())?))
    }
}

/// The blake3 a content-addressed layout path names (`<kind>/blake3/.../<hex>[.json]`).
pub fn content_digest(path: &str) -> Option<Digest> {
    let mut parts = path.split('/');
    parts.next()?;
    if parts.next()? != "blake3" {
        return None;
    }
    let last = path.rsplit('/').next()?;
    let hex = last.strip_suffix(".json").unwrap_or(last);
    format!("blake3:{hex}").parse().ok()
}

/// The order in which staged files become visible: content-addressed files (and anything
/// else new) first, then roots, then the index, then `timestamp.json` last.
fn commit_rank(path: &str) -> u8 {
    if path == layout::TIMESTAMP {
        3
    } else if path.starts_with("index/") {
        2
    } else if path.starts_with("root/") {
        1
    } else {
        0
    }
}

/// Syncs the registry at `remote` into `target`: verifies it against `anchor` through the
/// remote, then makes the verified files visible in `target`, the timestamp last. On any
/// failure `target` is left exactly as it was (partial downloads stay staged and resume on
/// the next run).
pub fn sync(
    remote: &dyn Remote,
    target: &Path,
    anchor: &[u8],
    opts: &SyncOptions,
) -> Result<SyncReport> {
    let staging_root = target.join(STAGING_DIR);
    fs::create_dir_all(&staging_root).map_err(|e| Error::io(&staging_root, e))?;
    let _lock = lock(&staging_root.join("lock"))?;
    let staging = staging_root.join("files");

    // Rollback floor: never replace the target's copy with an older one, whatever
    // rotations its chain holds (a non-regular file in the target is refused, not read).
    let floor = rollback_floor(&DirSource::new(target), anchor, &opts.verify.limits);
    let seen = match floor {
        Ok(floor) => opts.seen.clone().merged(floor),
        Err(e @ (cuda_aot::Error::NotRegular { .. } | cuda_aot::Error::Symlink { .. })) => {
            return Err(Error::Core(e));
        }
        // A target whose chain does not verify (damaged, or of another trust root) sets no
        // floor: the saved state still protects, and the sync repairs the copy.
        Err(_) => opts.seen.clone(),
    };

    let (src, index) =
        match fetch_and_verify(remote, target, &staging, anchor, seen.clone(), opts, true) {
            Ok(v) => v,
            // A reused local file of the target may be damaged: once more, fetching everything.
            Err(f) if f.1 => fetch_and_verify(remote, target, &staging, anchor, seen, opts, false)
                .map_err(|f| f.0)?,
            Err(f) => return Err(f.0),
        };

    let attestations = check_attestations(remote, &index)?;
    let record = src.record.into_inner().expect("sync record");
    let mut staged: Vec<&String> = record
        .origins
        .iter()
        .filter(|(_, o)| **o == Origin::Staged)
        .map(|(p, _)| p)
        .collect();
    staged.sort_by_key(|p| (commit_rank(p), p.as_str()));
    let mut committed = 0;
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
    for path in staged {
        let from = staging.join(path);
        let to = target.join(path);
        // Unchanged files stay. Both reads are bounded and never block: a FIFO or a device
        // in the target is refused (the staged file is regular, it was just written).
        let new = fs::read(&from).map_err(|e| Error::io(&from, e))?;
        if cuda_aot::fs::read_at_most(&to, new.len() as u64)?.is_some_and(|old| old == new) {
            continue;
        }
        check_no_link(target, path)?;
        let dir = to
            .parent()
            .expect("layout paths have a parent")
            .to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        fs::rename(&from, &to).map_err(|e| Error::io(&to, e))?;
        if commit_rank(path) > 0 {
            // Make the earlier files durable before the next kind names them.
            for d in std::mem::take(&mut dirs) {
                fsync_dir(&d)?;
            }
            fsync_dir(&dir)?;
        } else {
            dirs.insert(dir);
        }
        committed += 1;
    }
    for d in dirs {
        fsync_dir(&d)?;
    }
    let _ = fs::remove_dir_all(&staging);

    Ok(SyncReport {
        from: remote.describe(),
        index_version: index.index().version,
        timestamp_version: index.timestamp().version,
        root_version: index.root().root().version,
        modules: index.manifests().len(),
        files_fetched: record.files_fetched,
        bytes_fetched: record.bytes_fetched,
        files_reused: record
            .origins
            .values()
            .filter(|o| matches!(o, Origin::Local { .. }))
            .count(),
        bytes_resumed: record.bytes_resumed,
        retries: record.retries,
        files_committed: committed,
        attestations,
        state: index.state(),
    })
}

/// The documents `remote` attaches to the release beside its files (OCI referrers), each
/// required to be, byte for byte, a build statement or promotion record the verified
/// index lists (by blake3, under its own layout path): an attached document that is not is
/// refused, before anything is made visible. Returns how many there were and how they
/// were listed, or None where the remote attaches nothing.
fn check_attestations(
    remote: &dyn Remote,
    index: &cuda_aot::verify::Verified,
) -> Result<Option<(usize, String)>> {
    let Some((found, how)) = remote.attestations()? else {
        return Ok(None);
    };
    let idx = index.metadata().index();
    let listed: BTreeSet<String> = idx
        .statements
        .iter()
        .map(|d| layout::statement(&d.digest))
        .chain(idx.promotions.iter().map(|d| layout::promotion(&d.digest)))
        .collect();
    for (title, bytes) in &found {
        let ours = listed.contains(title)
            && content_digest(title).is_some_and(|d| d == cuda_aot::digest::Digest::of(bytes));
        if !ours {
            return Err(Error::Oci {
                reference: remote.describe(),
                reason: format!(
                    "an attestation attached to this release ({}) is not a build statement or promotion record of the index it verified: refused, nothing synced",
                    cuda_aot::error::escape_untrusted(title)
                ),
            });
        }
    }
    Ok(Some((found.len(), how)))
}

/// Runs the whole verification through a fresh [`SyncSource`]. On failure, also says
/// whether unchecked local files took part (then a run without reuse may succeed).
#[allow(clippy::type_complexity)]
fn fetch_and_verify<'a>(
    remote: &'a dyn Remote,
    target: &Path,
    staging: &Path,
    anchor: &[u8],
    seen: TrustState,
    opts: &SyncOptions,
    reuse: bool,
) -> std::result::Result<(SyncSource<'a>, Verified), Box<(Error, bool)>> {
    let src = SyncSource::new(remote, target, staging, reuse);
    // Steps 1-9, every file fetched as the verifier reads it, every blob (size first,
    // blake3, content) and source included, so a mirror holds only good bytes. One file at a time: the
    // fetches resume and retry in order.
    let run = || -> cuda_aot::Result<Verified> {
        let verified =
            verify_metadata(&src, anchor, seen, &opts.verify)?.complete(&src, Select::all())?;
        // A mirror holds what a rebuilder needs too (the sources the statements name), and
        // what tools that read sha256 check (every subject's sha256).
        verified.metadata().audit(&src)?;
        Ok(verified)
    };
    match run() {
        Ok(index) => Ok((src, index)),
        Err(e) => {
            let retry = reuse && src.reused_unchecked();
            let e = match e {
                cuda_aot::Error::Source { source, .. } if source.is::<Error>() => {
                    *source.downcast::<Error>().expect("checked")
                }
                e => Error::Core(e),
            };
            Err(Box::new((e, retry)))
        }
    }
}

fn lock(path: &Path) -> Result<File> {
    let f = cuda_aot::fs::open_lock_file(path).map_err(|e| Error::io(path, e))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(fs::TryLockError::WouldBlock) => Err(Error::Busy {
            path: path.to_path_buf(),
        }),
        Err(fs::TryLockError::Error(e)) => Err(Error::io(path, e)),
    }
}

/// Refuses to write through a symbolic link anywhere below the target.
fn check_no_link(target: &Path, rel: &str) -> Result<()> {
    let mut p = target.to_path_buf();
    for part in rel.split('/') {
        p.push(part);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(Error::Core(cuda_aot::Error::Symlink { path: p }));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(&p, e)),
        }
    }
    Ok(())
}

fn fsync_dir(dir: &Path) -> Result<()> {
    cuda_aot::fs::sync_dir(dir).map_err(|e| Error::io(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_addressed_paths_name_their_digest() {
        let d = Digest::of(b"x");
        assert_eq!(content_digest(&layout::blob(&d)), Some(d));
        assert_eq!(content_digest(&layout::manifest(&d)), Some(d));
        assert_eq!(content_digest(&layout::promotion(&d)), Some(d));
        assert_eq!(
            content_digest(&format!("statements/blake3/{}.json", d.hex())),
            Some(d),
            "a new content-addressed kind needs no change here"
        );
        for p in [
            layout::TIMESTAMP.to_string(),
            layout::index(3),
            layout::root(2),
            "blobs/blake3/ab/xyz".into(),
        ] {
            assert_eq!(content_digest(&p), None, "{p}");
        }
    }

    #[test]
    fn the_timestamp_commits_last_and_the_index_before_it() {
        let d = Digest::of(b"x");
        let mut paths = [
            layout::TIMESTAMP.to_string(),
            layout::index(4),
            layout::root(2),
            layout::blob(&d),
            layout::manifest(&d),
        ];
        paths.sort_by_key(|p| (commit_rank(p), p.clone()));
        assert_eq!(paths[4], layout::TIMESTAMP);
        assert_eq!(paths[3], layout::index(4));
        assert_eq!(paths[2], layout::root(2));
    }
}
