//! The signed documents of a registry besides manifests: trust root, timestamp, bundle
//! index and promotion records, and the expiry time format they share.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::time::{Duration, SystemTime};

use crate::digest::Digest;
use crate::envelope::{Envelope, PayloadType};
use crate::identity::{Channel, Kind};
use crate::keys::{PublicKey, SecretKey};
use crate::name::{ModuleName, Target};

pub use crate::role::RoleName;

/// A point in time, written in RFC 3339 UTC (`2027-01-01T00:00:00Z`), whole seconds since
/// the Unix epoch. Arithmetic saturates and formatting never panics, whatever the clock or
/// a document says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(u64);

/// The last second RFC 3339 can write (9999-12-31T23:59:59Z).
const RFC3339_MAX: u64 = 253_402_300_799;

impl Time {
    /// Now, truncated to whole seconds (0 for a clock before 1970).
    pub fn now() -> Self {
        Time::from(SystemTime::now())
    }
    /// From seconds since the Unix epoch.
    pub fn from_unix(secs: u64) -> Self {
        Time(secs)
    }
    /// Seconds since the Unix epoch.
    pub fn unix(&self) -> u64 {
        self.0
    }
    /// This time plus `d`, saturating at the largest representable time.
    pub fn plus(&self, d: Duration) -> Self {
        Time(self.0.saturating_add(d.as_secs()))
    }
    /// How long after `earlier` this is (zero if it is not after it).
    pub fn since(&self, earlier: Time) -> Duration {
        Duration::from_secs(self.0.saturating_sub(earlier.0))
    }
}

impl From<SystemTime> for Time {
    fn from(t: SystemTime) -> Self {
        Time(
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        )
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 > RFC3339_MAX {
            return write!(f, "@{} (after year 9999)", self.0);
        }
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(self.0);
        write!(f, "{}", humantime::format_rfc3339_seconds(t))
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 > RFC3339_MAX {
            return Err(serde::ser::Error::custom(
                "time after year 9999 cannot be written",
            ));
        }
        s.collect_str(self)
    }
}
impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let t = humantime::parse_rfc3339(&s).map(Time::from).map_err(|e| {
            serde::de::Error::custom(format!("bad time {:?}: {e}", s.escape_debug().to_string()))
        })?;
        // One spelling per instant: whole seconds, as written. A fraction would be signed
        // but dropped when the time is read, shown or written again (found by fuzzing).
        if t.to_string() != s {
            return Err(serde::de::Error::custom(format!(
                "bad time {:?}: expected whole seconds in UTC, e.g. {t}",
                s.escape_debug().to_string()
            )));
        }
        Ok(t)
    }
}

/// The keys of one role and how many of them must sign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Role {
    /// Public keys of the role.
    pub keys: Vec<PublicKey>,
    /// How many distinct keys must sign.
    pub threshold: u32,
}

/// The four roles of the trust model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Roles {
    /// Signs trust roots (offline).
    pub root: Role,
    /// Signs module manifests.
    pub builder: Role,
    /// Signs promotion records; shares no key with the builder.
    pub reviewer: Role,
    /// Signs the bundle index and the timestamp.
    pub publisher: Role,
}

impl Roles {
    /// The role named `r`.
    pub fn get(&self, r: RoleName) -> &Role {
        match r {
            RoleName::Root => &self.root,
            RoleName::Builder => &self.builder,
            RoleName::Reviewer => &self.reviewer,
            RoleName::Publisher => &self.publisher,
        }
    }
}

/// The trust root payload (`root/<N>.root.json`, `keys/root.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Root {
    /// Always [`Root::SCHEMA`].
    pub schema: String,
    /// Version; rotation goes N -> N+1.
    pub version: u64,
    /// After this time the root is no longer trusted.
    pub expires: Time,
    /// dev roots are made from generated keys; production loaders refuse them.
    pub channel: Channel,
    /// Role keys and thresholds.
    pub roles: Roles,
    /// How far ahead of the verifier's clock timestamps and indexes may expire (the freeze
    /// bound): a document expiring later is refused, so a stolen publisher key cannot make a
    /// release that never expires.
    pub max_expiry: MaxExpiry,
    /// The keys of the delegations role (issue 46), which signs the top-level delegations
    /// (`teams/<N>.delegations.json`: module-name patterns handed to teams' keys). Absent:
    /// nothing is delegated and the builder and reviewer roles sign every module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegations: Option<Role>,
}

