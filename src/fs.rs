//! File access with the guarantees verification needs, in one place for the whole workspace:
//! reads that open only regular files, never follow a final symbolic link, never block (a
//! FIFO or a device in place of a registry file is refused, not waited on) and stop one byte
//! past their cap; and writes that are atomic (temporary sibling, fsync, rename or hard link,
//! fsync of the folder).
//!
//! Below a registry root, the `*_beneath` functions go one step further: they walk the
//! path one folder at a time, each opened with `O_NOFOLLOW` relative to the one before
//! (`openat`), so a symbolic link anywhere below the root is refused, never followed, and
//! no rename racing the walk can make them read or write a file outside the root.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

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

/// A folder opened by handle: every file operation below is relative to it (`openat`,
/// `renameat`, `linkat`), so renaming a folder on the way cannot redirect it.
struct Dir {
    fd: OwnedFd,
    /// Where it was, for messages.
    path: PathBuf,
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

impl Dir {
    /// The folder `path` itself (following a link there: it is the caller's choice),
    /// created first with `create`.
    fn open(path: &Path, create: bool) -> std::io::Result<Dir> {
        if create {
            std::fs::create_dir_all(path)?;
        }
        let fd = rustix::fs::open(path, DIR_FLAGS, Mode::empty())?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Writes `bytes` to a fresh temporary file in this folder (created, never reused: the
    /// name holds the pid and a per-process counter) and fsyncs it; returns its name.
    fn write_temp(&self, name: &OsStr, bytes: &[u8]) -> std::io::Result<String> {
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = format!(".tmp.{}.{n}.{}", std::process::id(), name.to_string_lossy());
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
        let fd = rustix::fs::openat(
            &self.fd,
            tmp.as_str(),
            flags | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )?;
        let mut f = File::from(fd);
        let written = f.write_all(bytes).and_then(|()| f.sync_all());
        if let Err(e) = written {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
            return Err(e);
        }
        Ok(tmp)
    }

    /// Puts `bytes` at `name` in this folder atomically: temporary file, fsync, then a
    /// rename (`replace`) or a hard link (which fails with `AlreadyExists` rather than
    /// replace), then an fsync of the folder. A link at `name` is replaced, never followed.
    fn put(&self, name: &OsStr, bytes: &[u8], replace: bool) -> std::io::Result<()> {
        let tmp = self.write_temp(name, bytes)?;
        let placed = if replace {
            rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name)
        } else {
            rustix::fs::linkat(&self.fd, tmp.as_str(), &self.fd, name, AtFlags::empty())
        };
        if !replace || placed.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
        }
        placed?;
        rustix::fs::fsync(&self.fd)?;
        Ok(())
    }
}

/// The folder and file name of `path` (a bare name is in `.`).
fn split(path: &Path) -> std::io::Result<(&Path, &OsStr)> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{}: no file name", path.display())))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((dir, name))
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
/// state all write through it (below a registry root: [`write_atomic_beneath`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let (dir, name) = split(path)?;
    Dir::open(dir, true)?.put(name, bytes, true)
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
    let (dir, name) = split(path)?;
    Dir::open(dir, true)?.put(name, bytes, false)
}

/// The parts of the relative path `rel`, refusing an empty, `.` or `..` part (which could
/// step out of the folder it is walked from).
fn parts(rel: &str) -> Result<Vec<&str>> {
    let parts: Vec<&str> = rel.split('/').collect();
    if parts
        .iter()
        .any(|c| c.is_empty() || *c == "." || *c == "..")
    {
        return Err(Error::InvalidName {
            kind: "path below a registry root",
            value: rel.escape_debug().to_string(),
            reason: "an empty, `.` or `..` part",
        });
    }
    Ok(parts)
}

fn io_error(path: PathBuf, e: impl Into<std::io::Error>) -> Error {
    Error::Io {
        path,
        source: e.into(),
    }
}

/// The error for `name` in `dir` that could not be opened as a folder: a link (refused),
/// else `NotADirectory` (a file where a folder belongs).
fn not_a_folder(dir: &Dir, name: &str, path: PathBuf) -> Error {
    match rustix::fs::statat(&dir.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink() => {
            Error::Symlink { path }
        }
        _ => io_error(path, std::io::ErrorKind::NotADirectory),
    }
}

