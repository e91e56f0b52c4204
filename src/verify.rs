//! Offline verification of a registry, in the order the trust model fixes, for every caller
//! (runtime, `verify`, `sync`, the server's publish checks, OCI, benches): 1. trust root
//! and 2. its rotation chain → 3. timestamp → 4. bundle index → 5. build statements and
//! promotion records → 6. manifests → 7. blobs (size first, then blake3) → 8. their
//! content (the cubin's ELF SM, PTX text, the signed kernels and ABI).
//!
//! Steps 1-5 are [`verify_metadata`]; steps 6-8 are [`VerifiedIndex::complete`], for the
//! entries the caller selects ([`Select`]: all of them, or the runtime's per-device pick,
//! with its driver-floor check between steps 6 and 7); [`verify_all`] runs 1-8. Only the
//! value `complete` returns, [`Verified`], hands out the state to save: nothing can be
//! saved before every step passed.
//!
//! Signature checks per open are constant in the number of modules: one per document (the
//! root chain, the timestamp, the index, one per build statement and one per promotion
//! record); manifests and blobs are then authenticated by the digests those documents list.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::digest::Digest;
use crate::identity::Channel;
use crate::keys::KeyId;
use crate::limits::Limits;
use crate::manifest::Manifest;
use crate::metadata::{Attested, Index, IndexEntry, Promotion, Time, Timestamp};
use crate::provenance::Statement;
use crate::source::RegistrySource;
use crate::state::TrustState;
use crate::trust::VerifiedRoot;

mod delegated;
mod documents;
mod floor;
mod index;
mod outcome;

pub use delegated::DELEGATIONS;
pub use documents::{check_root_current, verify_metadata};
pub use floor::rollback_floor;
pub use outcome::{BeforeBlobs, Failed, Select, Verified};

/// How to verify: the clock, its explicit skew allowance, the offline grace, byte limits
/// and the channel the caller requires.
#[derive(Debug, Clone)]
pub struct Options {
    /// The verifier's notion of now.
    pub now: Time,
    /// How far past an expiry a document is still accepted. Explicit and reported: zero
    /// unless the operator sets it.
    pub skew: Duration,
    /// How long after the last fresh verification (recorded in the trust state) an expired
    /// timestamp is still accepted, with a warning: lets a prover host that synced a
    /// release and then lost its network keep starting. Zero unless the operator sets it.
    /// Roots, indexes and manifests get no grace.
    pub offline_grace: Duration,
    /// Byte caps per file kind.
    pub limits: Limits,
    /// Refuse documents of any other channel (production loaders require `Production`).
    pub required_channel: Option<Channel>,
    /// A rebuilder's view ([`VerifiedRoot::awaiting_builders`]): a build statement needs one
    /// listed builder's signature instead of the root's builder threshold, because the
    /// rebuild adds the next. Every other check is made. Never set by a loader: a release
    /// awaiting its rebuild is not loadable.
    pub awaiting_rebuild: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            now: Time::now(),
            skew: Duration::ZERO,
            offline_grace: Duration::ZERO,
            limits: Limits::default(),
            required_channel: None,
            awaiting_rebuild: false,
        }
    }
}

impl Options {
    /// For a publisher reading back its own registry: every check except expiry and the
    /// freeze bound (an expired registry is exactly what a publisher comes to fix).
    pub fn ignoring_expiry() -> Options {
        Options {
            skew: Duration::MAX,
            ..Options::default()
        }
    }
}

/// Whether the timestamp was current, or accepted within the offline grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// The timestamp had not expired (within the skew allowance).
    Fresh,
    /// The timestamp expired at `expired`; accepted because the registry was last verified
    /// fresh recently enough. It stops being accepted after `deadline`.
    Grace {
        /// When the timestamp expired.
        expired: Time,
        /// When the offline grace ends.
        deadline: Time,
    },
}

/// A manifest whose file, build statement, index entry (and promotion, in production)
/// were checked.
#[derive(Debug, Clone)]
pub struct VerifiedManifest {
    manifest: Manifest,
    entry: IndexEntry,
    signers: Vec<KeyId>,
    promoted_by: Vec<KeyId>,
    team: Option<String>,
}

impl VerifiedManifest {
    /// The manifest payload.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    /// The index entry that lists it.
    pub fn entry(&self) -> &IndexEntry {
        &self.entry
    }
    /// The builder keys whose signatures on its build statement counted.
    pub fn signers(&self) -> &[KeyId] {
        &self.signers
    }
    /// The reviewer keys whose promotion record covers it (production channel).
    pub fn promoted_by(&self) -> &[KeyId] {
        &self.promoted_by
    }
    /// The delegated role whose keys signed it (issue 46), or None for the trust root's own
    /// builders.
    pub fn team(&self) -> Option<&str> {
        self.team.as_deref()
    }
}

