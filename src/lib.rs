//! cuda-aot: verify and load signed, per-SM CUDA modules built ahead of time.
//!
//! Provers link this crate. At startup [`Runtime::open`] checks the signed bundle of a
//! registry against a trust root (root → timestamp → index → manifests), picks each
//! module's cubin for exactly the device's SM, checks blobs (size first, then blake3, then
//! their content: ELF SM or PTX `.target`, kernels and their signed launch ABI) and the
//! driver floor; [`Runtime::preload`] then hands each module to the driver once per
//! process. Kernels are looked up by symbol or demangled C++ name, and launches are checked
//! against the signed launch ABI. Nothing is compiled or fetched at request time.
//!
//! ```no_run
//! use cuda_aot::{Policy, Runtime};
//!
//! # fn main() -> Result<(), cuda_aot::Error> {
//! // The production trust root the prover ships with (`cargo xtask trust-root` writes it;
//! // keys/README.md): here beside the registry it opens.
//! let trust = std::fs::read("/srv/cuda-aot/root.json").expect("trust root");
//! let rt = Runtime::open("/srv/cuda-aot/registry", &trust, Policy::production())?;
//! rt.preload()?;
//! let kernel = rt.kernel("ntt", "ntt_butterfly")?; // launch on a cudarc stream
//! println!("{} on {}: {:?}", kernel.name(), rt.device().sm(), rt.counters());
//! # Ok(()) }
//! ```
//!
//! Offline verification without a GPU (what `cargo xtask verify` does):
//!
//! ```no_run
//! use cuda_aot::source::DirSource;
//! use cuda_aot::verify::{Options, verify_all};
//!
//! # fn main() -> Result<(), cuda_aot::Error> {
//! let src = DirSource::new("/srv/cuda-aot/registry");
//! let trust = std::fs::read("/srv/cuda-aot/root.json").expect("trust root");
//! // Steps 1-8: root chain, timestamp, index, statements, promotions, manifests, blobs and
//! // their content; the first failure is returned with the entry it concerns.
//! let verified = verify_all(&src, &trust, Default::default(), &Options::default())?;
//! for (_, module) in verified.modules() {
//!     println!("{} {} bytes", module.manifest().label(), module.bytes().len());
//! }
//! // Only a fully verified registry hands out the rollback state to save.
//! let _floor = verified.state();
//! # Ok(()) }
//! ```

#![deny(unsafe_code)]

/// The Rust blocks of docs/runtime.md, run as doctests (`xtask/tests/doc_blocks.rs` checks
/// that every Rust block of the docs is compiled somewhere).
#[cfg(doctest)]
#[doc = include_str!("../docs/runtime.md")]
pub struct RuntimeMdDoctests;

pub mod bundle;
pub mod content;
#[cfg(feature = "driver")]
#[allow(unsafe_code)]
pub mod cuda;
pub mod delegation;
pub mod demangle;
pub mod digest;
pub mod elf;
pub mod envelope;
pub mod error;
pub mod fs;
pub mod identity;
pub mod json;
pub mod keys;
pub mod limits;
pub mod lookup;
pub mod manifest;
pub mod metadata;
pub mod name;
pub mod output;
pub mod parallel;
pub mod provenance;
pub mod ptx;
#[cfg(feature = "research")]
pub mod research;
mod role;
#[cfg(feature = "driver")]
pub mod runtime;
pub mod source;
pub mod state;
pub mod trust;
pub mod verify;

pub use digest::Digest;
pub use error::{DriverFault, Error, ErrorKind, Result};
pub use identity::{
    Channel, DriverVersion, Function, Global, GlobalSpace, Identity, Kind, LaunchAbi, Param,
    Toolkit,
};
pub use keys::{KeyId, PublicKey, SecretKey};
pub use limits::Limits;
pub use manifest::Manifest;
pub use name::{FunctionName, GlobalName, KernelName, ModuleName, Target};
#[cfg(feature = "driver")]
pub use runtime::{Counters, DeviceSpec, Diagnosis, DoctorReport, Module, Policy, Runtime};
