//! Delegated publishing (issue 46), the publisher's side: the delegations a publish puts in
//! force (a new file the delegations role signed, or the current one), the team a release
//! is published for and its delegation, the team metadata the publish signs with the
//! team's own publisher keys, and which current entries a team's release leaves alone.
//! The verifier's search decides what clients accept; the publisher runs it on the next
//! index before committing (see `super::publish_as`).

use std::collections::{BTreeMap, BTreeSet};

use cuda_aot::delegation::{Delegation, TeamMetadata, check_list};
use cuda_aot::metadata::{IndexEntry, TeamRef, Time};
use cuda_aot::source::{layout, read_exact_signed};
use cuda_aot::trust::{VerifiedRoot, decode_unverified};
use cuda_aot::verify::DELEGATIONS;
use cuda_aot::{Digest, Limits, SecretKey};

use super::Store;
use super::base::Base;
use crate::error::{Error, Result};

/// The team a release is published for, with its publisher keys (they sign its metadata).
pub struct TeamPublish<'k> {
    /// The delegated role's name, as the delegations list it.
    pub name: String,
    /// Its publisher keys: a threshold of the keys its delegation lists.
    pub keys: Vec<&'k SecretKey>,
    /// The team's own delegations (one level below it, within its patterns) to sign into
    /// its metadata; None keeps the current ones.
    pub delegations: Option<Vec<Delegation>>,
}

/// What a publish changes in the registry's delegations.
#[derive(Default)]
pub struct Delegated<'k> {
    /// A delegations file the root's delegations role signed (`cargo xtask delegations
    /// sign`), put in force by this publish: the first delegations, or a team's rotated or
    /// revoked keys.
    pub delegations: Option<Vec<u8>>,
    /// The team the release is for; None for a release the trust root's builders signed.
    pub team: Option<TeamPublish<'k>>,
}

/// The delegated metadata a publish starts from and the files it adds.
pub(super) struct Teams {
    /// The current file of every role the index lists, as verified with it.
    current: BTreeMap<String, (TeamRef, TeamMetadata)>,
    /// Files this publish writes (content-addressed), with their references.
    pub(super) new_files: Vec<(TeamRef, Vec<u8>)>,
    /// The publishing team's delegation.
    pub(super) team: Option<Delegation>,
    /// The current files, by role (to tell whether the keys in force still sign one).
    files: BTreeMap<String, Vec<u8>>,
    /// The registry's trust root (it counts a delegated role's signatures).
    root: VerifiedRoot,
    /// The byte cap of one role's metadata.
    limit: u64,
}

fn team_error(team: &str, reason: String, fix: impl Into<String>) -> Error {
    Error::Team {
        team: team.escape_debug().to_string(),
        reason,
        fix: fix.into(),
    }
}

impl Teams {
    /// Reads the delegated metadata `base`'s index lists and applies `delegated`: a new
    /// delegations file is checked against the root's delegations role and its rules; the
    /// team's delegation is found, its keys checked, and its next metadata (listing
    /// `modules`, plus its current ones with `keep_unlisted`) signed. None when the registry
    /// delegates nothing and this publish changes nothing about it.
    pub(super) fn prepare(
        store: &dyn Store,
        base: &Base,
        delegated: &Delegated<'_>,
        modules: &BTreeSet<String>,
        opts: &super::PublishOptions,
    ) -> Result<Option<Teams>> {
        let (now, limits) = (opts.now, &opts.limits);
        let (expires, keep_unlisted) = (now.plus(opts.index_ttl), opts.keep_unlisted);
        let listed = base.index.as_ref().map_or(&[][..], |i| &i.teams[..]);
        if listed.is_empty() && delegated.delegations.is_none() && delegated.team.is_none() {
            return Ok(None);
        }
        let mut teams = Teams::read(store, base, delegated.delegations.as_deref(), now, limits)?;
        if let Some(t) = &delegated.team {
            teams.sign_team(t, modules, expires, keep_unlisted)?;
        }
        Ok(Some(teams))
    }