/// A module whose bytes passed every check; the only thing the loader accepts.
#[derive(Debug, Clone)]
pub struct VerifiedModule {
    manifest: Manifest,
    bytes: crate::source::Bytes,
}

impl VerifiedModule {
    /// The manifest that vouches for these bytes.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    /// The verified blob bytes, held in memory (or, from an embedded bundle, the
    /// program's own bytes, used in place): the loader never re-reads a path.
    pub fn bytes(&self) -> &crate::source::Bytes {
        &self.bytes
    }
}

/// A build statement whose builder threshold was met.
#[derive(Debug, Clone)]
struct VerifiedStatement {
    /// The delegated role whose builder keys signed it (None: the trust root's builders).
    team: Option<String>,
    attested: BTreeMap<Digest, Attested>,
    /// The in-toto form: each manifest's blob subject (digest, size).
    blobs: BTreeMap<Digest, (Digest, u64)>,
    signers: Vec<KeyId>,
    /// The in-toto statement (`None` for the earlier form): its provenance names the
    /// sources a rebuilder or a mirror fetches.
    statement: Option<Statement>,
}

/// A source file (or the spec) that a verified build statement's provenance names, read
/// from the registry and checked against its recorded size and blake3.
#[derive(Debug, Clone)]
pub struct VerifiedSource {
    /// Its path relative to the build's source root, as the provenance records it (not
    /// checked as a path: a rebuilder that lays it out checks it).
    pub name: String,
    /// Its blake3 (`sources/blake3/<hex>`).
    pub digest: Digest,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// A build statement the index lists, as verified: what a rebuilder starts from.
#[derive(Debug, Clone, Copy)]
pub struct VerifiedBuild<'a> {
    /// The statement file's blake3 (`statements/blake3/<hex>`).
    pub file: Digest,
    /// The distinct builder keys whose signatures verified.
    pub signers: &'a [KeyId],
    /// The in-toto statement (`None` for the earlier `cuda-aot/build/v1` form, which
    /// records no provenance).
    pub statement: Option<&'a Statement>,
}

/// A promotion record whose reviewer threshold was met.
#[derive(Debug, Clone)]
struct VerifiedPromotion {
    promotion: Promotion,
    signers: Vec<KeyId>,
}

/// The result of verifying a registry's metadata: the trusted root, timestamp, index, build
/// statements, promotions and the manifests verified so far.
#[derive(Debug, Clone)]
pub struct VerifiedIndex {
    root: VerifiedRoot,
    timestamp: Timestamp,
    index: Index,
    statements: BTreeMap<Digest, VerifiedStatement>,
    promotions: Vec<VerifiedPromotion>,
    manifests: Vec<VerifiedManifest>,
    state: TrustState,
    freshness: Freshness,
    skew: Duration,
    signature_checks: u64,
    discarded: Option<TrustState>,
    limits: Limits,
    /// The earliest expiry of the delegated metadata the owners were found through.
    delegated_expiry: Option<Time>,
}

/// One delegated role of the delegations in force (issue 46), as its delegator lists it,
/// with its metadata checked the way a search checks it (python-tuf's order) or why that
/// metadata was refused. For people reading a registry (the page); a load decides from the
/// owners of the modules it loads.
#[derive(Debug, Clone)]
pub struct DelegatedRole {
    /// The delegator (`delegations`, or a team).
    pub delegator: String,
    /// The delegation: patterns, order, keys and thresholds.
    pub delegation: crate::delegation::Delegation,
    /// The role's metadata (version, expiry, modules, its own delegations), or why it was
    /// refused.
    pub metadata: std::result::Result<crate::delegation::RoleView, String>,
}

/// Steps 1-8 for every entry: [`verify_metadata`], then [`VerifiedIndex::complete`] of
/// [`Select::all`] with the verified bytes kept.
///
/// `anchor` is the trust root file the caller trusts out of band; `seen` the state saved
/// before (rollback protection, offline grace).
pub fn verify_all(
    src: &(dyn RegistrySource + Sync),
    anchor: &[u8],
    seen: TrustState,
    opts: &Options,
) -> std::result::Result<Verified, Failed> {
    verify_metadata(src, anchor, seen, opts)
        .map_err(Failed::from)?
        .complete(src, Select::all().keep_bytes())
}
