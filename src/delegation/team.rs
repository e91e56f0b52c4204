//! A delegated team's signed metadata in a registry (issue 46): the document
//! ([`TeamMetadata`], payload type `application/vnd.cuda-aot.team.v1+json`) a team's
//! publisher keys sign, at `teams/blake3/<hex>.json` (named by its content, like a
//! statement: no role name ever reaches a path), and
//! [`RegistryTeams`], the [`Repository`] the search reads it through: exactly the length
//! and blake3 the verified index lists, signatures counted by the trust root's one
//! counting function against the keys the delegator gave the team.

use std::cell::RefCell;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Delegation;
use super::walk::{Listed, Repository, RoleView};
use crate::digest::Digest;
use crate::envelope::PayloadType;
use crate::metadata::{Document, Role, Time};
use crate::name::ModuleName;
use crate::role::RoleName;
use crate::source::RegistrySource;
use crate::source::layout;
use crate::trust::VerifiedRoot;

/// What a team signs: the modules it publishes and its own delegations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamMetadata {
    /// Always [`TeamMetadata::SCHEMA`].
    pub schema: String,
    /// The role it is the metadata of.
    pub name: String,
    /// Its version (the index lists the one in force).
    pub version: u64,
    /// After this time it is refused.
    pub expires: Time,
    /// The modules the team publishes.
    pub modules: Vec<ModuleName>,
    /// Its own delegations (one level at most), in order.
    pub delegations: Vec<Delegation>,
}

impl TeamMetadata {
    /// The schema tag.
    pub const SCHEMA: &'static str = "cuda-aot/team/v1";
}

impl Document for TeamMetadata {
    const PAYLOAD_TYPE: PayloadType = PayloadType::Team;
    const SCHEMA: &'static str = TeamMetadata::SCHEMA;
    /// Signed by the team's publisher keys, as its delegator lists them (never the root's
    /// publisher role: [`VerifiedRoot::open_delegated`] is given the team's keys).
    const SIGNER: RoleName = RoleName::Publisher;
    fn schema(&self) -> &str {
        &self.schema
    }
}

/// Delegated metadata read from a registry under a verified trust root.
pub struct RegistryTeams<'a> {
    /// The registry.
    pub src: &'a dyn RegistrySource,
    /// The trust root it verified under.
    pub root: &'a VerifiedRoot,
    /// What the verified index lists for each role.
    pub listed: BTreeMap<String, Listed>,
    /// The versions seen before (rollback protection).
    pub seen: BTreeMap<String, u64>,
    /// The verifier's clock.
    pub now: Time,
    /// The most bytes a team's metadata may have.
    pub limit: u64,
    /// The version and expiry of each role whose metadata was opened (its signatures met):
    /// for the rollback state, and for how long the release stays loadable, once the whole
    /// verification passes.
    pub opened: RefCell<BTreeMap<String, (u64, Time)>>,
    /// Metadata already opened, by its blake3 and the keys it was opened with: a search
    /// per module reads and checks each role's file once.
    pub cache: RefCell<BTreeMap<([u8; 32], String), RoleView>>,
}

impl<'a> RegistryTeams<'a> {
    /// A search's view of `src` under `root`: what the index lists, the versions seen
    /// before, the clock and the byte limit of one role's metadata.
    pub fn new(
        src: &'a dyn RegistrySource,
        root: &'a VerifiedRoot,
        listed: BTreeMap<String, Listed>,
        seen: BTreeMap<String, u64>,
        now: Time,
        limit: u64,
    ) -> Self {
        RegistryTeams {
            src,
            root,
            listed,
            seen,
            now,
            limit,
            opened: RefCell::default(),
            cache: RefCell::default(),
        }
    }
}

impl Repository for RegistryTeams<'_> {
    fn listed(&self, name: &str) -> Option<Listed> {
        self.listed.get(name).cloned()
    }

    fn read(&self, name: &str, listed: &Listed) -> Result<Vec<u8>, String> {
        let _ = name; // the file is named by its content: no role name reaches a path
        let path = layout::team(&Digest(listed.blake3));
        self.src
            .read_at_most(&path, listed.length.min(self.limit))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{path} is missing"))
    }

    fn open(&self, bytes: &[u8], keys: &Role) -> Result<RoleView, String> {
        let ids: Vec<String> = keys.keys.iter().map(|k| k.key_id().hex()).collect();
        let key = (
            *blake3::hash(bytes).as_bytes(),
            format!("{}/{}", keys.threshold, ids.join(",")),
        );
        if let Some(view) = self.cache.borrow().get(&key) {
            return Ok(view.clone());
        }
        let opened = self
            .root
            .open_delegated::<TeamMetadata>(bytes, keys, self.limit, "team metadata")
            .map_err(|e| describe(e, "its delegator lists"))?;
        let d = opened.doc;
        self.opened
            .borrow_mut()
            .insert(d.name.clone(), (d.version, d.expires));
        let view = RoleView {
            name: d.name,
            version: d.version,
            expires: d.expires,
            modules: d.modules.iter().map(|m| m.as_str().to_string()).collect(),
            delegations: d.delegations,
        };
        self.cache.borrow_mut().insert(key, view.clone());
        Ok(view)
    }

    fn seen(&self, name: &str) -> Option<u64> {
        self.seen.get(name).copied()
    }

    fn now(&self) -> Time {
        self.now
    }
}

/// A signature refusal of `what` against the builder (reviewer) keys of the delegated role
/// `d`, with the team named and its own `Fix:` (the shared message would blame another
/// trust root). Other errors are returned as they are.
pub fn refused_by_team(
    e: crate::error::Error,
    d: &super::Delegation,
    what: &str,
) -> crate::error::Error {
    match e {
        e @ crate::error::Error::Threshold { .. } => crate::error::Error::Delegation {
            what: what.to_string(),
            team: Some(d.name.clone()),
            reason: describe(e, &format!("that delegated role {:?} has for it", d.name)),
        },
        e => e,
    }
}

/// A refusal of a role's metadata, in the delegator's terms: a signature count names the
/// keys `whose` (as "its delegator lists") for the role, not a trust root's publisher
/// keys, as the shared message would.
pub fn describe(e: crate::error::Error, whose: &str) -> String {
    match e {
        crate::error::Error::Threshold {
            valid,
            threshold,
            foreign,
            trusted,
            ..
        } => {
            let mut text = format!(
                "signed by {valid} of the {threshold} required key(s) {whose} ({})",
                trusted.join(", ")
            );
            if !foreign.is_empty() {
                let keys: Vec<&str> = foreign.iter().map(|f| f.key.as_str()).collect();
                text += &format!(
                    "; also signed by {}, not one of them or not a valid signature",
                    keys.join(", ")
                );
            }
            text
        }
        e => e.to_string(),
    }
}
