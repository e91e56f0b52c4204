//! Atomic publishing into a directory registry (the registry layout of the architecture).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::metadata::{Index, IndexEntry, IndexRef, Root, Time, Timestamp};
use cuda_aot::source::{DirSource, RegistrySource, layout};
use cuda_aot::{Channel, Digest, Limits, Manifest, SecretKey};

use crate::error::{Error, Result};

/// A signed module manifest with the blob it describes, ready to publish.
#[derive(Debug, Clone)]
pub struct SignedModule {
    manifest: Manifest,
    envelope: Vec<u8>,
    blob: Vec<u8>,
}

impl SignedModule {
    /// Pairs a signed manifest file with its blob, checking that the blob is the one the
    /// manifest describes (size and blake3). Signatures are checked by the caller against
    /// its trust root; the registry stores exactly these bytes.
    pub fn new(envelope: Vec<u8>, blob: Vec<u8>) -> Result<Self> {
        let limits = Limits::default();
        let env = Envelope::parse(
            &envelope,
            limits.manifest,
            PayloadType::Manifest,
            "signed manifest",
        )?;
        let manifest: Manifest = cuda_aot::json::parse(
            &env.payload_bytes("signed manifest")?,
            limits.manifest,
            "manifest",
        )?;
        let id = &manifest.identity;
        let mismatch = |reason: String| Error::BlobMismatch {
            module: id.module.to_string(),
            target: id.sm.to_string(),
            reason,
        };
        if blob.len() as u64 != manifest.size {
            return Err(mismatch(format!(
                "is {} bytes, the manifest says {}",
                blob.len(),
                manifest.size
            )));
        }
        let d = Digest::of(&blob);
        if d != manifest.module_digest {
            return Err(mismatch(format!(
                "hashes to {d}, the manifest says {}",
                manifest.module_digest
            )));
        }
        Ok(SignedModule {
            manifest,
            envelope,
            blob,
        })
    }

    /// The manifest payload.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
}

/// Settings of one publish.
#[derive(Debug, Clone)]
pub struct PublishOptions {
    /// The publisher's clock.
    pub now: Time,
    /// Lifetime of the timestamp (short: clients refuse a registry nobody refreshes).
    pub timestamp_ttl: Duration,
    /// Lifetime of the index.
    pub index_ttl: Duration,
}

impl Default for PublishOptions {
    fn default() -> Self {
        PublishOptions {
            now: Time::now(),
            timestamp_ttl: Duration::from_secs(7 * 86_400),
            index_ttl: Duration::from_secs(365 * 86_400),
        }
    }
}

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The new index version.
    pub index_version: u64,
    /// The new timestamp version.
    pub timestamp_version: u64,
    /// Blobs written by this publish.
    pub blobs_written: usize,
    /// Blobs already present with the right content (idempotent re-publish).
    pub blobs_reused: usize,
    /// Entries of the new index.
    pub entries: usize,
}

/// The steps of a publish, in order. A publisher killed after any of them leaves a
/// registry that still verifies at the previous version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Every blob is in `blobs/`.
    Blobs,
    /// Every signed manifest is in `manifests/`.
    Manifests,
    /// The publish lock is held.
    Locked,
    /// The next index file exists (created with create-new semantics).
    Index,
    /// `timestamp.json` names the new index: the release is visible.
    Timestamp,
}

impl Step {
    /// The step's name (used by the test pause hook).
    pub fn as_str(&self) -> &'static str {
        match self {
            Step::Blobs => "blobs",
            Step::Manifests => "manifests",
            Step::Locked => "locked",
            Step::Index => "index",
            Step::Timestamp => "timestamp",
        }
    }
}

/// A registry in a local directory, as written by a publisher.
#[derive(Debug, Clone)]
pub struct DirRegistry {
    root: PathBuf,
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl DirRegistry {
    /// The registry at `root` (created on first publish).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DirRegistry { root: root.into() }
    }

    /// The registry directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A reader over the same directory.
    pub fn source(&self) -> DirSource {
        DirSource::new(&self.root)
    }

