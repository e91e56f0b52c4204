//! The repository's own chores, compiled only with the `repo` feature (the `cargo xtask`
//! alias and this crate's tests turn it on; `cargo install` leaves it off, so the installed
//! `cargo cuda-aot` has none of them): the benchmarks (`bench`, `bench-load`,
//! `bench-serve`), the GPU host's bundle and run (`gpu-bundle`, `gpu-run`) and the pinned
//! test servers (`servers`), with what only they use: `machine` (what benchmarks record
//! about the host), `stats` (order statistics) and `svg` (charts).

pub mod bench;
pub mod bench_load;
pub mod bench_serve;
pub mod gpu_bundle;
pub mod gpu_run;
pub mod machine;
pub mod servers;
pub mod stats;
#[cfg(any(feature = "gpu", feature = "net"))]
pub mod svg;

use clap::Subcommand;

/// The repository's tasks, flattened into the tool's own list of commands.
#[derive(Subcommand)]
pub enum Task {
    Bench(bench::Args),
    BenchLoad(bench_load::Args),
    BenchServe(bench_serve::Args),
    Servers(servers::Args),
    GpuBundle(gpu_bundle::Args),
    GpuRun(gpu_run::Args),
}

impl Task {
    /// Runs the task.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Task::Bench(a) => a.run(),
            Task::BenchLoad(a) => a.run(),
            Task::BenchServe(a) => a.run(),
            Task::Servers(a) => a.run(),
            Task::GpuBundle(a) => a.run(),
            Task::GpuRun(a) => a.run(),
        }
    }
}
