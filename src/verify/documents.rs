//! Steps 1-5 ([`verify_metadata`]): the trust root and its rotation chain, the timestamp,
//! the index, its build statements and promotion records; and the expiry, freeze-bound,
//! rollback and channel checks those documents pass.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::identity::Channel;
use crate::keys::KeyId;
use crate::limits::Limits;
use crate::metadata::{Index, Promotion, Time, Timestamp};
use crate::source::{RegistrySource, layout, read_exact_signed, read_required};
use crate::state::TrustState;
use crate::trust::{VerifiedRoot, verify_anchor};

use super::delegated::Owners;
use super::{Freshness, Options, VerifiedIndex, VerifiedPromotion, VerifiedStatement};
use crate::delegation::Delegation;

/// Steps 1-5: the trust root and its rotation chain, the timestamp, the index, its build
/// statements and promotion records. `opts.limits` is held by the result for every later
/// step. No manifest is read yet: the runtime picks the entries
/// for its device from the verified index and completes only those
/// ([`VerifiedIndex::complete`]).
pub fn verify_metadata(
    src: &dyn RegistrySource,
    anchor: &[u8],
    seen: TrustState,
    opts: &Options,
) -> Result<VerifiedIndex> {
    let limits = &opts.limits;
    let mut checks = 1;
    // 1. Trust root: the anchor must be self-consistent and signed by its own root keys.
    let anchor = verify_anchor(anchor, limits, "trust root")?;
    // 2. Rotation: walk root/<N+1>.root.json while present, each signed by old and new keys;
    //    never back to a root older than one seen; not expired; of the required channel.
    let walked = walk_root_chain(src, anchor, &seen, limits)?;
    checks += 2 * walked.rotations;
    let root = walked.root;
    check_not_rolled_back("trust root", seen.root, root.root().version)?;
    check_root_current(&root, opts)?;
    check_channel("trust root", root.root().channel, opts)?;
    // A rotation past the saved root that replaced the publisher keys discards the saved
    // timestamp and index versions (recovery from a stolen publisher key that inflated
    // them): the new keys start over.
    let seen_versions = match walked.publisher_rotated {
        true => TrustState {
            root: seen.root,
            ..TrustState::default()
        },
        false => seen.clone(),
    };
    // 3. Timestamp: publisher threshold, within the freeze bound, fresh (or within the
    //    offline grace), not older than the last seen.
    let (timestamp, freshness) = verify_timestamp(src, &root, &seen_versions, opts)?;
    checks += 1;
    // 4. Index: exactly the bytes the timestamp names, publisher threshold, same version,
    //    within the freeze bound, not expired, the root's channel, no duplicate entries.
    let index = verify_index_file(src, &root, &timestamp, &seen_versions, opts)?;
    checks += 1;
    // 5. Build statements and promotion records the index lists: builder (reviewer)
    //    threshold each, the index's channel.
    //    Under delegations (issue 46) a team's modules are signed by its own keys: the
    //    delegated metadata the index lists is checked first (python-tuf's order).
    let owners = Owners::resolve(src, &root, &index, &seen_versions, opts.now, limits)?;
    let statements = match opts.awaiting_rebuild {
        false => verify_statements(src, &root, owners.as_ref(), &index, limits)?,
        true => verify_statements(
            src,
            &root.awaiting_builders(),
            owners.as_ref(),
            &index,
            limits,
        )?,
    };
    let promotions = verify_promotions(src, &root, owners.as_ref(), &index, limits)?;
    checks += (statements.len() + promotions.len()) as u64;
    let teams = owners.as_ref().map(|o| o.versions()).unwrap_or_default();
    let delegated_expiry = owners.as_ref().and_then(|o| o.earliest_expiry());
    checks += teams.len() as u64;
    let mut state = seen_versions.max(TrustState {
        root: root.root().version,
        timestamp: timestamp.version,
        index: index.version,
        fresh_at: None,
        teams,
    });
    if freshness == Freshness::Fresh {
        state.fresh_at = Some(opts.now);
    }
    Ok(VerifiedIndex {
        root,
        timestamp,
        index,
        statements,
        promotions,
        manifests: Vec::new(),
        state,
        freshness,
        skew: opts.skew,
        signature_checks: checks,
        discarded: walked.publisher_rotated.then_some(seen),
        limits: *limits,
        delegated_expiry,
    })
}

