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
//! let build = SignedBuild::new(&root, statement, files, &Default::default())?; // builder threshold checked
//! let reg = DirRegistry::new("/srv/registry");
//! reg.ensure_root(&anchor)?;
//! let release = Release { build, promotions: vec![] };
//! let published = reg.publish(&anchor, &release, &[&publisher], &PublishOptions::default())?;
//! println!("index v{} (unchanged: {})", published.index_version, published.unchanged);
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
//!
//! The same sync reads a release pushed to an OCI registry ([`oci::OciRemote`],
//! [`oci::push`]) or published to a bucket of S3 or an S3-compatible store
//! ([`s3::S3Client`]; [`s3::S3Store`] publishes there with conditional writes). [`serve`] is the HTTP server (`cuda-aot-registry serve`): read-only for
//! anyone, and, given a bearer token file and a trust root, a publishing target whose
//! client is [`http_store::HttpStore`], the publish algorithm's second [`Store`].
//! `docs/network.md` describes all of it.
//!
//! The network half (HTTP, S3 and OCI clients, sync, the server: tokio, hyper, reqwest,
//! rustls, oci-client, object_store) is the cargo feature `net`, on by default. Without it
//! the crate is the publish algorithm and the directory store, which is all a local
//! release needs.

#![forbid(unsafe_code)]

pub mod defaults;
mod dir;
mod error;
#[cfg(feature = "net")]
pub mod http_store;
pub mod lock;
#[cfg(feature = "net")]
pub mod oci;
#[cfg(feature = "net")]
pub mod oci_cache;
#[cfg(feature = "net")]
pub mod oci_referrers;
pub mod page;
pub mod publish;
#[cfg(feature = "net")]
pub mod remote;
#[cfg(feature = "net")]
pub mod s3;
pub mod serve;
#[cfg(feature = "net")]
pub mod sync;

pub use dir::DirRegistry;
pub use error::{Error, Failure, Result};
pub use publish::{BuiltModule, PublishOptions, Published, Release, SignedBuild, Step, Store};
