//! A toolkit folder's identity and its stamp: nvcc's version and accepted targets (asked
//! once), and a blake3 digest over its executables, memoised with each file's size and
//! mtime so that a rerun hashes and spawns nothing.

use anyhow::{Context, Result, bail};
use cuda_aot::{Digest, Target, Toolkit};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::UNIX_EPOCH;

use super::{NVCC_ENV_SCRUB, ToolkitInfo, pinned::WheelPin};
use crate::advice::Advise;
use crate::process;

/// The file that marks a complete toolkit folder (written last, before the folder is renamed
/// into place) and memoises its identity.
pub const STAMP: &str = "cuda-aot-toolkit.json";
pub(super) const STAMP_SCHEMA: &str = "cuda-aot/toolkit-stamp/v1";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Stamp {
    pub(super) schema: String,
    pub(super) source: String,
    /// The pinned wheels it was unpacked from (empty for a system toolkit).
    pub(super) wheels: Vec<WheelPin>,
    /// The toolkit root, relative to the stamp's folder (pinned) or absolute (system).
    pub(super) root: String,
    pub(super) nvcc_version: String,
    pub(super) digest: Digest,
    /// Size and mtime of every hashed file: when all still match, `digest` is reused.
    pub(super) files: Vec<FileStat>,
    pub(super) real_targets: Vec<String>,
    pub(super) virtual_targets: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileStat {
    pub(super) path: String,
    pub(super) size: u64,
    pub(super) mtime_ns: u64,
}

pub(super) fn read_stamp(path: &Path) -> Result<Option<Stamp>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let stamp: Stamp = cuda_aot::json::parse(&bytes, 4 << 20, &path.display().to_string()).advise(
        || format!("reading the toolkit stamp {}", path.display()),
        || {
            format!(
                "delete {} and rerun `cargo xtask toolchain`",
                path.parent().unwrap_or(path).display()
            )
        },
    )?;
    if stamp.schema != STAMP_SCHEMA {
        bail!(
            "{}: unknown stamp schema `{}`",
            path.display(),
            stamp.schema
        );
    }
    Ok(Some(stamp))
}

impl Stamp {
    pub(super) fn info(&self, root: PathBuf) -> ToolkitInfo {
        ToolkitInfo {
            nvcc: root.join("bin/nvcc"),
            root,
            identity: Toolkit {
                nvcc: self.nvcc_version.clone(),
                digest: self.digest,
                source: self.source.clone(),
            },
            real_targets: self.real_targets.clone(),
            virtual_targets: self.virtual_targets.clone(),
            fresh: false,
        }
    }
}

pub(super) fn collect_files(root: &Path, sub: &str, out: &mut Vec<String>) -> Result<()> {
    let base = root.join(sub);
    if !base.exists() {
        return Ok(());
    }
    for f in crate::files::files_under(&base)? {
        out.push(format!("{sub}/{}", f.rel));
    }
    Ok(())
}

pub(super) fn stats_of(root: &Path, files: &[String]) -> Result<Vec<FileStat>> {
    files
        .iter()
        .map(|rel| {
            let m = std::fs::symlink_metadata(root.join(rel))
                .with_context(|| format!("reading {}", root.join(rel).display()))?;
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as u64);
            Ok(FileStat {
                path: rel.clone(),
                size: m.len(),
                mtime_ns: mtime,
            })
        })
        .collect()
}

/// blake3 over the files in sorted relative-path order: each path, then its length and
/// bytes (a symbolic link contributes its target instead).
pub(super) fn digest_files(root: &Path, files: &[String]) -> Result<(Digest, Vec<FileStat>)> {
    let stats = stats_of(root, files)?;
    let mut h = blake3::Hasher::new();
    h.update(b"cuda-aot toolkit digest v1\n");
    for rel in files {
        let path = root.join(rel);
        h.update(rel.as_bytes());
        h.update(&[0]);
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path)?;
            h.update(b"link:");
            h.update(target.as_os_str().as_encoded_bytes());
        } else {
            h.update(&meta.len().to_le_bytes());
            let f = std::fs::File::open(&path)
                .with_context(|| format!("hashing {}", path.display()))?;
            h.update_reader(f)
                .with_context(|| format!("hashing {}", path.display()))?;
        }
        h.update(&[0]);
    }
    Ok((Digest(*h.finalize().as_bytes()), stats))
}

pub(super) struct Probe {
    pub(super) version: String,
    pub(super) real: Vec<String>,
    pub(super) virtual_: Vec<String>,
}

/// Runs `nvcc --version`, `--list-gpu-code` and `--list-gpu-arch` (once per toolkit: the
/// answers are memoised in the stamp, so builds spawn no nvcc for them).
pub(super) fn probe_nvcc(nvcc: &Path) -> Result<Probe> {
    let run = |arg: &str| -> Result<String> {
        let mut cmd = Command::new(nvcc);
        cmd.arg(arg).env("LC_ALL", "C").stdin(Stdio::null());
        for v in NVCC_ENV_SCRUB {
            cmd.env_remove(v);
        }
        let out = process::output(&mut cmd)
            .with_context(|| format!("running {} {arg}", nvcc.display()))?;
        if !out.status.success() {
            bail!(
                "{} {arg} failed ({}): {}",
                nvcc.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let version_text = run("--version")?;
    let version = parse_nvcc_version(&version_text).with_context(|| {
        format!("no `release X.Y, VX.Y.Z` line in `nvcc --version`:\n{version_text}")
    })?;
    let list = |text: String, prefix: &str| -> Vec<String> {
        text.split_whitespace()
            .filter(|t| t.starts_with(prefix) && t.parse::<Target>().is_ok())
            .map(str::to_string)
            .collect()
    };
    Ok(Probe {
        version,
        real: list(run("--list-gpu-code")?, "sm_"),
        virtual_: list(run("--list-gpu-arch")?, "compute_"),
    })
}

/// `13.0.88` from nvcc's `Cuda compilation tools, release 13.0, V13.0.88`.
pub(super) fn parse_nvcc_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.contains("release"))?;
    let v = line.rsplit(", V").next()?.trim();
    (v.split('.').count() >= 3 && v.split('.').all(|p| p.parse::<u32>().is_ok()))
        .then(|| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvcc_version_line_parses() {
        let text = "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n\
                    Built on Wed_Aug_20_01:58:59_PM_PDT_2025\n\
                    Cuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n";
        assert_eq!(parse_nvcc_version(text).as_deref(), Some("13.0.88"));
        assert_eq!(parse_nvcc_version("garbage"), None);
    }

    #[test]
    fn digests_cover_paths_and_bytes_and_stats_detect_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::write(dir.path().join("bin/nvcc"), b"one").unwrap();
        let mut files = Vec::new();
        collect_files(dir.path(), "bin", &mut files).unwrap();
        assert_eq!(files, ["bin/nvcc"]);
        let (d1, s1) = digest_files(dir.path(), &files).unwrap();
        std::fs::write(dir.path().join("bin/nvcc"), b"two!").unwrap();
        let (d2, s2) = digest_files(dir.path(), &files).unwrap();
        assert_ne!(d1, d2);
        assert_ne!(s1, s2);
        assert_eq!(stats_of(dir.path(), &files).unwrap(), s2);
    }
}
