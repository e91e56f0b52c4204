//! Where an install goes: the prefix its files name, the folder they are written below
//! (`$DESTDIR$PREFIX`, as GNU makefiles stage an install), the checks that refuse a
//! destination before anything in it changes, and the writes (each file and link atomic).

use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};

use super::build::Built;
use super::packages::{Content, Entry};
use crate::advice::fail;
use crate::{files, paths};

/// The prefix and the folder the files are written below.
pub struct Destination {
    /// The prefix the installed files name (absolute, `..` folded).
    prefix: PathBuf,
    /// `$DESTDIR$PREFIX`, or the prefix when there is no DESTDIR.
    root: PathBuf,
    /// Whether a DESTDIR stages the install.
    staged: bool,
}

/// The advice for a destination this user cannot write.
const NOT_WRITABLE_FIX: &str = "choose a prefix you can write to (--prefix ~/.local), install as a user who can write there (sudo for /usr/local), or stage the install with DESTDIR=DIR and copy it into place";

impl Destination {
    /// The destination of `--prefix prefix` (relative: from the current folder) staged below
    /// `destdir` (none or empty: not staged).
    pub fn new(prefix: &Path, destdir: Option<&Path>) -> Result<Destination> {
        let prefix =
            normalized(&std::path::absolute(prefix).context("reading the current folder")?);
        let text = prefix.to_string_lossy();
        if let Some(c) = text
            .chars()
            .find(|c| c.is_whitespace() || "\"'\\$#".contains(*c))
        {
            return Err(fail(
                format!(
                    "--prefix {text}: holds {c:?}, which the pkg-config file cannot name (pkg-config splits and expands flags at it)"
                ),
                "choose a prefix without spaces, quotes, `\\`, `$` or `#`",
            ));
        }
        let (root, staged) = match destdir.filter(|d| !d.as_os_str().is_empty()) {
            Some(d) => {
                let d = std::path::absolute(d).context("reading the current folder")?;
                let below = prefix.strip_prefix("/").unwrap_or(&prefix);
                (normalized(&d).join(below), true)
            }
            None => (prefix.clone(), false),
        };
        Ok(Destination {
            prefix,
            root,
            staged,
        })
    }

    /// The prefix the installed files name.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The destination as messages name it.
    fn shown(&self) -> String {
        if self.staged {
            format!(
                "{} (prefix {} staged by DESTDIR)",
                paths::shown(&self.root),
                self.prefix.display()
            )
        } else {
            paths::shown(&self.root)
        }
    }