    /// Stores the signed trust root file as `root/<N>.root.json` unless that file already
    /// holds exactly these bytes. A different file at the same version is refused.
    pub fn ensure_root(&self, root_file: &[u8]) -> Result<u64> {
        let limits = Limits::default();
        let env = Envelope::parse(root_file, limits.root, PayloadType::Root, "trust root")?;
        let root: Root =
            cuda_aot::json::parse(&env.payload_bytes("trust root")?, limits.root, "trust root")?;
        let rel = layout::root(root.version);
        let path = self.root.join(&rel);
        match fs::read(&path) {
            Ok(existing) if existing == root_file => Ok(root.version),
            Ok(_) => Err(Error::RootConflict {
                path,
                version: root.version,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                create_new_atomic(&path, root_file).map_err(|e| io(&path, e))?;
                Ok(root.version)
            }
            Err(e) => Err(io(&path, e)),
        }
    }

    /// The current timestamp and index payloads (unverified: the publisher reads its own
    /// registry to build the next index; clients verify everything).
    pub fn current(&self) -> Result<Option<(Timestamp, Index)>> {
        let limits = Limits::default();
        let src = self.source();
        let Some(ts_bytes) = src.read_at_most(layout::TIMESTAMP, limits.timestamp)? else {
            return Ok(None);
        };
        let ts: Timestamp = payload(
            &ts_bytes,
            limits.timestamp,
            PayloadType::Timestamp,
            "timestamp",
        )?;
        let rel = layout::index(ts.index.version);
        let idx_bytes =
            cuda_aot::source::read_exact_signed(&src, &rel, ts.index.size, &ts.index.digest, &rel)?;
        let index: Index = payload(&idx_bytes, limits.index, PayloadType::Index, &rel)?;
        Ok(Some((ts, index)))
    }

    /// Publishes `modules` as the next index version, signed by `publisher` keys.
    ///
    /// Entries for the same module, target and kind replace the old ones; others are kept.
    /// Fails with [`Error::Conflict`] when another publisher committed after this one read
    /// the current version; retrying then succeeds.
    pub fn publish(
        &self,
        modules: &[SignedModule],
        publisher: &[&SecretKey],
        opts: &PublishOptions,
    ) -> Result<Published> {
        if !self.root.join(layout::root(1)).exists() {
            return Err(Error::NoRoot {
                path: self.root.clone(),
            });
        }
        let base = self.current()?;
        let (base_ts, base_index) = match &base {
            Some((ts, idx)) => (ts.version, idx.version),
            None => (0, 0),
        };
        let channel = modules
            .first()
            .map(|m| m.manifest.channel)
            .or(base.as_ref().map(|b| b.1.channel))
            .unwrap_or(Channel::Dev);
        let base_channel = base.as_ref().map(|b| b.1.channel).unwrap_or(channel);
        if let Some(m) = modules
            .iter()
            .find(|m| m.manifest.channel != channel || m.manifest.channel != base_channel)
        {
            return Err(Error::Core(cuda_aot::Error::Channel {
                what: m.manifest.label(),
                required: base_channel.to_string(),
                found: m.manifest.channel.to_string(),
            }));
        }

        let (mut written, mut reused) = (0, 0);
        for m in modules {
            if self.put_content(&layout::blob(&m.manifest.module_digest), &m.blob)? {
                written += 1;
            } else {
                reused += 1;
            }
        }
        pause_point(Step::Blobs);
        let mut new_entries = Vec::with_capacity(modules.len());
        for m in modules {
            let d = Digest::of(&m.envelope);
            self.put_content(&layout::manifest(&d), &m.envelope)?;
            let id = &m.manifest.identity;
            new_entries.push(IndexEntry {
                module: id.module.clone(),
                sm: id.sm,
                kind: id.kind,
                manifest: d,
                manifest_size: m.envelope.len() as u64,
                identity: id.digest(),
                since: base_index + 1,
            });
        }
        pause_point(Step::Manifests);

        let version = base_index + 1;
        let entries = merge_entries(base.map(|b| b.1.entries).unwrap_or_default(), new_entries);
        let index = Index {
            schema: Index::SCHEMA.into(),
            version,
            expires: opts.now.plus(opts.index_ttl),
            channel,
            entries,
        };
        let index_file = Envelope::sign(
            PayloadType::Index,
            &cuda_aot::json::to_vec(&index),
            publisher,
        )
        .to_bytes();

        let _lock = self.lock()?;
        pause_point(Step::Locked);
        // Under the lock: if anyone committed since we read, we lost the race.
        let now_ts = self.current()?.map(|(ts, _)| ts.version).unwrap_or(0);
        if now_ts != base_ts {
            return Err(Error::Conflict {
                version,
                base: base_index,
            });
        }
        let index_path = self.root.join(layout::index(version));
        if index_path.exists() {
            // Only a publisher holding the lock creates an index, and it replaces the
            // timestamp before letting go: an index past the timestamp is the leftover of
            // a publisher that died between the two steps. Nobody references it.
            fs::remove_file(&index_path).map_err(|e| io(&index_path, e))?;
        }
        match create_new_atomic(&index_path, &index_file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(Error::Conflict {
                    version,
                    base: base_index,
                });
            }
            Err(e) => return Err(io(&index_path, e)),
        }
        pause_point(Step::Index);

        let ts = Timestamp {
            schema: Timestamp::SCHEMA.into(),
            version: base_ts + 1,
            expires: opts.now.plus(opts.timestamp_ttl),
            index: IndexRef {
                version,
                digest: Digest::of(&index_file),
                size: index_file.len() as u64,
            },
        };
        let ts_file = Envelope::sign(
            PayloadType::Timestamp,
            &cuda_aot::json::to_vec(&ts),
            publisher,
        )
        .to_bytes();
        let ts_path = self.root.join(layout::TIMESTAMP);
        replace_atomic(&ts_path, &ts_file).map_err(|e| io(&ts_path, e))?;
        pause_point(Step::Timestamp);
        Ok(Published {
            index_version: version,
            timestamp_version: ts.version,
            blobs_written: written,
            blobs_reused: reused,
            entries: index.entries.len(),
        })
    }

