//! File access with the guarantees verification needs, in one place for the whole workspace:
//! reads that open only regular files, never follow a final symbolic link, never block (a
//! FIFO or a device in place of a registry file is refused, not waited on) and stop one byte
//! past their cap; and writes that are atomic (temporary sibling, fsync, rename or hard link,
//! fsync of the folder).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Opens `path` for reading without following a final symbolic link and without blocking,
/// and checks that the opened handle is a regular file. `Ok(None)` when it does not exist.
///
/// `O_NONBLOCK` makes opening a FIFO with no writer return at once (a plain open would wait
/// forever); the type check on the handle (not on the path, so there is no window between
/// check and use) then refuses it, as it refuses devices such as `/dev/zero`.
pub fn open_regular(path: &Path) -> Result<Option<File>> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // O_NOFOLLOW on a link fails with ELOOP.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(Error::Symlink { path: path.into() });
        }
        Err(e) => {
            return Err(Error::Io {
                path: path.into(),
                source: e,
            });
        }
    };
    let meta = file.metadata().map_err(|e| Error::Io {
        path: path.into(),
        source: e,
    })?;
    let kind = meta.file_type();
    if !kind.is_file() {
        return Err(Error::NotRegular {
            path: path.into(),
            kind: describe_kind(&kind),
        });
    }
    Ok(Some(file))
}

fn describe_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a folder"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Reads at most `max + 1` bytes of the regular file `path` (see [`open_regular`]), so the
/// caller can tell "too long" from "exact". `Ok(None)` when it does not exist.
pub fn read_at_most(path: &Path, max: u64) -> Result<Option<Vec<u8>>> {
    let Some(file) = open_regular(path)? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| Error::Io {
            path: path.into(),
            source: e,
        })?;
    Ok(Some(out))
}

/// Reads the whole regular file `path`, refusing one longer than `limit` bytes (without
/// reading past `limit + 1`). `what` names the file in errors ("trust root").
pub fn read_capped(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>> {
    match read_at_most(path, limit)? {
        None => Err(Error::Missing {
            what: what.into(),
            path: path.display().to_string(),
        }),
        Some(b) if b.len() as u64 > limit => Err(Error::TooLarge {
            what: format!("{what} {}", path.display()),
            limit,
            actual: b.len() as u64,
        }),
        Some(b) => Ok(b),
    }
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to a fresh temporary sibling of `path` (created, never reused: the name
/// holds the pid and a per-process counter) and fsyncs it.
fn write_temp(path: &Path, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let dir = parent(path)?;
    std::fs::create_dir_all(dir)?;
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".tmp.{}.{n}.{name}", std::process::id()));
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(tmp)
}

fn parent(path: &Path) -> std::io::Result<&Path> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => Ok(p),
        _ => Ok(Path::new(".")),
    }
}

/// Flushes the folder `dir` itself (its entries: a rename or a new file in it) to disk.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replaces `path` with `bytes` atomically: temporary sibling, fsync, rename, fsync of the
/// folder. Readers see the old file or the new one, never a part, and a crash after it
/// returns cannot lose the new file. Creates the parent folder if needed.
///
/// The one atomic-write routine of the workspace: the registry, the build and the trust
/// state all write through it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = write_temp(path, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    sync_dir(parent(path)?)
}

/// Opens (creating it if needed, never truncating) the lock file `path` for an advisory
/// `File::lock` / `try_lock`: the kernel releases the lock when the process dies. A final
/// symbolic link is not followed (`ELOOP`), so a planted link cannot make the caller create
/// or open a file elsewhere.
pub fn open_lock_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Creates `path` with all of `bytes`, or fails with `AlreadyExists` when it exists:
/// temporary sibling, fsync, hard link (which never replaces), fsync of the folder. The
/// loser of a race gets a conflict, not a merge, and nobody sees a partial file.
pub fn create_new_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = write_temp(path, bytes)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    linked?;
    sync_dir(parent(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_one_past_the_cap() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x");
        std::fs::write(&p, vec![1u8; 100]).unwrap();
        assert_eq!(read_at_most(&p, 10).unwrap().unwrap().len(), 11);
        assert_eq!(read_at_most(&p, 1000).unwrap().unwrap().len(), 100);
        assert!(read_at_most(&d.path().join("nope"), 10).unwrap().is_none());
        let err = read_capped(&p, 10, "trust root").unwrap_err();
        assert!(
            matches!(
                err,
                Error::TooLarge {
                    limit: 10,
                    actual: 11,
                    ..
                }
            ),
            "{err}"
        );
    }

    /// A link planted where a lock file goes is not followed: nothing is created at its
    /// target.
    #[test]
    fn a_lock_file_is_never_opened_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let elsewhere = d.path().join("elsewhere");
        let lock = d.path().join("x.lock");
        std::os::unix::fs::symlink(&elsewhere, &lock).unwrap();
        let err = open_lock_file(&lock).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
        assert!(!elsewhere.exists());
        let plain = d.path().join("y.lock");
        open_lock_file(&plain).unwrap().lock().unwrap();
        open_lock_file(&plain).unwrap(); // opening again neither truncates nor fails
    }

    #[test]
    fn a_fifo_a_device_a_folder_and_a_link_are_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success(), "mkfifo");
        let err = read_at_most(&fifo, 10).unwrap_err();
        assert!(
            matches!(&err, Error::NotRegular { kind, .. } if kind.contains("FIFO")),
            "{err}"
        );
        let err = read_capped(Path::new("/dev/zero"), 10, "trust root").unwrap_err();
        assert!(
            matches!(&err, Error::NotRegular { kind, .. } if kind.contains("character device")),
            "{err}"
        );
        let err = read_at_most(d.path(), 10).unwrap_err();
        assert!(matches!(&err, Error::NotRegular { .. }), "{err}");
        std::fs::write(d.path().join("target"), b"x").unwrap();
        std::os::unix::fs::symlink(d.path().join("target"), d.path().join("link")).unwrap();
        let err = read_at_most(&d.path().join("link"), 10).unwrap_err();
        assert!(matches!(&err, Error::Symlink { .. }), "{err}");
    }

    #[test]
    fn atomic_writes_replace_or_create_once_and_leave_no_temporary_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a/b.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let q = d.path().join("a/c.json");
        create_new_atomic(&q, b"first").unwrap();
        let e = create_new_atomic(&q, b"second").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&q).unwrap(), b"first");
        let names: Vec<_> = std::fs::read_dir(d.path().join("a"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
