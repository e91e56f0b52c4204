//! `cargo xtask`: the build engineer's and reviewer's tool, also installable into any
//! repository as the cargo subcommand `cargo cuda-aot` (`cargo install --path xtask --bin cargo-cuda-aot`). Both
//! binaries call [`main`]; this file only dispatches, and each task lives in its own file as
//! `impl Args { fn run(self) }`.
//!
//! The work is done by the crates: the build engine (`cuda-aot-builder`, whose support
//! modules — `advice`, `anchor`, `devkeys`, `files`, `limits`, `message`, `outdir`, `paths`,
//! `process` — the tasks import under those names), the registry (`cuda-aot-registry`) and
//! the runtime's verifier (`cuda-aot`). Layers here (imports point downwards only;
//! `tests/tidy.rs` checks it):
//! - support: `args` (shared arguments), `features` (running again with a part this build
//!   leaves out);
//! - pipeline: `toolchain`, `build`, `sign`, `publish`, `verify`, `doctor`;
//! - the network: `endpoint` (where a `--registry` points: a folder, OCI, HTTP or S3, and
//!   how to reach it), `sync`, `serve`
//!   (the registry crate's server); their code needs the `net` feature, and `net` runs them
//!   again under a build that has it;
//! - composite tasks: `release`, `repro`, `kernels`, `promote`, `rebuild`, `keygen`,
//!   `trust_root`;
//! - the C library: `install_capi` (builds `capi/` with cargo and installs it into a prefix);
//! - `repo` (feature `repo`, never in an installed tool): the benches, the GPU host's
//!   bundle and run, the pinned test servers.

#![forbid(unsafe_code)]

mod args;
mod build;
mod doctor;
mod endpoint;
// Running again with a part this build leaves out: the network stack, the driver layer,
// or (for the repository's bench-load) the GPU part.
mod delegation_spec;
mod delegations;
#[cfg(any(
    not(feature = "net"),
    not(feature = "driver"),
    all(feature = "repo", not(feature = "gpu"))
))]
mod features;
mod install_capi;
mod kernels;
mod keygen;
mod lock;
mod promote;
mod publish;
mod rebuild;
mod release;
#[cfg(feature = "repo")]
mod repo;
mod repro;
mod sign;
mod sync;
mod toolchain;
mod trust_root;
mod vendor;
mod verify;

// The builder's support modules, under the names every task imports them by.
use cuda_aot_builder::{advice, anchor, devkeys, files, limits, message, outdir, paths, process};

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ffi::OsString;

/// Build, sign, publish and verify ahead-of-time CUDA modules.
///
/// The main job is `release`: it bootstraps the pinned CUDA toolkit, compiles
/// every module of the release spec (manifests/release.toml, or --spec FILE) for every
/// target SM, signs the manifests and publishes them into a registry (by default
/// .cuda-aot/registry of the project), then verifies it.
#[derive(Parser)]
#[command(
    name = "cargo xtask",
    version,
    propagate_version = true,
    after_long_help = "\
The project a command acts on is found when it runs: the checkout holding --spec FILE (else the
spec's folder), or the checkout holding the current folder (a folder with manifests/release.toml).
Its ignored .cuda-aot/ folder holds the toolkit, build cache, outputs, dev keys and registry.

Exit status: 0 success, 1 failure (the error and a Fix: line on stderr), 2 bad usage,
130 interrupted (Ctrl-C; 143 for SIGTERM)."
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    Toolchain(toolchain::Args),
    Build(build::Args),
    Repro(repro::Args),
    Kernels(kernels::Args),
    Keygen(keygen::Args),
    TrustRoot(trust_root::Args),
    Delegations(delegations::Args),
    Sign(sign::Args),
    Rebuild(rebuild::Args),
    Publish(publish::Args),
    Verify(verify::Args),
    Doctor(doctor::Args),
    Promote(promote::Args),
    Release(release::Args),
    Serve(cuda_aot_registry::serve::ServeArgs),
    Sync(sync::Args),
    Lock(lock::Args),
    Vendor(vendor::Args),
    InstallCapi(install_capi::Args),
    /// The repository's own chores (benches, GPU runs, test servers): not in an installed
    /// tool.
    #[cfg(feature = "repo")]
    #[command(flatten)]
    Repo(repo::Task),
}

impl Task {
    /// Whether the task prints JSON messages.
    fn json(&self) -> bool {
        match self {
            Task::Build(a) => a.format.is_json(),
            Task::Repro(a) => a.format.is_json(),
            Task::Kernels(a) => a.format.is_json(),
            Task::Publish(a) => a.format.is_json(),
            Task::Verify(a) => a.format.is_json(),
            Task::Doctor(a) => a.format.is_json(),
            Task::Release(a) => a.format.is_json(),
            _ => false,
        }
    }

