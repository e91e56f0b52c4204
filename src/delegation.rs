//! Delegated publishing (issue 46): module-name patterns a delegator (the root's
//! delegations role, or a team one level down) hands to a team's own keys, and the rules a
//! delegation list must meet before anyone signs it. The search for the team that owns a
//! module, in python-tuf's order, is [`walk`].
//!
//! A pattern is a glob over module names: `*` stands for any run of characters and `?` for
//! one, neither crossing a `/` (module names hold none, so a pattern with one matches
//! nothing), and matching is case-sensitive (module names are lower case, so a pattern with
//! an upper-case letter matches nothing). A list is refused, naming the pattern, when:
//!
//! - a pattern can match no module name at all;
//! - two patterns of the list can both match one name and the earlier delegation does not
//!   decide it (it is not `terminating`), so two teams could claim that name;
//! - a nested pattern cannot match any name its delegator's patterns match;
//! - a role name is empty, reserved or used twice, a role lists a key twice, a threshold is
//!   0 or above its keys, or a builder key is also a reviewer key.
//!
//! Role names may hold any character (TUF's do); [`role_file`] turns one into a file name
//! that is always one plain path component.

pub mod team;
pub mod walk;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::metadata::Role;

pub use team::{RegistryTeams, TeamMetadata};
pub use walk::{Listed, Owner, RoleView, walk};

/// The most roles one search visits (python-tuf's `max_delegations`).
pub const MAX_DELEGATIONS: usize = 32;

/// Delegation depth: the root's delegations role delegates to teams (depth 1), a team to
/// its sub-teams (depth 2), and no further.
pub const MAX_DEPTH: usize = 2;

/// The longest role name, in bytes.
pub const MAX_ROLE_NAME: usize = 64;

/// Names a delegated role may not take: the trust root's own roles and the delegations
/// role.
pub const RESERVED_ROLES: [&str; 6] = [
    "root",
    "builder",
    "reviewer",
    "publisher",
    "delegations",
    "timestamp",
];

/// The longest module name (see `name::ModuleName`).
const MAX_MODULE_NAME: usize = 64;

/// One team's delegation: the names it owns, whether it decides them, and its keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delegation {
    /// The role's name (any characters; see [`role_file`]).
    pub name: String,
    /// Module-name patterns (see the module docs).
    pub paths: Vec<String>,
    /// When this role matches a name, no later sibling and nothing after it is searched.
    #[serde(default)]
    pub terminating: bool,
    /// Signs the team's metadata: its modules and its own delegations.
    pub publisher: Role,
    /// Signs the team's build statements.
    pub builder: Role,
    /// Signs the team's promotion records.
    pub reviewer: Role,
}

impl Delegation {
    /// Whether one of its patterns matches `name`.
    pub fn matches(&self, name: &str) -> bool {
        self.paths
            .iter()
            .any(|p| glob_match(p.as_bytes(), name.as_bytes()))
    }
}

/// Why a delegation list, or a search through delegations, is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A pattern no module name can match.
    MatchesNothing {
        /// The role.
        role: String,
        /// The pattern.
        pattern: String,
        /// Why.
        reason: &'static str,
    },
    /// Two sibling patterns that both match `example` with no order deciding it.
    Overlap {
        /// The earlier role and its pattern.
        first: (String, String),
        /// The later role and its pattern.
        second: (String, String),
        /// A module name both match.
        example: String,
    },
    /// A nested pattern outside everything its delegator's patterns match.
    OutsideDelegator {
        /// The delegating role.
        delegator: String,
        /// The nested role.
        role: String,
        /// The pattern.
        pattern: String,
    },
    /// A role name that is empty, too long, reserved or used twice in one list.
    BadRoleName {
        /// The name (escaped).
        role: String,
        /// Why.
        reason: &'static str,
    },
    /// A role whose keys or thresholds cannot work.
    BadKeys {
        /// The role.
        role: String,
        /// Why.
        reason: String,
    },
    /// A role nested deeper than [`MAX_DEPTH`].
    TooDeep {
        /// The role that delegates again.
        role: String,
    },
    /// The search visited [`MAX_DELEGATIONS`] roles without an answer.
    TooManyDelegations {
        /// The module looked for.
        module: String,
    },
    /// A delegated role's metadata was refused (see [`walk::MetadataRefusal`]).
    Metadata {
        /// The role.
        role: String,
        /// The role that delegated it.
        delegator: String,
        /// Why.
        refusal: walk::MetadataRefusal,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::MatchesNothing {
                role,
                pattern,
                reason,
            } => write!(
                f,
                "delegation {role:?}: pattern {pattern:?} matches no module name ({reason})"
            ),
            Refusal::Overlap {
                first,
                second,
                example,
            } => write!(
                f,
                "delegations {:?} (pattern {:?}) and {:?} (pattern {:?}) both match module names such as {example:?}, and {:?} is not terminating, so no order decides which team owns them",
                first.0, first.1, second.0, second.1, first.0
            ),
            Refusal::OutsideDelegator {
                delegator,
                role,
                pattern,
            } => write!(
                f,
                "delegation {role:?}: pattern {pattern:?} matches no name that its delegator {delegator:?} owns"
            ),
            Refusal::BadRoleName { role, reason } => {
                write!(f, "delegated role name {role:?}: {reason}")
            }
            Refusal::BadKeys { role, reason } => write!(f, "delegation {role:?}: {reason}"),
            Refusal::TooDeep { role } => write!(
                f,
                "delegated role {role:?} delegates again: delegations nest one level below the teams"
            ),
            Refusal::TooManyDelegations { module } => write!(
                f,
                "looking for the owner of {module:?} visited {MAX_DELEGATIONS} delegated roles without an answer"
            ),
            Refusal::Metadata {
                role,
                delegator,
                refusal,
            } => write!(
                f,
                "delegated role {role:?} (delegated by {delegator:?}): {refusal}"
            ),
        }
    }
}

