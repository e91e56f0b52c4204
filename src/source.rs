//! Where registry files come from: the registry layout (paths) and the [`RegistrySource`]
//! trait, with the local-directory implementation the runtime uses.

use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// `teams/blake3/<hex>.json`: a delegated role's signed metadata (issue 46), named by
    /// its content as the index lists it.
    pub fn team(d: &Digest) -> String {
        format!("teams/blake3/{}.json", d.hex())
    }
    /// `sources/blake3/<hex>`: a source file (or the spec) a build read, named by the
    /// build statement's provenance, for rebuilders.
    pub fn source(d: &Digest) -> String {
        format!("sources/blake3/{}", d.hex())
    }
    /// `blobs/blake3/<aa>/<hex>`
    pub fn blob(d: &Digest) -> String {
        let h = d.hex();
        format!("blobs/blake3/{}/{h}", &h[..2])
    }

    /// Whether `rel` is a path of this layout: [`TIMESTAMP`], [`root`], [`index`] (a
    /// version without leading zeros), or a [`manifest`], [`statement`], [`promotion`],
    /// [`team`], [`source`] or [`blob`] named by a lower-case blake3 hex digest. Servers serve nothing else.
    pub fn is_layout_path(rel: &str) -> bool {
        fn version(n: &str) -> bool {
            !n.is_empty()
                && n.len() <= 20
                && n.bytes().all(|b| b.is_ascii_digit())
                && !n.starts_with('0')
                && n.parse::<u64>().is_ok()
        }
        fn hex(h: &str) -> bool {
            h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        }
        let json_digest = |prefix: &str| {
            rel.strip_prefix(prefix)
                .and_then(|r| r.strip_suffix(".json"))
                .is_some_and(hex)
        };
        rel == TIMESTAMP
            || rel
                .strip_prefix("root/")
                .and_then(|r| r.strip_suffix(".root.json"))
                .is_some_and(version)
            || rel
                .strip_prefix("index/")
                .and_then(|r| r.strip_suffix(".index.json"))
                .is_some_and(version)
            || json_digest("manifests/blake3/")
            || json_digest("statements/blake3/")
            || json_digest("promotions/blake3/")
            || json_digest("teams/blake3/")
            || rel.strip_prefix("sources/blake3/").is_some_and(hex)
            || rel
                .strip_prefix("blobs/blake3/")
                .and_then(|r| r.split_once('/'))
                .is_some_and(|(aa, h)| hex(h) && h.starts_with(aa) && aa.len() == 2)
    }
}

