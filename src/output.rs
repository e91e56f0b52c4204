//! Where a build puts each module: `<out>/<module>/<target>.<kind>` (the blob) beside
//! `<out>/<module>/<target>.<kind>.manifest.json` (its unsigned manifest), and the one reader
//! of such a pair. The build tool writes the folder and reads it back (`sign`, `publish`,
//! `promote`); the parity runner reads it on the GPU host. Both take the layout from here.

use std::path::{Path, PathBuf};

use crate::digest::check_blob;
use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::manifest::Manifest;

/// The ending of a manifest file's name.
pub const MANIFEST_SUFFIX: &str = ".manifest.json";

/// `<out>/<module>/<target>.<kind>`.
pub fn blob_path(out: &Path, m: &Manifest) -> PathBuf {
    out.join(m.identity.module.as_str())
        .join(format!("{}.{}", m.identity.sm, m.identity.kind))
}

/// `<out>/<module>/<target>.<kind>.manifest.json`.
pub fn manifest_path(out: &Path, m: &Manifest) -> PathBuf {
    out.join(m.identity.module.as_str()).join(format!(
        "{}.{}{MANIFEST_SUFFIX}",
        m.identity.sm, m.identity.kind
    ))
}

/// The blob a manifest file describes: its path without [`MANIFEST_SUFFIX`].
pub fn blob_of_manifest(manifest_path: &Path) -> PathBuf {
    let s = manifest_path.to_string_lossy();
    let stem = s.strip_suffix(MANIFEST_SUFFIX).unwrap_or(&s);
    PathBuf::from(stem.to_string())
}

/// The manifest files of one module's folder (`<out>/<module>`), sorted.
pub fn manifest_files(module_dir: &Path) -> Result<Vec<PathBuf>> {
    let io = |source| Error::Io {
        path: module_dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for e in std::fs::read_dir(module_dir).map_err(io)? {
        let e = e.map_err(io)?;
        let is_file = e.file_type().map_err(io)?.is_file();
        if is_file && e.file_name().to_string_lossy().ends_with(MANIFEST_SUFFIX) {
            files.push(e.path());
        }
    }
    files.sort();
    Ok(files)
}

/// One module of a build output as read back.
#[derive(Debug, Clone)]
pub struct Built {
    /// The manifest.
    pub manifest: Manifest,
    /// The manifest file's bytes (what a build statement or promotion record names by
    /// blake3).
    pub manifest_file: Vec<u8>,
    /// The blob, checked against the manifest: size, then blake3.
    pub blob: Vec<u8>,
}

/// Reads the manifest at `manifest_path` and the blob beside it, each capped by `limits`,
/// and checks the blob against the manifest (size, then blake3). Errors name the file.
pub fn read_built(manifest_path: &Path, limits: &Limits) -> Result<Built> {
    let manifest_file = crate::fs::read_capped(manifest_path, limits.manifest, "manifest")?;
    let manifest: Manifest = crate::json::parse(
        &manifest_file,
        limits.manifest,
        &manifest_path.display().to_string(),
    )?;
    let blob_file = blob_of_manifest(manifest_path);
    let blob = crate::fs::read_capped(&blob_file, limits.blob, "blob")?;
    check_blob(
        &format!("{} ({})", manifest.label(), blob_file.display()),
        &blob,
        manifest.size,
        &manifest.module_digest,
    )?;
    Ok(Built {
        manifest,
        manifest_file,
        blob,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::Digest;
    use crate::identity::Channel;
    use crate::identity::tests::sample_identity;

    /// A module of a build output, written as the build writes it.
    fn written(out: &Path, blob: &[u8]) -> PathBuf {
        let m = Manifest {
            schema: Manifest::SCHEMA.into(),
            identity: sample_identity(),
            module_digest: Digest::of(blob),
            size: blob.len() as u64,
            functions: Vec::new(),
            globals: Some(Vec::new()),
            channel: Channel::Dev,
        };
        let (blob_file, manifest_file) = (blob_path(out, &m), manifest_path(out, &m));
        std::fs::create_dir_all(manifest_file.parent().unwrap()).unwrap();
        std::fs::write(&blob_file, blob).unwrap();
        std::fs::write(&manifest_file, crate::json::to_vec(&m)).unwrap();
        assert_eq!(blob_of_manifest(&manifest_file), blob_file);
        manifest_file
    }

    #[test]
    fn a_built_module_reads_back_and_a_changed_blob_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = written(dir.path(), b"cubin bytes");
        std::fs::write(manifest.with_file_name("notes.txt"), b"not a manifest").unwrap();
        let files = manifest_files(&dir.path().join("ntt")).unwrap();
        assert_eq!(files, vec![manifest.clone()]);
        let built = read_built(&manifest, &Limits::default()).unwrap();
        assert_eq!(built.blob, b"cubin bytes");
        assert_eq!(built.manifest_file, std::fs::read(&manifest).unwrap());

        let blob = blob_of_manifest(&manifest);
        std::fs::write(&blob, b"cubin bytez").unwrap();
        let e = read_built(&manifest, &Limits::default()).unwrap_err();
        assert!(matches!(e, Error::DigestMismatch { .. }), "{e}");
        assert!(e.to_string().contains(&blob.display().to_string()), "{e}");
        std::fs::write(&blob, b"cubin").unwrap();
        let e = read_built(&manifest, &Limits::default()).unwrap_err();
        assert!(matches!(e, Error::SizeMismatch { .. }), "{e}");
        std::fs::remove_file(&blob).unwrap();
        assert!(read_built(&manifest, &Limits::default()).is_err());
        assert!(manifest_files(&dir.path().join("nope")).is_err());
    }
}
