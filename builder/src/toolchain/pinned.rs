//! The pinned toolkit: NVIDIA's wheels listed in `manifests/toolchain.toml` (or the pins
//! built into the tool), fetched with pip into the per-user cache, sha256-checked on every
//! use, and unpacked atomically, with progress, into `.cuda-aot/toolkit/<key>/`.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use super::stamp::{
    STAMP, STAMP_SCHEMA, Stamp, collect_files, digest_files, probe_nvcc, read_stamp, stats_of,
};
use super::{BUILTIN_PINS, Pins, SOURCE_PINNED, ToolchainOptions, ToolkitInfo};
use crate::advice::{Advise, fail};
use crate::files;
use crate::message::Progress;
use crate::paths::is_relative_plain;
use crate::process::{self, check_interrupt, show_command};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PinFile {
    root: String,
    pip: PipSpec,
    wheel: Vec<WheelPin>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PipSpec {
    python: String,
    python_version: String,
    platforms: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WheelPin {
    name: String,
    version: String,
    sha256: String,
}

impl WheelPin {
    fn label(&self) -> String {
        format!("{} {}", self.name, self.version)
    }
    /// The file name prefix pip gives this wheel (`nvidia_cuda_nvcc-13.0.88-`).
    fn file_prefix(&self) -> String {
        format!("{}-{}-", self.name.replace('-', "_"), self.version)
    }
}

/// The wheels `source` pins (name, version, sha256), for the build statement's provenance.
pub fn wheels(source: &Pins) -> Result<Vec<super::Wheel>> {
    Ok(load_pins(source)?
        .wheel
        .into_iter()
        .map(|w| super::Wheel {
            name: w.name,
            version: w.version,
            sha256: w.sha256,
        })
        .collect())
}

fn load_pins(source: &Pins) -> Result<PinFile> {
    let text = match source {
        Pins::File(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the toolkit pin file {}", path.display()))?,
        Pins::Builtin => BUILTIN_PINS.to_string(),
    };
    let pins: PinFile = toml::from_str(&text).advise(
        || format!("parsing {}", source.describe()),
        || "fix manifests/toolchain.toml (docs/build.md describes it)".into(),
    )?;
    let bad = |what: String| -> Result<PinFile> {
        Err(fail(
            format!("{}: {what}", source.describe()),
            "each [[wheel]] needs name, version and a 64-hex-digit sha256",
        ))
    };
    if pins.wheel.is_empty() {
        return bad("no [[wheel]] entries".into());
    }
    if !is_relative_plain(Path::new(&pins.root)) {
        return bad(format!(
            "root `{}` must be a relative path without `..`",
            pins.root
        ));
    }
    for w in &pins.wheel {
        if w.name.is_empty()
            || !w
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return bad(format!(
                "wheel name `{}` is not a lower-case distribution name",
                w.name
            ));
        }
        if w.version.is_empty() || !w.version.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return bad(format!(
                "wheel {}: version `{}` is not an exact release",
                w.name, w.version
            ));
        }
        if w.sha256.len() != 64
            || !w
                .sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return bad(format!(
                "wheel {}: sha256 `{}` is not 64 lower-case hex digits",
                w.name, w.sha256
            ));
        }
    }
    if !pins.wheel.iter().any(|w| w.name == "nvidia-cuda-nvcc") {
        return bad("no nvidia-cuda-nvcc wheel".into());
    }
    Ok(pins)
}

/// The folder name of a pinned wheel set: nvcc's wheel version plus a digest of the list.
fn toolkit_key(pins: &PinFile) -> String {
    let mut h = blake3::Hasher::new();
    h.update(b"cuda-aot toolkit key v1\n");
    h.update(pins.root.as_bytes());
    h.update(b"\n");
    for w in &pins.wheel {
        h.update(format!("{}=={} sha256:{}\n", w.name, w.version, w.sha256).as_bytes());
    }
    let nvcc = pins
        .wheel
        .iter()
        .find(|w| w.name == "nvidia-cuda-nvcc")
        .map_or("cuda", |w| w.version.as_str());
    format!("{nvcc}-{}", &h.finalize().to_hex()[..16])
}

