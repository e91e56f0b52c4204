//! `cargo xtask bench-load`: module load cost on a GPU host — the runtime's verified load
//! against a bare `cuModuleLoadData` of the same bytes, PTX through the driver JIT (cache
//! off) and NVRTC compile + load (research builds) — written as CSV and an SVG chart, then
//! gated; beside them, reported only: fresh-copy diagnostics (`copies`), loading into
//! several contexts (`contexts`) and lazy against eager module loading at start-up.

use std::path::PathBuf;

use crate::args::RegistryArgs;

// The arm order is an argument (`--order`): its type is in every build.
#[cfg(feature = "gpu")]
mod contexts;
#[cfg(feature = "gpu")]
mod copies;
#[cfg(feature = "gpu")]
mod embedded;
#[cfg(feature = "gpu")]
mod nvrtc;
#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
mod order;
#[cfg(feature = "gpu")]
mod report;
#[cfg(feature = "gpu")]
mod run;
#[cfg(feature = "gpu")]
mod startup;
#[cfg(feature = "gpu")]
mod stats;

/// Benchmark module loading and prover start-up on a GPU host, and gate them.
///
/// Load: for each module selected for the device, and for the whole bundle, the same bytes
/// go through (a) the runtime's verified load (`preload`, from verified in-memory bytes),
/// (b) bare cuModuleLoadData in two fair ways (each module loaded and unloaded; all modules
/// kept loaded until the clock stops), (c) PTX through the driver JIT with the JIT cache off
/// (CUDA_CACHE_DISABLE=1), (d) NVRTC compile + load (--features research builds). The
/// bundle arms are interleaved over many repetitions in a balanced order (every arm right
/// after every other equally often), each after an identical Runtime::open, and compared
/// as paired ratios with a bootstrap 95 % interval; the bare kept arm runs twice, as an A/A
/// control. With --also-registry the same is done for a second registry (the foreign-style
/// corpus).
///
/// Fresh-copy diagnostics (`copy_*`, each registry): the same bytes loaded bare from the
/// runtime's verified buffer, from it again (A/A), from a long-lived buffer rewritten in
/// place, from a new allocation, from the long-lived buffer refilled, with the copy inside
/// the clock, and from a long-lived buffer only read; each against the first.
///
/// Contexts (`*_ctx<K>`, `*_ctx1`, each registry): with --contexts K extra contexts on
/// device 0, every kernel made ready in every context by loading each module into each
/// context (cuModuleLoadData) or once (cuLibraryLoadData), bare and through the runtime's
/// loader, and the same in one context.
///
/// Start-up: fresh processes, run before this process touches the driver, each measuring
/// process start to every kernel ready to launch, through cuda-aot or bare (context +
/// loads + lookups), interleaved; cuda-aot on one device again with CUDA_MODULE_LOADING=LAZY
/// and =EAGER; on a host with two or more GPUs also on two devices, and with
/// --startup-connections N cuda-aot on one and two devices again with
/// CUDA_DEVICE_MAX_CONNECTIONS=N (the driver's hardware queues per context: fewer make each
/// context cheaper to create and let fewer streams run at once).
///
/// Embedded (`open_embedded`, `open_files`, each registry): `Runtime::open_embedded` of the
/// release packed into one in-memory bundle (as a prover binary embeds it) against
/// `Runtime::open` of the registry folder, each with `preload`, interleaved; gated at 1.00
/// (embedded no slower).
///
/// Writes bench-load.csv (medians), bench-ratios.csv (ratios and intervals) and
/// bench-load.svg, then gates: the upper end of every load and start-up interval at most
/// 1.05x bare, every A/A control within [1/1.05, 1.05], and the verified load at least 100x
/// faster than NVRTC. Two devices against one, the fresh-copy, context and module loading
/// rows are reported, not gated.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    at: RegistryArgs,
    /// The release spec the registry was built from: the NVRTC baseline compiles each
    /// module's source with its flags, defines and include folders [default:
    /// manifests/release.toml of the project].
    #[arg(long, value_name = "FILE")]
    spec: Option<PathBuf>,
    /// Repetitions per measurement (medians are reported).
    #[arg(long, value_name = "N", default_value_t = 20)]
    reps: usize,
    /// Where bench-load.csv and bench-load.svg go [default: .cuda-aot/bench-load of the
    /// project; results kept as evidence are copied into docs/evidence/ with their date].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Only re-read an existing CSV and apply the gate.
    #[arg(long)]
    gate_only: bool,
    /// Only redraw bench-load.svg from the CSVs in --out.
    #[arg(long)]
    chart_only: bool,
    /// A second registry (same trust root) whose bundle load is gated too, e.g. the
    /// foreign-style corpus with its real-size modules.
    #[arg(long, value_name = "DIR")]
    also_registry: Option<PathBuf>,
    /// Interleaved repetitions of the bundle load arms, the fresh-copy diagnostics and the
    /// context arms (paired ratios).
    #[arg(long, value_name = "N", default_value_t = 300)]
    ratio_reps: usize,
    /// Extra contexts created on device 0 (cuCtxCreate), standing in for the contexts of K
    /// devices, for the context rows: every kernel made ready in each context, each module
    /// loaded into each (cuModuleLoadData) against loaded once (cuLibraryLoadData); also
    /// measured with one context. 0 leaves the context rows out.
    #[arg(long, value_name = "N", default_value_t = 4)]
    #[arg(value_parser = clap::value_parser!(u32).range(0..=32))]
    contexts: u32,
    /// Fresh processes per start-up arm.
    #[arg(long, value_name = "N", default_value_t = 100)]
    startup_reps: usize,
    /// Also measure cuda-aot's start-up on one and two devices with
    /// CUDA_DEVICE_MAX_CONNECTIONS=N in the probes' environment (the driver's default is 8;
    /// fewer hardware queues make each context cheaper to create, at the price of fewer
    /// streams running concurrently).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=32))]
    startup_connections: Option<u32>,
    /// The order of the interleaved arms: `balanced` (a Williams design: every arm right
    /// after every other equally often, each cycle under a random relabelling of the arms,
    /// seeded) or `rotation` (each arm always after the same
    /// neighbour; kept to show the bias it carries, in the A/A control row
    /// `*_bare_kept_vs_itself`).
    #[arg(long, value_enum, value_name = "KIND", default_value_t = order::Order::Balanced)]
    order: order::Order,
    /// (internal) Run one start-up probe in this process and print its time.
    #[arg(long, value_enum, hide = true)]
    startup_probe: Option<Arm>,
    /// (internal) Devices of a start-up probe, e.g. `0,1`.
    #[arg(long, value_delimiter = ',', hide = true, default_value = "0")]
    devices: Vec<usize>,
    /// (internal) The cubin files a bare start-up probe loads (JSON).
    #[arg(long, hide = true)]
    bare_images: Option<PathBuf>,
}

/// Which arm a start-up probe runs (`--startup-probe`, internal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Arm {
    /// Through cuda-aot: verify, select, load, look up every kernel.
    Verified,
    /// The same cubin files straight into the driver.
    Bare,
    /// Not timed: writes the cubin files a bare probe loads (what cuda-aot selects on
    /// device 0) to `--bare-images` and prints the number of devices.
    Plan,
}

#[cfg(not(feature = "gpu"))]
impl Args {
    /// Runs the task: under a build with the GPU side.
    pub fn run(self) -> anyhow::Result<()> {
        crate::features::rerun("bench-load", "gpu")
    }
}
