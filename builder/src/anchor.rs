//! The trust root a command is given (`--trust FILE`, or the project's default): which
//! file, and reading it with advice that fits a trust root (make or rotate one with
//! `cargo xtask trust-root`), not the advice for a registry file.

use anyhow::Result;
use cuda_aot::trust::VerifiedRoot;
use std::path::{Path, PathBuf};

use crate::advice::{fail, refix};
use crate::paths;

/// The trust root to use: the given file, else the dev root if generated, else
/// `keys/root.json` of the project.
pub fn trust_file(given: Option<&Path>) -> Result<PathBuf> {
    trust_file_for(given, None)
}

/// [`trust_file`] for a command that reads the registry folder `registry`: when there is
/// no default root but a release made `registry` beside a dev root (`--spec` puts both
/// in `.cuda-aot/` beside the spec), the advice names that root. It is never picked on
/// its own: a trust root is chosen by the user, not found next to what it verifies.
pub fn trust_file_for(given: Option<&Path>, registry: Option<&Path>) -> Result<PathBuf> {
    locate(given, registry, "--trust")
}

/// [`trust_file`] for a command whose flag for the root is `flag` (`build`'s
/// `--remote-cache-trust`): the advice names that flag.
pub fn trust_file_flag(given: Option<&Path>, flag: &str) -> Result<PathBuf> {
    locate(given, None, flag)
}

fn locate(given: Option<&Path>, registry: Option<&Path>, flag: &str) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let dev = paths::dev_keys_dir().join("root.json");
    if dev.exists() {
        return Ok(dev);
    }
    let prod = paths::repo_root().join("keys/root.json");
    if prod.exists() {
        return Ok(prod);
    }
    let beside = registry
        .and_then(Path::parent)
        .map(|w| w.join("dev-keys/root.json"))
        .filter(|p| p.is_file());
    let fix = match beside {
        Some(p) => format!(
            "this registry was released with the development root {}: pass {flag} {}",
            paths::shown(&p),
            paths::shell(&p)
        ),
        None => format!(
            "pass {flag} FILE, or run `cargo xtask release` once to generate development keys"
        ),
    };
    Err(fail(
        format!(
            "no trust root: neither {} nor {} exists",
            paths::shown(&dev),
            paths::shown(&prod)
        ),
        fix,
    ))
}

/// Reads a trust root file (a regular file, within the size limit), unverified.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    cuda_aot::fs::read_capped(path, crate::limits::limits().root, "trust root")
        .map_err(|e| bad_root(e, path))
}

/// Reads and verifies the trust root in `path` (consistent, and self-signed by a threshold
/// of its root keys); returns its bytes and the verified root. Its expiry is not checked
/// here: the verifier checks it, against its clock, when it walks the root chain.
pub fn read(path: &Path) -> Result<(Vec<u8>, VerifiedRoot)> {
    let bytes = read_bytes(path)?;
    let root = cuda_aot::trust::verify_anchor(
        &bytes,
        &crate::limits::limits(),
        &path.display().to_string(),
    )
    .map_err(|e| bad_root(e, path))?;
    Ok((bytes, root))
}

/// A refused trust root, with advice about trust roots.
pub fn bad_root(e: cuda_aot::Error, path: &Path) -> anyhow::Error {
    if matches!(e, cuda_aot::Error::BadRoot { .. }) {
        // Its own advice (thresholds, distinct keys) is already about the root.
        return anyhow::Error::new(e)
            .context(format!("{} is not a usable trust root", path.display()));
    }
    // Not a file with a signed root in it (an expired root is read fine here and refused,
    // with its own advice, when a registry is verified against it).
    let fix = "pass the trust root file with --trust (a regular file holding a signed root), \
               or make a new root with `cargo xtask trust-root` (docs/trust.md)";
    refix(e, fix).context(format!("{} is not a usable trust root", path.display()))
}
