//! A registry in a local directory: the [`Store`] the publish algorithm writes through, with
//! content-addressed files written atomically, the next index created only if absent and
//! `timestamp.json` replaced last, under an OS advisory lock. Every write goes one folder at
//! a time below the root and refuses a symbolic link on the way (`cuda_aot::fs`'s
//! `*_beneath` functions), so a link planted in the registry cannot redirect a write
//! outside it.

use std::fs::File;
use std::path::{Path, PathBuf};

use cuda_aot::fs::{create_new_atomic_beneath, remove_beneath, write_atomic_beneath};
use cuda_aot::metadata::{Index, Timestamp};
use cuda_aot::source::{DirSource, RegistrySource, layout};
use cuda_aot::trust::decode_unverified;
use cuda_aot::{Digest, Limits, SecretKey};

use crate::error::{Error, Result};
use crate::publish::{self, Commit, PublishOptions, Published, Release, Step, Store, pause_point};

/// A registry in a local directory, as written by a publisher.
#[derive(Debug, Clone)]
pub struct DirRegistry {
    root: PathBuf,
    source: DirSource,
    limits: Limits,
}

impl DirRegistry {
    /// The registry at `root` (created on first publish).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        DirRegistry {
            source: DirSource::new(&root),
            root,
            limits: Limits::default(),
        }
    }

    /// The same registry, reading its own files back within `limits` (the caller's caps:
    /// a server's, a tool's) instead of the defaults.
    pub fn with_limits(self, limits: Limits) -> Self {
        DirRegistry { limits, ..self }
    }

    /// The registry directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Stores the signed trust root file as `root/<N>.root.json` unless that file already
    /// holds exactly these bytes. A different file at the same version is refused.
    pub fn ensure_root(&self, anchor: &[u8]) -> Result<u64> {
        publish::ensure_root(self, anchor, &self.limits)
    }

    /// Publishes `release` (see [`publish::publish`]).
    pub fn publish(
        &self,
        anchor: &[u8],
        release: &Release,
        publisher: &[&SecretKey],
        opts: &PublishOptions,
    ) -> Result<Published> {
        publish::publish(self, anchor, release, publisher, opts)
    }

    /// Re-signs the timestamp (see [`publish::refresh_timestamp`]).
    pub fn refresh_timestamp(
        &self,
        anchor: &[u8],
        publisher: &[&SecretKey],
        opts: &PublishOptions,
    ) -> Result<Timestamp> {
        publish::refresh_timestamp(self, anchor, publisher, opts)
    }

    /// The current timestamp and index payloads, UNVERIFIED (for tests and tools that
    /// inspect what a publisher wrote; clients verify).
    pub fn current(&self) -> Result<Option<(Timestamp, Index)>> {
        let limits = self.limits;
        let src = &self.source;
        let Some(ts_bytes) = src.read_at_most(layout::TIMESTAMP, limits.timestamp)? else {
            return Ok(None);
        };
        let ts: Timestamp = decode_unverified(&ts_bytes, limits.timestamp, "timestamp")?;
        let rel = layout::index(ts.index.version);
        let idx_bytes =
            cuda_aot::source::read_exact_signed(src, &rel, ts.index.size, &ts.index.digest, &rel)?;
        let index: Index = decode_unverified(&idx_bytes, limits.index, &rel)?;
        Ok(Some((ts, index)))
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Replaces `rel` atomically below the root (see [`write_atomic_beneath`]).
    fn write(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        Ok(write_atomic_beneath(&self.root, rel, bytes)?)
    }

    /// Creates `rel` below the root unless it exists (`Ok(false)`).
    fn create_new(&self, rel: &str, bytes: &[u8]) -> Result<bool> {
        match create_new_atomic_beneath(&self.root, rel, bytes) {
            Ok(()) => Ok(true),
            Err(cuda_aot::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn lock(&self) -> Result<File> {
        std::fs::create_dir_all(&self.root).map_err(|e| Error::io(&self.root, e))?;
        let path = self.root.join(".lock");
        let f = cuda_aot::fs::open_lock_file(&path).map_err(|e| Error::io(&path, e))?;
        // An OS advisory lock: released by the kernel if the publisher dies.
        f.lock().map_err(|e| Error::io(&path, e))?;
        Ok(f)
    }

    /// The blake3 of the current `timestamp.json`, if any.
    fn timestamp_digest(&self) -> Result<Option<Digest>> {
        let limits = self.limits;
        Ok(self
            .source
            .read_at_most(layout::TIMESTAMP, limits.timestamp)?
            .map(|b| Digest::of(&b)))
    }
}

impl Store for DirRegistry {
    fn source(&self) -> &dyn RegistrySource {
        &self.source
    }

    fn put_content(&self, rel: &str, bytes: &[u8]) -> Result<bool> {
        if let Ok(Some(existing)) = self.source.read_at_most(rel, bytes.len() as u64)
            && existing == bytes
        {
            return Ok(false);
        }
        self.write(rel, bytes)?;
        Ok(true)
    }

    fn put_root(&self, version: u64, bytes: &[u8]) -> Result<()> {
        let rel = layout::root(version);
        let path = self.path(&rel);
        match self.source.read_at_most(&rel, self.limits.root)? {
            Some(existing) if existing == bytes => Ok(()),
            Some(_) => Err(Error::RootConflict { path, version }),
            None => match self.create_new(&rel, bytes)? {
                true => Ok(()),
                // Another publisher stored a root of this version first: the same bytes are
                // fine, anything else is a conflict.
                false => self.put_root(version, bytes),
            },
        }
    }

    fn commit(&self, c: &Commit<'_>) -> Result<()> {
        let _lock = self.lock()?;
        pause_point(Step::Locked);
        // Under the lock: if anyone committed since we read, we lost the race.
        if self.timestamp_digest()? != c.base_timestamp {
            return Err(Error::Conflict {
                version: c.version,
                base: c.base,
            });
        }
        // Only a publisher holding the lock creates an index, and it replaces the timestamp
        // before letting go: an index past the timestamp is the leftover of a publisher
        // that died between the two steps. Nobody references it.
        remove_beneath(&self.root, &c.index_rel)?;
        if !self.create_new(&c.index_rel, c.index)? {
            return Err(Error::Conflict {
                version: c.version,
                base: c.base,
            });
        }
        pause_point(Step::Index);
        self.write(layout::TIMESTAMP, c.timestamp)?;
        pause_point(Step::Timestamp);
        Ok(())
    }

    fn replace_timestamp(&self, bytes: &[u8], base_timestamp: Option<Digest>) -> Result<()> {
        let _lock = self.lock()?;
        if self.timestamp_digest()? != base_timestamp {
            return Err(Error::Conflict {
                version: 0,
                base: 0,
            });
        }
        self.write(layout::TIMESTAMP, bytes)
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuda_aot::metadata::{MaxExpiry, Role, Roles, Root, Time};
    use cuda_aot::{Channel, SecretKey};

    /// A key from the OS random source: no key of a test is ever fixed.
    fn key() -> SecretKey {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).unwrap();
        SecretKey::from_seed(seed)
    }

    /// A signed trust root of freshly generated keys.
    fn root_file() -> Vec<u8> {
        let k = key();
        let role = |k: &SecretKey| Role {
            keys: vec![k.public()],
            threshold: 1,
        };
        let root = Root {
            schema: Root::SCHEMA.into(),
            version: 1,
            expires: Time::from_unix(4_000_000_000),
            channel: Channel::Dev,
            max_expiry: MaxExpiry::DEFAULT,
            delegations: None,
            roles: Roles {
                root: role(&k),
                builder: role(&key()),
                reviewer: role(&key()),
                publisher: role(&key()),
            },
        };
        cuda_aot::metadata::sign_doc(&root, &[&k]).to_bytes()
    }

    /// Finding 4 of the serve review: a publish wrote through a symbolic link planted as a
    /// folder of the registry (`blobs/blake3/<aa>`), to outside the root.
    #[test]
    fn finding_4_a_publish_writes_nothing_through_a_linked_folder() {
        let d = tempfile::tempdir().unwrap();
        let (root, outside) = (d.path().join("registry"), d.path().join("outside"));
        std::fs::create_dir_all(root.join("blobs/blake3")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let blob = b"a blob";
        let rel = layout::blob(&Digest::of(blob));
        let aa = rel.rsplit('/').nth(1).unwrap().to_string();
        std::os::unix::fs::symlink(&outside, root.join("blobs/blake3").join(&aa)).unwrap();
        let reg = DirRegistry::new(&root);
        let err = reg.put_content(&rel, blob).unwrap_err();
        let link = root.join("blobs/blake3").join(&aa);
        assert!(
            matches!(&err, Error::Core(cuda_aot::Error::Symlink { path }) if *path == link),
            "{err}"
        );
        assert!(
            err.to_string().contains(&link.display().to_string()),
            "{err}"
        );
        assert!(err.fix().contains("symbolic link"), "{}", err.fix());
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "nothing written outside"
        );
        // The same through a linked `index/` folder and a linked root folder.
        std::os::unix::fs::symlink(&outside, root.join("root")).unwrap();
        let err = reg.ensure_root(&root_file()).unwrap_err();
        assert!(
            matches!(&err, Error::Core(cuda_aot::Error::Symlink { .. })),
            "{err}"
        );
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "nothing written outside"
        );
    }

    #[test]
    fn a_different_root_of_the_same_version_is_a_root_conflict() {
        let d = tempfile::tempdir().unwrap();
        let reg = DirRegistry::new(d.path());
        let (first, other) = (root_file(), root_file());
        assert_eq!(reg.ensure_root(&first).unwrap(), 1);
        assert_eq!(
            reg.ensure_root(&first).unwrap(),
            1,
            "the same root again is fine"
        );
        let err = reg.ensure_root(&other).unwrap_err();
        assert!(
            matches!(&err, Error::RootConflict { version: 1, .. }),
            "{err}"
        );
        assert!(err.fix().contains("trust-root --previous"), "{}", err.fix());
        assert_eq!(
            std::fs::read(d.path().join("root/1.root.json")).unwrap(),
            first
        );
    }
}
