//! cuda-aot: verify and load signed, per-SM CUDA modules built ahead of time.
//!
//! Provers link this crate. At startup [`verify::verify_index`] checks the signed bundle
//! of a registry against a trust root (root → timestamp → index → manifests), blobs are
//! checked (size first, then blake3, then the cubin's ELF SM) when loaded, and nothing is
//! compiled or fetched at request time.

pub mod cuda;
pub mod digest;
pub mod elf;
pub mod envelope;
pub mod error;
pub mod identity;
pub mod json;
pub mod keys;
pub mod limits;
pub mod metadata;
pub mod name;
pub mod runtime;
pub mod source;
pub mod state;
pub mod trust;
pub mod verify;

pub use digest::Digest;
pub use error::{Error, Result};
pub use identity::{Channel, DriverVersion, Function, Identity, Kind, Manifest, Toolkit};
pub use keys::{KeyId, PublicKey, SecretKey};
pub use limits::Limits;
pub use name::{FunctionName, ModuleName, Target};
pub use runtime::{Counters, Module, Policy, Runtime};