/// The freeze bound of a trust root, in days from the verifier's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaxExpiry {
    /// Longest a timestamp may be valid.
    pub timestamp_days: u32,
    /// Longest an index may be valid.
    pub index_days: u32,
}

impl MaxExpiry {
    /// The defaults of `cargo xtask trust-root`: 31 days for timestamps (published with 7),
    /// 400 for indexes (published with 365).
    pub const DEFAULT: MaxExpiry = MaxExpiry {
        timestamp_days: 31,
        index_days: 400,
    };
}

impl Root {
    /// The schema tag.
    pub const SCHEMA: &'static str = "cuda-aot/root/v1";
}

/// What the timestamp says about the current index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexRef {
    /// The index version.
    pub version: u64,
    /// blake3 of the index file bytes.
    pub digest: Digest,
    /// Size of the index file in bytes.
    pub size: u64,
}

/// The timestamp payload (`timestamp.json`): short-lived, names the current index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timestamp {
    /// Always [`Timestamp::SCHEMA`].
    pub schema: String,
    /// Increases with every publish.
    pub version: u64,
    /// After this time, clients refuse the registry until it is republished.
    pub expires: Time,
    /// The current index.
    pub index: IndexRef,
}

impl Timestamp {
    /// The schema tag.
    pub const SCHEMA: &'static str = "cuda-aot/timestamp/v1";
}

/// A reference to another signed document by its exact file bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocRef {
    /// blake3 of the file.
    pub digest: Digest,
    /// Size of the file in bytes.
    pub size: u64,
}

/// One module manifest listed in an index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexEntry {
    /// Module name.
    pub module: ModuleName,
    /// Exact target.
    pub sm: Target,
    /// cubin or ptx.
    pub kind: Kind,
    /// blake3 of the manifest file; names `manifests/blake3/<hex>.json`.
    pub manifest: Digest,
    /// Size of the manifest file.
    pub manifest_size: u64,
    /// The module's identity digest (for caches).
    pub identity: Digest,
    /// The build statement (listed in [`Index::statements`]) that attests this manifest.
    pub statement: Digest,
    /// Index version in which this manifest was first published.
    pub since: u64,
}

/// The bundle index payload (`index/<N>.index.json`): the snapshot of every module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Index {
    /// Always [`Index::SCHEMA`].
    pub schema: String,
    /// Version, one more than the previous index.
    pub version: u64,
    /// After this time the index is no longer trusted.
    pub expires: Time,
    /// Channel of every manifest listed.
    pub channel: Channel,
    /// The builder-signed build statements that attest the entries' manifests
    /// (`statements/blake3/<hex>.json`); usually one per release.
    pub statements: Vec<DocRef>,
    /// The reviewer-signed promotion records of production modules
    /// (`promotions/blake3/<hex>.json`).
    pub promotions: Vec<DocRef>,
    /// The modules.
    pub entries: Vec<IndexEntry>,
    /// The delegated metadata in force (issue 46): the delegations role's and each team's
    /// file, by version, size and blake3 (TUF's snapshot of targets metadata).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub teams: Vec<TeamRef>,
}

/// What an index lists of one delegated role's metadata (`teams/<version>.<role>.json`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamRef {
    /// The role (`delegations` for the root's delegations role).
    pub name: String,
    /// The version in force.
    pub version: u64,
    /// blake3 of the file.
    pub digest: Digest,
    /// Size of the file in bytes.
    pub size: u64,
}

impl Index {
    /// The schema tag.
    pub const SCHEMA: &'static str = "cuda-aot/index/v2";
}

/// A manifest as a build statement attests it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attested {
    /// Module name.
    pub module: ModuleName,
    /// Exact target.
    pub sm: Target,
    /// cubin or ptx.
    pub kind: Kind,
    /// blake3 of the manifest file.
    pub manifest: Digest,
    /// Size of the manifest file.
    pub manifest_size: u64,
}

/// A builder's signed word on one entry of a shared build cache (`--remote-cache`): "the
/// blob with this digest, described by the manifest file with this digest, is what I built
/// for this identity". A build that takes an entry from a shared cache checks a threshold
/// of the trust root's builder keys signed it, that its identity is the one the build
/// computed from its own inputs (no replay under another identity), that the manifest and
/// blob are the ones named, and the blob's content, before it uses a byte of it. Its own
/// payload type, so it never passes as a build statement, nor one as it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheEntry {
    /// Always [`CacheEntry::SCHEMA`].
    pub schema: String,
    /// The identity digest the entry was built for ([`crate::Identity::digest`]).
    pub identity: Digest,
    /// Module name (the identity's; for messages before the manifest is read).
    pub module: ModuleName,
    /// Exact target.
    pub sm: Target,
    /// cubin or ptx.
    pub kind: Kind,
    /// blake3 of the entry's unsigned manifest file.
    pub manifest: Digest,
    /// Size of the manifest file.
    pub manifest_size: u64,
    /// blake3 of the blob.
    pub blob: Digest,
    /// Size of the blob.
    pub blob_size: u64,
}