    /// Re-signs the timestamp for the current index with a new expiry and the next
    /// timestamp version, without publishing anything else: what a publisher runs
    /// periodically so clients do not refuse an unchanged registry as expired.
    pub fn refresh_timestamp(
        &self,
        publisher: &[&SecretKey],
        opts: &PublishOptions,
    ) -> Result<Timestamp> {
        let _lock = self.lock()?;
        let Some((current, _)) = self.current()? else {
            return Err(Error::Core(cuda_aot::Error::Missing {
                what: "timestamp".into(),
                path: self.root.join(layout::TIMESTAMP).display().to_string(),
            }));
        };
        let ts = Timestamp {
            version: current.version + 1,
            expires: opts.now.plus(opts.timestamp_ttl),
            ..current
        };
        let file = Envelope::sign(
            PayloadType::Timestamp,
            &cuda_aot::json::to_vec(&ts),
            publisher,
        )
        .to_bytes();
        let path = self.root.join(layout::TIMESTAMP);
        replace_atomic(&path, &file).map_err(|e| io(&path, e))?;
        Ok(ts)
    }

    /// Writes a content-addressed file unless it already holds exactly these bytes.
    /// Returns whether it wrote.
    fn put_content(&self, rel: &str, bytes: &[u8]) -> Result<bool> {
        let path = self.root.join(rel);
        if let Ok(existing) = fs::read(&path)
            && existing == bytes
        {
            return Ok(false);
        }
        replace_atomic(&path, bytes).map_err(|e| io(&path, e))?;
        Ok(true)
    }

    fn lock(&self) -> Result<File> {
        fs::create_dir_all(&self.root).map_err(|e| io(&self.root, e))?;
        let path = self.root.join(".lock");
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        // An OS advisory lock: released by the kernel if the publisher dies.
        f.lock().map_err(|e| io(&path, e))?;
        Ok(f)
    }
}

fn payload<T: serde::de::DeserializeOwned>(
    file: &[u8],
    limit: u64,
    pt: PayloadType,
    what: &str,
) -> Result<T> {
    let env = Envelope::parse(file, limit, pt, what)?;
    Ok(cuda_aot::json::parse(
        &env.payload_bytes(what)?,
        limit,
        what,
    )?)
}

