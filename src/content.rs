//! Content checks: that a blob is what its signed manifest says it is, for every kind.
//!
//! - cubin: a complete CUDA ELF whose header records exactly the signed SM and `a`
//!   variant (a family build, `sm_100f`, records its plain SM: the manifest is what says
//!   `f`);
//! - PTX: PTX text whose `.target` is the signed compute target (`compute_90` ↔
//!   `.target sm_90`);
//! - both: the signed kernels are exactly the blob's kernels, with the signed parameter
//!   layout.
//!
//! The verifier runs [`check`] on every blob after its digest matched; the builder runs it
//! on every blob it writes, so a build and a load agree on what a blob holds.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::identity::{Function, Kind, LaunchAbi, Manifest, describe_functions};

/// Checks that `bytes` is the kind of blob `manifest` signs, built for its target, with
/// its kernels and their parameter layout.
pub fn check(manifest: &Manifest, bytes: &[u8]) -> Result<()> {
    let id = &manifest.identity;
    let kernels: Vec<(String, LaunchAbi)> = match id.kind {
        Kind::Cubin => {
            let info = crate::elf::inspect(bytes).map_err(|reason| Error::NotCubin {
                what: manifest.label(),
                reason,
            })?;
            // Target: the ELF header must record the signed SM; `f` reads as the plain SM.
            let actual = info.target();
            let claimed = if id.sm.family_specific {
                id.sm.base()
            } else {
                id.sm
            };
            if id.sm.virtual_arch || actual != claimed {
                return Err(Error::ElfSmMismatch {
                    module: id.module.to_string(),
                    claimed: id.sm.to_string(),
                    actual: actual.to_string(),
                });
            }
            info.kernels
                .into_iter()
                .map(|k| (k.symbol, k.abi))
                .collect()
        }
        Kind::Ptx => {
            let info = crate::ptx::inspect(bytes).map_err(|reason| Error::NotPtx {
                what: manifest.label(),
                reason,
            })?;
            // Target: `.target sm_90` is what compute_90 PTX says.
            let want = format!("sm_{}", id.sm.to_string().trim_start_matches("compute_"));
            if !id.sm.virtual_arch || info.target != want {
                return Err(Error::PtxTargetMismatch {
                    module: id.module.to_string(),
                    claimed: id.sm.to_string(),
                    actual: info.target,
                });
            }
            info.kernels
        }
    };
    check_kernels(manifest, &kernels)
}

/// The signed kernels must be exactly the blob's kernels, with the same parameter layout
/// (and, for a cubin, the same resource figures).
fn check_kernels(manifest: &Manifest, found: &[(String, LaunchAbi)]) -> Result<()> {
    let what = manifest.label();
    let mismatch = |reason: String| Error::FunctionMismatch {
        what: what.clone(),
        reason,
    };
    let in_blob: BTreeMap<&str, &LaunchAbi> = found.iter().map(|(s, a)| (s.as_str(), a)).collect();
    let signed: BTreeMap<&str, &Function> = manifest
        .functions
        .iter()
        .map(|f| (f.symbol.as_str(), f))
        .collect();
    if signed.len() != manifest.functions.len() {
        return Err(mismatch("the manifest lists a kernel twice".into()));
    }
    let missing: Vec<&Function> = signed
        .iter()
        .filter(|(s, _)| !in_blob.contains_key(*s))
        .map(|(_, f)| *f)
        .collect();
    if !missing.is_empty() {
        return Err(mismatch(format!(
            "signed kernel(s) {} are not in the blob",
            describe_functions(missing)
        )));
    }
    let extra: Vec<&str> = in_blob
        .keys()
        .filter(|s| !signed.contains_key(*s))
        .copied()
        .collect();
    if !extra.is_empty() {
        return Err(mismatch(format!(
            "the blob has kernel(s) the manifest does not sign: {}",
            extra.join(", ")
        )));
    }
    for (symbol, f) in &signed {
        let blob = in_blob[symbol];
        let same = &f.abi == blob;
        if !same {
            return Err(mismatch(format!(
                "kernel {}: signed launch ABI {:?}, the blob has {:?}",
                f.display_name(),
                f.abi,
                blob
            )));
        }
    }
    Ok(())
}
