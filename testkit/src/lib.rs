//! cuda-aot-testkit: the test support that the workspace's integration tests share, written
//! once. Keys are generated (none is ever committed), blobs are the real cubins and PTX of
//! `tests/data/elf/add.cu` with manifests as the build writes them, and registries are
//! published into a temporary folder with the real publisher and checked with the one
//! verification pipeline.
//!
//! ```
//! use cuda_aot_testkit::{Fixture, verify_dir};
//!
//! let f = Fixture::new(); // generated keys, root v1, dev channel, an empty registry
//! f.publish_sms(&["sm_80", "sm_90"]); // one signed build of `add`, published
//! let verified = verify_dir(&f.reg_path(), &f.root_file).expect("a clean registry");
//! assert_eq!(verified.modules().len(), 2);
//! ```

#![forbid(unsafe_code)]

mod blobs;
mod build;
mod fs;
mod keys;
mod registry;
mod teams;

pub use blobs::{
    ManifestAndBlob, Module, add_module, big_ptx, cubin, data, functions_of, manifest, ptx,
};
pub use build::{Build, FIXTURE_SPEC, promotion, provenance, provenance_for};
pub use fs::mkfifo;
pub use keys::{Keys, key, root_file, root_payload, sign_doc, sign_root};
pub use registry::{Fixture, verify_dir};
pub use teams::{Delegations, TeamKeys};
