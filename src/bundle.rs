//! The embedded bundle: a verified release's registry files packed into one byte string
//! that a prover compiles into its binary ([`crate::include_bundle!`] of what its build
//! script wrote), read in place ([`Embedded`] is a [`RegistrySource`]) by
//! `Runtime::open_embedded` through the same verification as a registry folder.
//!
//! The format (little-endian), all of it checked before any file is handed out:
//!
//! ```text
//! "cuda-aot bundle\n"   16 bytes of magic
//! version               u32 (1)
//! files                 u32
//! trust root            32 bytes: blake3 of the trust root file it was fetched under
//! origin                u16 length, UTF-8 (the registry it came from, for messages)
//! per file              u16 length, layout path; u64 offset; u64 length
//! data                  each file at its offset, aligned to 64 bytes, in table order
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::source::{Bytes, RegistrySource, layout};

/// The first bytes of every bundle.
pub const MAGIC: &[u8; 16] = b"cuda-aot bundle\n";
/// The format version this crate reads and writes.
pub const VERSION: u32 = 1;
/// Where each file starts: a multiple of this from the bundle's start, so that a bundle
/// embedded at an aligned address ([`crate::include_bundle!`]) hands the driver aligned
/// cubins.
pub const ALIGN: usize = 64;
/// The file name a build script writes the bundle to below `OUT_DIR`
/// ([`crate::include_bundle!`] without an argument reads it).
pub const FILE_NAME: &str = "cuda-aot.bundle";
/// At most this many files (a release has a few per module binary).
const MAX_FILES: u32 = 1 << 20;

/// Embeds the bundle a build script wrote (`$OUT_DIR/cuda-aot.bundle`, or the path given)
/// into the program, aligned to [`ALIGN`] bytes, as a `&'static [u8]` for
/// `Runtime::open_embedded`:
///
/// ```ignore
/// static BUNDLE: &[u8] = cuda_aot::include_bundle!();
/// ```
#[macro_export]
macro_rules! include_bundle {
    () => {
        $crate::include_bundle!(concat!(env!("OUT_DIR"), "/cuda-aot.bundle"))
    };
    ($path:expr) => {{
        #[repr(C, align(64))]
        struct Aligned<T: ?Sized>(T);
        static ALIGNED: &Aligned<[u8]> = &Aligned(*include_bytes!($path));
        &ALIGNED.0
    }};
}

/// An embedded bundle, parsed: its files (borrowed from the program's own bytes), the
/// trust root it was made for and where it came from.
#[derive(Debug, Clone)]
pub struct Embedded {
    files: BTreeMap<&'static str, &'static [u8]>,
    trust_root: Digest,
    origin: String,
    size: usize,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::BadBundle {
        reason: reason.into(),
    }
}

/// A little-endian reader over the bundle's table that refuses to run past its end.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| bad(format!("truncated in its {what}")))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(
            self.take(2, what)?.try_into().expect("2"),
        ))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4"),
        ))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8"),
        ))
    }
    fn text(&mut self, what: &str) -> Result<&'a str> {
        let n = self.u16(what)? as usize;
        std::str::from_utf8(self.take(n, what)?)
            .map_err(|_| bad(format!("its {what} is not UTF-8")))
    }
}

/// What a bundle holds: its files (borrowed from its bytes), the trust root it was made
/// for and where it came from.
#[derive(Debug, Clone)]
pub struct Parsed<'a> {
    /// Each file by its layout path.
    pub files: BTreeMap<&'a str, &'a [u8]>,
    /// The blake3 of the trust root file it was fetched under.
    pub trust_root: Digest,
    /// The registry it came from (control characters escaped).
    pub origin: String,
}