/// Read access to a registry. Implementations must never follow symbolic links, read only
/// regular files, never block on a file, and stop reading at `max + 1` bytes.
pub trait RegistrySource {
    /// Reads `path` (a [`layout`] path). Returns `Ok(None)` when the file does not exist,
    /// otherwise at most `max + 1` bytes, so the caller can tell "too long" from "exact".
    fn read_at_most(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>>;

    /// [`RegistrySource::read_at_most`], handing out the source's own bytes where it holds
    /// the file in memory for the life of the program (an embedded bundle,
    /// [`crate::bundle::Embedded`]): no copy. Otherwise the bytes read.
    fn read_in_place(&self, path: &str, max: u64) -> Result<Option<Bytes>> {
        Ok(self.read_at_most(path, max)?.map(Bytes::from))
    }

    /// Whether this source carries the files of the index entry whose manifest is
    /// `manifest`: a registry carries all of them (a missing one is an error when read); a
    /// bundle fetched for some targets only those ([`crate::bundle::Embedded`]).
    fn carries(&self, manifest: &Digest) -> bool {
        let _ = manifest;
        true
    }

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

/// Bytes a registry handed out: read into memory, or borrowed for the life of the program
/// from an embedded bundle (used in place: the loader hands the driver these very bytes).
#[derive(Debug, Clone)]
pub enum Bytes {
    /// Read from a file or the network.
    Read(Arc<[u8]>),
    /// Part of a bundle compiled into the program ([`crate::include_bundle!`]).
    Embedded(&'static [u8]),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Read(b) => b,
            Bytes::Embedded(b) => b,
        }
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Bytes {
        Bytes::Read(v.into())
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
    let bytes = src.read_at_most(path, size)?;
    checked_signed(src, path, bytes, size, digest, what)
}

/// [`read_exact_signed`] through [`RegistrySource::read_in_place`]: a module blob, which an
/// embedded bundle hands out without a copy.
pub fn read_exact_signed_in_place(
    src: &dyn RegistrySource,
    path: &str,
    size: u64,
    digest: &Digest,
    what: &str,
) -> Result<Bytes> {
    let bytes = src.read_in_place(path, size)?;
    checked_signed(src, path, bytes, size, digest, what)
}

/// `bytes` (what `path` of `src` held) when present and exactly `size` bytes of blake3
/// `digest`.
fn checked_signed<B: std::ops::Deref<Target = [u8]>>(
    src: &dyn RegistrySource,
    path: &str,
    bytes: Option<B>,
    size: u64,
    digest: &Digest,
    what: &str,
) -> Result<B> {
    let bytes = bytes.ok_or_else(|| Error::Missing {
        what: what.into(),
        path: format!("{}/{path}", src.describe()),
    })?;
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

    /// The registry files the folder holds: every regular file whose path is a
    /// [`layout`] path (links and anything else are skipped), sorted. What a bundle packs
    /// or a copy copies.
    pub fn layout_paths(&self) -> Result<Vec<String>> {
        let io = |path: &Path, source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut out = Vec::new();
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let dir = self.root.join(&rel);
            for entry in std::fs::read_dir(&dir).map_err(|e| io(&dir, e))? {
                let entry = entry.map_err(|e| io(&dir, e))?;
                let rel = rel.join(entry.file_name());
                let kind = entry.file_type().map_err(|e| io(&entry.path(), e))?;
                match rel.to_str() {
                    Some(_) if kind.is_dir() => stack.push(rel),
                    Some(r) if kind.is_file() && layout::is_layout_path(r) => {
                        out.push(r.to_string())
                    }
                    _ => {}
                }
            }
        }
        out.sort();
        Ok(out)
    }
}

/// Refuses a layout path that could leave the registry (`..`, absolute, empty parts, or a
/// byte outside `A-Za-z0-9._-`). Servers and fetchers check request paths with it too.
pub fn check_relative(path: &str) -> Result<()> {
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
        // One folder at a time, never through a link below the root (a folder or the file
        // itself), whatever is renamed meanwhile; a FIFO or a device is refused without
        // blocking, and the read stops at max + 1.
        crate::fs::read_beneath_at_most(&self.root, path, max)
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_paths_are_exactly_what_the_layout_functions_make() {
        let d = Digest::of(b"x");
        for good in [
            layout::TIMESTAMP.to_string(),
            layout::root(1),
            layout::index(u64::MAX),
            layout::manifest(&d),
            layout::statement(&d),
            layout::promotion(&d),
            layout::blob(&d),
            layout::source(&d),
            layout::team(&d),
        ] {
            assert!(layout::is_layout_path(&good), "{good}");
        }
        let h = d.hex();
        for bad in [
            "notes.txt".to_string(),
            "keys/x".into(),
            ".lock".into(),
            "root/01.root.json".into(),
            "root/1.index.json".into(),
            "index/0.index.json".into(),
            "index/18446744073709551616.index.json".into(),
            format!("manifests/blake3/{}.json", h.to_uppercase()),
            format!("manifests/blake3/{h}"),
            format!("blobs/blake3/{h}"),
            format!("blobs/blake3/zz/{h}"),
            format!("blobs/blake3/{}/{h}/x", &h[..2]),
            format!("statements/sha256/{h}.json"),
            format!("sources/blake3/{h}.json"),
            format!("sources/blake3/{}/{h}", &h[..2]),
            format!("teams/blake3/{h}"),
            "teams/1.team-a.json".into(),
        ] {
            assert!(!layout::is_layout_path(&bad), "{bad}");
        }
    }

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
