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
    /// The registry is empty, and the versions it would continue above (what this publisher
    /// has seen of it, [`crate::publish::PublishOptions::seen`]) cannot be incremented.
    #[error(
        "the registry is empty and the versions seen of it before (index v{index}, timestamp v{timestamp}) cannot be incremented"
    )]
    SeenExhausted {
        /// The highest index version seen.
        index: u64,
        /// The highest timestamp version seen.
        timestamp: u64,
    },
    /// A publish token would be sent over plain HTTP to another machine.
    #[error(
        "{url}: the publish token would cross the network in clear (plain http:// to a host that is not this machine)"
    )]
    TokenInClear {
        /// The registry URL.
        url: String,
    },
    /// A transfer failed, after its retries where the failure was transient.
    #[error("{url}: {failure} (after {attempts} attempt(s))")]
    Transfer {
        /// The URL (or OCI reference and path).
        url: String,
        /// Attempts made.
        attempts: u32,
        /// What went wrong on the last attempt.
        failure: Failure,
    },
    /// The server answered with a status that retrying cannot fix.
    #[error("{url}: HTTP {status}{}", if .message.is_empty() { String::new() } else { format!(": {}", .message) })]
    Status {
        /// The URL.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The server's explanation (first line of its body), if any.
        message: String,
    },
    /// A URL or OCI reference is not usable.
    #[error("{url:?}: {reason}")]
    BadUrl {
        /// What was given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// An OCI registry refused an operation or answered something unusable.
    #[error("{reference}: {reason}")]
    Oci {
        /// The OCI reference (`HOST/REPO:TAG`).
        reference: String,
        /// What went wrong.
        reason: String,
    },
    /// An object store (S3 or S3-compatible) refused a request or could not be reached,
    /// after its retries where the failure was transient.
    #[error("{url}: {reason}")]
    ObjectStore {
        /// `s3://BUCKET/KEY`.
        url: String,
        /// What the store or the client said.
        reason: String,
    },
    /// An object store does not honour conditional writes, so two publishers could both
    /// believe they committed.
    #[error("{url}: refusing to publish: the store does not honour conditional writes ({what})")]
    NoConditionalWrites {
        /// `s3://BUCKET/PREFIX`.
        url: String,
        /// What the probe saw.
        what: String,
    },
    /// Another sync is writing into the same folder.
    #[error("{path}: another sync holds this folder")]
    Busy {
        /// The lock file.
        path: PathBuf,
    },
    /// A delegated publish (issue 46) cannot go ahead: the team, its keys or its modules do
    /// not fit the delegations in force. Nothing was committed.
    #[error("team {team:?}: {reason}")]
    Team {
        /// The delegated role publishing (or `delegations`).
        team: String,
        /// Why.
        reason: String,
        /// What to do.
        fix: String,
    },
    /// The trust root `serve --trust` was given cannot be used.
    #[error("--trust {path}: {reason}")]
    TrustRoot {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The server could not start or stopped with an error.
    #[error("serve {addr}: {reason}")]
    Serve {
        /// The address it was to listen on.
        addr: String,
        /// What went wrong.
        reason: String,
    },
}

/// Why one transfer attempt failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Failure {
    /// No connection could be made.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// No byte arrived for the read timeout.
    #[error("no data for {secs} s (read timeout)")]
    Timeout {
        /// The read timeout in seconds.
        secs: u64,
    },
    /// Bytes arrived, but slower than the minimum rate over a whole window.
    #[error(
        "transfer too slow: {bytes} bytes in {secs:.1} s, below the minimum of {min_rate} bytes/s"
    )]
    TooSlow {
        /// Bytes received in the window.
        bytes: u64,
        /// Length of the window in seconds.
        secs: f64,
        /// The minimum rate in bytes per second.
        min_rate: u64,
    },
    /// The connection ended before the announced length.
    #[error("connection closed after {got} of {expected} bytes")]
    Truncated {
        /// Bytes received.
        got: u64,
        /// Bytes announced.
        expected: u64,
    },
    /// A status that may go away (408, 429, 5xx).
    #[error("HTTP {0}")]
    Status(u16),
    /// Any other transport error.
    #[error("{0}")]
    Other(String),
}