/// Reads a bundle. Refused: an empty bundle (the build could not fetch one), another magic
/// or version, a table that runs past the end, a path outside the registry layout or named
/// twice, a file outside the bundle or overlapping the table or another file.
pub fn parse(bytes: &[u8]) -> Result<Parsed<'_>> {
    if bytes.is_empty() {
        return Err(bad(
            "empty: the build that embedded it could not fetch the kernels (its build script warned why)",
        ));
    }
    let mut c = Cursor { bytes, at: 0 };
    if c.take(MAGIC.len(), "magic").ok() != Some(&MAGIC[..]) {
        return Err(bad(
            "not a cuda-aot bundle (its first bytes are not the bundle magic)",
        ));
    }
    let version = c.u32("version")?;
    if version != VERSION {
        return Err(bad(format!(
            "format version {version}; this cuda-aot reads version {VERSION}"
        )));
    }
    let count = c.u32("file count")?;
    if count > MAX_FILES {
        return Err(bad(format!("{count} files (at most {MAX_FILES})")));
    }
    let trust_root = Digest(c.take(32, "trust root digest")?.try_into().expect("32"));
    let origin = crate::error::escape_untrusted(c.text("origin")?);
    let mut table = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let path = c.text("file table")?;
        let (offset, len) = (c.u64("file table")?, c.u64("file table")?);
        table.push((path, offset, len));
    }
    let mut files = BTreeMap::new();
    let mut end_of_previous = c.at as u64;
    for (path, offset, len) in table {
        let shown = path.escape_debug();
        if !layout::is_layout_path(path) {
            return Err(bad(format!(
                "holds {shown:?}, which is not a registry file"
            )));
        }
        let end = offset.checked_add(len).filter(|&e| e <= bytes.len() as u64);
        let Some(end) = end else {
            return Err(bad(format!("{shown}: runs past the end of the bundle")));
        };
        if offset < end_of_previous {
            return Err(bad(format!(
                "{shown}: overlaps the table or the file before it"
            )));
        }
        end_of_previous = end;
        if files
            .insert(path, &bytes[offset as usize..end as usize])
            .is_some()
        {
            return Err(bad(format!("holds {shown} twice")));
        }
    }
    Ok(Parsed {
        files,
        trust_root,
        origin,
    })
}

impl Embedded {
    /// Parses `bytes` (what [`crate::include_bundle!`] embedded): [`parse`] of the
    /// program's own bytes, which the bundle then hands out in place.
    pub fn parse(bytes: &'static [u8]) -> Result<Embedded> {
        let Parsed {
            files,
            trust_root,
            origin,
        } = parse(bytes)?;
        Ok(Embedded {
            files,
            trust_root,
            origin,
            size: bytes.len(),
        })
    }

    /// The blake3 of the trust root file the bundle was fetched under (what
    /// `Runtime::open_embedded` compares with the trust root it is given, before anything
    /// else).
    pub fn trust_root(&self) -> &Digest {
        &self.trust_root
    }

    /// The registry it was fetched from, as its lock names it.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The bundle's size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The layout paths it holds, in order.
    pub fn paths(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.files.keys().copied()
    }

    /// Refuses a bundle made for another trust root than `trust_root` (the file's bytes),
    /// naming both digests: nothing in it would verify.
    pub fn check_trust_root(&self, trust_root: &[u8]) -> Result<()> {
        let given = Digest::of(trust_root);
        if given != self.trust_root {
            return Err(Error::BundleOtherRoot {
                origin: self.origin.clone(),
                bundle: self.trust_root.short(),
                given: given.short(),
            });
        }
        Ok(())
    }

    /// The bundle of the files `paths` (layout paths) of the registry folder `dir`, made
    /// for the trust root whose blake3 is `trust_root` and named after `origin`: what a
    /// build script writes. Every file is read beneath `dir` (never through a link).
    pub fn pack(
        dir: &Path,
        paths: &[String],
        trust_root: &Digest,
        origin: &str,
    ) -> Result<Vec<u8>> {
        let mut paths: Vec<&String> = paths.iter().collect();
        paths.sort();
        paths.dedup();
        let mut contents = Vec::with_capacity(paths.len());
        for p in &paths {
            crate::source::check_relative(p)?;
            if !layout::is_layout_path(p) {
                return Err(bad(format!("{p:?} is not a registry file")));
            }
            let bytes = crate::source::read_required(
                &crate::source::DirSource::new(dir),
                p,
                u64::MAX - 1,
                "bundle file",
            )?;
            contents.push(bytes);
        }
        let origin = &origin[..origin.len().min(u16::MAX as usize)];
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(paths.len() as u32).to_le_bytes());
        out.extend_from_slice(&trust_root.0);
        out.extend_from_slice(&(origin.len() as u16).to_le_bytes());
        out.extend_from_slice(origin.as_bytes());
        let table_len: usize = paths.iter().map(|p| 2 + p.len() + 16).sum();
        let mut offset = (out.len() + table_len).next_multiple_of(ALIGN);
        for (p, bytes) in paths.iter().zip(&contents) {
            out.extend_from_slice(&(p.len() as u16).to_le_bytes());
            out.extend_from_slice(p.as_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            offset = (offset + bytes.len()).next_multiple_of(ALIGN);
        }
        for bytes in &contents {
            out.resize(out.len().next_multiple_of(ALIGN), 0);
            out.extend_from_slice(bytes);
        }
        Ok(out)
    }
}

