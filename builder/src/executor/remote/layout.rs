//! Where an action's inputs go in its REAPI input root ([`Layout`]): the toolkit under one
//! folder, everything else under another, relative to their common folder; and how paths a
//! worker wrote (a dependency file) come back as this machine's.

use std::path::{Path, PathBuf};

use super::super::Action;

/// Where the inputs of an action go in its input root: the toolkit (the input holding the
/// program) at `cuda-aot-toolkit/`, everything else (sources, include folders, the working
/// folder, the outputs' folders) at `cuda-aot-work/`, relative to their common folder. Two
/// checkouts with the same layout at different paths make the same actions, so they share
/// the server's cache, and no path of this machine reaches the worker.
#[derive(Debug, Clone)]
pub struct Layout {
    toolkit: Option<PathBuf>,
    base: PathBuf,
}

/// The input root's folder of the toolkit.
pub const TOOLKIT: &str = "cuda-aot-toolkit";
/// The input root's folder of the rest.
const WORK: &str = "cuda-aot-work";
/// The folder below the working folder that the outputs are written to.
pub const OUT: &str = ".cuda-aot-out";

impl Layout {
    /// The layout of `action`.
    pub fn of(action: &Action) -> Layout {
        let toolkit = action
            .inputs
            .iter()
            .find(|i| action.program.starts_with(i))
            .cloned();
        let mut rest: Vec<&Path> = action
            .inputs
            .iter()
            .filter(|i| Some(*i) != toolkit.as_ref())
            .map(PathBuf::as_path)
            .collect();
        rest.push(&action.cwd);
        let mut base = rest.first().map(|p| p.to_path_buf()).unwrap_or_default();
        for p in &rest[1..] {
            while !p.starts_with(&base) {
                if !base.pop() {
                    break;
                }
            }
        }
        Layout { toolkit, base }
    }

    /// The place of the absolute `path` in the input root.
    pub fn place(&self, path: &Path) -> std::io::Result<Vec<String>> {
        let (top, rest) = match &self.toolkit {
            Some(t) if path.starts_with(t) => (TOOLKIT, path.strip_prefix(t)),
            _ => (WORK, path.strip_prefix(&self.base)),
        };
        let rest = rest.map_err(|_| {
            std::io::Error::other(format!("{}: outside the action's inputs", path.display()))
        })?;
        let mut out = vec![top.to_string()];
        for c in rest.components() {
            match c {
                std::path::Component::Normal(s) => {
                    out.push(s.to_str().map(str::to_string).ok_or_else(|| {
                        std::io::Error::other(format!("{}: not UTF-8", path.display()))
                    })?)
                }
                _ => {
                    return Err(std::io::Error::other(format!(
                        "{}: not a normal path",
                        path.display()
                    )));
                }
            }
        }
        Ok(out)
    }

    /// `path`'s place as an absolute path of the input root, to take relative paths
    /// between places.
    pub fn virtual_path(&self, path: &Path) -> std::io::Result<PathBuf> {
        Ok(Path::new("/").join(self.place(path)?.join("/")))
    }

    /// A dependency file written on a worker, run in `cwd`, with every path that names a
    /// file of the toolkit mapped back to this machine's (absolute, as a local nvcc given
    /// the toolkit's absolute path writes them), and absolute paths into the rest mapped back
    /// too; relative paths into the rest stay (the layout below the common folder is this
    /// machine's).
    pub fn local_paths(&self, text: &[u8], cwd: &Path) -> Vec<u8> {
        let text = String::from_utf8_lossy(text);
        let Ok(here) = self.virtual_path(cwd) else {
            return text.into_owned().into_bytes();
        };
        let mut out = String::with_capacity(text.len());
        for (i, token) in text.split(' ').enumerate() {
            if i > 0 {
                out.push(' ');
            }
            let path = token.trim_end();
            let tail = &token[path.len()..];
            match self.local_path(path, &here) {
                Some(p) => {
                    out.push_str(&p.to_string_lossy());
                    out.push_str(tail);
                }
                None => out.push_str(token),
            }
        }
        out.into_bytes()
    }

