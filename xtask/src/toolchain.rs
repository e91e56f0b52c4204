//! `cargo xtask toolchain`: bootstraps the CUDA toolkit that compiles (the builder's
//! [`cuda_aot_builder::toolchain`]) and prints its identity.

use anyhow::Result;
use cuda_aot_builder::toolchain::ensure_with;
use std::path::PathBuf;

use crate::args::ToolkitArgs;
use crate::paths;

/// Fetch (pinned, sha256-checked) and unpack the CUDA toolkit wheels.
///
/// Fetches the five pinned NVIDIA wheels (nvcc, crt, nvvm, runtime headers, CCCL) with pip
/// into the per-user cache, checks every sha256, and unpacks them into
/// `.cuda-aot/toolkit/<key>/`. Reruns are instant. Builds do this implicitly; run it to
/// bootstrap ahead of time or to see the toolkit identity that manifests will record.
#[derive(clap::Args)]
#[command(after_long_help = "\
The five pinned wheels (nvcc, crt, nvvm, runtime headers, CCCL) are those of the project's
manifests/toolchain.toml, or, in a project without one, the pins built into this tool. They are
fetched with `python3 -m pip download --no-deps` into the per-user wheel cache
($CUDA_AOT_CACHE_DIR/wheels, else $XDG_CACHE_HOME/cuda-aot/wheels, else
~/.cache/cuda-aot/wheels; one <sha256>.whl each), their sha256 checked on every use, and
unpacked into .cuda-aot/toolkit/<key>/ (or $CUDA_AOT_TOOLKIT_DIR/<key>/), with progress.
Reruns are instant. pip honours PIP_INDEX_URL and PIP_FIND_LINKS for mirrors and offline use.

The toolkit identity recorded in every manifest is nvcc's version plus a blake3 digest over
the toolkit's executables (bin/ and nvvm/bin/), and its source: pinned-wheels or system.")]
pub struct Args {
    #[command(flatten)]
    toolkit: ToolkitArgs,
    /// Bootstrap for the project of this release spec (its .cuda-aot/toolkit)
    /// [default: the checkout holding the current folder].
    #[arg(long, value_name = "FILE")]
    spec: Option<PathBuf>,
}

impl Args {
    /// Runs the task: ensures the toolkit and prints what it is and where.
    pub fn run(self) -> Result<()> {
        if let Some(s) = &self.spec {
            paths::select_spec(s)?;
        }
        let opts = self.toolkit.options();
        let t = std::time::Instant::now();
        let tk = ensure_with(&opts)?;
        if !tk.fresh {
            eprintln!(
                "toolchain: already in place, stamp and executables checked in {:.1} ms",
                t.elapsed().as_secs_f64() * 1000.0
            );
        }
        println!("toolkit  {}", tk.root.display());
        println!("nvcc     {} ({})", tk.identity.nvcc, tk.nvcc.display());
        println!("source   {}", tk.identity.source);
        println!("digest   {}", tk.identity.digest);
        println!("targets  {}", tk.real_targets.join(" "));
        println!("ptx      {}", tk.virtual_targets.join(" "));
        Ok(())
    }
}
