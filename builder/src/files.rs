//! File helpers shared by the tasks: atomic writes through the workspace's one routine
//! [`cuda_aot::fs::write_atomic`] (temporary sibling, fsync, rename, fsync of the folder: a
//! reader sees the old file or the new one and never half of either), links replaced the
//! same way, tree copies, and the one walk over a folder's files.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// One file found by [`files_under`].
pub struct Found {
    /// Its path below the root, with `/` separators.
    pub rel: String,
    /// Its full path.
    pub path: PathBuf,
    /// Whether it is a regular file (else a link, FIFO, socket or device: never followed).
    pub regular: bool,
}

/// Every entry of `root` that is not a folder, in walk order, no link followed (a link is
/// reported as itself, never as what it points to). Errors name the folder.
pub fn files_under(root: &Path) -> Result<Vec<Found>> {
    let mut out = Vec::new();
    for e in walkdir::WalkDir::new(root).follow_links(false) {
        let e = e.with_context(|| format!("listing {}", root.display()))?;
        if e.file_type().is_dir() {
            continue;
        }
        let rel = e
            .path()
            .strip_prefix(root)
            .expect("the walk stays under its root");
        let rel = rel
            .to_str()
            .with_context(|| format!("{}: a path that is not UTF-8", e.path().display()))?
            .replace('\\', "/");
        out.push(Found {
            rel,
            path: e.path().to_path_buf(),
            regular: e.file_type().is_file(),
        });
    }
    Ok(out)
}

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

/// Makes `path` a symbolic link to `target` atomically: the link is made under a temporary
/// name beside `path` and renamed over it, then the folder is flushed, so `path` is at
/// every moment the old entry or the new link (a program loading a library through it never
/// finds nothing). `path`'s folder must exist.
pub fn symlink(path: &Path, target: &Path) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".link-")
        .make_in(dir, |p| std::os::unix::fs::symlink(target, p))
        .with_context(|| format!("making a link in {}", dir.display()))?;
    std::fs::rename(tmp.path(), path)
        .with_context(|| format!("linking {} to {}", path.display(), target.display()))?;
    // Renamed: nothing is left at the temporary name to delete.
    let _ = tmp.into_temp_path().keep();
    cuda_aot::fs::sync_dir(dir).with_context(|| format!("flushing {}", dir.display()))
}

/// Copies the regular files of `from` into `to`, keeping relative paths.
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for f in files_under(from)?.into_iter().filter(|f| f.regular) {
        let dest = to.join(&f.rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::copy(&f.path, &dest).with_context(|| format!("copying {}", f.path.display()))?;
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

    #[test]
    fn a_link_replaces_a_file_or_a_link_and_leaves_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("libx.so");
        std::fs::write(&link, b"old file").unwrap();
        symlink(&link, Path::new("libx.so.1")).unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("libx.so.1"));
        symlink(&link, Path::new("libx.so.2")).unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("libx.so.2"));
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary link left behind");
    }
}