pub fn ensure(opts: &ToolchainOptions) -> Result<ToolkitInfo> {
    let pins = load_pins(&opts.pins)?;
    let key = toolkit_key(&pins);
    let dir = opts.toolkit_dir.join(&key);
    let stamp_path = dir.join(STAMP);
    if let Some(stamp) = read_stamp(&stamp_path)? {
        return check_pinned(&pins, &dir, stamp);
    }
    if dir.exists() {
        return Err(fail(
            format!(
                "{} exists but holds no {STAMP}: an interrupted or foreign unpack",
                dir.display()
            ),
            format!("delete {} and rerun `cargo xtask toolchain`", dir.display()),
        ));
    }
    bootstrap(opts, &pins, &dir)
}

/// A stamped toolkit: the digest is reused when every executable's size and mtime still
/// match; otherwise it is recomputed and must equal the digest taken at unpack time.
fn check_pinned(pins: &PinFile, dir: &Path, stamp: Stamp) -> Result<ToolkitInfo> {
    let root = dir.join(&stamp.root);
    if stamp.wheels != pins.wheel || stamp.source != SOURCE_PINNED {
        return Err(fail(
            format!(
                "{} was unpacked from other wheels than manifests/toolchain.toml pins",
                dir.display()
            ),
            format!("delete {} and rerun `cargo xtask toolchain`", dir.display()),
        ));
    }
    let files = pinned_tool_files(&root)?;
    if stats_of(&root, &files)? == stamp.files {
        return Ok(stamp.info(root));
    }
    let (digest, stats) = digest_files(&root, &files)?;
    if digest != stamp.digest {
        return Err(fail(
            format!(
                "the pinned toolkit in {} was modified after it was unpacked: its executables \
                 hash to {digest}, unpacked as {}",
                dir.display(),
                stamp.digest
            ),
            format!(
                "delete {} and rerun `cargo xtask toolchain` to unpack the pinned wheels again",
                dir.display()
            ),
        ));
    }
    let mut fresh = stamp;
    fresh.files = stats;
    files::write(&dir.join(STAMP), &cuda_aot::json::to_vec(&fresh))?;
    Ok(fresh.info(root))
}

/// Fetches (or finds) every pinned wheel, checks each sha256, unpacks all of them into a
/// temporary sibling of `dir`, records the identity, and renames the folder into place.
fn bootstrap(opts: &ToolchainOptions, pins: &PinFile, dir: &Path) -> Result<ToolkitInfo> {
    let t0 = Instant::now();
    let wheels = fetch_wheels(opts, pins)?;
    std::fs::create_dir_all(&opts.toolkit_dir)
        .with_context(|| format!("creating {}", opts.toolkit_dir.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".unpack-")
        .tempdir_in(&opts.toolkit_dir)
        .with_context(|| {
            format!(
                "creating a temporary folder in {}",
                opts.toolkit_dir.display()
            )
        })?;
    // The unpack takes a while (about 270 MB written): the wheels on several threads (the
    // large ones are compute-bound inflating, the many-file one waits on the disk), with
    // progress per wheel, a bar on a terminal. That needs the wheels to hold disjoint
    // files, which is checked first (one wheel overwriting another's file would also make
    // the toolkit depend on the unpack order).
    check_disjoint(&wheels)?;
    let progress = Progress::new("toolchain", wheels.len(), true);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    cuda_aot::parallel::try_map(&wheels, threads, |(pin, bytes)| {
        let what = format!("unpacking {} ({} MB)", pin.label(), bytes.len() >> 20);
        progress.start(&what, true);
        let t = Instant::now();
        let n = unpack_wheel(pin, bytes, tmp.path())?;
        progress.finish(
            &what,
            Some(&format!("{n} files in {:.1} s", t.elapsed().as_secs_f64())),
        );
        anyhow::Ok(())
    })?;
    progress.finish_and_clear();
    drop(wheels);
    let root = tmp.path().join(&pins.root);
    let nvcc = root.join("bin/nvcc");
    if !nvcc.is_file() {
        bail!(
            "the pinned wheels hold no {}/bin/nvcc; check `root` in {}",
            pins.root,
            opts.pins.describe()
        );
    }
    let files = pinned_tool_files(&root)?;
    let (digest, stats) = digest_files(&root, &files)?;
    let probe = probe_nvcc(&nvcc)?;
    let stamp = Stamp {
        schema: STAMP_SCHEMA.into(),
        source: SOURCE_PINNED.into(),
        wheels: pins.wheel.clone(),
        root: pins.root.clone(),
        nvcc_version: probe.version,
        digest,
        files: stats,
        real_targets: probe.real,
        virtual_targets: probe.virtual_,
    };
    files::write(&tmp.path().join(STAMP), &cuda_aot::json::to_vec(&stamp))?;
    let staged = tmp.keep();
    if let Err(e) = std::fs::rename(&staged, dir) {
        let _ = std::fs::remove_dir_all(&staged);
        // Another process may have finished the same unpack first: use its folder.
        if let Ok(Some(theirs)) = read_stamp(&dir.join(STAMP)) {
            return check_pinned(pins, dir, theirs);
        }
        return Err(e).with_context(|| format!("moving the unpacked toolkit to {}", dir.display()));
    }
    eprintln!(
        "toolchain: unpacked {} wheels into {} in {:.1} s (nvcc {}, {})",
        pins.wheel.len(),
        dir.display(),
        t0.elapsed().as_secs_f64(),
        stamp.nvcc_version,
        stamp.digest
    );
    Ok(ToolkitInfo {
        fresh: true,
        ..stamp.info(dir.join(&pins.root))
    })
}

/// Every pinned wheel's bytes, each checked against its sha256: cached wheels first (a
/// tampered cache fails before any download), then one pip run for the missing ones.
fn fetch_wheels(opts: &ToolchainOptions, pins: &PinFile) -> Result<Vec<(WheelPin, Vec<u8>)>> {
    let mut have = Vec::new();
    let mut missing = Vec::new();
    for pin in &pins.wheel {
        let path = opts.wheel_cache.join(format!("{}.whl", pin.sha256));
        match std::fs::read(&path) {
            Ok(bytes) => {
                check_sha256(pin, &bytes, &path, true)?;
                eprintln!(
                    "toolchain: {} (sha256 ok) from {}",
                    pin.label(),
                    path.display()
                );
                have.push((pin.clone(), bytes));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(pin.clone()),
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("reading the cached wheel {}", path.display()));
            }
        }
    }
    if !missing.is_empty() {
        have.extend(download(opts, pins, &missing)?);
    }
    // Keep the pin file's order: it is the unpack order.
    have.sort_by_key(|(p, _)| pins.wheel.iter().position(|w| w == p));
    Ok(have)
}