/// Opens the folders `parts` below `root` one at a time, each relative to the one before
/// with `O_NOFOLLOW`: a link on the way is [`Error::Symlink`]. `root` itself is opened as
/// given. With `create`, missing folders are made (mode 0755); without, `Ok(None)` when one
/// is missing or is a file.
fn open_below(root: &Path, parts: &[&str], create: bool) -> Result<Option<Dir>> {
    let mut dir = match Dir::open(root, create) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => return Ok(None),
        Err(e) => return Err(io_error(root.into(), e)),
    };
    for part in parts {
        let path = dir.path.join(part);
        let flags = DIR_FLAGS | OFlags::NOFOLLOW;
        let fd = loop {
            match rustix::fs::openat(&dir.fd, *part, flags, Mode::empty()) {
                Ok(fd) => break fd,
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&dir.fd, *part, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => continue,
                        Err(e) => return Err(io_error(path, e)),
                    }
                }
                Err(Errno::NOENT) => return Ok(None),
                // O_NOFOLLOW on a link: ELOOP (or ENOTDIR with O_DIRECTORY).
                Err(Errno::LOOP | Errno::NOTDIR) => match not_a_folder(&dir, part, path) {
                    Error::Io { .. } if !create => return Ok(None),
                    e => return Err(e),
                },
                Err(e) => return Err(io_error(path, e)),
            }
        };
        dir = Dir { fd, path };
    }
    Ok(Some(dir))
}

/// Opens the file `rel` below the folder `root` for reading, walking one folder at a time
/// without following a link anywhere below `root` ([`Error::Symlink`]), without blocking
/// (a FIFO with no writer opens at once), and checks that the opened handle, not the path,
/// is a regular file ([`Error::NotRegular`]). `Ok(None)` when it does not exist.
///
/// A rename or a link swapped in while it runs cannot make it open a file outside `root`:
/// each step resolves one name inside a folder already held open.
pub fn open_beneath(root: &Path, rel: &str) -> Result<Option<File>> {
    let parts = parts(rel)?;
    let (name, folders) = parts.split_last().expect("split yields at least one part");
    let Some(dir) = open_below(root, folders, false)? else {
        return Ok(None);
    };
    let path = dir.path.join(name);
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = match rustix::fs::openat(&dir.fd, *name, flags | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => return Err(Error::Symlink { path }),
        // A socket cannot be opened at all.
        Err(Errno::NXIO) => {
            return Err(Error::NotRegular {
                path,
                kind: "a socket",
            });
        }
        Err(e) => return Err(io_error(path, e)),
    };
    let file = File::from(fd);
    let kind = file
        .metadata()
        .map_err(|e| io_error(path.clone(), e))?
        .file_type();
    if !kind.is_file() {
        return Err(Error::NotRegular {
            path,
            kind: describe_kind(&kind),
        });
    }
    Ok(Some(file))
}

/// Reads at most `max + 1` bytes of the file `rel` below `root` (see [`open_beneath`]).
pub fn read_beneath_at_most(root: &Path, rel: &str, max: u64) -> Result<Option<Vec<u8>>> {
    let Some(file) = open_beneath(root, rel)? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| io_error(root.join(rel), e))?;
    Ok(Some(out))
}

/// The folder of `rel` below `root`, created as needed without following a link, and the
/// file name.
fn folder_for_write<'a>(root: &Path, rel: &'a str) -> Result<(Dir, &'a str)> {
    let parts = parts(rel)?;
    let (name, folders) = parts.split_last().expect("split yields at least one part");
    let dir = open_below(root, folders, true)?.expect("created folders exist");
    Ok((dir, name))
}

/// [`write_atomic`] of `rel` below `root`, creating missing folders; nothing is written
/// when a folder on the way is a symbolic link ([`Error::Symlink`], naming it), and a link
/// at `rel` itself is replaced, not written through.
pub fn write_atomic_beneath(root: &Path, rel: &str, bytes: &[u8]) -> Result<()> {
    let (dir, name) = folder_for_write(root, rel)?;
    dir.put(name.as_ref(), bytes, true)
        .map_err(|e| io_error(dir.path.join(name), e))
}