impl CacheEntry {
    /// The schema tag.
    pub const SCHEMA: &'static str = "cuda-aot/cache-entry/v1";

    /// The statement over one built module: its manifest (whose identity names the entry)
    /// with the exact bytes of the manifest file, and the blob.
    pub fn over(manifest: &crate::manifest::Manifest, manifest_file: &[u8], blob: &[u8]) -> Self {
        CacheEntry {
            schema: Self::SCHEMA.into(),
            identity: manifest.identity.digest(),
            module: manifest.identity.module.clone(),
            sm: manifest.identity.sm,
            kind: manifest.identity.kind,
            manifest: Digest::of(manifest_file),
            manifest_size: manifest_file.len() as u64,
            blob: Digest::of(blob),
            blob_size: blob.len() as u64,
        }
    }
}

/// A builder's signed statement over a shared build cache's dependency records of one job
/// (`v1/deps/<key>.json`): which files, read with which content, gave which identities.
/// A reader takes the records only when a builder key of its trust root signed exactly
/// these bytes for exactly this job key, so a store writer without a builder key cannot
/// make a build read a path of its choosing, and nothing unsigned enters a local cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheRecords {
    /// Always [`CacheRecords::SCHEMA`].
    pub schema: String,
    /// The job key the records belong to (module, target, kind, flags, toolkit, ...).
    pub key: Digest,
    /// blake3 of the records file.
    pub records: Digest,
    /// Size of the records file.
    pub records_size: u64,
}

impl CacheRecords {
    /// The schema tag.
    pub const SCHEMA: &'static str = "cuda-aot/cache-records/v1";

    /// The statement over the records file `bytes` of the job `key`.
    pub fn over(key: Digest, bytes: &[u8]) -> Self {
        CacheRecords {
            schema: Self::SCHEMA.into(),
            key,
            records: Digest::of(bytes),
            records_size: bytes.len() as u64,
        }
    }
}

/// A builder's signed statement over one compiled file of a device-linked module in a
/// shared build cache (`v1/units/<id>/`): the relocatable cubin (or LTO IR) that the
/// file's inputs, named by the unit id, gave. A reader takes it only for exactly that id,
/// with exactly these bytes, and links it with the module's other files itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheUnit {
    /// Always [`CacheUnit::SCHEMA`].
    pub schema: String,
    /// The unit id: the file's dependency key and the digest of what it read.
    pub id: Digest,
    /// blake3 of the object.
    pub object: Digest,
    /// Size of the object.
    pub size: u64,
}

impl CacheUnit {
    /// The schema tag.
    pub const SCHEMA: &'static str = "cuda-aot/cache-unit/v1";

    /// The statement over the object `bytes` of unit `id`.
    pub fn over(id: Digest, bytes: &[u8]) -> Self {
        CacheUnit {
            schema: Self::SCHEMA.into(),
            id,
            object: Digest::of(bytes),
            size: bytes.len() as u64,
        }
    }
}

/// The builder's one signed statement over a whole build: "these manifests (and through
/// their digests, these blobs) came out of this build". Opening a bundle costs one builder
/// signature check per statement, however many modules it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildStatement {
    /// Always [`BuildStatement::SCHEMA`].
    pub schema: String,
    /// The channel of every manifest attested.
    pub channel: Channel,
    /// Every manifest of the build, sorted by module, target and kind.
    pub manifests: Vec<Attested>,
}

impl BuildStatement {
    /// The schema tag.
    pub const SCHEMA: &'static str = "cuda-aot/build/v1";

    /// The statement over the manifest files of one build of `channel`: each manifest with
    /// the exact bytes of its file, listed sorted (so the same build always gives the same
    /// statement, and the same signature).
    pub fn over<'a>(
        channel: Channel,
        manifests: impl IntoIterator<Item = (&'a crate::manifest::Manifest, &'a [u8])>,
    ) -> BuildStatement {
        let mut attested: Vec<Attested> = manifests
            .into_iter()
            .map(|(m, file)| Attested {
                module: m.identity.module.clone(),
                sm: m.identity.sm,
                kind: m.identity.kind,
                manifest: Digest::of(file),
                manifest_size: file.len() as u64,
            })
            .collect();
        attested.sort();
        BuildStatement {
            schema: BuildStatement::SCHEMA.into(),
            channel,
            manifests: attested,
        }
    }
}