fn check_sha256(pin: &WheelPin, bytes: &[u8], path: &Path, cached: bool) -> Result<()> {
    let actual = hex::encode(sha2::Sha256::digest(bytes));
    if actual == pin.sha256 {
        return Ok(());
    }
    let (what, fix) = if cached {
        (
            "cached wheel",
            format!(
                "delete {} (corrupted or tampered with); the next run downloads it again",
                path.display()
            ),
        )
    } else {
        (
            "downloaded wheel",
            "check manifests/toolchain.toml and the package index pip used (PIP_INDEX_URL, \
             PIP_FIND_LINKS): it must serve the pinned file byte for byte"
                .to_string(),
        )
    };
    Err(fail(
        format!(
            "{what} {} fails its sha256 check: {}\n  expected sha256 {}\n  actual   sha256 {actual}",
            pin.label(),
            path.display(),
            pin.sha256
        ),
        fix,
    ))
}

/// Downloads `missing` with one pip run into a temporary folder of the cache, checks each
/// sha256 and moves each into the cache as `<sha256>.whl`.
fn download(
    opts: &ToolchainOptions,
    pins: &PinFile,
    missing: &[WheelPin],
) -> Result<Vec<(WheelPin, Vec<u8>)>> {
    std::fs::create_dir_all(&opts.wheel_cache)
        .with_context(|| format!("creating the wheel cache {}", opts.wheel_cache.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".download-")
        .tempdir_in(&opts.wheel_cache)
        .with_context(|| {
            format!(
                "creating a temporary folder in {}",
                opts.wheel_cache.display()
            )
        })?;
    let mut cmd = Command::new(&pins.pip.python);
    cmd.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"]);
    for p in &pins.pip.platforms {
        cmd.args(["--platform", p]);
    }
    cmd.args(["--python-version", &pins.pip.python_version, "-d"])
        .arg(tmp.path())
        .args(missing.iter().map(|w| format!("{}=={}", w.name, w.version)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()));
    let names: Vec<String> = missing.iter().map(WheelPin::label).collect();
    eprintln!("toolchain: downloading {} with pip", names.join(", "));
    let shown = show_command(&cmd);
    let status = process::status(&mut cmd);
    check_interrupt()?;
    let status = status.advise(
        || format!("running {shown}"),
        || {
            format!(
                "install Python 3 with pip (`{}` must run), or put the wheels into {} as <sha256>.whl",
                pins.pip.python,
                opts.wheel_cache.display()
            )
        },
    )?;
    if !status.success() {
        return Err(fail(
            format!(
                "pip failed ({status}) downloading {}\ncommand: {shown}",
                names.join(", ")
            ),
            format!(
                "check network access to PyPI, or point pip at a mirror (PIP_INDEX_URL) or a folder \
                 of wheels (PIP_FIND_LINKS), or put the wheels into {} as <sha256>.whl",
                opts.wheel_cache.display()
            ),
        ));
    }
    let listing: Vec<PathBuf> = std::fs::read_dir(tmp.path())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    let mut out = Vec::new();
    for pin in missing {
        let prefix = pin.file_prefix();
        let file = listing
            .iter()
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
            })
            .with_context(|| {
                format!(
                    "pip ran but left no {prefix}*.whl in {}",
                    tmp.path().display()
                )
            })?;
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        check_sha256(pin, &bytes, file, false)?;
        let dest = opts.wheel_cache.join(format!("{}.whl", pin.sha256));
        std::fs::rename(file, &dest)
            .with_context(|| format!("moving the wheel into {}", dest.display()))?;
        eprintln!(
            "toolchain: {} (sha256 ok) cached as {}",
            pin.label(),
            dest.display()
        );
        out.push((pin.clone(), bytes));
    }
    Ok(out)
}

