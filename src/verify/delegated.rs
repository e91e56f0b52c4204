//! Step 5 under delegations (issue 46): who must sign each module's build statement and
//! promotion record. A module some delegation's pattern names is signed by the builder
//! (reviewer) keys of the delegated role that owns it, found by the search in python-tuf's
//! order ([`crate::delegation::walk`]) through metadata the index lists; any other module
//! by the trust root's builder (reviewer) role, as before delegations.

use std::cell::RefCell;
use std::collections::BTreeMap;

use super::DelegatedRole;
use crate::delegation::walk::load;
use crate::delegation::{Delegation, Listed, Owner, Refusal, RegistryTeams, walk};
use crate::error::{Error, Result, escape_untrusted};
use crate::limits::Limits;
use crate::metadata::{Index, Role, Time};
use crate::source::RegistrySource;
use crate::state::TrustState;
use crate::trust::VerifiedRoot;

/// The name under which the index lists the root's delegations role's metadata.
pub const DELEGATIONS: &str = "delegations";

/// The delegations in force for one verified index, and the owner of each module asked
/// about so far.
pub(crate) struct Owners<'a> {
    top: Vec<Delegation>,
    repo: RegistryTeams<'a>,
    owners: RefCell<BTreeMap<String, Option<Owner>>>,
}

/// A refusal of the search, as the crate's error: `what` is the module or document.
fn refused(what: &str, r: Refusal) -> Error {
    Error::Delegation {
        what: what.to_string(),
        team: None,
        reason: r.to_string(),
    }
}

/// The delegation that stands for the root's delegations role: its keys sign the
/// top-level delegations, and it owns every name.
fn top_role(keys: &Role) -> Delegation {
    Delegation {
        name: DELEGATIONS.into(),
        paths: vec!["*".into()],
        terminating: false,
        publisher: keys.clone(),
        builder: keys.clone(),
        reviewer: keys.clone(),
    }
}

impl<'a> Owners<'a> {
    /// The delegations `index` puts in force under `root`, checked (listed, length, hash,
    /// the delegations role's threshold, version, not rolled back below `seen`, not
    /// expired at `now`); None when nothing is delegated.
    pub(crate) fn resolve(
        src: &'a dyn RegistrySource,
        root: &'a VerifiedRoot,
        index: &Index,
        seen: &TrustState,
        now: Time,
        limits: &Limits,
    ) -> Result<Option<Owners<'a>>> {
        let what = format!("the delegated metadata index v{} lists", index.version);
        let Some(keys) = &root.root().delegations else {
            if let Some(t) = index.teams.first() {
                return Err(Error::Delegation {
                    what,
                    team: None,
                    reason: format!(
                        "it lists metadata of role {:?}, but trust root v{} names no delegations role",
                        escape_untrusted(&t.name),
                        root.root().version
                    ),
                });
            }
            return Ok(None);
        };
        let mut listed = BTreeMap::new();
        for t in &index.teams {
            if t.size > limits.index {
                return Err(Error::TooLarge {
                    what: format!("metadata of delegated role {:?}", escape_untrusted(&t.name)),
                    limit: limits.index,
                    actual: t.size,
                });
            }
            let l = Listed {
                version: t.version,
                length: t.size,
                blake3: t.digest.0,
            };
            if listed.insert(t.name.clone(), l).is_some() {
                return Err(Error::Delegation {
                    what,
                    team: None,
                    reason: format!("it lists role {:?} twice", escape_untrusted(&t.name)),
                });
            }
        }
        if !listed.contains_key(DELEGATIONS) {
            // A role seen before that the index no longer lists: TUF's "missing from the
            // snapshot that should list it".
            if let Some(v) = seen.teams.get(DELEGATIONS) {
                return Err(Error::Delegation {
                    what,
                    team: None,
                    reason: format!(
                        "it omits the delegations (version {v} was seen before): the index was made without them, or they were removed to hand teams' modules back to the trust root's keys"
                    ),
                });
            }
            return Ok(None);
        }
        let repo = RegistryTeams::new(src, root, listed, seen.teams.clone(), now, limits.index);
        let view =
            load(&repo, &top_role(keys), "root").map_err(|r| refused("the delegations", r))?;
        if let Some(m) = view.modules.iter().next() {
            return Err(Error::Delegation {
                what: "the delegations".into(),
                team: None,
                reason: format!(
                    "they list module {m:?} themselves: the delegations role only delegates, a team publishes"
                ),
            });
        }
        crate::delegation::check_list(DELEGATIONS, 1, None, &view.delegations)
            .map_err(|r| refused("the delegations", r))?;
        Ok(Some(Owners {
            top: view.delegations,
            repo,
            owners: RefCell::default(),
        }))
    }

    /// Who signs `module`'s documents: the delegation of the delegated role that owns it,
    /// or None (the trust root's own roles) when no delegation's pattern names it. A module
    /// a pattern names that no delegated role lists is refused: the root's keys never sign
    /// a team's names.
    pub(crate) fn owner(&self, module: &str) -> Result<Option<Delegation>> {
        if let Some(known) = self.owners.borrow().get(module) {
            return Ok(known.as_ref().map(|o| o.delegation.clone()));
        }
        let found = walk(module, &self.top, DELEGATIONS, &self.repo)
            .map_err(|r| refused(&format!("module {module}"), r))?;
        if found.is_none()
            && let Some(d) = self.top.iter().find(|d| d.matches(module))
        {
            return Err(Error::Delegation {
                what: format!("module {module}"),
                team: Some(d.name.clone()),
                reason: format!(
                    "delegation {:?} (patterns {:?}) owns the name, but no delegated role's metadata lists the module",
                    d.name, d.paths
                ),
            });
        }
        let owner = found.as_ref().map(|o| o.delegation.clone());
        self.owners.borrow_mut().insert(module.to_string(), found);
        Ok(owner)
    }

    /// Every role the delegations in force name (the teams, then each team's own
    /// delegations), each with its metadata checked as a search checks it, or why not.
    pub(crate) fn roles(&self) -> Vec<DelegatedRole> {
        let mut out = Vec::new();
        for d in &self.top {
            let metadata = load(&self.repo, d, DELEGATIONS).map_err(|r| r.to_string());
            let nested = metadata
                .as_ref()
                .map(|v| v.delegations.clone())
                .unwrap_or_default();
            out.push(DelegatedRole {
                delegator: DELEGATIONS.into(),
                delegation: d.clone(),
                metadata,
            });
            for n in nested {
                out.push(DelegatedRole {
                    delegator: d.name.clone(),
                    metadata: load(&self.repo, &n, &d.name).map_err(|r| r.to_string()),
                    delegation: n,
                });
            }
        }
        out
    }

    /// The versions of the delegated metadata this verification read and accepted.
    pub(crate) fn versions(&self) -> BTreeMap<String, u64> {
        self.repo
            .opened
            .borrow()
            .iter()
            .map(|(role, (version, _))| (role.clone(), *version))
            .collect()
    }

    /// The earliest expiry of the delegated metadata this verification read and accepted:
    /// past it, the search that found the modules' owners fails.
    pub(crate) fn earliest_expiry(&self) -> Option<Time> {
        self.repo.opened.borrow().values().map(|(_, t)| *t).min()
    }
}
