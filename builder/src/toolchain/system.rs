//! A system toolkit (`--toolkit system`): `$CUDA_HOME`, else the `nvcc` on PATH. An
//! explicit choice whose identity says `source = "system"` and carries its own digest.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

use super::stamp::{
    STAMP_SCHEMA, Stamp, collect_files, digest_files, probe_nvcc, read_stamp, stats_of,
};
use super::{SOURCE_SYSTEM, ToolchainOptions, ToolkitInfo};
use crate::advice::{Advise, fail};
use crate::files;
use crate::process::which;

/// The files of a system toolkit that take part in a compile (a system `bin/` may hold
/// profilers and debuggers, or be `/usr/bin`): its identity is the digest of these.
const SYSTEM_TOOLS: &[&str] = &[
    "bin/nvcc",
    "bin/nvcc.profile",
    "bin/cudafe++",
    "bin/ptxas",
    "bin/fatbinary",
    "bin/nvlink",
    "bin/bin2c",
    "bin/crt",
    "nvvm/bin",
];

/// Finds the system toolkit and its (memoised) identity.
pub fn ensure(opts: &ToolchainOptions) -> Result<ToolkitInfo> {
    let root = find_system_root()?;
    let files: Vec<String> = {
        let mut v = Vec::new();
        for t in SYSTEM_TOOLS {
            let p = root.join(t);
            if p.is_dir() {
                collect_files(&root, t, &mut v)?;
            } else if p.exists() {
                v.push((*t).to_string());
            }
        }
        v.sort();
        v
    };
    let memo_name = format!(
        "system-{}.json",
        &blake3::hash(root.as_os_str().as_encoded_bytes()).to_hex()[..16]
    );
    let memo_path = opts.toolkit_dir.join(memo_name);
    let stats = stats_of(&root, &files)?;
    match read_stamp(&memo_path) {
        Ok(Some(stamp)) if stamp.files == stats && stamp.source == SOURCE_SYSTEM => {
            return Ok(stamp.info(root));
        }
        _ => {}
    }
    let (digest, stats) = digest_files(&root, &files)?;
    let probe = probe_nvcc(&root.join("bin/nvcc"))?;
    let stamp = Stamp {
        schema: STAMP_SCHEMA.into(),
        source: SOURCE_SYSTEM.into(),
        wheels: Vec::new(),
        root: root.display().to_string(),
        nvcc_version: probe.version,
        digest,
        files: stats,
        real_targets: probe.real,
        virtual_targets: probe.virtual_,
    };
    std::fs::create_dir_all(&opts.toolkit_dir)
        .with_context(|| format!("creating {}", opts.toolkit_dir.display()))?;
    files::write(&memo_path, &cuda_aot::json::to_vec(&stamp))?;
    eprintln!(
        "toolchain: system toolkit {} (nvcc {}, {})",
        root.display(),
        stamp.nvcc_version,
        stamp.digest
    );
    Ok(ToolkitInfo {
        fresh: true,
        ..stamp.info(root)
    })
}

/// `$CUDA_HOME`, else the folder above the `bin/` holding the `nvcc` found on PATH.
fn find_system_root() -> Result<PathBuf> {
    if let Some(home) = std::env::var_os("CUDA_HOME").filter(|h| !h.is_empty()) {
        let root = PathBuf::from(home);
        if !root.join("bin/nvcc").is_file() {
            return Err(fail(
                format!("CUDA_HOME={} holds no bin/nvcc", root.display()),
                "point CUDA_HOME at a CUDA toolkit (the folder holding bin/nvcc), or build with \
                 the pinned toolkit (--toolkit pinned, the default)",
            ));
        }
        return Ok(root);
    }
    let nvcc = which("nvcc").advise(
        || "--toolkit system: CUDA_HOME is not set".into(),
        || {
            "set CUDA_HOME to a CUDA toolkit or put its bin/ on PATH, or build with the pinned \
             toolkit (--toolkit pinned, the default)"
                .into()
        },
    )?;
    let real = nvcc.canonicalize().unwrap_or(nvcc.clone());
    real.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .with_context(|| format!("{} is not inside a toolkit's bin/", real.display()))
}