    /// The delegated metadata `base`'s index lists, with `delegations` (a new delegations
    /// file, checked) in force instead of the current one.
    fn read(
        store: &dyn Store,
        base: &Base,
        delegations: Option<&[u8]>,
        now: Time,
        limits: &Limits,
    ) -> Result<Teams> {
        let listed = base.index.as_ref().map_or(&[][..], |i| &i.teams[..]);
        let mut current = BTreeMap::new();
        let mut files = BTreeMap::new();
        for r in listed {
            let what = format!("metadata of delegated role {:?}", r.name);
            let bytes = read_exact_signed(
                store.source(),
                &layout::team(&r.digest),
                r.size,
                &r.digest,
                &what,
            )?;
            // Verified with the current index (the base): read back, not trusted anew.
            let doc = decode_unverified::<TeamMetadata>(&bytes, limits.index, &what)?;
            current.insert(r.name.clone(), (r.clone(), doc));
            files.insert(r.name.clone(), bytes);
        }
        let mut teams = Teams {
            current,
            new_files: Vec::new(),
            team: None,
            files,
            root: base.root.clone(),
            limit: limits.index,
        };
        if let Some(file) = delegations {
            let (r, doc) = check_delegations(
                &base.root,
                file,
                teams.current.get(DELEGATIONS),
                now,
                limits,
            )?;
            teams.new_files.push((r.clone(), file.to_vec()));
            teams.current.insert(DELEGATIONS.into(), (r, doc));
        }
        Ok(teams)
    }

    /// Signs team `t`'s next metadata (listing `modules`, plus its current ones with
    /// `keep_unlisted`) with its publisher keys, unless its current metadata already says
    /// exactly that until `expires`.
    fn sign_team(
        &mut self,
        t: &TeamPublish<'_>,
        modules: &BTreeSet<String>,
        expires: Time,
        keep_unlisted: bool,
    ) -> Result<()> {
        let (d, depth) = self.find(&t.name)?;
        check_team_keys(&d, &t.keys)?;
        let mut names = modules.clone();
        let old = self.current.get(&d.name).map(|(_, doc)| doc.clone());
        if keep_unlisted && let Some(o) = &old {
            names.extend(o.modules.iter().map(|m| m.to_string()));
        }
        if let Some(m) = names.iter().find(|m| !d.matches(m)) {
            return Err(team_error(
                &d.name,
                format!(
                    "module {m} is outside the names delegated to it (patterns {:?})",
                    d.paths
                ),
                "publish the module under the team whose delegation names it, or have the delegations role add a pattern for it (cargo xtask delegations sign)",
            ));
        }
        let delegations = match &t.delegations {
            Some(list) => list.clone(),
            None => old.as_ref().map_or(Vec::new(), |o| o.delegations.clone()),
        };
        self.check_sub_delegations(&d, depth, &delegations)?;
        let modules: Vec<cuda_aot::ModuleName> = names
            .iter()
            .map(|m| cuda_aot::ModuleName::new(m))
            .collect::<cuda_aot::Result<_>>()?;
        // Kept only while it says the same and the keys in force still sign it (a
        // rotation re-signs it with the new keys).
        let signed_now = self.files.get(&d.name).is_some_and(|f| {
            self.root
                .open_delegated::<TeamMetadata>(f, &d.publisher, self.limit, "team metadata")
                .is_ok()
        });
        let unchanged = signed_now
            && old.as_ref().is_some_and(|o| {
                o.modules == modules && o.delegations == delegations && o.expires >= expires
            });
        if !unchanged {
            let version = old.as_ref().map_or(1, |o| o.version.saturating_add(1));
            let doc = TeamMetadata {
                schema: TeamMetadata::SCHEMA.into(),
                name: d.name.clone(),
                version,
                expires,
                modules,
                delegations,
            };
            let bytes = cuda_aot::metadata::sign_doc(&doc, &t.keys).to_bytes();
            let r = TeamRef {
                name: d.name.clone(),
                version,
                digest: Digest::of(&bytes),
                size: bytes.len() as u64,
            };
            self.new_files.push((r.clone(), bytes));
            self.current.insert(d.name.clone(), (r, doc));
        }
        self.team = Some(d);
        Ok(())
    }

    /// A team's own delegations meet the rules of a list one level below it (within its
    /// patterns, no overlap without an order, no deeper nesting), and name no role the
    /// delegations role delegates to.
    fn check_sub_delegations(
        &self,
        d: &Delegation,
        depth: usize,
        delegations: &[Delegation],
    ) -> Result<()> {
        check_list(&d.name, depth + 1, Some(&d.paths), delegations).map_err(|r| {
            team_error(
                &d.name,
                r.to_string(),
                "fix the team's delegations (--team-delegations): each pattern must match names the team owns, two may claim one name only when the earlier is terminating, and a team delegates to other roles, one level down",
            )
        })?;
        // A role the delegations role delegates to is not delegated again below a team
        // (a diamond through the delegations, one file read under two delegators).
        let top = self.current.get(DELEGATIONS).map(|(_, t)| &t.delegations);
        if let Some(sub) = delegations
            .iter()
            .find(|s| top.is_some_and(|t| t.iter().any(|d| d.name == s.name)))
        {
            return Err(team_error(
                &d.name,
                format!(
                    "it delegates to {:?}, which the delegations role delegates to itself: one role under two delegators (a cycle through the delegations)",
                    sub.name
                ),
                "name the sub-team's role differently from every team the delegations list",
            ));
        }
        Ok(())
    }