impl From<cuda_aot::verify::Failed> for Error {
    fn from(f: cuda_aot::verify::Failed) -> Error {
        Error::Core(*f.error)
    }
}

impl Error {
    /// An I/O failure on `path`.
    pub fn io(path: &std::path::Path, source: std::io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

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
            Error::SeenExhausted { .. } => "those versions come from the publisher's local trust state for this registry, not from the registry: the state was edited or saved from a registry a stolen key inflated. If this registry was emptied on purpose, delete that state file (the per-user rollback state of this registry folder, named above; the prover runtime reads the same file) and publish again; verifiers holding the same state must drop theirs too".into(),
            Error::TokenInClear { url } => format!(
                "publish over https:// (put TLS in front of `serve`: a reverse proxy or load balancer, docs/network.md), or, on a network you trust, pass --allow-plain-http (anyone on the path can then read the token and publish with it to {url})"
            ),
            Error::NoRoot { .. } => "publish with --trust pointing at the trust root (cargo xtask release creates a dev one)".into(),
            Error::Transfer { failure, .. } => match failure {
                Failure::Connect(_) => "check that the server is running and the URL is right; the local copy was not changed, and running the sync again resumes partial downloads".into(),
                Failure::Timeout { .. } | Failure::TooSlow { .. } => "the server or network is stalling: check the server's load and the network; run the sync again (partial downloads resume), or adjust --read-timeout / --min-speed if the link is known to be slow".into(),
                _ => "the server or network failed during the transfer; the local copy was not changed: run the sync again (partial downloads resume)".into(),
            },
            Error::Status { status: 401 | 403, .. } => "the server refused the credentials: check the token file given to the publisher and to the server (--token-file)".into(),
            Error::Status { status: 300..=399, .. } => "the server answered with a redirect, which a publisher never follows (its token would go along): publish to the address the server redirects to".into(),
            Error::Status { status: 404, .. } => "the URL does not point at a registry root (it must hold timestamp.json)".into(),
            Error::Status { .. } => "the server refused the request; see the message above and the server's log line for this request".into(),
            Error::BadUrl { .. } => "give an http://, https://, s3://BUCKET/PREFIX or oci://HOST/REPOSITORY:TAG address".into(),
            Error::Oci { .. } => "check the OCI reference and that the registry is reachable and accepts this user; see the message above".into(),
            Error::ObjectStore { .. } => "check the bucket name and the store's credentials and address in the standard AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION; AWS_ENDPOINT_URL for an S3-compatible store); what was written before the failure is content-addressed and harmless, and running the command again continues".into(),
            Error::NoConditionalWrites { .. } => "publish to a store with S3 conditional writes (If-None-Match and If-Match on PUT, as Amazon S3 has), or publish into a folder (--registry DIR) and upload it with timestamp.json last from one machine at a time".into(),
            Error::Busy { .. } => "wait for the other sync into this folder to finish, then run again".into(),
            Error::Serve { .. } => "choose a free address (--addr) and a readable registry folder (--root)".into(),
            Error::Team { fix, .. } => fix.clone(),
            Error::TrustRoot { .. } => "pass the signed trust root the registry is published under: after a dev `cargo xtask release` that is .cuda-aot/dev-keys/root.json, for production the root.json your team publishes".into(),
        }
    }

    /// This error as the core crate's, for a [`cuda_aot::source::RegistrySource`] read of
    /// `path` that a remote store failed: a core error stays itself, any other is an I/O
    /// error of `path`.
    #[cfg(feature = "net")]
    pub(crate) fn into_core(self, path: &str) -> cuda_aot::Error {
        match self {
            Error::Core(c) => c,
            other => cuda_aot::Error::Io {
                path: path.into(),
                source: std::io::Error::other(other),
            },
        }
    }

    /// True for [`Error::Conflict`]: retrying the publish is the fix.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