/// [`create_new_atomic`] of `rel` below `root` (`Error::Io` of kind `AlreadyExists` when
/// it exists), with the guarantees of [`write_atomic_beneath`].
pub fn create_new_atomic_beneath(root: &Path, rel: &str, bytes: &[u8]) -> Result<()> {
    let (dir, name) = folder_for_write(root, rel)?;
    dir.put(name.as_ref(), bytes, false)
        .map_err(|e| io_error(dir.path.join(name), e))
}

/// Removes the file `rel` below `root` without following a link on the way; false when
/// it did not exist.
pub fn remove_beneath(root: &Path, rel: &str) -> Result<bool> {
    let parts = parts(rel)?;
    let (name, folders) = parts.split_last().expect("split yields at least one part");
    let Some(dir) = open_below(root, folders, false)? else {
        return Ok(false);
    };
    match rustix::fs::unlinkat(&dir.fd, *name, AtFlags::empty()) {
        Ok(()) => {
            rustix::fs::fsync(&dir.fd).map_err(|e| io_error(dir.path.clone(), e))?;
            Ok(true)
        }
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(io_error(dir.path.join(name), e)),
    }
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

    fn mkfifo(path: &Path) {
        let made = std::process::Command::new("mkfifo").arg(path).status();
        assert!(made.unwrap().success(), "mkfifo {}", path.display());
    }

    #[test]
    fn a_fifo_a_device_a_folder_and_a_link_are_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
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

    /// A link anywhere below the root is refused for reads and writes, and nothing is
    /// written at its target; a FIFO is refused without blocking.
    #[test]
    fn nothing_is_read_or_written_through_a_link_below_the_root() {
        let d = tempfile::tempdir().unwrap();
        let (root, outside) = (d.path().join("root"), d.path().join("outside"));
        std::fs::create_dir_all(root.join("blobs/blake3")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"outside").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("blobs/blake3/ab")).unwrap();
        let err = write_atomic_beneath(&root, "blobs/blake3/ab/abcd", b"x").unwrap_err();
        assert!(
            matches!(&err, Error::Symlink { path } if *path == root.join("blobs/blake3/ab")),
            "{err}"
        );
        let err = create_new_atomic_beneath(&root, "blobs/blake3/ab/abcd", b"x").unwrap_err();
        assert!(matches!(&err, Error::Symlink { .. }), "{err}");
        let err = open_beneath(&root, "blobs/blake3/ab/secret").unwrap_err();
        assert!(matches!(&err, Error::Symlink { .. }), "{err}");
        let err = remove_beneath(&root, "blobs/blake3/ab/secret").unwrap_err();
        assert!(matches!(&err, Error::Symlink { .. }), "{err}");
        let names: Vec<_> = std::fs::read_dir(&outside).unwrap().collect();
        assert_eq!(names.len(), 1, "nothing was written outside the root");
        assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"outside");

        std::os::unix::fs::symlink(outside.join("secret"), root.join("ts.json")).unwrap();
        let err = read_beneath_at_most(&root, "ts.json", 100).unwrap_err();
        assert!(matches!(&err, Error::Symlink { .. }), "{err}");
        let fifo = root.join("fifo");
        mkfifo(&fifo);
        let err = open_beneath(&root, "fifo").unwrap_err();
        assert!(
            matches!(&err, Error::NotRegular { kind, .. } if kind.contains("FIFO")),
            "{err}"
        );
        for bad in ["../outside/secret", "a//b", "./x", ""] {
            assert!(
                matches!(open_beneath(&root, bad), Err(Error::InvalidName { .. })),
                "{bad}"
            );
        }
        // Plain files: written (folders created), read back, created once, removed.
        write_atomic_beneath(&root, "index/1.index.json", b"one").unwrap();
        assert_eq!(
            read_beneath_at_most(&root, "index/1.index.json", 10)
                .unwrap()
                .unwrap(),
            b"one"
        );
        let e = create_new_atomic_beneath(&root, "index/1.index.json", b"two").unwrap_err();
        assert!(
            matches!(&e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists),
            "{e}"
        );
        assert!(remove_beneath(&root, "index/1.index.json").unwrap());
        assert!(!remove_beneath(&root, "index/1.index.json").unwrap());
        assert!(open_beneath(&root, "index/1.index.json").unwrap().is_none());
        assert!(open_beneath(&root, "nope/x").unwrap().is_none());
        assert!(
            open_beneath(&root, "ts.json/x")
                .unwrap_err()
                .to_string()
                .contains("symbolic link")
        );
    }
}