impl RegistrySource for Embedded {
    fn read_at_most(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.read_in_place(path, max)?.map(|b| b.to_vec()))
    }

    fn read_in_place(&self, path: &str, max: u64) -> Result<Option<Bytes>> {
        crate::source::check_relative(path)?;
        Ok(self.files.get(path).map(|b| {
            // As any source, at most max + 1 bytes: the caller tells "too long" from "exact".
            let cut = b
                .len()
                .min(usize::try_from(max.saturating_add(1)).unwrap_or(usize::MAX));
            Bytes::Embedded(&b[..cut])
        }))
    }

    fn carries(&self, manifest: &Digest) -> bool {
        self.files.contains_key(layout::manifest(manifest).as_str())
    }

    fn describe(&self) -> String {
        format!("the embedded bundle of {}", self.origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leak(v: Vec<u8>) -> &'static [u8] {
        Box::leak(v.into_boxed_slice())
    }

    fn sample() -> (tempfile::TempDir, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let blob = layout::blob(&Digest::of(b"cubin"));
        let paths = vec![layout::TIMESTAMP.to_string(), layout::root(1), blob];
        for (p, body) in paths.iter().zip([&b"ts"[..], b"root", b"cubin bytes"]) {
            let f = dir.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, body).unwrap();
        }
        (dir, paths)
    }

    #[test]
    fn a_packed_bundle_hands_out_its_files_in_place_and_aligned() {
        let (dir, paths) = sample();
        let root = Digest::of(b"root");
        let packed = leak(Embedded::pack(dir.path(), &paths, &root, "http://r.example/").unwrap());
        let b = Embedded::parse(packed).unwrap();
        assert_eq!(b.trust_root(), &root);
        assert_eq!(b.origin(), "http://r.example/");
        assert_eq!(b.paths().count(), 3);
        let cubin = b.read_in_place(&paths[2], 100).unwrap().unwrap();
        assert_eq!(&cubin[..], b"cubin bytes");
        let start = cubin.as_ptr() as usize - packed.as_ptr() as usize;
        assert_eq!(start % ALIGN, 0);
        assert!(matches!(cubin, Bytes::Embedded(_)));
        // Reads stop at max + 1, as every source's.
        assert_eq!(b.read_at_most(&paths[2], 3).unwrap().unwrap().len(), 4);
        assert!(b.read_at_most("index/1.index.json", 10).unwrap().is_none());
        b.check_trust_root(b"root").unwrap();
        let err = b.check_trust_root(b"another root").unwrap_err();
        assert!(err.to_string().contains(&root.short()), "{err}");
        assert!(err.fix().contains("trust root"), "{}", err.fix());
    }

    #[test]
    fn every_damaged_bundle_is_refused_naming_why() {
        let (dir, paths) = sample();
        let packed = Embedded::pack(dir.path(), &paths, &Digest::of(b"root"), "o").unwrap();
        let refused = |bytes: Vec<u8>, why: &str| {
            let err = Embedded::parse(leak(bytes)).unwrap_err();
            assert!(matches!(err, Error::BadBundle { .. }), "{err}");
            assert!(err.to_string().contains(why), "{why}: {err}");
        };
        refused(vec![], "empty");
        refused(b"not a bundle at all".to_vec(), "not a cuda-aot bundle");
        let mut v = packed.clone();
        v[16] = 2;
        refused(v, "format version 2");
        for cut in [20, 60, 70, packed.len() - 1] {
            refused(
                packed[..cut].to_vec(),
                if cut < 90 {
                    "truncated"
                } else {
                    "past the end"
                },
            );
        }
        // A path outside the layout: rename the timestamp's table entry.
        let at = packed
            .windows(14)
            .position(|w| w == b"timestamp.json")
            .unwrap();
        let mut v = packed.clone();
        v[at..at + 14].copy_from_slice(b"../../etc/pass");
        refused(v, "not a registry file");
        // Two table entries naming the same bytes overlap.
        let mut v = packed.clone();
        let first = at + 14;
        let second = packed
            .windows(16)
            .position(|w| w == b"root/1.root.json")
            .unwrap()
            + 16;
        let root_offset = v[second..second + 8].to_vec();
        v[first..first + 8].copy_from_slice(&root_offset);
        refused(v, "overlaps");
        // A count no table can hold.
        let mut v = packed;
        v[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        refused(v, "files (at most");
    }
}
