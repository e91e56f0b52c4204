//! The search for the delegated role that owns a module, as python-tuf's client makes it
//! (`_preorder_depth_first_walk`): depth first, in list order, a `terminating` match
//! ending the search after it, each (role, delegator) pair visited once, at most
//! [`MAX_DELEGATIONS`] roles. Each role's metadata is checked in python-tuf's order
//! before it is used: listed by the index (the snapshot); exactly the listed length, then
//! hash; a threshold of the delegator's keys for it; the version the index lists and not
//! below the one seen before; not expired.

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use super::{Delegation, MAX_DELEGATIONS, Refusal, check_list};
use crate::metadata::{Role, Time};

/// What the index (snapshot) says of one delegated role's metadata file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The version it must have.
    pub version: u64,
    /// Its exact length in bytes.
    pub length: u64,
    /// Its blake3.
    pub blake3: [u8; 32],
}

/// A delegated role's metadata, once its signatures were checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleView {
    /// The role it names itself (must be the role looked for).
    pub name: String,
    /// Its version.
    pub version: u64,
    /// When it stops being valid.
    pub expires: Time,
    /// The modules the role publishes.
    pub modules: BTreeSet<String>,
    /// Its own delegations, in order.
    pub delegations: Vec<Delegation>,
}

/// Why one delegated role's metadata was refused, in the order the checks run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataRefusal {
    /// The index lists no metadata for the role.
    NotListed,
    /// The file could not be read (missing, or a link).
    Unreadable(String),
    /// Not the length the index lists (a truncated or over-long file).
    Length {
        /// The listed length.
        listed: u64,
        /// The length found (at most listed + 1 is read).
        found: u64,
    },
    /// Not the blake3 the index lists.
    Hash,
    /// Not signed by a threshold of the delegator's keys for the role, or not the role's
    /// metadata at all.
    Signatures(String),
    /// Names another role.
    OtherRole(String),
    /// Not the version the index lists.
    Version {
        /// The listed version.
        listed: u64,
        /// The file's.
        found: u64,
    },
    /// Older than a version seen before.
    RolledBack {
        /// The version seen before.
        seen: u64,
        /// The file's.
        found: u64,
    },
    /// Past its expiry.
    Expired(Time),
}

impl fmt::Display for MetadataRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetadataRefusal::NotListed => f.write_str("the index lists no metadata for it"),
            MetadataRefusal::Unreadable(e) => write!(f, "its metadata cannot be read: {e}"),
            MetadataRefusal::Length { listed, found } => write!(
                f,
                "its metadata is {} bytes where the index lists {listed}",
                match found > listed {
                    true => "more than that".to_string(),
                    false => found.to_string(),
                }
            ),
            MetadataRefusal::Hash => {
                f.write_str("its metadata is not the file the index lists (blake3 differs)")
            }
            MetadataRefusal::Signatures(e) => write!(
                f,
                "its metadata is not signed by its delegator's keys for it: {e}"
            ),
            MetadataRefusal::OtherRole(r) => write!(f, "its metadata names role {r:?}"),
            MetadataRefusal::Version { listed, found } => {
                write!(
                    f,
                    "its metadata is version {found} where the index lists {listed}"
                )
            }
            MetadataRefusal::RolledBack { seen, found } => write!(
                f,
                "its metadata is version {found}, older than version {seen} seen before (a rollback)"
            ),
            MetadataRefusal::Expired(t) => write!(f, "its metadata expired at {t}"),
        }
    }
}

/// Where the search reads delegated metadata from: the verified index, the registry's
/// files and the verifier's state.
pub trait Repository {
    /// What the verified index lists for role `name`'s metadata.
    fn listed(&self, name: &str) -> Option<Listed>;
    /// The file of role `name` at `listed.version`, at most `listed.length + 1` bytes.
    fn read(&self, name: &str, listed: &Listed) -> Result<Vec<u8>, String>;
    /// Checks that a threshold of `keys` signed `bytes` (the role's metadata) and parses it;
    /// the error says which signatures were missing or why it is not role metadata.
    fn open(&self, bytes: &[u8], keys: &Role) -> Result<RoleView, String>;
    /// The version of role `name` seen before, if any (rollback protection).
    fn seen(&self, name: &str) -> Option<u64>;
    /// The verifier's clock.
    fn now(&self) -> Time;
}

