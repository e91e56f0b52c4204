//! Headless Chromium for the tests of `serve --trust`'s page (issue 46): `cargo xtask
//! servers chromium --url URL` loads a page and writes a screenshot (`--screenshot FILE`)
//! or prints the DOM it rendered (`--dump-dom`). Debian 12's `chromium-headless-shell` and
//! `chromium-common` and the libraries they link that a machine without a desktop lacks,
//! each fetched and checked like nginx (manifests/servers.toml), never installed: the
//! binary and the resources of both packages are hard-linked into one folder (Chromium
//! reads its ICU data and locales beside its own path), the libraries found through
//! LD_LIBRARY_PATH. As root it runs with `--no-sandbox`; every run gets a fresh profile
//! folder, removed after.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::ensure;
use crate::paths;

/// The pinned packages holding the libraries the headless shell links beyond a base
/// Debian 12 system (see manifests/servers.toml).
const LIBS: [&str; 16] = [
    "libasyncns0",
    "libdouble-conversion3",
    "libflac12",
    "libharfbuzz-subset0",
    "libminizip1",
    "libmp3lame0",
    "libmpg123-0",
    "libogg0",
    "libopenjp2-7",
    "libopenh264-7",
    "libopus0",
    "libpulse0",
    "libsndfile1",
    "libvorbis0a",
    "libvorbisenc2",
    "libxnvctrl0",
];

/// The folder below an unpacked package where Chromium's files are.
const CHROMIUM_DIR: &str = "usr/lib/chromium";

/// The headless shell ready to run (its folder made on first use) and the library path it
/// needs.
pub fn ensure_chromium() -> Result<(PathBuf, String)> {
    let shell = ensure("chromium-headless-shell")?;
    let common = ensure("chromium-common")?;
    let pkg_root = |bin: &Path| -> PathBuf {
        bin.ancestors()
            .nth(4)
            .map(Path::to_path_buf)
            .unwrap_or_default()
    };
    let (shell_root, common_root) = (pkg_root(&shell), pkg_root(&common));
    let name = shell_root
        .file_name()
        .context("the headless shell's folder")?
        .to_string_lossy()
        .replace("chromium-headless-shell", "chromium-run");
    let run = paths::work_dir().join("servers").join(name);
    let bin = run.join("chromium-headless-shell");
    if !bin.is_file() {
        let tmp = tempfile::Builder::new()
            .prefix(".tmp.chromium-run.")
            .tempdir_in(run.parent().context("servers folder")?)?;
        for from in [&common_root, &shell_root] {
            link_tree(&from.join(CHROMIUM_DIR), tmp.path())?;
        }
        let _ = std::fs::remove_dir_all(&run);
        std::fs::rename(tmp.keep(), &run)
            .with_context(|| format!("moving into {}", run.display()))?;
    }
    let mut dirs = Vec::new();
    for lib in LIBS {
        let so = ensure(lib)?;
        let dir = so.parent().context("library folder")?.to_path_buf();
        dirs.push(dir.join("pulseaudio"));
        dirs.push(dir);
    }
    dirs.sort();
    dirs.dedup();
    let ld = dirs
        .iter()
        .filter(|d| d.is_dir())
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let missing = super::missing_libraries(&[&bin], std::ffi::OsStr::new(&ld))?;
    if !missing.is_empty() {
        return Err(crate::advice::fail(
            format!(
                "headless Chromium ({}) links libraries neither this machine nor the pinned packages have: {}",
                bin.display(),
                missing.join(", ")
            ),
            "add the Debian 12 packages that hold them (`apt-file search NAME`) to manifests/servers.toml and to LIBS in xtask/src/repo/servers/chromium.rs (a newer Chromium links new ones), or install them",
        ));
    }
    Ok((bin, ld))
}

/// Hard-links (else copies) every file below `from` into `to`, keeping the folders (links
/// are not followed).
fn link_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e?;
        let (path, dest) = (e.path(), to.join(e.file_name()));
        let kind = e.file_type()?;
        if kind.is_dir() {
            link_tree(&path, &dest)?;
        } else if kind.is_file() && !dest.exists() && std::fs::hard_link(&path, &dest).is_err() {
            std::fs::copy(&path, &dest).with_context(|| format!("copying {}", path.display()))?;
        }
    }
    Ok(())
}

/// Loads `url` in headless Chromium: a screenshot of `window` (`W,H`) into `screenshot`,
/// or the rendered DOM printed (`dump_dom`); waits for it and reports a failure with
/// Chromium's own output.
pub fn run(url: &str, screenshot: Option<&Path>, dump_dom: bool, window: &str) -> Result<()> {
    if screenshot.is_none() && !dump_dom {
        bail!("give --screenshot FILE, --dump-dom or both");
    }
    let (bin, ld) = ensure_chromium()?;
    let profile = tempfile::Builder::new()
        .prefix("cuda-aot-chromium-")
        .tempdir()?;
    let root = super::apt::running_as_root();
    // Each load is a run of its own, with the same flags and the same fresh profile.
    let command = || {
        let mut cmd = Command::new(&bin);
        if root {
            cmd.arg("--no-sandbox");
        }
        cmd.arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--window-size={window}"))
            .args(["--hide-scrollbars", "--disable-gpu", "--no-first-run"])
            .env("LD_LIBRARY_PATH", &ld);
        cmd
    };
    let mut outputs = Vec::new();
    if let Some(png) = screenshot {
        let png = std::path::absolute(png)?;
        let out = command()
            .arg(format!("--screenshot={}", png.display()))
            .arg(url)
            .output()
            .context("running chromium-headless-shell")?;
        if !out.status.success() || !png.is_file() {
            bail!(
                "chromium could not take a screenshot of {url} ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        outputs.push(format!("screenshot {}", png.display()));
    }
    if dump_dom {
        let out = command()
            .arg("--dump-dom")
            .arg(url)
            .output()
            .context("running chromium-headless-shell")?;
        if !out.status.success() {
            bail!(
                "chromium could not load {url} ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        use std::io::Write;
        std::io::stdout().write_all(&out.stdout)?;
    }
    for o in outputs {
        eprintln!("servers chromium: {o}");
    }
    Ok(())
}
