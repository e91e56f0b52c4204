//! Where the tool keeps things: the repository root and the ignored `.cuda-aot/` folder
//! (toolkit, build cache, build output, dev keys, default registry, trust state).

use std::path::{Path, PathBuf};

/// The workspace root (the folder holding `manifests/` and `kernels/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// The ignored working folder `.cuda-aot/`.
pub fn work_dir() -> PathBuf {
    repo_root().join(".cuda-aot")
}

/// `.cuda-aot/`, created if needed.
pub fn work_dir_created() -> std::io::Result<PathBuf> {
    let d = work_dir();
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

/// The default registry of `cargo xtask release`.
pub fn default_registry() -> PathBuf {
    work_dir().join("registry")
}

/// The default build output folder.
pub fn default_build_out() -> PathBuf {
    work_dir().join("build")
}

/// The development keys generated on first use.
pub fn dev_keys_dir() -> PathBuf {
    work_dir().join("dev-keys")
}

/// The per-user download cache (wheels keyed by sha256), shared by clones and CI runs.
pub fn user_cache_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("CUDA_AOT_CACHE_DIR") {
        return PathBuf::from(x);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("cuda-aot")
}

/// An error's `Fix:` advice, attached as context so the CLI prints it.
#[derive(Debug)]
pub struct Fix(pub String);

impl std::fmt::Display for Fix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for Fix {}
