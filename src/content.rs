//! Content checks: that a blob is what its signed manifest says it is, for every kind.
//!
//! - cubin: a complete CUDA ELF whose header records exactly the signed SM and `a`
//!   variant (a family build, `sm_100f`, records its plain SM: the manifest is what says
//!   `f`);
//! - PTX: PTX text whose `.target` is the signed compute target (`compute_90` ↔
//!   `.target sm_90`);
//! - both: the signed kernels are exactly the blob's kernels, with the signed parameter
//!   layout; no `__managed__` variable; and, for manifests of schema v2, the signed
//!   globals are exactly the blob's device globals (symbol, size, memory space,
//!   initialised: [`crate::elf`] says which symbols count). A v1 manifest signs no globals,
//!   so its blob's globals are not compared (it verifies exactly as before v2 existed).
//!
//! The verifier runs [`check`] on every blob after its digest matched; the builder runs it
//! on every blob it writes, so a build and a load agree on what a blob holds.

use std::collections::BTreeMap;

use crate::elf::GlobalInfo;
use crate::error::{Error, Result};
use crate::identity::{Function, Global, Kind, LaunchAbi};
use crate::lookup::describe_functions;
use crate::manifest::Manifest;

/// Checks that `bytes` is the kind of blob `manifest` signs, built for its target, with
/// its kernels and their parameter layout.
pub fn check(manifest: &Manifest, bytes: &[u8]) -> Result<()> {
    let id = &manifest.identity;
    let (kernels, globals): (Vec<(String, LaunchAbi)>, Vec<GlobalInfo>) = match id.kind {
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
            let kernels = info
                .kernels
                .into_iter()
                .map(|k| (k.symbol, k.abi))
                .collect();
            (kernels, info.globals)
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
            (info.kernels, info.globals)
        }
    };
    check_kernels(manifest, &kernels)?;
    check_globals(manifest, &globals)
}

/// No `__managed__` variable; for v2, the signed globals are exactly the blob's.
fn check_globals(manifest: &Manifest, found: &[GlobalInfo]) -> Result<()> {
    let what = manifest.label();
    if let Some(g) = found.iter().find(|g| g.managed) {
        return Err(Error::ManagedGlobal {
            what,
            symbol: g.symbol.clone(),
        });
    }
    // Schema v1: signed before globals were; nothing to compare (docs/trust.md).
    let Some(signed) = &manifest.globals else {
        return Ok(());
    };
    let mismatch = |reason: String| Error::GlobalMismatch {
        what: what.clone(),
        reason,
    };
    let in_blob: BTreeMap<&str, &GlobalInfo> =
        found.iter().map(|g| (g.symbol.as_str(), g)).collect();
    let by_symbol: BTreeMap<&str, &Global> =
        signed.iter().map(|g| (g.symbol.as_str(), g)).collect();
    if by_symbol.len() != signed.len() {
        return Err(mismatch("the manifest lists a global twice".into()));
    }
    let describe = |space, size, initialised: bool| {
        format!(
            "{size} bytes, {space}, {}",
            if initialised {
                "initialised"
            } else {
                "not initialised"
            }
        )
    };
    for (symbol, g) in &by_symbol {
        let Some(b) = in_blob.get(symbol) else {
            return Err(mismatch(format!(
                "signed global {} ({symbol}) is not in the blob",
                g.name
            )));
        };
        if (g.size, g.space, g.initialised) != (b.size, b.space, b.initialised) {
            return Err(mismatch(format!(
                "global {} ({symbol}): signed {}, the blob has {}",
                g.name,
                describe(g.space, g.size, g.initialised),
                describe(b.space, b.size, b.initialised)
            )));
        }
    }
    let extra = unsigned(&in_blob, &by_symbol);
    if !extra.is_empty() {
        return Err(mismatch(format!(
            "the blob has global(s) the manifest does not sign: {}",
            extra.join(", ")
        )));
    }
    Ok(())
}