/// Step 2's result: the newest root, how many rotations led there, and whether one past
/// the saved root replaced the publisher keys.
struct Walked {
    root: VerifiedRoot,
    rotations: u64,
    publisher_rotated: bool,
}

/// Step 2: the rotation chain from the anchor ([`crate::trust::walk_chain`]), noting whether
/// a rotation past the saved root replaced the publisher keys.
fn walk_root_chain(
    src: &dyn RegistrySource,
    trusted: VerifiedRoot,
    seen: &TrustState,
    limits: &Limits,
) -> Result<Walked> {
    let mut rotations = 0;
    let mut publisher_rotated = false;
    let root = crate::trust::walk_chain(src, trusted, limits, |old, new| {
        if new.root().version > seen.root && publisher_keys(new) != publisher_keys(old) {
            publisher_rotated = true;
        }
        rotations += 1;
    })?;
    Ok(Walked {
        root,
        rotations,
        publisher_rotated,
    })
}

fn publisher_keys(r: &VerifiedRoot) -> BTreeSet<KeyId> {
    r.root()
        .roles
        .publisher
        .keys
        .iter()
        .map(|k| k.key_id())
        .collect()
}

fn verify_timestamp(
    src: &dyn RegistrySource,
    root: &VerifiedRoot,
    seen: &TrustState,
    opts: &Options,
) -> Result<(Timestamp, Freshness)> {
    let what = layout::TIMESTAMP;
    let bytes = read_required(src, what, opts.limits.timestamp, "timestamp")?;
    let ts: Timestamp = root.open(&bytes, opts.limits.timestamp, what)?.doc;
    let label = format!("timestamp v{}", ts.version);
    check_freeze_bound(
        &label,
        ts.expires,
        root,
        root.root().max_expiry.timestamp_days,
        opts,
    )?;
    check_not_rolled_back("timestamp", seen.timestamp, ts.version)?;
    let freshness = match check_not_expired(&label, ts.expires, opts) {
        Ok(()) => Freshness::Fresh,
        Err(expired) => {
            let deadline = seen
                .fresh_at
                .filter(|_| !opts.offline_grace.is_zero())
                .map(|t| t.plus(opts.offline_grace));
            match deadline {
                Some(deadline) if opts.now <= deadline => Freshness::Grace {
                    expired: ts.expires,
                    deadline,
                },
                _ => return Err(expired),
            }
        }
    };
    Ok((ts, freshness))
}

fn verify_index_file(
    src: &dyn RegistrySource,
    root: &VerifiedRoot,
    ts: &Timestamp,
    seen: &TrustState,
    opts: &Options,
) -> Result<Index> {
    let path = layout::index(ts.index.version);
    if ts.index.size > opts.limits.index {
        return Err(Error::TooLarge {
            what: path,
            limit: opts.limits.index,
            actual: ts.index.size,
        });
    }
    let bytes = read_exact_signed(src, &path, ts.index.size, &ts.index.digest, &path)?;
    let index: Index = root.open(&bytes, opts.limits.index, &path)?.doc;
    if index.version != ts.index.version {
        return Err(Error::VersionMismatch {
            what: format!("{path} (named by timestamp v{})", ts.version),
            expected: ts.index.version,
            got: index.version,
        });
    }
    let label = format!("index v{}", index.version);
    check_freeze_bound(
        &label,
        index.expires,
        root,
        root.root().max_expiry.index_days,
        opts,
    )?;
    check_not_rolled_back("index", seen.index, index.version)?;
    check_not_expired(&label, index.expires, opts)?;
    check_channel(&path, index.channel, opts)?;
    if index.channel != root.root().channel {
        return Err(Error::Channel {
            what: path,
            required: root.root().channel.to_string(),
            found: index.channel.to_string(),
        });
    }
    let count = index.entries.len() + index.statements.len() + index.promotions.len();
    if count > opts.limits.index_entries {
        return Err(Error::TooLarge {
            what: format!("{path} entries"),
            limit: opts.limits.index_entries as u64,
            actual: count as u64,
        });
    }
    let mut keys = BTreeSet::new();
    for e in &index.entries {
        if !keys.insert((e.module.clone(), e.sm, e.kind)) {
            return Err(Error::DuplicateEntry {
                module: e.module.to_string(),
                target: e.sm.to_string(),
                kind: e.kind.to_string(),
            });
        }
    }
    Ok(index)
}

