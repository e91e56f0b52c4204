//! `cargo xtask`: the build engineer's and reviewer's tool. This file only dispatches; each
//! task lives in its own file as `impl Args { fn run(self) }`.

#![forbid(unsafe_code)]

mod bench;
mod bench_load;
mod build;
mod devkeys;
mod keygen;
mod paths;
mod promote;
mod publish;
mod release;
mod repro;
mod sign;
mod toolchain;
mod trust_root;
mod verify;

use clap::{Parser, Subcommand};

/// Build, sign, publish and verify ahead-of-time CUDA modules.
///
/// The main job is `cargo xtask release`: it bootstraps the pinned CUDA toolkit, compiles
/// every module of manifests/release.toml for every target SM, signs the manifests and
/// publishes them into a registry (by default .cuda-aot/registry), then verifies it.
#[derive(Parser)]
#[command(name = "cargo xtask", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    Toolchain(toolchain::Args),
    Build(build::Args),
    Repro(repro::Args),
    Keygen(keygen::Args),
    TrustRoot(trust_root::Args),
    Sign(sign::Args),
    Publish(publish::Args),
    Verify(verify::Args),
    Promote(promote::Args),
    Release(release::Args),
    Bench(bench::Args),
    BenchLoad(bench_load::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Toolchain(a) => a.run(),
        Task::Build(a) => a.run(),
        Task::Repro(a) => a.run(),
        Task::Keygen(a) => a.run(),
        Task::TrustRoot(a) => a.run(),
        Task::Sign(a) => a.run(),
        Task::Publish(a) => a.run(),
        Task::Verify(a) => a.run(),
        Task::Promote(a) => a.run(),
        Task::Release(a) => a.run(),
        Task::Bench(a) => a.run(),
        Task::BenchLoad(a) => a.run(),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        for cause in e
            .chain()
            .skip(1)
            .filter(|c| c.downcast_ref::<paths::Fix>().is_none())
        {
            eprintln!("  caused by: {cause}");
        }
        if let Some(fix) = fix_for(&e) {
            eprintln!("Fix: {fix}");
        }
        std::process::exit(1);
    }
}

/// The `Fix:` advice of the first error in the chain that has one.
fn fix_for(e: &anyhow::Error) -> Option<String> {
    e.chain().find_map(|c| {
        if let Some(x) = c.downcast_ref::<cuda_aot::Error>() {
            Some(x.fix())
        } else if let Some(x) = c.downcast_ref::<cuda_aot_registry::Error>() {
            Some(x.fix())
        } else {
            c.downcast_ref::<paths::Fix>().map(|f| f.0.clone())
        }
    })
}
