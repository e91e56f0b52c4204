//! The cuda-aot build engine: what turns a release spec into verified, unsigned build
//! outputs. It holds the pinned CUDA toolkit ([`toolchain`]), the plan (modules × targets →
//! jobs) and the jobs' execution behind one seam ([`executor`]: local nvcc today), the local
//! and shared build caches, the output folder ([`outdir`]) and the build's provenance. The
//! command line (`cargo xtask`, installed as `cargo cuda-aot`) calls it; so can any other
//! tool.
//!
//! ```no_run
//! use cuda_aot_builder::build::{BuildOptions, run_build};
//!
//! fn main() -> anyhow::Result<()> {
//!     // The project holding the current folder (found as cargo finds Cargo.toml): its
//!     // manifests/release.toml, the pinned toolkit, .cuda-aot/build and .cuda-aot/cache.
//!     let report = run_build(&BuildOptions::default())?;
//!     for m in &report.modules {
//!         println!("{} {}", m.manifest.label(), m.blob.display());
//!     }
//!     println!("{} nvcc run(s) in {:?}", report.nvcc_runs, report.wall);
//!     Ok(())
//! }
//! ```
//!
//! Layers (imports point downwards only; the workspace's tidy test checks it):
//! - support: [`advice`] (errors and their `Fix:` line), [`files`], [`limits`],
//!   [`process`] (children and interrupts), [`paths`] (the project, found at run time),
//!   [`message`] (JSON and progress), [`outdir`] (the build output layout), [`anchor`]
//!   (the trust root given), [`devkeys`] (key files and the development keys);
//! - the engine: [`toolchain`], [`executor`], [`build`].

#![forbid(unsafe_code)]

pub mod advice;
pub mod anchor;
pub mod build;
pub mod devkeys;
pub mod executor;
pub mod files;
pub mod limits;
pub mod message;
pub mod outdir;
pub mod paths;
pub mod process;
pub mod toolchain;