fn verify_statements(
    src: &dyn RegistrySource,
    root: &VerifiedRoot,
    owners: Option<&Owners>,
    index: &Index,
    limits: &Limits,
) -> Result<BTreeMap<Digest, VerifiedStatement>> {
    let mut out = BTreeMap::new();
    for r in &index.statements {
        let path = layout::statement(&r.digest);
        let what = format!("build statement {path}");
        if r.size > limits.statement {
            return Err(Error::TooLarge {
                what,
                limit: limits.statement,
                actual: r.size,
            });
        }
        let bytes = read_exact_signed(src, &path, r.size, &r.digest, &what)?;
        // Whose builder keys: the owner of the modules the index lists under it.
        let listed = index
            .entries
            .iter()
            .filter(|e| e.statement == r.digest)
            .map(|e| e.module.as_str());
        let owner = match owners {
            None => None,
            Some(o) => statement_owner(o, listed, &what)?,
        };
        let opened = crate::provenance::open_build_by(
            root,
            owner.as_ref().map(|d| &d.builder),
            &bytes,
            limits.statement,
            &what,
        )
        .map_err(|e| for_team(e, owner.as_ref(), &what))?;
        let a = opened.attestation;
        // Nothing it attests belongs to another owner.
        if let Some(o) = owners
            && let Some(d) =
                statement_owner(o, a.manifests.iter().map(|m| m.module.as_str()), &what)?
            && Some(&d.name) != owner.as_ref().map(|o| &o.name)
        {
            let signed_for = owner
                .as_ref()
                .map_or("the trust root's builders".to_string(), |o| {
                    format!("{:?}", o.name)
                });
            return Err(Error::Delegation {
                what,
                team: Some(d.name.clone()),
                reason: format!(
                    "it attests modules of delegated role {:?} but is signed for {signed_for}",
                    d.name
                ),
            });
        }
        if a.channel != index.channel {
            return Err(Error::Channel {
                what,
                required: index.channel.to_string(),
                found: a.channel.to_string(),
            });
        }
        out.insert(
            r.digest,
            VerifiedStatement {
                team: owner.as_ref().map(|d| d.name.clone()),
                attested: a.manifests.into_iter().map(|m| (m.manifest, m)).collect(),
                blobs: a.blobs,
                signers: opened.signers,
                statement: opened.statement,
            },
        );
    }
    Ok(out)
}

fn verify_promotions(
    src: &dyn RegistrySource,
    root: &VerifiedRoot,
    owners: Option<&Owners>,
    index: &Index,
    limits: &Limits,
) -> Result<Vec<VerifiedPromotion>> {
    let mut out = Vec::with_capacity(index.promotions.len());
    for r in &index.promotions {
        let path = layout::promotion(&r.digest);
        let what = format!("promotion record {path}");
        if r.size > limits.promotion {
            return Err(Error::TooLarge {
                what,
                limit: limits.promotion,
                actual: r.size,
            });
        }
        let bytes = read_exact_signed(src, &path, r.size, &r.digest, &what)?;
        // Whose reviewer keys: the owner of the module it names (read to choose the keys,
        // like a key id; the signatures are checked before anything of it is used).
        let owner = match owners {
            None => None,
            Some(o) => {
                let peek =
                    crate::trust::decode_unverified::<Promotion>(&bytes, limits.promotion, &what)?;
                o.owner(peek.module.as_str())?
            }
        };
        let opened = match &owner {
            None => root.open::<Promotion>(&bytes, limits.promotion, &what),
            Some(d) => {
                root.open_delegated::<Promotion>(&bytes, &d.reviewer, limits.promotion, &what)
            }
        }
        .map_err(|e| for_team(e, owner.as_ref(), &what))?;
        out.push(VerifiedPromotion {
            promotion: opened.doc,
            signers: opened.signers,
        });
    }
    Ok(out)
}

