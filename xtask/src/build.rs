//! `cargo xtask build`: compiles every (module, target) of the release spec through the
//! build engine ([`cuda_aot_builder::build`]) and prints what it did.

use anyhow::Result;
use cuda_aot_builder::build::{
    JsonReport, Shard, SharedCacheMode, emit_json, emit_plan, plan, print_plan, print_report,
    run_build,
};
use std::path::PathBuf;

use crate::advice::fail;
use crate::args::{CacheArgs, ChannelArg, FormatArgs, SelectArgs};
use crate::{files, message};

/// Compile every module for every target SM into cubins and unsigned manifests.
///
/// Compiles each module of manifests/release.toml for each target SM with one nvcc run per
/// (module, target), in parallel, and writes `<out>/<module>/<target>.cubin` plus
/// `<out>/<module>/<target>.cubin.manifest.json` (an unsigned manifest) for each; PTX that a
/// module opts into lands beside them as `<target>.ptx`. Results come from the build cache
/// (.cuda-aot/cache) when every input is unchanged: toolkit, host compiler, flags, sources
/// and every header they include. A rebuild with nothing changed runs no nvcc at all, and
/// neither does one after a change was reverted (each job keeps several dependency records).
/// --explain says, for every job that ran nvcc, which input changed.
#[derive(clap::Args)]
#[command(after_long_help = "\
Outputs (read by `cargo xtask sign` and `publish`):
  <out>/<module>/<target>.cubin                 one per module and target SM
  <out>/<module>/<target>.cubin.manifest.json   its unsigned manifest (identity, digests, entry points)
  <out>/<module>/<target>.ptx[.manifest.json]   only for modules that opt into PTX (compatibility mode)

A failed build changes nothing: not the output folder, not the cache. An interrupted one (Ctrl-C)
stops nvcc, keeps every finished job in the cache (the rerun compiles only the rest), removes its
temporary folders and exits 130. Without a terminal (CI logs) progress is printed line by line on
stderr. The summary counts cache hits and misses (and the kinds of input behind the misses);
--explain names, for each job that compiled, what changed: its source, a header, a flag, the
toolkit, the host compiler, a spec value, or that the cache had nothing for it. The cache is
bounded (--cache-max-size): after a build that added to it, the least recently used entries
that this build does not use are removed. docs/build.md explains the toolkit, the identity,
the cache key and reproducibility; docs/json.md the --json messages.

Examples:
  cargo xtask build                                    the release set, one job per core
  cargo xtask build --module ntt --target sm_90 -j 4
  cargo xtask build --spec ../prover/gpu/kernels.toml  a spec kept anywhere; .cuda-aot/ beside it
  cargo xtask build --dry-run                          the jobs and their exact nvcc flags
  cargo xtask build --explain                          why each compiled job compiled")]
pub struct Args {
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten)]
    cache: CacheArgs,
    /// Output folder; files of earlier builds that this build does not produce are removed
    /// [default: .cuda-aot/build of the project].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The channel written into every manifest.
    #[arg(long, value_enum, value_name = "CHANNEL", default_value_t = ChannelArg::Dev)]
    channel: ChannelArg,
    /// Take module sources from this folder instead of the spec's `build.sources`.
    #[arg(long, value_name = "DIR")]
    sources: Option<PathBuf>,
    /// Print the jobs (module, target, exact nvcc flags) and compile nothing.
    #[arg(long)]
    dry_run: bool,
    /// For every job that ran nvcc, say which input changed since the cache last built it
    /// (source, header, flag, toolkit, host compiler, spec value), or that the cache had
    /// nothing for it.
    #[arg(long)]
    explain: bool,
    /// Also write the build summary to FILE as one JSON document (the `build-finished`
    /// message of docs/json.md).
    #[arg(long, value_name = "FILE")]
    report_json: Option<PathBuf>,
    /// Build only part K of N of the jobs, for N machines building one release together:
    /// a deterministic split, balanced by the compile times the shared cache recorded at
    /// its last whole read-write build (in spec order where it has none), the same on every
    /// machine of one run. Needs a read-write --remote-cache, where the final build finds
    /// every part (docs/build.md, "Sharded builds").
    #[arg(long, value_name = "K/N")]
    shard: Option<Shard>,
    #[command(flatten)]
    pub(crate) format: FormatArgs,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        self.select.select_project()?;
        let mut opts = self.select.build_options(&self.cache);
        if let Some(o) = self.out {
            opts.out = o;
        }
        opts.sources = self.sources;
        opts.channel = self.channel.into();
        if let Some(shard) = self.shard {
            if !opts
                .remote
                .as_ref()
                .is_some_and(|r| r.mode == SharedCacheMode::ReadWrite)
            {
                return Err(fail(
                    format!(
                        "--shard {}/{} builds only part of the release, and nothing would carry it to the final build",
                        shard.index, shard.count
                    ),
                    "give the shared cache every part is added to: --remote-cache URL --remote-cache-mode read-write (docs/build.md, \"Sharded builds\")",
                ));
            }
            opts.shard = Some(shard);
        }
        if self.dry_run {
            let plan = plan(&opts)?;
            if message::json() {
                emit_plan(&plan);
            } else {
                print_plan(&plan);
            }
            return Ok(());
        }
        // The remote executor is asked for its capabilities before any job starts.
        if let Some(remote) = self.cache.exec.executor()? {
            opts.executor = remote;
        }
        let report = run_build(&opts)?;
        if message::json() {
            emit_json(&report);
        } else {
            print_report(&report, self.explain);
        }
        if let Some(summary) = opts.executor.summary() {
            eprintln!("{summary}");
        }
        if let Some(p) = self.report_json {
            files::write(&p, &serde_json::to_vec_pretty(&JsonReport::of(&report))?)?;
        }
        Ok(())
    }
}