    /// The delegation of role `name` and its depth (1: the delegations role's, 2: a
    /// team's), as the delegations in force give it.
    fn find(&self, name: &str) -> Result<(Delegation, usize)> {
        let Some((_, top)) = self.current.get(DELEGATIONS) else {
            return Err(team_error(
                name,
                "the registry has no delegations in force".into(),
                "put delegations in force first: the delegations role signs them (cargo xtask delegations sign) and a publisher puts them in force (cargo xtask delegations publish FILE)",
            ));
        };
        if let Some(d) = top.delegations.iter().find(|d| d.name == name) {
            return Ok((d.clone(), 1));
        }
        for (_, (_, doc)) in self.current.iter().filter(|(n, _)| *n != DELEGATIONS) {
            if let Some(d) = doc.delegations.iter().find(|d| d.name == name) {
                return Ok((d.clone(), 2));
            }
        }
        Err(team_error(
            name,
            format!(
                "no delegation names it (the delegations v{} delegate to {:?})",
                top.version,
                top.delegations.iter().map(|d| &d.name).collect::<Vec<_>>()
            ),
            "name a team the delegations list (--team), or have the delegations role delegate to it (cargo xtask delegations sign)",
        ))
    }

    /// Whether a current entry stays in the next index although the release does not list
    /// it: it belongs to another owner than the one publishing (a team's release leaves the
    /// other teams' and the root's modules alone; a release of the root's builders leaves
    /// every team's).
    pub(super) fn keeps(&self, e: &IndexEntry) -> bool {
        let owner = self
            .current
            .iter()
            .filter(|(n, _)| *n != DELEGATIONS)
            .find(|(_, (_, doc))| doc.modules.contains(&e.module))
            .map(|(n, _)| n.as_str());
        owner != self.team.as_ref().map(|d| d.name.as_str())
    }

    /// The index's list of delegated metadata after this publish, by role name.
    pub(super) fn refs(&self) -> Vec<TeamRef> {
        self.current.values().map(|(r, _)| r.clone()).collect()
    }
}

/// A team's view of the registry's trust root (issue 46): its builder and reviewer keys as
/// the delegations in force (or `delegations`, a new file about to be published) give team
/// `name`, with that delegation. What a team's publisher checks its build statement (a
/// team's reviewer its promotion) against before publishing; a refusal under it is named
/// for the team by [`cuda_aot::delegation::team::refused_by_team`].
pub fn team_root(
    store: &dyn Store,
    anchor: &[u8],
    name: &str,
    delegations: Option<&[u8]>,
    limits: &Limits,
) -> Result<(VerifiedRoot, Delegation)> {
    let base = super::base::base(store, anchor, &[], limits)?;
    let teams = Teams::read(store, &base, delegations, Time::now(), limits)?;
    let (d, _) = teams.find(name)?;
    Ok((base.root.for_team(&d.builder, &d.reviewer), d))
}

/// Puts the delegations file `file` (signed by the trust root's delegations role) in force:
/// the next index lists it and otherwise what the current one lists, verified as a client
/// will before it is committed (a team whose metadata the new delegations no longer accept
/// is named: publish its release with them, `publish_as`).
pub fn publish_delegations(
    store: &dyn Store,
    anchor: &[u8],
    file: &[u8],
    publisher: &[&SecretKey],
    opts: &super::PublishOptions,
) -> Result<super::Published> {
    let base = super::read_base(store, anchor, publisher, opts)?;
    let teams = Teams::read(store, &base, Some(file), opts.now, &opts.limits)?;
    // A registry with no release yet starts with the delegations alone (a hub sets them
    // up before any team publishes).
    let current = base
        .index
        .clone()
        .unwrap_or_else(|| cuda_aot::metadata::Index {
            schema: cuda_aot::metadata::Index::SCHEMA.into(),
            version: 0,
            expires: opts.now,
            channel: base.root.root().channel,
            statements: Vec::new(),
            promotions: Vec::new(),
            entries: Vec::new(),
            teams: Vec::new(),
        });
    for (r, bytes) in &teams.new_files {
        store.put_content(&layout::team(&r.digest), bytes)?;
    }
    let v = super::next_versions(store, &base, opts)?;
    let index = cuda_aot::metadata::Index {
        version: v.version,
        expires: opts.now.plus(opts.index_ttl),
        teams: teams.refs(),
        ..current
    };
    let timestamp_version = super::commit_index(store, &base, &index, publisher, opts, &v, anchor)?;
    Ok(super::Published {
        index_version: v.version,
        timestamp_version,
        unchanged: false,
        blobs_written: 0,
        blobs_reused: 0,
        entries: index.entries.len(),
        removed: 0,
        recovered: base.recovered,
        continued_after: v.continued_after,
        retries: 0,
    })
}