/// The one owner of `modules` (None: the trust root's builders), or the refusal of a
/// statement that spans two.
fn statement_owner<'m>(
    owners: &Owners,
    modules: impl Iterator<Item = &'m str>,
    what: &str,
) -> Result<Option<Delegation>> {
    let mut found: Option<(String, Option<Delegation>)> = None;
    for m in modules {
        let o = owners.owner(m)?;
        match &found {
            None => found = Some((m.to_string(), o)),
            Some((first, f)) if f.as_ref().map(|d| &d.name) != o.as_ref().map(|d| &d.name) => {
                let name = |d: &Option<Delegation>| {
                    d.as_ref().map_or("the trust root".to_string(), |d| {
                        format!("delegated role {:?}", d.name)
                    })
                };
                return Err(Error::Delegation {
                    what: what.to_string(),
                    team: None,
                    reason: format!(
                        "it covers {first} of {} and {m} of {}: each owner signs its own build statement",
                        name(f),
                        name(&o)
                    ),
                });
            }
            Some(_) => {}
        }
    }
    Ok(found.and_then(|(_, o)| o))
}

/// A signature refusal against the keys of `owner`, if a team owns what was checked.
fn for_team(e: Error, owner: Option<&Delegation>, what: &str) -> Error {
    match owner {
        Some(d) => crate::delegation::team::refused_by_team(e, d, what),
        None => e,
    }
}

fn check_not_rolled_back(what: &str, seen: u64, got: u64) -> Result<()> {
    if got < seen {
        Err(Error::Rollback {
            what: what.into(),
            seen,
            got,
        })
    } else {
        Ok(())
    }
}

/// Refuses a trust root that has expired at `opts.now` (with the skew allowance): the
/// verifier's own check of the root it walked to, and what other readers of signed
/// artifacts (the shared build cache) run before trusting the root's keys.
pub fn check_root_current(root: &VerifiedRoot, opts: &Options) -> Result<()> {
    check_not_expired(
        &format!("trust root v{}", root.root().version),
        root.root().expires,
        opts,
    )
}

fn check_not_expired(what: &str, expires: Time, opts: &Options) -> Result<()> {
    if opts.now > expires.plus(opts.skew) {
        return Err(Error::Expired {
            what: what.into(),
            expires: expires.to_string(),
            now: opts.now.to_string(),
            skew_secs: opts.skew.as_secs(),
        });
    }
    Ok(())
}

/// The freeze bound: a document may not expire further ahead of the verifier's clock than
/// the trust root allows (plus the skew allowance).
fn check_freeze_bound(
    what: &str,
    expires: Time,
    root: &VerifiedRoot,
    days: u32,
    opts: &Options,
) -> Result<()> {
    let latest = opts
        .now
        .plus(Duration::from_secs(u64::from(days) * 86_400))
        .plus(opts.skew);
    if expires > latest {
        return Err(Error::FreezeBound {
            what: what.into(),
            expires: expires.to_string(),
            root: root.root().version,
            bound_days: days,
            latest: latest.to_string(),
        });
    }
    Ok(())
}

fn check_channel(what: &str, found: Channel, opts: &Options) -> Result<()> {
    match opts.required_channel {
        Some(req) if req != found => Err(Error::Channel {
            what: what.into(),
            required: req.to_string(),
            found: found.to_string(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_checks_saturate_instead_of_overflowing() {
        let opts = Options {
            now: Time::from_unix(u64::MAX - 5),
            skew: Duration::from_secs(u64::MAX),
            ..Options::default()
        };
        check_not_expired("t", Time::from_unix(1), &opts).unwrap();
        let opts = Options {
            now: Time::from_unix(u64::MAX),
            ..Options::default()
        };
        let err = check_not_expired("t", Time::from_unix(1), &opts).unwrap_err();
        assert!(err.to_string().contains("after year 9999"), "{err}");
    }
}