/// The role that owns a module: the delegations that lead to it, outermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Role names from the team down to the owner.
    pub chain: Vec<String>,
    /// The owner's delegation: its builder and reviewer keys sign for the module.
    pub delegation: Delegation,
    /// The owner's metadata.
    pub view: RoleView,
}

/// Loads and checks role `d`'s metadata, delegated by `delegator`, in python-tuf's order.
pub fn load(repo: &dyn Repository, d: &Delegation, delegator: &str) -> Result<RoleView, Refusal> {
    let refuse = |refusal| Refusal::Metadata {
        role: d.name.clone(),
        delegator: delegator.to_string(),
        refusal,
    };
    let listed = repo
        .listed(&d.name)
        .ok_or_else(|| refuse(MetadataRefusal::NotListed))?;
    let bytes = repo
        .read(&d.name, &listed)
        .map_err(|e| refuse(MetadataRefusal::Unreadable(e)))?;
    if bytes.len() as u64 != listed.length {
        return Err(refuse(MetadataRefusal::Length {
            listed: listed.length,
            found: bytes.len() as u64,
        }));
    }
    if *blake3::hash(&bytes).as_bytes() != listed.blake3 {
        return Err(refuse(MetadataRefusal::Hash));
    }
    let view = repo
        .open(&bytes, &d.publisher)
        .map_err(|e| refuse(MetadataRefusal::Signatures(e)))?;
    if view.name != d.name {
        return Err(refuse(MetadataRefusal::OtherRole(
            view.name.escape_debug().to_string(),
        )));
    }
    if view.version != listed.version {
        return Err(refuse(MetadataRefusal::Version {
            listed: listed.version,
            found: view.version,
        }));
    }
    if let Some(seen) = repo.seen(&d.name).filter(|s| *s > view.version) {
        return Err(refuse(MetadataRefusal::RolledBack {
            seen,
            found: view.version,
        }));
    }
    if repo.now() >= view.expires {
        return Err(refuse(MetadataRefusal::Expired(view.expires)));
    }
    Ok(view)
}

/// One role still to visit: its delegation, who delegated it, the chain to it, its depth.
struct Visit {
    delegation: Delegation,
    delegator: String,
    chain: Vec<String>,
    depth: usize,
}

/// The children of a role to visit for `module`, in search order (first to visit last, for
/// a stack), and whether a terminating match ends the search after them.
fn children(
    list: &[Delegation],
    module: &str,
    parent: &str,
    chain: &[String],
    depth: usize,
) -> (Vec<Visit>, bool) {
    let mut out = Vec::new();
    let mut terminated = false;
    for d in list.iter().filter(|d| d.matches(module)) {
        let mut c = chain.to_vec();
        c.push(d.name.clone());
        out.push(Visit {
            delegation: d.clone(),
            delegator: parent.to_string(),
            chain: c,
            depth,
        });
        if d.terminating {
            terminated = true;
            break;
        }
    }
    out.reverse();
    (out, terminated)
}

/// The role that owns `module` under the top-level delegations `top` (made by the root's
/// delegations role, named `delegator`), or None when no delegated role lists it.
pub fn walk(
    module: &str,
    top: &[Delegation],
    delegator: &str,
    repo: &dyn Repository,
) -> Result<Option<Owner>, Refusal> {
    check_list(delegator, 1, None, top)?;
    let (mut stack, _) = children(top, module, delegator, &[], 1);
    let mut visited: HashSet<(String, String)> = HashSet::new();
    let mut count = 0;
    while let Some(v) = stack.pop() {
        if !visited.insert((v.delegation.name.clone(), v.delegator.clone())) {
            continue;
        }
        if count == MAX_DELEGATIONS {
            return Err(Refusal::TooManyDelegations {
                module: module.to_string(),
            });
        }
        count += 1;
        let view = load(repo, &v.delegation, &v.delegator)?;
        if view.modules.contains(module) {
            return Ok(Some(Owner {
                chain: v.chain,
                delegation: v.delegation,
                view,
            }));
        }
        if view.delegations.is_empty() {
            continue;
        }
        // The same rules as when it was signed: no overlap without an order, nothing
        // outside this role's own patterns, one level of nesting.
        check_list(
            &v.delegation.name,
            v.depth + 1,
            Some(&v.delegation.paths),
            &view.delegations,
        )?;
        let (next, terminated) = children(
            &view.delegations,
            module,
            &v.delegation.name,
            &v.chain,
            v.depth + 1,
        );
        if terminated {
            stack.clear();
        }
        stack.extend(next);
    }
    Ok(None)
}
