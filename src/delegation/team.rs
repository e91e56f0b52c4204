//! A delegated team's signed metadata in a registry (issue 46): the document
//! ([`TeamMetadata`], payload type `application/vnd.cuda-aot.team.v1+json`) a team's
//! publisher keys sign, at `teams/<version>.<role>.json` ([`team_path`]), and
//! [`RegistryTeams`], the [`Repository`] the search reads it through: exactly the length
//! and blake3 the verified index lists, signatures counted by the trust root's one
//! counting function against the keys the delegator gave the team.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::walk::{Listed, Repository, RoleView};
use super::{Delegation, role_file};
use crate::envelope::PayloadType;
use crate::metadata::{Document, Role, Time};
use crate::name::ModuleName;
use crate::role::RoleName;
use crate::source::RegistrySource;
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

/// Where version `version` of role `name`'s metadata is in a registry.
pub fn team_path(name: &str, version: u64) -> String {
    format!("teams/{}", role_file(name, version))
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
}

impl Repository for RegistryTeams<'_> {
    fn listed(&self, name: &str) -> Option<Listed> {
        self.listed.get(name).cloned()
    }

    fn read(&self, name: &str, listed: &Listed) -> Result<Vec<u8>, String> {
        let path = team_path(name, listed.version);
        self.src
            .read_at_most(&path, listed.length.min(self.limit))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{path} is missing"))
    }

    fn open(&self, bytes: &[u8], keys: &Role) -> Result<RoleView, String> {
        let opened = self
            .root
            .open_delegated::<TeamMetadata>(bytes, keys, self.limit, "team metadata")
            .map_err(|e| e.to_string())?;
        let d = opened.doc;
        Ok(RoleView {
            name: d.name,
            version: d.version,
            expires: d.expires,
            modules: d.modules.iter().map(|m| m.as_str().to_string()).collect(),
            delegations: d.delegations,
        })
    }

    fn seen(&self, name: &str) -> Option<u64> {
        self.seen.get(name).copied()
    }

    fn now(&self) -> Time {
        self.now
    }
}
