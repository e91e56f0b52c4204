//! cuda-aot-registry: storage and transport of cuda-aot registries.
//!
//! [`DirRegistry`] publishes signed module manifests and blobs into a directory with the
//! registry layout, atomically: blobs and manifests are content-addressed and written
//! with temp file + fsync + rename; the next index is created with create-new semantics
//! under a lock; `timestamp.json` is replaced last. A reader never sees a half-published
//! release, and a publisher killed at any step leaves a registry that verifies at the old
//! version.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use cuda_aot_registry::{DirRegistry, PublishOptions, SignedModule};
//! # let (root_file, modules, publisher): (Vec<u8>, Vec<SignedModule>, cuda_aot::SecretKey) = todo!();
//! let reg = DirRegistry::new("/srv/registry");
//! reg.ensure_root(&root_file)?;
//! let published = reg.publish(&modules, &[&publisher], &PublishOptions::default())?;
//! println!("index v{}", published.index_version);
//! # Ok(()) }
//! ```
//!
//! [`sync::sync`] brings a registry served over HTTP (any static file server, or
//! `cuda-aot-registry serve`) into a local folder, verified before anything becomes
//! visible; a prover's init step runs it, then opens the folder with `cuda_aot::Runtime`:
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use cuda_aot_registry::remote::{HttpOptions, HttpRemote};
//! use cuda_aot_registry::sync::{SyncOptions, sync};
//!
//! let trust = std::fs::read("keys/root.json")?;
//! let remote = HttpRemote::new("https://artifacts.example/cuda-aot/", HttpOptions::default())?;
//! let report = sync(&remote, "/var/lib/prover/registry".as_ref(), &trust, &SyncOptions::default())?;
//! println!("index v{}: {} file(s) fetched", report.index_version, report.files_fetched);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod dir;
mod error;
pub mod oci;
pub mod remote;
pub mod serve;
pub mod sync;

pub use dir::{DirRegistry, PublishOptions, Published, SignedModule, Step, replace_atomic};
pub use error::{Error, Failure, Result};
