//! Where registry files come from: the registry layout (paths) and the [`RegistrySource`]
//! trait, with the local-directory implementation the runtime uses.

use std::path::{Path, PathBuf};

use crate::digest::{Digest, check_blob};
use crate::error::{Error, Result};

/// Paths of the registry layout, relative to the registry root. The same layout serves a
/// directory, an HTTP server, a CDN or an object store.
pub mod layout {
    use crate::digest::Digest;

    /// The only file ever rewritten.
    pub const TIMESTAMP: &str = "timestamp.json";
    /// `root/<N>.root.json`
    pub fn root(version: u64) -> String {
        format!("root/{version}.root.json")
    }
    /// `index/<N>.index.json`
    pub fn index(version: u64) -> String {
        format!("index/{version}.index.json")
    }
    /// `manifests/blake3/<hex>.json`
    pub fn manifest(d: &Digest) -> String {
        format!("manifests/blake3/{}.json", d.hex())
    }
    /// `statements/blake3/<hex>.json`
    pub fn statement(d: &Digest) -> String {
        format!("statements/blake3/{}.json", d.hex())
    }
    /// `promotions/blake3/<hex>.json`
    pub fn promotion(d: &Digest) -> String {
        format!("promotions/blake3/{}.json", d.hex())
    }
    /// `blobs/blake3/<aa>/<hex>`
    pub fn blob(d: &Digest) -> String {
        let h = d.hex();
        format!("blobs/blake3/{}/{h}", &h[..2])
    }
}

/// Read access to a registry. Implementations must never follow symbolic links, read only
/// regular files, never block on a file, and stop reading at `max + 1` bytes.
pub trait RegistrySource {
    /// Reads `path` (a [`layout`] path). Returns `Ok(None)` when the file does not exist,
    /// otherwise at most `max + 1` bytes, so the caller can tell "too long" from "exact".
    fn read_at_most(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>>;

    /// Where this registry is, for messages.
    fn describe(&self) -> String;
}

/// Reads a required file: missing is an error, more than `limit` bytes is an error.
pub fn read_required(
    src: &dyn RegistrySource,
    path: &str,
    limit: u64,
    what: &str,
) -> Result<Vec<u8>> {
    match src.read_at_most(path, limit)? {
        None => Err(Error::Missing {
            what: what.into(),
            path: format!("{}/{path}", src.describe()),
        }),
        Some(b) if b.len() as u64 > limit => Err(Error::TooLarge {
            what: what.into(),
            limit,
            actual: b.len() as u64,
        }),
        Some(b) => Ok(b),
    }
}

/// Reads a file whose exact size and blake3 are signed: size first (reading stops at
/// `size + 1`), then the digest.
pub fn read_exact_signed(
    src: &dyn RegistrySource,
    path: &str,
    size: u64,
    digest: &Digest,
    what: &str,
) -> Result<Vec<u8>> {
    let bytes = match src.read_at_most(path, size)? {
        None => {
            return Err(Error::Missing {
                what: what.into(),
                path: format!("{}/{path}", src.describe()),
            });
        }
        Some(b) => b,
    };
    check_blob(what, &bytes, size, digest)?;
    Ok(bytes)
}

/// A registry in a local directory.
#[derive(Debug, Clone)]
pub struct DirSource {
    root: PathBuf,
}

impl DirSource {
    /// A registry rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DirSource { root: root.into() }
    }
    /// The registry directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// Refuses a layout path that could leave the registry (`..`, absolute, empty parts).
fn check_relative(path: &str) -> Result<()> {
    let ok = !path.is_empty()
        && !path.starts_with('/')
        && path.split('/').all(|c| {
            !c.is_empty()
                && c != "."
                && c != ".."
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidName {
            kind: "registry path",
            value: path.escape_debug().to_string(),
            reason: "not a registry layout path",
        })
    }
}

impl RegistrySource for DirSource {
    fn read_at_most(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>> {
        check_relative(path)?;
        // Refuse a link anywhere below the registry root (a folder or the file itself).
        let mut p = self.root.clone();
        for part in path.split('/') {
            p.push(part);
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.file_type().is_symlink() => return Err(Error::Symlink { path: p }),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(Error::Io { path: p, source: e }),
            }
        }
        // The open itself refuses a link swapped in since, a FIFO or a device, without
        // blocking, and the read stops at max + 1.
        crate::fs::read_at_most(&p, max)
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_one_past_the_limit_and_links_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("blobs/blake3/ab")).unwrap();
        std::fs::write(dir.path().join("blobs/blake3/ab/x"), vec![7u8; 1000]).unwrap();
        let src = DirSource::new(dir.path());
        assert_eq!(
            src.read_at_most("blobs/blake3/ab/x", 10)
                .unwrap()
                .unwrap()
                .len(),
            11
        );
        assert!(src.read_at_most("blobs/blake3/ab/y", 10).unwrap().is_none());
        std::os::unix::fs::symlink(
            dir.path().join("blobs/blake3/ab/x"),
            dir.path().join("timestamp.json"),
        )
        .unwrap();
        assert!(matches!(
            src.read_at_most("timestamp.json", 10),
            Err(Error::Symlink { .. })
        ));
        std::os::unix::fs::symlink(dir.path().join("blobs"), dir.path().join("index")).unwrap();
        assert!(matches!(
            src.read_at_most("index/blake3/ab/x", 10000),
            Err(Error::Symlink { .. })
        ));
        for bad in ["../x", "/etc/passwd", "a//b", "a/./b", "a/%2e%2e/b"] {
            assert!(
                matches!(src.read_at_most(bad, 10), Err(Error::InvalidName { .. })),
                "{bad}"
            );
        }
    }
}
