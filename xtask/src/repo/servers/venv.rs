//! A test server's Python venv from a pin file of wheels (every wheel by version and
//! sha256), installed by pip with `--no-deps --require-hashes --only-binary=:all:` into
//! `.cuda-aot/servers/<name>-<hash of the pins>/venv`: a change of the pins gets a venv of
//! its own, and a venv is moved into place only once every wheel is in.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::advice::fail;
use crate::paths;

/// A pinned Python server: what its venv is called and where its pins come from.
pub struct Pins {
    /// The folder's name before the pins' hash, e.g. `moto-s3`.
    pub name: &'static str,
    /// The pin file's path in the repository (for messages).
    pub file: &'static str,
    /// The pin file's text (requirements with `--hash=sha256:` on every line).
    pub text: &'static str,
    /// What it is, for messages: `the S3 test server`.
    pub what: &'static str,
}

impl Pins {
    /// The version pinned for `package` (`package==VERSION` in the pin file), or `?`.
    pub fn version(&self, package: &str) -> &'static str {
        let prefix = format!("{package}==");
        self.text
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or("?")
    }

    /// The folder holding `venv/` with the pinned wheels installed (made on first use);
    /// returns it.
    pub fn ensure(&self) -> Result<PathBuf> {
        let pins = blake3::hash(self.text.as_bytes()).to_hex();
        let base = paths::work_dir().join("servers");
        let dir = base.join(format!("{}-{}", self.name, &pins[..12]));
        if dir.join(".installed").is_file() {
            return Ok(dir);
        }
        std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{}-", self.name))
            .tempdir_in(&base)
            .with_context(|| format!("a folder for {}'s venv", self.what))?;
        let venv = tmp.path().join("venv");
        run(
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            &format!("creating a Python venv for {}", self.what),
        )?;
        let req = tmp.path().join("requirements.txt");
        std::fs::write(&req, self.text)?;
        eprintln!("servers: installing {} ({}) ...", self.what, self.file);
        run(
            Command::new(venv.join("bin/python"))
                .args(["-m", "pip", "install", "--no-deps", "--require-hashes"])
                .args(["--only-binary=:all:", "--no-input", "--quiet", "--disable-pip-version-check", "-r"])
                .arg(&req),
            &format!("installing the pinned wheels of {}", self.what),
        )
        .map_err(|e| {
            fail(
                format!("{e:#}"),
                format!(
                    "the wheels of {} are pinned for CPython 3.11 on x86-64 Linux and come from PyPI: run on such a machine with PyPI reachable (pip checks every sha256)",
                    self.file
                ),
            )
        })?;
        std::fs::write(tmp.path().join(".installed"), self.text)?;
        let made = tmp.keep();
        match std::fs::rename(&made, &dir) {
            Ok(()) => Ok(dir),
            // Another process installed it meanwhile.
            Err(_) if dir.join(".installed").is_file() => {
                let _ = std::fs::remove_dir_all(&made);
                Ok(dir)
            }
            Err(e) => Err(e).with_context(|| format!("moving the venv to {}", dir.display())),
        }
    }
}

/// The venv's Python in a folder [`Pins::ensure`] returned.
pub fn python(dir: &Path) -> PathBuf {
    dir.join("venv/bin/python")
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("{what}: starting {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{what}: {:?} failed ({}):\n{}{}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
