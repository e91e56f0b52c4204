//! The signed documents of a registry besides manifests: trust root, timestamp, bundle
//! index and promotion records, and the expiry time format they share.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::time::{Duration, SystemTime};

use crate::digest::Digest;
use crate::identity::{Channel, Kind};
use crate::keys::PublicKey;
use crate::name::{ModuleName, Target};

/// A point in time, written in RFC 3339 UTC (`2027-01-01T00:00:00Z`), second precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time(pub SystemTime);

impl Time {
    /// Now, truncated to whole seconds.
    pub fn now() -> Self {
        Time::from_unix(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        )
    }
    /// From seconds since the Unix epoch.
    pub fn from_unix(secs: u64) -> Self {
        Time(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
    }
    /// This time plus `d`.
    pub fn plus(&self, d: Duration) -> Self {
        Time(self.0 + d)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_rfc3339_seconds(self.0))
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let t = humantime::parse_rfc3339(&s)
            .map(Time)
            .map_err(|e| serde::de::Error::custom(format!("bad time {s:?}: {e}")))?;
        // One spelling per instant: whole seconds, as written. A fraction would be signed
        // but lost when the time is shown or written again (found by fuzzing).
        if t.to_string() != s {
            return Err(serde::de::Error::custom(format!(
                "bad time {s:?}: expected whole seconds in UTC, e.g. {t}"
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

/// Names a role, for lookups and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoleName {
    /// See [`Roles::root`].
    Root,
    /// See [`Roles::builder`].
    Builder,
    /// See [`Roles::reviewer`].
    Reviewer,
    /// See [`Roles::publisher`].
    Publisher,
}

impl RoleName {
    /// All roles, in a fixed order.
    pub const ALL: [RoleName; 4] = [
        RoleName::Root,
        RoleName::Builder,
        RoleName::Reviewer,
        RoleName::Publisher,
    ];
    /// The role's name as written in files and messages.
    pub fn as_str(&self) -> &'static str {
        match self {
            RoleName::Root => "root",
            RoleName::Builder => "builder",
            RoleName::Reviewer => "reviewer",
            RoleName::Publisher => "publisher",
        }
    }
}

impl fmt::Display for RoleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RoleName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        RoleName::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                format!("unknown role {s:?}: expected root, builder, reviewer or publisher")
            })
    }
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
    /// blake3 of the signed manifest file; names `manifests/blake3/<hex>.json`.
    pub manifest: Digest,
    /// Size of the signed manifest file.
    pub manifest_size: u64,
    /// The module's identity digest (for caches).
    pub identity: Digest,
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
    /// The modules.
    pub entries: Vec<IndexEntry>,
}

impl Index {
    /// The schema tag.
    pub const SCHEMA: &'static str = "cuda-aot/index/v1";
}

/// A reviewer's promotion record: a research kernel's AOT build passed parity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Promotion {
    /// Always [`Promotion::SCHEMA`].
    pub schema: String,
    /// The promoted module.
    pub module: ModuleName,
    /// The source digest the reviewer looked at.
    pub source_digest: Digest,
    /// Free-text parity evidence (device, command, result).
    pub parity: String,
}

impl Promotion {
    /// The schema tag.
    pub const SCHEMA: &'static str = "cuda-aot/promotion/v1";
}

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
        // Regression (fuzz/regressions/timestamp/fractional-seconds-expiry): a fraction
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