/// Extracts a wheel (a zip) into `dest`; files whose zip mode has an exec bit become 0755.
/// Returns the number of files; stops at an interrupt.
/// Refuses two wheels that hold the same file.
fn check_disjoint(wheels: &[(WheelPin, Vec<u8>)]) -> Result<()> {
    let mut owner: std::collections::BTreeMap<String, String> = Default::default();
    for (pin, bytes) in wheels {
        let zip = zip::ZipArchive::new(std::io::Cursor::new(bytes.as_slice()))
            .with_context(|| format!("reading wheel {}", pin.label()))?;
        for name in zip.file_names().filter(|n| !n.ends_with('/')) {
            if let Some(other) = owner.insert(name.to_string(), pin.label()) {
                bail!(
                    "the pinned wheels {other} and {} both hold {name}; pin versions that do not overlap in manifests/toolchain.toml",
                    pin.label()
                );
            }
        }
    }
    Ok(())
}

fn unpack_wheel(pin: &WheelPin, bytes: &[u8], dest: &Path) -> Result<usize> {
    use std::os::unix::fs::PermissionsExt;
    let ctx = || format!("unpacking wheel {}", pin.label());
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).with_context(ctx)?;
    let mut files = 0;
    for i in 0..zip.len() {
        check_interrupt()?;
        let mut entry = zip.by_index(i).with_context(ctx)?;
        let rel = entry
            .enclosed_name()
            .with_context(|| format!("{}: entry `{}` escapes the folder", ctx(), entry.name()))?;
        let path = dest.join(rel);
        if entry.is_dir() {
            std::fs::create_dir_all(&path)?;
            continue;
        }
        let mode = entry.unix_mode().unwrap_or(0o644);
        if mode & 0o170000 == 0o120000 {
            bail!("{}: entry `{}` is a symbolic link", ctx(), entry.name());
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut f = std::fs::File::create(&path)
            .with_context(|| format!("{}: creating {}", ctx(), path.display()))?;
        std::io::copy(&mut entry, &mut f)
            .with_context(|| format!("{}: writing {}", ctx(), path.display()))?;
        let perm = if mode & 0o111 != 0 { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(perm))?;
        files += 1;
    }
    Ok(files)
}

/// Every file under `bin/` and `nvvm/bin/` of a pinned toolkit, by relative path.
fn pinned_tool_files(root: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for sub in ["bin", "nvvm/bin"] {
        collect_files(root, sub, &mut out)?;
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths;

    #[test]
    fn repository_pin_file_is_valid_and_keyed() {
        let file = Pins::File(paths::repo_root().join("manifests/toolchain.toml"));
        let pins = load_pins(&file).unwrap();
        let builtin = load_pins(&Pins::Builtin).unwrap();
        assert_eq!(
            builtin.wheel, pins.wheel,
            "the built-in pins are the checkout's"
        );
        assert_eq!(pins.wheel.len(), 5);
        let key = toolkit_key(&pins);
        assert!(key.starts_with("13.0.88-"), "{key}");
        assert_eq!(key, toolkit_key(&pins));
    }
}
