//! The registry crate's error type, with `Fix:` advice.

use std::path::PathBuf;

/// Errors of publishing to or reading from a registry store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A verification or format error from the core crate.
    #[error(transparent)]
    Core(#[from] cuda_aot::Error),
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Another publisher committed first: the index version this publish prepared exists.
    #[error(
        "publish conflict: index version {version} was published by someone else while this publish was prepared on version {base}"
    )]
    Conflict {
        /// The version this publish wanted to create.
        version: u64,
        /// The version it started from.
        base: u64,
    },
    /// A blob does not match the manifest that describes it.
    #[error("{module} {target}: blob {reason}")]
    BlobMismatch {
        /// The module.
        module: String,
        /// The target.
        target: String,
        /// What differs.
        reason: String,
    },
    /// The registry already holds a different trust root of the same version.
    #[error("{path}: the registry already holds a different trust root v{version}")]
    RootConflict {
        /// The root file in the registry.
        path: PathBuf,
        /// Its version.
        version: u64,
    },
    /// A key given as the publisher key is not a publisher key of the newest trust root.
    #[error(
        "key {key} is not a publisher key of trust root v{root} (the newest in the registry's chain)"
    )]
    NotPublisher {
        /// The key id.
        key: String,
        /// The root version.
        root: u64,
    },
    /// The registry has no trust root yet and none was given.
    #[error("{path}: registry has no trust root (root/1.root.json)")]
    NoRoot {
        /// The registry.
        path: PathBuf,
    },
}

impl Error {
    /// What to do about this error.
    pub fn fix(&self) -> String {
        match self {
            Error::Core(e) => e.fix(),
            Error::Io { .. } => "check that the registry folder exists and is writable by this user".into(),
            Error::Conflict { version: 0, .. } => "another publisher changed timestamp.json at the same time; run the command again".into(),
            Error::Conflict { .. } => "another release was published at the same time; run the publish again (it will build on the new index)".into(),
            Error::BlobMismatch { .. } => "rebuild (cargo xtask build) and sign again; the blob changed after its manifest was written".into(),
            Error::RootConflict { version, .. } => format!(
                "publish with the trust root this registry was started with (root v{version}), or rotate to v{} with cargo xtask trust-root --previous",
                version + 1
            ),
            Error::NotPublisher { root, .. } => format!("publish with a publisher key listed in trust root v{root} (--publisher-key), or rotate the trust root to list this key"),
            Error::NoRoot { .. } => "publish with --trust pointing at the trust root (cargo xtask release creates a dev one)".into(),
        }
    }

    /// True for [`Error::Conflict`]: retrying the publish is the fix.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
