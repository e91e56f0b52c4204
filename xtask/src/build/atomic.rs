//! Atomic file writes: a temporary file in the destination's folder, renamed over the
//! destination, so a reader sees the old file or the new one and never half of either.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` atomically (temporary sibling + rename), mode 0644, creating
/// the parent folder if needed.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let parent = path
        .parent()
        .with_context(|| format!("{} has no parent folder", path.display()))?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempfile_in(parent)
        .with_context(|| format!("creating a temporary file in {}", parent.display()))?;
    tmp.write_all(bytes)
        .with_context(|| format!("writing {}", tmp.path().display()))?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))
        .with_context(|| format!("setting the mode of {}", tmp.path().display()))?;
    tmp.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("renaming a temporary file to {}", path.display()))?;
    Ok(())
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
