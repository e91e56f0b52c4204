//! `cargo xtask kernels`: every kernel and device global of the built modules of a spec,
//! with the symbol, both demanglers' spellings and the signed ABI, so a user can copy the
//! name a prover looks up (`Runtime::kernel`, `Module::global`).

use anyhow::Result;
use cuda_aot::{Function, Global, Manifest};
use serde_json::json;

use crate::args::{CacheArgs, FormatArgs, SelectArgs};
use crate::message;
use cuda_aot_builder::build;

/// List the kernels and device globals of built modules, by every name that finds them.
///
/// Builds what the spec selects (through the build cache: a built module costs no nvcc run)
/// into a temporary folder, then prints, per module and target, each kernel's symbol, its
/// name as `cpp_demangle` spells it (what the manifest records), as c++filt and Nsight spell
/// it (derived from the symbol: c++filt's exact text, less the `void` before a template),
/// and its signed launch ABI, then each device global's symbol, names, size, memory space
/// and whether it has an initial value. Any of the three spellings finds the kernel.
#[derive(clap::Args)]
#[command(after_long_help = "\
Any spelling printed finds the kernel or global: Runtime::kernel(module, name) and
Module::global(name) accept the symbol, the cpp_demangle spelling and the c++filt spelling
(with or without parameters; whitespace does not matter). The output folder of `build` is not
touched.

Examples:
  cargo xtask kernels --spec kernels/foreign/foreign.toml --module foreign_ntt --target sm_90
  cargo xtask kernels --json                                 every module of the release set")]
pub struct Args {
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    pub(crate) format: FormatArgs,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        self.select.select_project()?;
        let mut opts = self.select.build_options(&self.cache);
        if let Some(remote) = self.cache.exec.executor()? {
            opts.executor = remote;
        }
        let out = tempfile::Builder::new()
            .prefix("cuda-aot-kernels-")
            .tempdir()?;
        opts.out = out.path().to_path_buf();
        let report = build::run_build(&opts)?;
        let manifests: Vec<&Manifest> = report.modules.iter().map(|b| &b.manifest).collect();
        if message::json() {
            message::emit(
                "kernels",
                json!({ "modules": manifests.iter().map(|m| module_json(m)).collect::<Vec<_>>() }),
            );
        } else {
            for m in manifests {
                print_module(m);
            }
        }
        Ok(())
    }
}

fn print_module(m: &Manifest) {
    println!("{}", m.label());
    for f in &m.functions {
        let abi = &f.abi;
        println!("  kernel {}", f.symbol);
        if let (Some(sig), Some(theirs)) = (&f.signature, f.cxxfilt()) {
            spellings(sig.as_str(), &theirs.signature);
        }
        let mut res = Vec::new();
        if let Some(r) = abi.registers {
            res.push(format!("{r} registers"));
        }
        if let Some(s) = abi.shared_bytes {
            res.push(format!("{s} B shared"));
        }
        if let Some(l) = abi.local_bytes {
            res.push(format!("{l} B local"));
        }
        // The whole stack, with the calls the kernel makes, where it is more than its frame.
        if let Some(st) = abi.stack_bytes.filter(|st| Some(*st) != abi.local_bytes) {
            res.push(format!("{st} B stack with calls"));
        }
        if let Some(t) = abi.max_threads {
            res.push(format!("at most {t} threads"));
        }
        println!(
            "    params        {} ({} bytes){}",
            if abi.params.is_empty() {
                "(none)".to_string()
            } else {
                abi.describe_params()
            },
            abi.param_bytes,
            if res.is_empty() {
                String::new()
            } else {
                format!("; {}", res.join(", "))
            }
        );
    }
    match &m.globals {
        None => println!("  globals: not signed (a manifest of schema v1)"),
        Some(gs) => {
            for g in gs {
                println!(
                    "  global {} ({} bytes, {}{})",
                    g.symbol,
                    g.size,
                    g.space,
                    if g.initialised { ", initialised" } else { "" }
                );
                if let Some(theirs) = g.cxxfilt() {
                    spellings(g.name.as_str(), &theirs);
                }
            }
        }
    }
}

/// The demangled name as `cpp_demangle` spells it and, where it differs, as c++filt does.
fn spellings(name: &str, theirs: &str) {
    if theirs == name {
        println!("    demangled     {name}");
    } else {
        println!("    cpp_demangle  {name}");
        println!("    c++filt       {theirs}");
    }
}

fn function_json(f: &Function) -> serde_json::Value {
    json!({
        "symbol": f.symbol,
        "cpp_demangle": f.signature.as_ref().map(|s| s.as_str()),
        "cxxfilt": f.cxxfilt().map(|theirs| theirs.signature),
        "name": f.name,
        "abi": f.abi,
    })
}

fn global_json(g: &Global) -> serde_json::Value {
    json!({
        "symbol": g.symbol,
        "cpp_demangle": g.name,
        "cxxfilt": g.cxxfilt().unwrap_or_else(|| g.name.to_string()),
        "size": g.size,
        "space": g.space,
        "initialised": g.initialised,
    })
}

fn module_json(m: &Manifest) -> serde_json::Value {
    json!({
        "module": m.identity.module,
        "target": m.identity.sm,
        "kind": m.identity.kind,
        "kernels": m.functions.iter().map(function_json).collect::<Vec<_>>(),
        "globals": m.globals.as_ref().map(|gs| gs.iter().map(global_json).collect::<Vec<_>>()),
    })
}
