//! Context-independent loading against per-context loading, for a prover with several
//! contexts: `--contexts K` extra contexts on device 0 (`cuCtxCreate`) stand in for the
//! contexts of K devices, and every kernel of every selected module is made ready to launch
//! in each of them.
//!
//! Arms, interleaved in the balanced order, each timed from its first driver call to every
//! kernel ready (`cuFuncLoad`) in every context, everything unloaded after the clock:
//!
//! - `per_context_module`: in each context, `cuModuleLoadData` of each module's verified
//!   bytes, `cuModuleGetFunction` + `cuFuncLoad` of each kernel its signed manifest lists
//!   (what one `Runtime` per device does);
//! - `library_once`: `cuLibraryLoadData` of each module once, then in each context
//!   `cuLibraryGetKernel` + `cuKernelGetFunction` + `cuFuncLoad` of each kernel;
//! - `per_context_runtime`: `per_context_module` through the runtime's own loader
//!   (`LoadedModule::load_verified` with `LoadApi::Module`, then `LoadedModule::function`,
//!   which also reads each kernel's parameter layout): how far the bare arm is from what
//!   cuda-aot does;
//! - `per_context_module` and `library_once` again with one context, so a prover also
//!   learns whether the library API helps with one context.
//!
//! The two bare ways run through the same layer (`cuda_aot_baseline`), the runtime's
//! `LoadedModule` cannot place one library in several contexts. All arms load the same
//! long-lived verified bytes, read just before the clock. They run under the driver's
//! module loading mode of bench-load itself (its header records `CUDA_MODULE_LOADING`):
//! under EAGER, `cuLibraryLoadData` also loads into every context that exists then,
//! bench-load's primary context included.

use anyhow::{Context, Result, bail};
use cuda_aot::cuda::{CudaContext, LoadApi, LoadedModule};
use cuda_aot::verify::VerifiedModule;
use cuda_aot::{Kind, Policy, Runtime};
use cuda_aot_baseline as raw;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Args;
use super::run::{Row, interleave, verify_registry, warm};
use super::stats::Ratio;

