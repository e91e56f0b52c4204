//! `cargo xtask bench-serve`: many concurrent clients syncing one release from
//! `cuda-aot-registry serve` and from nginx serving the same folder, in the same run —
//! throughput, p50/p99 latency, failures and corrupt files — written to `docs/` as a table,
//! a CSV and an SVG chart, then gated (serve at least half of nginx's throughput).

use std::path::PathBuf;

use crate::args::RegistryArgs;

#[cfg(feature = "net")]
mod clients;
#[cfg(feature = "net")]
mod hostile;
#[cfg(feature = "net")]
mod report;
#[cfg(feature = "net")]
mod run;
#[cfg(feature = "net")]
mod stalled;

/// Load benchmark of the HTTP server against nginx: concurrent verified syncs and GETs.
///
/// Starts `cuda-aot-registry serve` and nginx (the pinned Debian package, see `cargo xtask
/// servers`) on loopback, both serving the same registry folder with one worker per core
/// and an access log each. Then, for each server in turn (alternating the order between
/// passes), N concurrent clients each run cold verified syncs into empty folders (a fresh
/// client, as a prover's first start), and then GET every file of the release over
/// keep-alive connections. Every synced folder is compared with the release byte for byte
/// (corrupt files are counted) and every GET body is hashed. Then the same GETs run
/// against serve once more with hostile clients mixed in (`--hostile`: slow readers,
/// pipeliners, wrong publish tokens; `--stalled`: connections that send nothing or half a
/// request, which serve's stall bound must cut): the `get-hostile` workload, compared with
/// serve's own `get` of the same run. Writes docs/bench-serve.{md,csv,svg} and fails unless there
/// were no failures, no corrupt files, serve reached at least half of nginx's throughput
/// in both workloads, and the honest clients' p99 under attack stayed within 10x of their
/// p99 without it.
///
/// Runs release builds: from a debug build it builds xtask and cuda-aot-registry with
/// --release and re-runs itself.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    at: RegistryArgs,
    /// Concurrent clients.
    #[arg(long, value_name = "N", default_value_t = 64)]
    clients: usize,
    /// Cold syncs per client per pass.
    #[arg(long, value_name = "N", default_value_t = 4)]
    syncs: usize,
    /// Rounds of "GET every file" per client per pass.
    #[arg(long, value_name = "N", default_value_t = 4)]
    get_rounds: usize,
    /// Passes over both servers (the order alternates).
    #[arg(long, value_name = "N", default_value_t = 2)]
    passes: usize,
    /// Hostile connections of each kind in the `get-hostile` workload of serve: slow
    /// readers (a large file requested, nothing read), pipeliners (requests written, no
    /// answer read) and wrong-token publishers (PUT in a loop); 0 skips the workload.
    #[arg(long, value_name = "N", default_value_t = 16)]
    hostile: usize,
    /// Stalled connections in the `get-hostile` workload, beside the --hostile ones: half
    /// send nothing, half part of a request line, from 8 loopback addresses (127.0.0.2 and
    /// up, so serve's per-address cap does not refuse them first); each connects again as
    /// soon as serve closes it, and the time it held its slot is reported.
    #[arg(long, value_name = "N", default_value_t = 192)]
    stalled: usize,
    /// The stall bound serve runs with (its --stall-timeout-secs): how long a connection
    /// may make no progress while serve waits on its client.
    #[arg(long, value_name = "N", default_value_t = cuda_aot_registry::defaults::serve::STALL_TIMEOUT_SECS)]
    stall_timeout_secs: u64,
    /// Where bench-serve.md, .csv and .svg go [default: .cuda-aot/bench-serve of the
    /// project; the kept run is written to docs/ with `--out docs`].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Run in this (debug) build instead of re-running a release build.
    #[arg(long)]
    no_release_rebuild: bool,
}

/// The two servers.
#[cfg(not(feature = "net"))]
impl Args {
    /// Runs the task: under a build with the network stack.
    pub fn run(self) -> anyhow::Result<()> {
        crate::features::rerun("bench-serve", "net")
    }
}