    /// Refuses a mapped dependency file (see [`Layout::local_paths`]) that names a file of
    /// the input root's folders which was not an input of `action`: a worker can only have
    /// read what it was sent, so such a name (a project file, or `..` climbing out of the
    /// toolkit) is a worker's lie that would put files it never saw into the build's
    /// records. Paths outside those folders are the worker's own system headers.
    pub fn check_depfile(&self, mapped: &[u8], action: &Action) -> Result<(), String> {
        let text = String::from_utf8_lossy(mapped);
        // The rule's prerequisites: what follows its target's colon.
        let deps = text.split_once(':').map_or("", |(_, d)| d);
        let outputs: Vec<PathBuf> = action
            .outputs
            .iter()
            .map(|o| lexical(&action.cwd.join(o)))
            .collect();
        for token in deps.split_whitespace() {
            if token == "\\" {
                continue;
            }
            let raw = action.cwd.join(token);
            let path = lexical(&raw);
            let ours = [&raw, &path].iter().any(|p| {
                p.starts_with(&self.base) || self.toolkit.as_ref().is_some_and(|t| p.starts_with(t))
            }) || token.starts_with("..");
            let sent = action.inputs.iter().any(|i| path.starts_with(lexical(i)));
            if ours && !sent && !outputs.contains(&path) {
                return Err(format!(
                    "the worker's dependency file names {}, which is not an input of the action: a worker can only have read what it was sent",
                    path.display()
                ));
            }
        }
        Ok(())
    }

    /// `path` (from a worker run in the input root's `here`) as this machine's, when it
    /// names the toolkit or (absolute) the rest.
    fn local_path(&self, path: &str, here: &Path) -> Option<PathBuf> {
        let toolkit = format!("/{TOOLKIT}/");
        let work = format!("/{WORK}/");
        if path.starts_with('/') {
            if let (Some(t), Some((_, rest))) = (&self.toolkit, path.split_once(&toolkit)) {
                return Some(t.join(rest));
            }
            return path.split_once(&work).map(|(_, rest)| self.base.join(rest));
        }
        if path.is_empty() || path.ends_with(':') || path == "\\" {
            return None;
        }
        let mut virt = here.to_path_buf();
        for c in Path::new(path).components() {
            match c {
                std::path::Component::ParentDir => {
                    virt.pop();
                }
                std::path::Component::Normal(n) => virt.push(n),
                _ => {}
            }
        }
        let rest = virt.strip_prefix(Path::new("/").join(TOOLKIT)).ok()?;
        Some(self.toolkit.as_ref()?.join(rest))
    }
}

/// `path` with `.` and `..` resolved without the file system (`..` at the root stays
/// there).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_placed_by_role_and_a_workers_paths_come_back_as_this_machines() {
        let action = Action {
            program: "/opt/tk/bin/nvcc".into(),
            args: vec![],
            cwd: "/home/u/proj/src".into(),
            inputs: vec![
                "/home/u/proj/src".into(),
                "/opt/tk".into(),
                "/home/u/proj/include".into(),
            ],
            outputs: vec!["../out/a.cubin".into()],
            depfiles: vec![],
        };
        let layout = Layout::of(&action);
        assert_eq!(
            layout.place(Path::new("/opt/tk/bin/nvcc")).unwrap(),
            vec!["cuda-aot-toolkit", "bin", "nvcc"]
        );
        assert_eq!(
            layout.place(Path::new("/home/u/proj/src")).unwrap(),
            vec!["cuda-aot-work", "src"]
        );
        assert!(layout.place(Path::new("/etc/passwd")).is_err());
        let depfile = b"a.cubin : a.cu ../include/b.cuh /w/1/act/cuda-aot-work/include/a.cuh \\\n /w/1/act/cuda-aot-toolkit/include/cuda.h ../../cuda-aot-toolkit/include/crt/x.h\n /usr/include/stdio.h";
        let local =
            String::from_utf8(layout.local_paths(depfile, Path::new("/home/u/proj/src"))).unwrap();
        assert_eq!(
            local,
            "a.cubin : a.cu ../include/b.cuh /home/u/proj/include/a.cuh \\\n /opt/tk/include/cuda.h /opt/tk/include/crt/x.h\n /usr/include/stdio.h"
        );
        layout.check_depfile(local.as_bytes(), &action).unwrap();
        // A worker naming what it was never sent: a project file, or a climb out of the
        // toolkit or the input root.
        for lie in [
            "/w/1/act/cuda-aot-work/secrets.env",
            "../secrets.env",
            "/w/1/act/cuda-aot-toolkit/../../../../home/u/proj/secrets.env",
            "../../../../../etc/shadow",
        ] {
            let depfile = format!("a.cubin : a.cu {lie}");
            let mapped = layout.local_paths(depfile.as_bytes(), Path::new("/home/u/proj/src"));
            let err = layout.check_depfile(&mapped, &action).unwrap_err();
            assert!(err.contains("not an input of the action"), "{lie}: {err}");
        }
    }
}