fn merge_entries(old: Vec<IndexEntry>, new: Vec<IndexEntry>) -> Vec<IndexEntry> {
    let mut out: Vec<IndexEntry> = old
        .into_iter()
        .filter(|o| {
            !new.iter()
                .any(|n| (&n.module, n.sm, n.kind) == (&o.module, o.sm, o.kind))
        })
        .collect();
    for n in new {
        let same = out
            .iter()
            .position(|o| (&o.module, o.sm, o.kind) == (&n.module, n.sm, n.kind));
        match same {
            Some(i) => out[i] = n,
            None => out.push(n),
        }
    }
    out.sort_by(|a, b| (&a.module, a.sm, a.kind).cmp(&(&b.module, b.sm, b.kind)));
    out
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `bytes` to a fresh temporary file in the same folder and fsyncs it.
fn write_temp(path: &Path, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let dir = path.parent().expect("registry paths have a parent");
    fs::create_dir_all(dir)?;
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".tmp.{}.{n}.{name}", std::process::id()));
    let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(tmp)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// temp + fsync + rename (+ fsync of the folder): readers see the old file or the new one,
/// never a part, and a crash after it returns cannot lose the new file. Creates the parent
/// folder if needed. The one atomic-write routine of the workspace (xtask uses it too).
pub fn replace_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = write_temp(path, bytes)?;
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })?;
    sync_dir(path.parent().expect("has parent"))
}

/// temp + fsync + hard link: creates `path` with its full content, or fails with
/// `AlreadyExists` if it exists (the loser of a race gets a conflict, not a merge).
fn create_new_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = write_temp(path, bytes)?;
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    linked?;
    sync_dir(path.parent().expect("has parent"))
}

/// Test hook for crash and race tests: with `CUDA_AOT_PUBLISH_PAUSE=<step>:<dir>`, the
/// publisher announces `<dir>/<step>.<pid>.reached` after that step and waits (up to a
/// minute) for `<dir>/go` before going on, so a test can kill it or line up two
/// publishers. Unset, it costs one environment lookup per step.
fn pause_point(step: Step) {
    let Some(spec) = std::env::var_os("CUDA_AOT_PUBLISH_PAUSE") else {
        return;
    };
    let spec = spec.to_string_lossy().into_owned();
    let Some((name, dir)) = spec.split_once(':') else {
        return;
    };
    if name != step.as_str() {
        return;
    }
    let dir = Path::new(dir);
    let _ = fs::write(
        dir.join(format!("{name}.{}.reached", std::process::id())),
        b"",
    );
    for _ in 0..6000 {
        if dir.join("go").exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_different_root_of_the_same_version_is_a_root_conflict() {
        use cuda_aot::metadata::{Role, Roles};
        let d = tempfile::tempdir().unwrap();
        let root_file = |seed: u8| {
            let k = SecretKey::from_seed([seed; 32]);
            let role = |s: u8| Role {
                keys: vec![SecretKey::from_seed([s; 32]).public()],
                threshold: 1,
            };
            let root = Root {
                schema: Root::SCHEMA.into(),
                version: 1,
                expires: Time::now(),
                channel: Channel::Dev,
                roles: Roles {
                    root: role(seed),
                    builder: role(seed + 1),
                    reviewer: role(seed + 2),
                    publisher: role(seed + 3),
                },
            };
            Envelope::sign(PayloadType::Root, &cuda_aot::json::to_vec(&root), &[&k]).to_bytes()
        };
        let reg = DirRegistry::new(d.path());
        assert_eq!(reg.ensure_root(&root_file(1)).unwrap(), 1);
        assert_eq!(
            reg.ensure_root(&root_file(1)).unwrap(),
            1,
            "the same root again is fine"
        );
        let err = reg.ensure_root(&root_file(10)).unwrap_err();
        assert!(
            matches!(&err, Error::RootConflict { version: 1, .. }),
            "{err}"
        );
        assert!(err.fix().contains("trust-root --previous"), "{}", err.fix());
        assert_eq!(
            fs::read(d.path().join("root/1.root.json")).unwrap(),
            root_file(1)
        );
    }

    #[test]
    fn create_new_refuses_an_existing_file_and_leaves_no_temp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("index/2.index.json");
        create_new_atomic(&p, b"one").unwrap();
        let e = create_new_atomic(&p, b"two").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&p).unwrap(), b"one");
        assert_eq!(fs::read_dir(d.path().join("index")).unwrap().count(), 1);
    }
}
