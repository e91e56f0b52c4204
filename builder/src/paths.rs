//! Where the tool keeps things, found at run time (never fixed when the tool was compiled,
//! so two clones sharing one `CARGO_TARGET_DIR` each act on their own files): the project a
//! command acts on, its ignored work folder `.cuda-aot/` (toolkit, build cache, build
//! output, dev keys, default registry, trust state), and the per-user download cache.
//!
//! The project is, in order:
//! 1. with `--spec FILE`: the nearest folder at or above the spec's folder that holds
//!    `manifests/release.toml` (a checkout laid out like cuda-aot's), else the spec's own
//!    folder — so a spec kept anywhere gets its `.cuda-aot/` beside it;
//! 2. otherwise the nearest folder at or above the current folder that holds
//!    `manifests/release.toml`, the way cargo finds `Cargo.toml`;
//! 3. otherwise the current folder.

use anyhow::{Result, bail};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use crate::advice::fail;

/// The file that marks a checkout laid out like cuda-aot's (its release spec).
pub const SPEC_IN_CHECKOUT: &str = "manifests/release.toml";

/// The project a command acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    /// The project folder (absolute): `.cuda-aot/` is created here.
    pub root: PathBuf,
    /// Whether it holds `manifests/release.toml`: then its `manifests/toolchain.toml` and
    /// `keys/root.json` are the defaults too.
    pub checkout: bool,
    /// How it was found, for messages.
    pub found_by: &'static str,
}

static PROJECT: OnceLock<Project> = OnceLock::new();

impl Project {
    /// The project of a spec file (rule 1).
    pub fn of_spec(spec: &Path) -> Result<Project> {
        let abs = absolute(spec)?;
        let dir = abs.parent().unwrap_or(Path::new("/")).to_path_buf();
        // `..` folded and links resolved where the folder exists.
        let dir = dir.canonicalize().unwrap_or(dir);
        Ok(match checkout_at_or_above(&dir) {
            Some(root) => Project {
                root,
                checkout: true,
                found_by: "the checkout holding --spec",
            },
            None => Project {
                root: dir,
                checkout: false,
                found_by: "the folder of --spec",
            },
        })
    }

    /// The project of the current folder (rules 2 and 3).
    pub fn of_current_dir() -> Result<Project> {
        let cwd = std::env::current_dir().map_err(|e| {
            fail(
                format!("reading the current folder: {e}"),
                "cd into a folder that exists",
            )
        })?;
        Ok(match checkout_at_or_above(&cwd) {
            Some(root) => Project {
                root,
                checkout: true,
                found_by: "the checkout holding the current folder",
            },
            None => Project {
                root: cwd,
                checkout: false,
                found_by: "the current folder",
            },
        })
    }
}

/// Selects the project of `spec` for this run. Called before anything asks for a path; a
/// later call with a spec of another project is refused.
pub fn select_spec(spec: &Path) -> Result<&'static Project> {
    let p = Project::of_spec(spec)?;
    let chosen = PROJECT.get_or_init(|| p.clone());
    if chosen.root != p.root {
        bail!(
            "internal: project {} selected before --spec chose {}",
            chosen.root.display(),
            p.root.display()
        );
    }
    Ok(chosen)
}

/// The project of this run (selected by `--spec`, else found from the current folder).
pub fn project() -> &'static Project {
    PROJECT.get_or_init(|| {
        Project::of_current_dir().unwrap_or_else(|_| Project {
            root: PathBuf::from("."),
            checkout: false,
            found_by: "the current folder",
        })
    })
}

/// The project root (the folder holding `manifests/` in a checkout).
pub fn repo_root() -> PathBuf {
    project().root.clone()
}

/// The ignored work folder `.cuda-aot/` of the project.
pub fn work_dir() -> PathBuf {
    project().root.join(".cuda-aot")
}

/// `.cuda-aot/`, created if needed, holding a `.gitignore` of `*` so that nothing in it
/// (dev keys among it) is ever committed, wherever the project lives.
pub fn work_dir_created() -> std::io::Result<PathBuf> {
    let d = work_dir();
    std::fs::create_dir_all(&d)?;
    let ignore = d.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(
            &ignore,
            "# made by cuda-aot: toolkit, build cache, outputs, dev keys; never commit\n*\n",
        )?;
    }
    Ok(d)
}

/// Before writing to `p`: when `p` lies in the work folder, creates the work folder with
/// its `.gitignore` (see [`work_dir_created`]).
pub fn prepare(p: &Path) -> Result<()> {
    if std::path::absolute(p)?.starts_with(std::path::absolute(work_dir())?) {
        work_dir_created().map_err(|e| {
            fail(
                format!("creating the work folder {}: {e}", work_dir().display()),
                "make the project folder writable, or pass the paths to use explicitly",
            )
        })?;
    }
    Ok(())
}