    /// Refuses a destination where one of `folders` (below the prefix) cannot be made or
    /// written: the nearest existing folder on the way must be a folder, and writable.
    pub fn check_folders(&self, folders: &[&str]) -> Result<()> {
        for f in folders {
            let dir = self.root.join(f);
            let mut at = dir.as_path();
            loop {
                match std::fs::metadata(at) {
                    Ok(m) if m.is_dir() => {
                        writable(at).map_err(|e| {
                            fail(
                                format!(
                                    "cannot install into {}: {} is not writable ({e})",
                                    self.shown(),
                                    at.display()
                                ),
                                NOT_WRITABLE_FIX,
                            )
                        })?;
                        break;
                    }
                    Ok(_) => return Err(self.in_the_way(at, &format!("a folder ({f}/)"))),
                    // Missing, or below a file: what stands on the way is found further up.
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                        ) =>
                    {
                        if at.symlink_metadata().is_ok() {
                            return Err(
                                self.in_the_way(at, "a folder (a link to nothing stands there)")
                            );
                        }
                        at = at.parent().unwrap_or(Path::new("/"));
                    }
                    Err(e) => {
                        return Err(fail(
                            format!(
                                "cannot install into {}: {}: {e}",
                                self.shown(),
                                at.display()
                            ),
                            NOT_WRITABLE_FIX,
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Refuses a folder standing where a file or link of `entries` goes.
    pub fn check_files(&self, entries: &[Entry]) -> Result<()> {
        for e in entries {
            let path = self.root.join(&e.rel);
            if path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                return Err(self.in_the_way(&path, &format!("the file {}", e.rel)));
            }
        }
        Ok(())
    }

    /// The refusal for `at`, which stands where `what` must go.
    fn in_the_way(&self, at: &Path, what: &str) -> anyhow::Error {
        let kind = match at.symlink_metadata() {
            Ok(m) if m.is_dir() => "a folder",
            Ok(m) if m.file_type().is_symlink() => "a link",
            _ => "a file",
        };
        fail(
            format!(
                "cannot install into {}: {} is {kind} where {what} must be",
                self.shown(),
                at.display()
            ),
            format!(
                "choose another --prefix, or move {} out of the way",
                at.display()
            ),
        )
    }

    /// Writes `entries` in order, each file and link atomically, creating folders.
    pub fn install(&self, entries: &[Entry]) -> Result<()> {
        for e in entries {
            let path = self.root.join(&e.rel);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            match &e.content {
                Content::File(bytes) => files::write(&path, bytes)?,
                Content::Link(to) => files::symlink(&path, Path::new(to))?,
            }
        }
        Ok(())
    }

    /// Prints what went where, and how to use it.
    pub fn summary(&self, entries: &[Entry], built: &Built) {
        println!(
            "installed cuda-aot-capi {} ({} build, {}) into {}",
            built.version,
            built.profile,
            paths::shown(&built.dir),
            self.shown()
        );
        for e in entries {
            match &e.content {
                Content::File(bytes) => println!("  {:<48} {:>10} bytes", e.rel, bytes.len()),
                Content::Link(to) => println!("  {:<48} -> {to}", e.rel),
            }
        }
        let p = self.prefix.display();
        println!(
            "pkg-config: PKG_CONFIG_PATH={p}/lib/pkgconfig pkg-config --cflags --libs cuda-aot"
        );
        println!(
            "CMake:      -DCMAKE_PREFIX_PATH={p}, then find_package(cuda-aot CONFIG REQUIRED) and cuda-aot::cuda_aot"
        );
    }
}

/// Whether this user can create files in the folder `dir`: an unnamed temporary file is
/// made there and dropped, which leaves nothing behind.
fn writable(dir: &Path) -> std::io::Result<()> {
    tempfile::tempfile_in(dir).map(drop)
}

/// `p` with `.` dropped and `..` folded (lexically: the prefix is a name, not resolved).
fn normalized(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destdir_stages_below_itself_and_the_prefix_stays_what_files_name() {
        let d = Destination::new(
            Path::new("/usr/local/../opt/./x"),
            Some(Path::new("/stage")),
        )
        .unwrap();
        assert_eq!(d.prefix(), Path::new("/usr/opt/x"));
        assert_eq!(d.root, Path::new("/stage/usr/opt/x"));
        let plain = Destination::new(Path::new("/opt/x"), Some(Path::new(""))).unwrap();
        assert_eq!(plain.root, Path::new("/opt/x"));
        assert!(!plain.staged);
    }

    #[test]
    fn a_prefix_pkg_config_cannot_name_is_refused() {
        let err = Destination::new(Path::new("/opt/my dir"), None)
            .err()
            .unwrap();
        assert!(format!("{err:#}").contains("cannot name"), "{err:#}");
    }

    #[test]
    fn a_file_where_a_folder_must_be_is_refused_and_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("p")).unwrap();
        std::fs::write(tmp.path().join("p/lib"), b"mine").unwrap();
        let d = Destination::new(&tmp.path().join("p"), None).unwrap();
        let err = d.check_folders(&["include", "lib/pkgconfig"]).unwrap_err();
        assert!(
            format!("{err:#}").contains("lib is a file where a folder (lib/pkgconfig/) must be"),
            "{err:#}"
        );
        assert!(!tmp.path().join("p/include").exists());
        assert_eq!(std::fs::read(tmp.path().join("p/lib")).unwrap(), b"mine");
    }
}