/// A new delegations file: signed by a threshold of the root's delegations role, named
/// `delegations`, listing no module, its list meeting the rules (refusals name the
/// pattern), its version above the one in force.
fn check_delegations(
    root: &VerifiedRoot,
    file: &[u8],
    current: Option<&(TeamRef, TeamMetadata)>,
    now: Time,
    limits: &Limits,
) -> Result<(TeamRef, TeamMetadata)> {
    let fix_keys = "sign the delegations with keys of the trust root's delegations role (cargo xtask delegations sign --key FILE), or rotate the trust root to name one (cargo xtask trust-root --delegations KEY)";
    let Some(keys) = &root.root().delegations else {
        return Err(team_error(
            DELEGATIONS,
            format!(
                "trust root v{} names no delegations role",
                root.root().version
            ),
            fix_keys,
        ));
    };
    let doc = root
        .open_delegated::<TeamMetadata>(file, keys, limits.index, "delegations file")
        .map_err(|e| {
            let why =
                cuda_aot::delegation::team::describe(e, "of the trust root's delegations role");
            team_error(DELEGATIONS, format!("delegations file: {why}"), fix_keys)
        })?
        .doc;
    let fix = "sign the delegations again (cargo xtask delegations sign)";
    if doc.name != DELEGATIONS || !doc.modules.is_empty() {
        return Err(team_error(
            DELEGATIONS,
            format!(
                "the file is the metadata of role {:?} with {} module(s), not the delegations",
                doc.name.escape_debug().to_string(),
                doc.modules.len()
            ),
            fix,
        ));
    }
    check_list(DELEGATIONS, 1, None, &doc.delegations)
        .map_err(|r| team_error(DELEGATIONS, r.to_string(), fix))?;
    if doc.expires <= now {
        return Err(team_error(
            DELEGATIONS,
            format!("they expired at {}", doc.expires),
            fix,
        ));
    }
    if let Some((r, _)) = current.filter(|(r, _)| r.version >= doc.version) {
        return Err(team_error(
            DELEGATIONS,
            format!(
                "version {} is not above version {} in force",
                doc.version, r.version
            ),
            "sign the delegations with the next version (cargo xtask delegations sign --version N)",
        ));
    }
    let r = TeamRef {
        name: DELEGATIONS.into(),
        version: doc.version,
        digest: Digest::of(file),
        size: file.len() as u64,
    };
    Ok((r, doc))
}

/// The team's publisher keys: each listed by its delegation, a threshold of them.
fn check_team_keys(d: &Delegation, keys: &[&SecretKey]) -> Result<()> {
    let fix = "publish with the team's publisher keys as the delegations list them (--team-key FILE, repeat up to the threshold), or have the delegations role list the key (cargo xtask delegations sign)";
    if let Some(k) = keys
        .iter()
        .find(|k| !d.publisher.keys.contains(&k.public()))
    {
        return Err(team_error(
            &d.name,
            format!(
                "key {} is not one of its publisher keys ({})",
                k.public().key_id().short(),
                d.publisher
                    .keys
                    .iter()
                    .map(|k| k.key_id().short())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            fix,
        ));
    }
    let distinct: BTreeSet<_> = keys.iter().map(|k| k.public().key_id()).collect();
    if (distinct.len() as u64) < u64::from(d.publisher.threshold) {
        return Err(team_error(
            &d.name,
            format!(
                "{} of the {} publisher key(s) its metadata needs were given",
                distinct.len(),
                d.publisher.threshold
            ),
            fix,
        ));
    }
    Ok(())
}
