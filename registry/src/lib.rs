//! cuda-aot-registry: storage and transport of cuda-aot registries.
//!
//! The publish algorithm ([`publish::publish`]) is written once over a [`Store`];
//! [`DirRegistry`] is the directory store: blobs, manifests, build statements and promotion
//! records are content-addressed and written with temp file + fsync + rename; the next
//! index is created with create-new semantics under a lock; `timestamp.json` is replaced
//! last. A reader never sees a half-published release, and a publisher killed at any step
//! leaves a registry that verifies at the old version. The next index holds exactly the
//! release; a release equal to what the registry serves commits nothing.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use cuda_aot_registry::{DirRegistry, PublishOptions, Release, SignedBuild};
//! # let (anchor, statement, files, publisher): (Vec<u8>, Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>, cuda_aot::SecretKey) = todo!();
//! let root = cuda_aot::trust::verify_anchor(&anchor, &Default::default(), "trust root")?;
//! let build = SignedBuild::new(&root, statement, files)?; // builder threshold checked
//! let reg = DirRegistry::new("/srv/registry");
//! reg.ensure_root(&anchor)?;
//! let release = Release { build, promotions: vec![] };
//! let published = reg.publish(&anchor, &release, &[&publisher], &PublishOptions::default())?;
//! println!("index v{} (unchanged: {})", published.index_version, published.unchanged);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod dir;
mod error;
pub mod publish;

pub use dir::DirRegistry;
pub use error::{Error, Result};
pub use publish::{BuiltModule, PublishOptions, Published, Release, SignedBuild, Step, Store};