impl Args {
    /// The context rows of `registry` (module docs): `{scope}_ctx{K}` with `--contexts K`
    /// contexts and `{scope}_ctx1` with one, interleaved over `ratio_reps` repetitions.
    /// Reported, not gated; none with `--contexts 0`.
    pub(super) fn context_arms(
        &self,
        scope: &str,
        registry: &Path,
        trust: &[u8],
        policy: &Policy,
    ) -> Result<(Vec<Row>, Vec<Ratio>)> {
        let k = self.contexts as usize;
        if k == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let modules = selected_modules(registry, trust, policy)?;
        let kernels: Vec<Vec<String>> = modules
            .iter()
            .map(|m| {
                m.manifest()
                    .functions
                    .iter()
                    .map(|f| f.symbol.as_str().to_string())
                    .collect()
            })
            .collect();
        let images: Vec<raw::ModuleKernels<'_>> = modules
            .iter()
            .zip(&kernels)
            .map(|(m, ks)| (&m.bytes()[..], &ks[..]))
            .collect();
        let bytes: Vec<&[u8]> = images.iter().map(|(b, _)| *b).collect();
        let total = bytes.iter().map(|b| b.len()).sum();
        let contexts = raw::extra_contexts(0, k)
            .with_context(|| format!("creating {k} contexts on device 0 for --contexts {k}"))?;
        let (many, one) = (format!("{scope}_ctx{k}"), format!("{scope}_ctx1"));
        // Arm, row scope and the contexts it makes the kernels ready in.
        let table: [(&'static str, &str, &[Arc<CudaContext>]); 5] = [
            ("per_context_module", &many, &contexts),
            ("library_once", &many, &contexts),
            ("per_context_runtime", &many, &contexts),
            ("per_context_module", &one, &contexts[..1]),
            ("library_once", &one, &contexts[..1]),
        ];
        // With K = 1 the first three arms are the one-context ones already.
        let arms = if k > 1 { 5 } else { 3 };
        let samples = interleave(self.order, arms, self.ratio_reps, |arm, _| {
            let (method, _, ctxs) = table[arm];
            warm(&bytes);
            let took = match arm {
                0 | 3 => raw::time_ready_in_contexts(ctxs, &images, LoadApi::Module)
                    .map_err(anyhow::Error::new),
                1 | 4 => raw::time_ready_in_contexts(ctxs, &images, LoadApi::Library)
                    .map_err(anyhow::Error::new),
                _ => runtime_ready(ctxs, &modules),
            };
            took.with_context(|| {
                format!("{scope} {method} in {} context(s) of device 0", ctxs.len())
            })
        })?;
        let rows: Vec<Row> = table
            .iter()
            .zip(samples)
            .map(|(&(method, scope, _), s)| {
                let mut row = Row::new(scope, method, total);
                row.samples = s;
                row
            })
            .collect();
        let ratio = |name: &str, a: usize, b: usize| rows[a].ratio(&rows[b], name, None);
        let mut ratios = vec![
            ratio(&format!("{many}_library_once_vs_module"), 1, 0),
            ratio(&format!("{many}_runtime_vs_module"), 2, 0),
        ];
        if k > 1 {
            ratios.extend([
                ratio(&format!("{one}_library_once_vs_module"), 4, 3),
                // How each way grows with the contexts: K contexts against one.
                ratio(&format!("{many}_vs_ctx1_module"), 0, 3),
                ratio(&format!("{many}_vs_ctx1_library"), 1, 4),
            ]);
        }
        drop(contexts);
        Ok((rows, ratios))
    }
}

/// The modules a `Runtime::open` of `registry` selects for device 0, as the verifier hands
/// them over (`LoadedModule::load_verified` takes nothing else): the registry verified once
/// more, its modules matched to the selection by blob digest. Each must be a cubin.
fn selected_modules(registry: &Path, trust: &[u8], policy: &Policy) -> Result<Vec<VerifiedModule>> {
    let rt = Runtime::open(registry, trust, policy.clone())?;
    let verified = verify_registry(registry, trust)?;
    rt.selected()
        .map(|want| {
            let m = verified
                .modules()
                .iter()
                .map(|(_, m)| m)
                .find(|m| m.manifest().module_digest == want.module_digest)
                .with_context(|| {
                    format!(
                        "{}: the verifier did not return the module the runtime selected",
                        want.label()
                    )
                })?;
            if m.manifest().identity.kind != Kind::Cubin {
                bail!(
                    "{}: selected as PTX; the context rows load cubins (run bench-load on a \
                     device the registry has cubins for)",
                    want.label()
                );
            }
            Ok(m.clone())
        })
        .collect()
}

/// `per_context_runtime`: in each context, every module through the runtime's loader
/// (`LoadedModule::load_verified`, `LoadApi::Module`) and every kernel its manifest lists
/// through `LoadedModule::function` (`cuModuleGetFunction` + `cuFuncLoad` + its parameter
/// layout). Timed to the last lookup; the modules are unloaded after the clock, and an
/// unload error the runtime records on a context is reported.
fn runtime_ready(contexts: &[Arc<CudaContext>], modules: &[VerifiedModule]) -> Result<Duration> {
    let mut held = Vec::with_capacity(contexts.len() * modules.len());
    let start = Instant::now();
    for ctx in contexts {
        for m in modules {
            let loaded = LoadedModule::load_verified(ctx, m, LoadApi::Module)?;
            let kernels = m
                .manifest()
                .functions
                .iter()
                .map(|f| loaded.function(f.symbol.as_str()))
                .collect::<Result<Vec<_>, _>>()?;
            held.push((loaded, kernels));
        }
    }
    let took = start.elapsed();
    drop(held);
    for ctx in contexts {
        ctx.check_err()
            .context("unloading the per_context_runtime modules (cuModuleUnload)")?;
    }
    Ok(took)
}