/// A reviewer's promotion record: a research kernel's AOT build passed parity and review,
/// and may be loaded by production provers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Promotion {
    /// Always [`Promotion::SCHEMA`].
    pub schema: String,
    /// The promoted module.
    pub module: ModuleName,
    /// The schedule version reviewed (the launch contract).
    pub schedule_version: u32,
    /// blake3 of every manifest file promoted (one per target).
    pub manifests: Vec<Digest>,
    /// blake3 of the parity report the reviewer read (written by the parity runner on the
    /// GPU host: NVRTC build, AOT cubins and CPU reference equal on every case).
    pub parity_report: Digest,
    /// blake3 of the resource review the reviewer read (`cargo xtask promote` step 3:
    /// registers, shared and local memory, launch bounds per entry point, NVRTC vs AOT vs
    /// released).
    pub resource_review: Digest,
    /// The reviewer's note (what was checked, by whom).
    pub note: String,
}

impl Promotion {
    /// The schema tag.
    pub const SCHEMA: &'static str = "cuda-aot/promotion/v1";

    /// The promotion rule, in one place for the verifier and the publisher: this record
    /// covers the manifest file `manifest` of `module` built at `schedule_version` when it
    /// names that module, that schedule version and that exact manifest digest.
    pub fn covers(&self, module: &ModuleName, schedule_version: u32, manifest: &Digest) -> bool {
        self.module == *module
            && self.schedule_version == schedule_version
            && self.manifests.contains(manifest)
    }
}

/// A kind of signed document: its payload type, schema tag and the role that signs it.
/// [`crate::trust::VerifiedRoot::open`] opens any of them in the same numbered steps.
pub trait Document: serde::de::DeserializeOwned + Serialize {
    /// The envelope payload type.
    const PAYLOAD_TYPE: PayloadType;
    /// The schema tag every payload of this kind carries.
    const SCHEMA: &'static str;
    /// The role whose threshold must sign it.
    const SIGNER: RoleName;
    /// The schema tag this payload carries.
    fn schema(&self) -> &str;
}

/// Signs `doc` as an envelope of its own kind: the payload type of [`Document`], the
/// payload its canonical JSON. The one way the tools sign a document; [`Envelope::sign`]
/// signs any bytes under any type, which only attack fixtures need.
pub fn sign_doc<T: Document>(doc: &T, keys: &[&SecretKey]) -> Envelope {
    Envelope::sign(T::PAYLOAD_TYPE, &crate::json::to_vec(doc), keys)
}

macro_rules! document {
    ($t:ty, $pt:expr, $role:expr) => {
        impl Document for $t {
            const PAYLOAD_TYPE: PayloadType = $pt;
            const SCHEMA: &'static str = <$t>::SCHEMA;
            const SIGNER: RoleName = $role;
            fn schema(&self) -> &str {
                &self.schema
            }
        }
    };
}

document!(Root, PayloadType::Root, RoleName::Root);
document!(Timestamp, PayloadType::Timestamp, RoleName::Publisher);
document!(Index, PayloadType::Index, RoleName::Publisher);
document!(BuildStatement, PayloadType::Build, RoleName::Builder);
document!(Promotion, PayloadType::Promotion, RoleName::Reviewer);
document!(CacheEntry, PayloadType::CacheEntry, RoleName::Builder);
document!(CacheRecords, PayloadType::CacheRecords, RoleName::Builder);
document!(CacheUnit, PayloadType::CacheUnit, RoleName::Builder);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_only_in_their_canonical_whole_second_form() {
        let t: Time = serde_json::from_str("\"2027-01-01T00:00:00Z\"").unwrap();
        assert_eq!(t, Time::from_unix(1_798_761_600));
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "\"2027-01-01T00:00:00Z\""
        );
        // Regression (fuzz/regressions/timestamp/bad-fractional-seconds-expiry): a fraction
        // parsed, then vanished when the time was written again.
        for bad in [
            "2027-01-01T00:00:00.5Z",
            "2027-01-01T00:00:00.000Z",
            "2027-01-01t00:00:00z",
            "2027-01-01 00:00:00Z",
        ] {
            let err = serde_json::from_str::<Time>(&format!("{bad:?}")).unwrap_err();
            assert!(err.to_string().contains("bad time"), "{bad}: {err}");
        }
    }
}