impl std::error::Error for Refusal {}

/// Checks a delegation list before it is signed, and again when a verifier reads it: the
/// delegations of `delegator` (at
/// `depth`: 1 for the root's delegations role, 2 for a team's), whose own patterns are
/// `within` (None for the root's delegations role, which owns every name).
pub fn check_list(
    delegator: &str,
    depth: usize,
    within: Option<&[String]>,
    list: &[Delegation],
) -> Result<(), Refusal> {
    if depth > MAX_DEPTH && !list.is_empty() {
        return Err(Refusal::TooDeep {
            role: delegator.to_string(),
        });
    }
    let mut names = BTreeSet::new();
    for d in list {
        check_role_name(&d.name)?;
        if d.name == delegator {
            return Err(Refusal::BadRoleName {
                role: d.name.escape_debug().to_string(),
                reason: "delegates to itself (a cycle)",
            });
        }
        if !names.insert(d.name.as_str()) {
            return Err(Refusal::BadRoleName {
                role: d.name.escape_debug().to_string(),
                reason: "is delegated twice in one list",
            });
        }
        check_keys(d)?;
        if d.paths.is_empty() {
            return Err(Refusal::MatchesNothing {
                role: d.name.clone(),
                pattern: String::new(),
                reason: "the delegation lists no pattern",
            });
        }
        for p in &d.paths {
            if let Some(reason) = matches_nothing(p) {
                return Err(Refusal::MatchesNothing {
                    role: d.name.clone(),
                    pattern: p.clone(),
                    reason,
                });
            }
            if let Some(parent) = within
                && !parent.iter().any(|q| common_name(q, p).is_some())
            {
                return Err(Refusal::OutsideDelegator {
                    delegator: delegator.to_string(),
                    role: d.name.clone(),
                    pattern: p.clone(),
                });
            }
        }
    }
    for (i, a) in list.iter().enumerate() {
        if a.terminating {
            continue;
        }
        for b in &list[i + 1..] {
            for p in &a.paths {
                for q in &b.paths {
                    if let Some(example) = common_name(p, q) {
                        return Err(Refusal::Overlap {
                            first: (a.name.clone(), p.clone()),
                            second: (b.name.clone(), q.clone()),
                            example,
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

/// A role name: 1 to [`MAX_ROLE_NAME`] bytes, none of [`RESERVED_ROLES`], no control
/// characters. Anything else is allowed: [`role_file`] makes it a safe file name.
pub fn check_role_name(name: &str) -> Result<(), Refusal> {
    let bad = |reason| {
        Err(Refusal::BadRoleName {
            role: name.escape_debug().to_string(),
            reason,
        })
    };
    if name.is_empty() || name.len() > MAX_ROLE_NAME {
        return bad("must be 1 to 64 bytes");
    }
    if name.chars().any(char::is_control) {
        return bad("holds a control character");
    }
    if RESERVED_ROLES.contains(&name) {
        return bad("is the name of a role of the trust root");
    }
    Ok(())
}

/// The file name of version `version` of role `name`'s metadata: `<version>.<name>.json`
/// with every byte of the name outside `[A-Za-z0-9_-]` percent-encoded, so that `..`, `/x`,
/// `?`, `#` or `%` can neither leave the folder nor collide with another name.
pub fn role_file(name: &str, version: u64) -> String {
    let mut out = format!("{version}.");
    for b in name.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out.push_str(".json");
    out
}

/// The trust root's own rules for each of the team's roles (no key twice, thresholds within
/// the keys) and for builders and reviewers (no shared key).
fn check_keys(d: &Delegation) -> Result<(), Refusal> {
    let bad = |reason: String| Refusal::BadKeys {
        role: d.name.clone(),
        reason,
    };
    for (what, role) in [
        ("publisher", &d.publisher),
        ("builder", &d.builder),
        ("reviewer", &d.reviewer),
    ] {
        crate::trust::check_role(role, what).map_err(bad)?;
    }
    crate::trust::check_builders_apart(&d.builder, &d.reviewer).map_err(bad)
}

/// Whether glob `pattern` matches `text`: `*` any run and `?` one byte, neither a `/`;
/// case-sensitive.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    // The classic two-pointer glob match, with `*` stopped at a separator.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if (c == b'?' && text[t] != b'/') || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                // The star takes one more byte, unless that byte is a separator.
                Some((sp, st)) if text[st] != b'/' => {
                    star = Some((sp, st + 1));
                    p = sp + 1;
                    t = st + 1;
                }
                _ => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Why `pattern` can match no module name, if it cannot.
fn matches_nothing(pattern: &str) -> Option<&'static str> {
    if pattern.is_empty() {
        return Some("it is empty");
    }
    if pattern.contains('/') {
        return Some("module names hold no '/', and a wildcard never crosses one");
    }
    if pattern.bytes().any(|b| b.is_ascii_uppercase()) {
        return Some("matching is case-sensitive and module names are lower case");
    }
    if common_name(pattern, "*").is_none() {
        return Some(
            "module names are 1 to 64 characters of a-z, 0-9 and _, starting with a letter",
        );
    }
    None
}

/// The shortest module name both globs match, if there is one of at most 64 characters: a
/// breadth-first search over pairs of positions, each step one character both accept.
pub fn common_name(a: &str, b: &str) -> Option<String> {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    // A state: positions in a and b, and whether a character was taken yet.
    type State = (usize, usize, bool);
    let start: State = (0, 0, false);
    let mut parent: HashMap<State, Option<(State, u8)>> = HashMap::new();
    let mut queue = VecDeque::new();
    // Stars may match nothing: a state stands for every state its stars can skip to.
    let skip = |s: State| -> Vec<State> {
        let mut out = vec![s];
        let mut i = 0;
        while i < out.len() {
            let (x, y, t) = out[i];
            if a.get(x) == Some(&b'*') && !out.contains(&(x + 1, y, t)) {
                out.push((x + 1, y, t));
            }
            if b.get(y) == Some(&b'*') && !out.contains(&(x, y + 1, t)) {
                out.push((x, y + 1, t));
            }
            i += 1;
        }
        out
    };
    for s in skip(start) {
        parent.entry(s).or_insert(None);
        queue.push_back((s, 0usize));
    }
    while let Some((s @ (x, y, taken), len)) = queue.pop_front() {
        if taken && x == a.len() && y == b.len() {
            let mut name = Vec::new();
            let mut at = s;
            while let Some(Some((prev, c))) = parent.get(&at) {
                name.push(*c);
                at = *prev;
            }
            name.reverse();
            return String::from_utf8(name).ok();
        }
        if len == MAX_MODULE_NAME {
            continue;
        }
        let (Some(&pa), Some(&pb)) = (a.get(x), b.get(y)) else {
            continue;
        };
        let allowed = |c: u8| match taken {
            false => c.is_ascii_lowercase(),
            true => c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_',
        };
        let wants = |p: u8| (p != b'*' && p != b'?').then_some(p);
        let c = match (wants(pa), wants(pb)) {
            (Some(c), Some(d)) if c != d => continue,
            (Some(c), _) | (None, Some(c)) => c,
            (None, None) => b'a',
        };
        if !allowed(c) {
            continue;
        }
        let next = (
            if pa == b'*' { x } else { x + 1 },
            if pb == b'*' { y } else { y + 1 },
            true,
        );
        for n in skip(next) {
            if let std::collections::hash_map::Entry::Vacant(e) = parent.entry(n) {
                e.insert(Some((s, c)));
                queue.push_back((n, len + 1));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
