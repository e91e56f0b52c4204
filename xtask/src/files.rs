//! File helpers shared by the tasks: atomic writes through the workspace's one routine
//! [`cuda_aot::fs::write_atomic`] (temporary sibling, fsync, rename, fsync of the folder: a
//! reader sees the old file or the new one and never half of either), and tree copies.

use anyhow::{Context, Result};
use std::path::Path;

/// Writes `bytes` to `path` atomically, creating the parent folder if needed.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    cuda_aot::fs::write_atomic(path, bytes)
        .with_context(|| format!("writing {} atomically", path.display()))
}

/// Like [`write()`], but leaves `path` alone (mtime included) when it already holds `bytes`.
/// Returns whether it wrote.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<bool> {
    let same_len = std::fs::metadata(path).is_ok_and(|m| m.len() == bytes.len() as u64);
    if same_len && std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    write(path, bytes)?;
    Ok(true)
}

/// Copies the regular files of `from` into `to`, keeping relative paths.
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    for e in walkdir::WalkDir::new(from) {
        let e = e.with_context(|| format!("listing {}", from.display()))?;
        let rel = e.path().strip_prefix(from).expect("under from");
        let dest = to.join(rel);
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest)
                .with_context(|| format!("creating {}", dest.display()))?;
        } else if e.file_type().is_file() {
            std::fs::copy(e.path(), &dest)
                .with_context(|| format!("copying {}", e.path().display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_whole_files_and_skip_identical_ones() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.json");
        assert!(write_if_changed(&p, b"one").unwrap());
        assert!(!write_if_changed(&p, b"one").unwrap());
        assert!(write_if_changed(&p, b"two!").unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"two!");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("a")).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left behind");
    }
}
