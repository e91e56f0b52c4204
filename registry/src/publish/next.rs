//! What the next index is: its version (above the current one, or the first free one
//! after a publisher-key rotation) and its entries, statements and promotion records,
//! derived from the current index and the release.

use std::collections::BTreeSet;

use cuda_aot::Digest;
use cuda_aot::metadata::{DocRef, IndexEntry, Promotion};
use cuda_aot::source::layout;

use super::base::Base;
use super::build::SignedBuild;
use super::{PublishOptions, Store};
use crate::error::{Error, Result};

/// The versions a publish starts from and the index version it creates.
pub(super) struct Versions {
    /// The current timestamp version (the highest seen, for a registry with no release).
    pub(super) base_ts: u64,
    /// The current index version (the highest seen, for a registry with no release).
    pub(super) base_index: u64,
    /// [`super::Published::continued_after`].
    pub(super) continued_after: Option<u64>,
    /// The next index version.
    pub(super) version: u64,
}

/// Step 5 of [`super::publish`]: the versions the publish starts from (the current ones,
/// or the ones seen when the registry holds no release) and the next index version (the
/// first free one after a publisher-key rotation, or where the store keeps uncommitted
/// index files).
pub(super) fn next_versions(
    store: &dyn Store,
    base: &Base,
    opts: &PublishOptions,
) -> Result<Versions> {
    let (base_ts, base_index) = match (&base.timestamp, &base.index) {
        (Some((ts, _)), Some(idx)) => (ts.version, idx.version),
        _ => (opts.seen.timestamp, opts.seen.index),
    };
    let continued_after =
        (base.timestamp.is_none() && !base.recovered && base_index > 0).then_some(base_index);
    let version = match base.recovered {
        false if store.keeps_uncommitted_indexes() => {
            free_index_from(store, next_version("index", base_index)?)?
        }
        false => next_version("index", base_index)?,
        true => first_free_index(store)?,
    };
    Ok(Versions {
        base_ts,
        base_index,
        continued_after,
        version,
    })
}

pub(super) fn next_version(what: &str, v: u64) -> Result<u64> {
    v.checked_add(1).ok_or_else(|| {
        Error::Core(cuda_aot::Error::VersionOverflow {
            what: what.into(),
            version: v,
        })
    })
}

/// After a publisher-key rotation: the lowest index version with no file yet (the files of
/// the old line, an attacker's included, stay untouched and unreferenced).
pub(super) fn first_free_index(store: &dyn Store) -> Result<u64> {
    free_index_from(store, 1)
}

/// The lowest index version from `v` on with no file yet.
pub(super) fn free_index_from(store: &dyn Store, mut v: u64) -> Result<u64> {
    while store.source().read_at_most(&layout::index(v), 0)?.is_some() {
        v = next_version("index", v)?;
    }
    Ok(v)
}

pub(super) type Entries = (Vec<IndexEntry>, Vec<DocRef>, Vec<DocRef>, usize);

/// The next index's entries, statements and promotions, and how many current entries it
/// drops.
pub(super) fn next_entries(
    base: &Base,
    build: &SignedBuild,
    statement: DocRef,
    promotions: &[(&[u8], Promotion)],
    version: u64,
    keep: &dyn Fn(&IndexEntry) -> bool,
) -> Entries {
    let old: &[IndexEntry] = base.index.as_ref().map_or(&[], |i| &i.entries);
    let since = |d: &Digest| {
        old.iter()
            .find(|o| o.manifest == *d)
            .map_or(version, |o| o.since)
    };
    let mut entries: Vec<IndexEntry> = build
        .modules
        .iter()
        .map(|m| {
            let d = Digest::of(&m.manifest_file);
            let id = &m.manifest.identity;
            IndexEntry {
                module: id.module.clone(),
                sm: id.sm,
                kind: id.kind,
                manifest: d,
                manifest_size: m.manifest_file.len() as u64,
                identity: id.digest(),
                statement: statement.digest,
                since: since(&d),
            }
        })
        .collect();
    let new_keys: BTreeSet<_> = entries
        .iter()
        .map(|e| (e.module.clone(), e.sm, e.kind))
        .collect();
    let mut removed = 0;
    for o in old {
        if new_keys.contains(&(o.module.clone(), o.sm, o.kind)) {
            continue;
        }
        match keep(o) {
            true => entries.push(o.clone()),
            false => removed += 1,
        }
    }
    entries.sort_by(|a, b| (&a.module, a.sm, a.kind).cmp(&(&b.module, b.sm, b.kind)));
    // Statements: this build's, plus the kept entries' own.
    let old_index = base.index.as_ref();
    let mut statements = vec![statement];
    for r in old_index.map_or(&[][..], |i| &i.statements) {
        if entries.iter().any(|e| e.statement == r.digest) && !statements.contains(r) {
            statements.push(*r);
        }
    }
    statements.sort();
    // Promotions: this release's, plus the current ones that name a listed manifest of
    // their module (an unchanged promoted module stays promoted in the next release; a
    // record that names it at another schedule version is carried too and covers nothing,
    // exactly as the verifier reads it: `Promotion::covers`).
    let mut refs: Vec<DocRef> = promotions
        .iter()
        .map(|(file, _)| DocRef {
            digest: Digest::of(file),
            size: file.len() as u64,
        })
        .collect();
    for (r, p) in &base.promotions {
        let names_listed = entries
            .iter()
            .any(|e| e.module == p.module && p.manifests.contains(&e.manifest));
        if names_listed && !refs.contains(r) {
            refs.push(*r);
        }
    }
    refs.sort();
    (entries, statements, refs, removed)
}