    fn run(self) -> anyhow::Result<()> {
        match self {
            Task::Toolchain(a) => a.run(),
            Task::Build(a) => a.run(),
            Task::Repro(a) => a.run(),
            Task::Kernels(a) => a.run(),
            Task::Keygen(a) => a.run(),
            Task::TrustRoot(a) => a.run(),
            Task::Delegations(a) => a.run(),
            Task::Sign(a) => a.run(),
            Task::Rebuild(a) => a.run(),
            Task::Publish(a) => a.run(),
            Task::Verify(a) => a.run(),
            Task::Doctor(a) => a.run(),
            Task::Promote(a) => a.run(),
            Task::Release(a) => a.run(),
            #[cfg(feature = "net")]
            Task::Serve(a) => a.run().map_err(Into::into),
            #[cfg(not(feature = "net"))]
            Task::Serve(_) => features::rerun("serve", "net"),
            Task::Sync(a) => a.run(),
            Task::Lock(a) => a.run(),
            Task::Vendor(a) => a.run(),
            Task::InstallCapi(a) => a.run(),
            #[cfg(feature = "repo")]
            Task::Repo(t) => t.run(),
        }
    }
}

/// How the tool was started: the name its usage lines show, and its arguments. Installed
/// as `cargo-cuda-aot`, cargo starts it as `cargo-cuda-aot cuda-aot ARGS...`.
fn invocation() -> (&'static str, Vec<OsString>) {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let exe = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if exe.starts_with("cargo-cuda-aot") {
        if args.get(1).is_some_and(|a| a == "cuda-aot") {
            args.remove(1);
        }
        ("cargo cuda-aot", args)
    } else {
        ("cargo xtask", args)
    }
}

/// Runs the tool: parses the command line, runs the task, prints the error (with its
/// `Fix:` line, and as a JSON message with `--message-format json`) and exits with 0, 1,
/// 2 (usage) or 130 (interrupted).
pub fn main() -> ! {
    let (name, args) = invocation();
    advice::set_tool(name);
    // Help texts are written once with `cargo xtask`; they show the command as run.
    let restyle =
        |text: Option<&clap::builder::StyledStr>| text.map(|t| advice::as_run(&t.to_string()));
    let matches = Cli::command()
        .name(name)
        .bin_name(name)
        .mut_subcommands(|s| {
            let texts = [
                restyle(s.get_about()),
                restyle(s.get_long_about()),
                restyle(s.get_after_help()),
                restyle(s.get_after_long_help()),
            ];
            let [about, long, after, after_long] = texts;
            let mut s = s;
            if let Some(t) = about {
                s = s.about(t);
            }
            if let Some(t) = long {
                s = s.long_about(t);
            }
            if let Some(t) = after {
                s = s.after_help(t);
            }
            if let Some(t) = after_long {
                s = s.after_long_help(t);
            }
            s
        })
        .get_matches_from(args);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    message::set_json(cli.task.json());
    if let Err(e) = process::install_interrupt_handler() {
        eprintln!("warning: {e:#}; Ctrl-C will stop the tool without cleaning up");
    }
    let result = cli.task.run();
    // A shared cache this build cannot reach (`s3://`, `oci://` without the network stack):
    // the same command again, under a build that has it. The builder refuses before any work.
    #[cfg(not(feature = "net"))]
    let result = result.or_else(|e| {
        let needs = e
            .chain()
            .find_map(|c| c.downcast_ref::<cuda_aot_builder::build::NeedsNet>())
            .cloned();
        match needs {
            Some(n) => features::rerun(&n.what, "net").and(Err(e)),
            None => Err(e),
        }
    });
    // A task that failed after a signal was interrupted; one that still finished (`serve`
    // stops gracefully on SIGTERM, a build that had just ended) exits as it finished.
    let interrupt = result.as_ref().err().and_then(|e| {
        process::interrupted().or_else(|| {
            e.chain()
                .find_map(|c| c.downcast_ref::<process::Interrupted>())
                .copied()
        })
    });
    if let Some(i) = interrupt {
        eprintln!("interrupted");
        if message::json() {
            message::emit(
                "interrupted",
                serde_json::json!({
                    "signal": process::signal_name(i.signal),
                    "exit_code": i.exit_code(),
                }),
            );
        }
        std::process::exit(i.exit_code());
    }
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            advice::print_human(&e);
            if message::json() {
                message::emit("error", message::error_fields(&e, 1));
            }
            std::process::exit(1);
        }
    }
}