/// The blob's symbols the manifest does not sign, in symbol order.
fn unsigned<'a, A, B>(in_blob: &BTreeMap<&'a str, A>, signed: &BTreeMap<&str, B>) -> Vec<&'a str> {
    in_blob
        .keys()
        .filter(|s| !signed.contains_key(*s))
        .copied()
        .collect()
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
    let extra = unsigned(&in_blob, &signed);
    if !extra.is_empty() {
        return Err(mismatch(format!(
            "the blob has kernel(s) the manifest does not sign: {}",
            extra.join(", ")
        )));
    }
    for (symbol, f) in &signed {
        let blob = in_blob[symbol];
        // A manifest signed before the whole stack was read (no `stack_bytes`) signs the
        // rest: it is compared without it, so registries published earlier still load.
        let same = match f.abi.stack_bytes {
            Some(_) => &f.abi == blob,
            None => {
                f.abi
                    == LaunchAbi {
                        stack_bytes: None,
                        ..blob.clone()
                    }
            }
        };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Digest;
    use crate::identity::tests::sample_identity;
    use crate::identity::{Channel, GlobalSpace};
    use crate::name::{FunctionName, GlobalName, KernelName};

    const CUBIN: &[u8] = include_bytes!("../tests/data/elf/globals_sm_90.cubin");

    /// The kernels of an inspected cubin as a manifest lists them (unmangled names).
    fn functions_of(info: &crate::elf::CubinInfo) -> Vec<Function> {
        info.kernels
            .iter()
            .map(|k| Function {
                symbol: FunctionName::new(&k.symbol).unwrap(),
                name: KernelName::new(&k.symbol).unwrap(),
                signature: None,
                abi: k.abi.clone(),
            })
            .collect()
    }

    /// A manifest for `bytes` (an sm_90 cubin) that signs exactly what it holds, at
    /// `schema`: v2 with its globals, v1 without.
    fn manifest_for(bytes: &[u8], v2: bool) -> Manifest {
        let info = crate::elf::inspect(bytes).unwrap();
        let functions = functions_of(&info);
        let globals = info
            .globals
            .into_iter()
            .map(|g| Global {
                symbol: GlobalName::new(&g.symbol).unwrap(),
                name: KernelName::new(&g.symbol).unwrap(),
                size: g.size,
                space: g.space,
                initialised: g.initialised,
            })
            .collect();
        Manifest {
            schema: if v2 {
                Manifest::SCHEMA
            } else {
                Manifest::SCHEMA_V1
            }
            .into(),
            identity: sample_identity(),
            module_digest: Digest::of(bytes),
            size: bytes.len() as u64,
            functions,
            globals: v2.then_some(globals),
            channel: Channel::Dev,
        }
    }

    /// Issue 19, item 4: a v2 manifest must sign exactly the blob's globals; one of the
    /// wrong size, space or initialisation, a missing one or an extra one is refused naming
    /// the module, the SM and the global. A v1 manifest (no globals) passes as before.
    #[test]
    fn issue_19_signed_globals_must_be_exactly_the_blobs() {
        check(&manifest_for(CUBIN, true), CUBIN).unwrap();
        let v1 = manifest_for(CUBIN, false);
        assert_eq!(v1.check_schema(), Ok(()));
        check(&v1, CUBIN).unwrap();
        let refused = |edit: &dyn Fn(&mut Vec<Global>)| {
            let mut m = manifest_for(CUBIN, true);
            edit(m.globals.as_mut().unwrap());
            let err = check(&m, CUBIN).unwrap_err();
            assert!(matches!(err, Error::GlobalMismatch { .. }), "{err}");
            assert!(err.to_string().starts_with("ntt sm_90: "), "{err}");
            assert!(err.fix().contains("rebuild and re-sign"), "{}", err.fix());
            err.to_string()
        };
        let at = |gs: &mut Vec<Global>, sym: &str| {
            gs.iter().position(|g| g.symbol.as_str() == sym).unwrap()
        };
        let err = refused(&|gs| {
            let i = at(gs, "_ZN6tables6roundsE");
            gs[i].size = 60;
        });
        assert!(
            err.contains("global _ZN6tables6roundsE (_ZN6tables6roundsE): signed 60 bytes, constant, initialised, the blob has 64 bytes, constant, initialised"),
            "{err}"
        );
        let err = refused(&|gs| {
            let i = at(gs, "_ZN6tables7counterE");
            gs[i].space = GlobalSpace::Constant;
        });
        assert!(
            err.contains("_ZN6tables7counterE") && err.contains("the blob has 8 bytes, device"),
            "{err}"
        );
        let err = refused(&|gs| {
            let i = at(gs, "_ZN6tables7scratchE");
            gs[i].initialised = true;
        });
        assert!(err.contains("not initialised"), "{err}");
        let err = refused(&|gs| {
            let i = at(gs, "target_v");
            gs.remove(i);
        });
        assert!(
            err.contains("the blob has global(s) the manifest does not sign: target_v"),
            "{err}"
        );
        let err = refused(&|gs| {
            let mut extra = gs[0].clone();
            extra.symbol = GlobalName::new("twiddles").unwrap();
            extra.name = KernelName::new("twiddles").unwrap();
            gs.push(extra);
        });
        assert!(
            err.contains("signed global twiddles (twiddles) is not in the blob"),
            "{err}"
        );
        let err = refused(&|gs| {
            let twice = gs[0].clone();
            gs.push(twice);
        });
        assert!(err.contains("twice"), "{err}");
    }

    /// A `__managed__` variable is refused, whatever the schema.
    #[test]
    fn issue_19_a_managed_variable_is_refused() {
        let bytes = include_bytes!("../tests/data/elf/managed_sm_90.cubin");
        let info = crate::elf::inspect(bytes).unwrap();
        let mut m = manifest_for(CUBIN, false);
        m.functions = functions_of(&info);
        for globals in [None, Some(Vec::new())] {
            m.globals = globals;
            let err = check(&m, bytes).unwrap_err();
            assert!(
                matches!(&err, Error::ManagedGlobal { symbol, .. } if symbol == "managed_total"),
                "{err}"
            );
            assert!(err.fix().contains("__device__"), "{}", err.fix());
        }
    }
}