/// The release spec of the project: `manifests/release.toml`.
pub fn default_spec() -> PathBuf {
    project().root.join(SPEC_IN_CHECKOUT)
}

/// The default registry of `cargo xtask release`.
pub fn default_registry() -> PathBuf {
    work_dir().join("registry")
}

/// The default build output folder.
pub fn default_build_out() -> PathBuf {
    work_dir().join("build")
}

/// The default build cache (`CUDA_AOT_BUILD_CACHE` overrides it).
pub fn default_build_cache() -> PathBuf {
    work_dir().join("cache")
}

/// The development keys generated on first use.
pub fn dev_keys_dir() -> PathBuf {
    work_dir().join("dev-keys")
}

/// The per-user download cache (wheels keyed by sha256), shared by clones and CI runs:
/// `$CUDA_AOT_CACHE_DIR`, else `$XDG_CACHE_HOME/cuda-aot`, else `~/.cache/cuda-aot`.
pub fn user_cache_dir() -> PathBuf {
    cuda_aot_registry::defaults::user_cache_dir()
}

/// `path` as a shell word the user can paste where they stand: [`shown`], quoted as the
/// tool quotes every command it prints ([`crate::process::shell_quote`]).
pub fn shell(path: &Path) -> String {
    crate::process::shell_quote(&shown(path))
}

/// `path` as the user would like to read it: relative to the current folder when it lies
/// below it, else as given.
pub fn shown(path: &Path) -> String {
    match std::env::current_dir() {
        Ok(cwd) => match path.strip_prefix(&cwd) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
            _ => path.display().to_string(),
        },
        Err(_) => path.display().to_string(),
    }
}

/// A relative path made only of normal components (no `..`, no root).
pub fn is_relative_plain(p: &Path) -> bool {
    !p.as_os_str().is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

fn absolute(p: &Path) -> Result<PathBuf> {
    Ok(std::path::absolute(p)?)
}

fn checkout_at_or_above(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join(SPEC_IN_CHECKOUT).is_file())
        .map(Path::to_path_buf)
}

/// The default trust-state file for a registry folder: the one [`cuda_aot::Runtime::open`]
/// reads by default ([`cuda_aot::state::TrustState::default_path`]: per user, per registry
/// location, `$CUDA_AOT_STATE_DIR` first), so what `verify`, `sync`, `release` and OCI pulls
/// saw is the floor a prover on the same host starts from.
pub fn state_file(registry: &Path) -> Result<PathBuf> {
    cuda_aot::state::TrustState::default_path(registry).ok_or_else(|| {
        crate::advice::fail(
            format!(
                "no per-user folder for the rollback state of {} (neither CUDA_AOT_STATE_DIR, XDG_STATE_HOME nor HOME is set)",
                registry.display()
            ),
            "set CUDA_AOT_STATE_DIR to a folder that outlives this machine's processes (the prover's runtime reads the same one), or pass --state FILE",
        )
    })
}

/// `target` as a path relative to `base` (both absolute and canonical), with `..` where it
/// lies outside: what keeps absolute paths out of nvcc's `__FILE__` and dependency names.
pub fn relative_to(base: &Path, target: &Path) -> PathBuf {
    let (b, t): (Vec<_>, Vec<_>) = (base.components().collect(), target.components().collect());
    let common = b.iter().zip(&t).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c.as_os_str());
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_outside_a_checkout_is_its_own_project_and_inside_one_the_checkout_is() {
        let dir = tempfile::tempdir().unwrap();
        let foreign = dir.path().join("prover/gpu");
        std::fs::create_dir_all(&foreign).unwrap();
        std::fs::write(foreign.join("kernels.toml"), "").unwrap();
        let p = Project::of_spec(&foreign.join("kernels.toml")).unwrap();
        assert_eq!((p.root.as_path(), p.checkout), (foreign.as_path(), false));

        let clone = dir.path().join("clone");
        std::fs::create_dir_all(clone.join("manifests")).unwrap();
        std::fs::write(clone.join(SPEC_IN_CHECKOUT), "").unwrap();
        std::fs::create_dir_all(clone.join("manifests/variants")).unwrap();
        for spec in ["manifests/release.toml", "manifests/variants/v.toml"] {
            let p = Project::of_spec(&clone.join(spec)).unwrap();
            assert_eq!((p.root.as_path(), p.checkout), (clone.as_path(), true));
        }
    }

    #[test]
    fn plain_relative_paths() {
        assert!(is_relative_plain(Path::new("a/b.cu")) && is_relative_plain(Path::new("./a")));
        for bad in ["", "/a", "../a", "a/../../b"] {
            assert!(!is_relative_plain(Path::new(bad)), "{bad}");
        }
    }
}
