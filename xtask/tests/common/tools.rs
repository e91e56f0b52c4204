//! The C build tools the install test needs and CI machines lack (CMake, Ninja, pkgconf),
//! bootstrapped the way the toolkit is: the wheels pinned by version and sha256 in
//! `manifests/test-tools.toml`, fetched once with `python3 -m pip download --no-deps` into
//! the per-user wheel cache (`<sha256>.whl`, re-hashed on every use), unpacked into the
//! ignored `.cuda-aot/test-tools/` of the checkout. Nothing installed by hand is used.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use sha2::Digest;

use super::{repo, user_cache_dir};

/// One pinned wheel of `manifests/test-tools.toml`.
#[derive(serde::Deserialize)]
struct Wheel {
    name: String,
    version: String,
    sha256: String,
    /// The program inside the wheel.
    executable: String,
    /// The name it gets on PATH.
    command: String,
}

#[derive(serde::Deserialize)]
struct Pins {
    wheel: Vec<Wheel>,
}

/// A folder holding `cmake`, `ninja` and `pkg-config` (small scripts running the pinned
/// programs), to put first on PATH; bootstrapped once per test binary.
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let text = std::fs::read_to_string(repo().join("manifests/test-tools.toml")).unwrap();
        let pins: Pins = toml::from_str(&text).unwrap();
        let bin = tempfile::Builder::new()
            .prefix("test-tools-")
            .tempdir()
            .unwrap();
        for w in &pins.wheel {
            let program = unpacked(w).join(&w.executable);
            assert!(program.is_file(), "{} holds no {}", w.name, w.executable);
            let script = bin.path().join(&w.command);
            std::fs::write(
                &script,
                format!("#!/bin/sh\nexec '{}' \"$@\"\n", program.display()),
            )
            .unwrap();
            set_mode(&script, 0o755);
        }
        bin
    })
    .path()
}

/// The folder the wheel `w` is unpacked in (unpacked on first use).
fn unpacked(w: &Wheel) -> PathBuf {
    let base = repo().join(".cuda-aot/test-tools");
    let dir = base.join(format!("{}-{}-{}", w.name, w.version, &w.sha256[..12]));
    if dir.join(".unpacked").is_file() {
        return dir;
    }
    std::fs::create_dir_all(&base).unwrap();
    let tmp = tempfile::Builder::new()
        .prefix(".unpack-")
        .tempdir_in(&base)
        .unwrap();
    let bytes = wheel_bytes(w);
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).unwrap();
        let Some(rel) = f.enclosed_name() else {
            panic!("{}: an entry outside the wheel: {}", w.name, f.name());
        };
        let out = tmp.path().join(rel);
        if f.is_dir() {
            std::fs::create_dir_all(&out).unwrap();
            continue;
        }
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let mut data = Vec::new();
        f.read_to_end(&mut data).unwrap();
        std::fs::write(&out, data).unwrap();
        if f.unix_mode().is_some_and(|m| m & 0o111 != 0) {
            set_mode(&out, 0o755);
        }
    }
    std::fs::write(tmp.path().join(".unpacked"), &w.sha256).unwrap();
    let made = tmp.keep();
    // Another test binary may have unpacked it meanwhile: keep theirs.
    if std::fs::rename(&made, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&made);
        assert!(dir.join(".unpacked").is_file(), "{}", dir.display());
    }
    dir
}

/// The wheel's bytes from the per-user cache, downloaded with pip when missing; its sha256
/// is checked on every use.
fn wheel_bytes(w: &Wheel) -> Vec<u8> {
    let cache = user_cache_dir().join("wheels");
    let cached = cache.join(format!("{}.whl", w.sha256));
    if let Ok(bytes) = std::fs::read(&cached) {
        check_sha256(w, &bytes, &cached);
        return bytes;
    }
    std::fs::create_dir_all(&cache).unwrap();
    let tmp = tempfile::Builder::new()
        .prefix(".download-")
        .tempdir_in(&cache)
        .unwrap();
    let spec = format!("{}=={}", w.name, w.version);
    let out = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args([
            "--platform",
            "manylinux2014_x86_64",
            "--python-version",
            "3.11",
        ])
        .args(["--disable-pip-version-check", "--quiet", "-d"])
        .arg(tmp.path())
        .arg(&spec)
        .stdin(Stdio::null())
        .output()
        .expect("python3 -m pip: the install test fetches its pinned build tools with pip");
    assert!(
        out.status.success(),
        "pip download {spec} failed (CI needs PyPI once, or PIP_FIND_LINKS with the wheel):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .unwrap_or_else(|| panic!("pip left no wheel of {spec}"));
    let bytes = std::fs::read(&file).unwrap();
    check_sha256(w, &bytes, &file);
    std::fs::rename(&file, &cached).unwrap();
    bytes
}

fn check_sha256(w: &Wheel, bytes: &[u8], path: &Path) {
    let actual = hex::encode(sha2::Sha256::digest(bytes));
    assert_eq!(
        actual,
        w.sha256,
        "{} {}: {} fails its sha256 pin in manifests/test-tools.toml (delete it if it is a cached copy)",
        w.name,
        w.version,
        path.display()
    );
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
