//! What a verified index answers (its root, timestamp, index, builds, freshness, how long
//! it stays loadable), and the steps that run on it: 6-8 for the entries a caller selects
//! ([`VerifiedIndex::complete`]), 9 for the sources its builds name, and the promotion gaps
//! a production verifier would refuse.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::error::{Error, Result, escape_untrusted};
use crate::identity::Channel;
use crate::keys::KeyId;
use crate::limits::Limits;
use crate::manifest::Manifest;
use crate::metadata::{DocRef, Index, IndexEntry, Promotion, Time, Timestamp};
use crate::source::{RegistrySource, layout, read_exact_signed, read_exact_signed_in_place};
use crate::state::TrustState;
use crate::trust::VerifiedRoot;

use super::{
    Failed, Freshness, Select, Verified, VerifiedBuild, VerifiedIndex, VerifiedManifest,
    VerifiedModule, VerifiedPromotion, VerifiedSource,
};

impl VerifiedIndex {
    /// The newest trusted root after walking the rotation chain.
    pub fn root(&self) -> &VerifiedRoot {
        &self.root
    }
    /// The verified timestamp.
    pub fn timestamp(&self) -> &Timestamp {
        &self.timestamp
    }
    /// The verified index.
    pub fn index(&self) -> &Index {
        &self.index
    }
    /// The promotion records the index lists, each opened against the root (reviewer
    /// threshold: step 5), with its reference in the index, in index order: a publisher
    /// keeping them reads none of them again.
    pub fn promotions(&self) -> impl Iterator<Item = (&DocRef, &Promotion)> {
        self.index
            .promotions
            .iter()
            .zip(self.promotions.iter().map(|p| &p.promotion))
    }
    /// The build statements the index lists, verified (builder threshold, channel), in the
    /// order of their file digests.
    pub fn builds(&self) -> Vec<VerifiedBuild<'_>> {
        self.statements
            .iter()
            .map(|(d, s)| VerifiedBuild {
                file: *d,
                signers: &s.signers,
                statement: s.statement.as_ref(),
            })
            .collect()
    }
    /// Step 9, for mirrors, OCI pushes and rebuilders (never a loader: a prover reads no
    /// sources): every source file and spec the verified build statements' provenance
    /// names, read from `src` with its recorded size (all of them together at most
    /// [`Limits::blob`]) and checked against its blake3, in statement and provenance order,
    /// each digest read once. A source the registry lacks or altered is an error naming it.
    pub fn sources(&self, src: &dyn RegistrySource) -> Result<Vec<VerifiedSource>> {
        let mut out: Vec<VerifiedSource> = Vec::new();
        let mut total = 0u64;
        for s in self.statements.values() {
            let Some(st) = &s.statement else { continue };
            for (dep, digest, size) in st.predicate.sources() {
                // Two names of the same bytes (two equal headers) are both laid out.
                if let Some(same) = out.iter().find(|v| v.digest == digest) {
                    let bytes = same.bytes.clone();
                    out.push(VerifiedSource {
                        name: dep.name.clone(),
                        digest,
                        bytes,
                    });
                    continue;
                }
                let what = format!(
                    "source {} ({})",
                    escape_untrusted(&dep.name),
                    digest.short()
                );
                total = total.saturating_add(size);
                if total > self.limits.blob {
                    return Err(Error::TooLarge {
                        what: "the sources the build statements name".into(),
                        limit: self.limits.blob,
                        actual: total,
                    });
                }
                let bytes = read_exact_signed(src, &layout::source(&digest), size, &digest, &what)?;
                out.push(VerifiedSource {
                    name: dep.name.clone(),
                    digest,
                    bytes,
                });
            }
        }
        Ok(out)
    }
    /// What a registry's auditors check beyond what a load needs (`cargo xtask verify`,
    /// the C ABI's `cuda_aot_verify`, `sync` before a mirror is visible): every subject of
    /// every in-toto build statement is the file it names, by size and blake3 and by the
    /// sha256 the statement gives tools that read only sha256 (cosign, the in-toto
    /// verifiers); and every rebuild source the statements name is in the registry, intact
    /// ([`VerifiedIndex::sources`]: size, blake3, no links). The first failure names the
    /// file, its statement and what is wrong. Provers read none of this.
    pub fn audit(&self, src: &dyn RegistrySource) -> Result<()> {
        self.audit_roots(src)?;
        for (digest, s) in &self.statements {
            let Some(st) = &s.statement else { continue };
            for subject in &st.subject {
                let Some(blake3) = subject.digest.blake3() else {
                    continue; // refused when the statement was verified
                };
                let is_manifest = subject.media_type == crate::provenance::MANIFEST_MEDIA_TYPE;
                let path = match is_manifest {
                    true => layout::manifest(&blake3),
                    false => layout::blob(&blake3),
                };
                let what = format!(
                    "subject {} of build statement {} ({path})",
                    escape_untrusted(&subject.name),
                    digest.short()
                );
                let size = subject.annotations.size;
                let limit = match is_manifest {
                    true => self.limits().manifest,
                    false => self.limits().blob,
                };
                if size > limit {
                    return Err(Error::TooLarge {
                        what,
                        limit,
                        actual: size,
                    });
                }
                let bytes = read_exact_signed(src, &path, size, &blake3, &what)?;
                if let Some(sha256) = subject.digest.sha256 {
                    let actual = crate::provenance::Hex32::sha256(&bytes);
                    if actual != sha256 {
                        return Err(Error::DigestMismatch {
                            what: format!("{what}: its sha256"),
                            expected: format!("sha256:{sha256}"),
                            actual: format!("sha256:{actual}"),
                        });
                    }
                }
            }
        }
        self.sources(src).map(|_| ())
    }

    /// The registry's own root chain, from `root/1.root.json` (self-signed) through every
    /// rotation it holds ([`crate::trust::walk_chain`]), must end at the root this
    /// verification trusts: a load starts from the caller's anchor and never reads the
    /// files before it, but a new client, a mirror or an auditor starts from version 1.
    fn audit_roots(&self, src: &dyn RegistrySource) -> Result<()> {
        let limits = self.limits();
        let path = layout::root(1);
        let what = format!("the registry's first trust root ({path})");
        let first = crate::source::read_required(src, &path, limits.root, &what)?;
        let v1 = crate::trust::verify_anchor(&first, limits, &what)?;
        let newest = crate::trust::walk_chain(src, v1, limits, |_, _| {})?;
        if newest.file_bytes() != self.root.file_bytes() {
            return Err(Error::Json {
                what: format!("the registry's root chain ({path} onwards)"),
                message: format!(
                    "it ends at root v{}, which is not the root v{} this verification trusts",
                    newest.root().version,
                    self.root.root().version
                ),
            });
        }
        Ok(())
    }

    /// The manifests verified so far: none after [`verify_metadata`]; the selected ones
    /// once [`VerifiedIndex::complete`] passed.
    ///
    /// [`verify_metadata`]: super::verify_metadata
    pub fn manifests(&self) -> &[VerifiedManifest] {
        &self.manifests
    }
    /// When a verification last passed with a fresh timestamp (this one, when it was
    /// fresh; else the saved state's): the start of the offline grace.
    pub fn last_fresh(&self) -> Option<Time> {
        self.state.fresh_at
    }
    /// Whether the timestamp was fresh or accepted within the offline grace.
    pub fn freshness(&self) -> Freshness {
        self.freshness
    }
    /// The clock-skew allowance this verification used (to be logged).
    pub fn skew(&self) -> Duration {
        self.skew
    }
    /// How many signed documents had their signature threshold checked (root chain,
    /// timestamp, index, build statements, promotions): constant in the number of modules.
    pub fn signature_checks(&self) -> u64 {
        self.signature_checks
    }
    /// Every delegated role of the delegations in force in `src` (the registry this
    /// verified), outermost first, each role's metadata checked at `now` as a search checks
    /// it or why not (empty when the registry delegates nothing): see [`DelegatedRole`].
    /// For people reading a registry (the page); a load never asks, so verification does
    /// not read the roles no module needs.
    ///
    /// [`DelegatedRole`]: super::DelegatedRole
    pub fn delegated_roles(
        &self,
        src: &dyn RegistrySource,
        now: Time,
    ) -> Result<Vec<super::DelegatedRole>> {
        let owners = super::delegated::Owners::resolve(
            src,
            &self.root,
            &self.index,
            &self.state,
            now,
            &self.limits,
        )?;
        Ok(owners.map(|o| o.roles()).unwrap_or_default())
    }
    /// The saved versions that were discarded because a root rotation replaced the
    /// publisher keys (recovery from a stolen publisher key), if any.
    pub fn discarded_state(&self) -> Option<TrustState> {
        self.discarded.clone()
    }

    /// The earliest expiry of the delegated metadata (the delegations and each team's
    /// metadata) through which the modules' owners were found; `None` when nothing is
    /// delegated. [`VerifiedIndex::loadable_until`] counts it.
    pub fn delegated_expiry(&self) -> Option<Time> {
        self.delegated_expiry
    }

    /// Until when this registry stays loadable for a verifier with `grace` offline grace
    /// and this verification's skew, if nothing is republished: the earliest of the root's
    /// and the index's expiry, the delegated metadata's the modules' owners were found
    /// through (issue 46), and the timestamp's expiry extended by the grace (counted from
    /// this verification, which is fresh, or from the last fresh one).
    pub fn loadable_until(&self, grace: Duration) -> Time {
        let ts = self.timestamp.expires.plus(self.skew);
        let ts = match (self.freshness, grace.is_zero()) {
            (_, true) => ts,
            (Freshness::Fresh, false) => ts.max(
                self.state
                    .fresh_at
                    .unwrap_or(self.timestamp.expires)
                    .plus(grace),
            ),
            (Freshness::Grace { deadline, .. }, false) => deadline,
        };
        let until = ts
            .min(self.index.expires.plus(self.skew))
            .min(self.root.root().expires.plus(self.skew));
        // Under delegations, the metadata the modules' owners were found through too.
        match self.delegated_expiry {
            Some(t) => until.min(t.plus(self.skew)),
            None => until,
        }
    }

    /// Steps 6-8 for the entries `select` names, in one sequence for every caller:
    ///
    /// 6. each manifest is exactly the file the index lists, attested by its build
    ///    statement, describing what the index lists, of the index's channel, and
    ///    (production channel) covered by a promotion record;
    ///    then the caller's own check of the verified manifests ([`Select::before_blobs`]:
    ///    the runtime's driver floor);
    /// 7. each blob is exactly the signed size and blake3 (the size bounds the read);
    /// 8. its content is what the manifest claims (a cubin of exactly the claimed SM, or PTX
    ///    text of the claimed target, holding exactly the signed kernels and launch ABI).
    ///
    /// The first failure (in `select`'s order, per step) is returned with the entry it
    /// concerns. Only the value this returns hands out the state to save.
    pub fn complete(
        mut self,
        src: &(dyn RegistrySource + Sync),
        select: Select<'_>,
    ) -> std::result::Result<Verified, Failed> {
        let n = self.index.entries.len();
        let mut picked: Vec<usize> = match select.entries {
            Some(p) => p.into_iter().filter(|&i| i < n).collect(),
            None => (0..n).collect(),
        };
        let mut seen = BTreeSet::new();
        picked.retain(|i| seen.insert(*i));
        let threads = |items: usize, bytes: u64| match select.parallel {
            true => crate::parallel::threads_for(items, bytes),
            false => 1,
        };
        // 6. Manifests (read, hashed and parsed on several threads when there are many).
        let manifests = {
            let this = &self;
            crate::parallel::try_map(&picked, threads(picked.len(), 0), |&i| {
                let e = &this.index.entries[i];
                this.verify_entry(src, e)
                    .map(|m| (i, m))
                    .map_err(|error| Failed::at(error, e, None))
            })?
        };
        // The caller's check of what the manifests say, before any blob is read.
        if let Some(check) = select.before_blobs {
            let all: Vec<(usize, &VerifiedManifest)> =
                manifests.iter().map(|(i, m)| (*i, m)).collect();
            check(&all).map_err(|error| match all.as_slice() {
                [(_, m)] => Failed::at(error, m.entry(), None),
                _ => Failed::from(error),
            })?;
        }
        // 7-8. Blobs and their content (on several threads when the bundle is large).
        let bytes = manifests
            .iter()
            .map(|(_, m)| m.manifest().size)
            .fold(0u64, u64::saturating_add);
        let modules = {
            let this = &self;
            crate::parallel::try_map(&manifests, threads(manifests.len(), bytes), |(i, m)| {
                let module = this.verify_blob(src, m).map_err(|error| {
                    Failed::at(error, m.entry(), Some(m.manifest().module_digest))
                })?;
                // A caller that only checks drops the bytes at once.
                Ok::<_, Failed>((*i, select.keep.then_some(module)))
            })?
        };
        self.manifests = manifests.into_iter().map(|(_, m)| m).collect();
        let mut modules: Vec<(usize, VerifiedModule)> = modules
            .into_iter()
            .filter_map(|(i, m)| m.map(|m| (i, m)))
            .collect();
        // By entry position, for `Verified::module`'s binary search.
        modules.sort_by_key(|(i, _)| *i);
        Ok(Verified {
            modules,
            index: self,
        })
    }

    /// Step 6 for one entry (see [`VerifiedIndex::complete`]), without recording it: for a
    /// caller that only reads what a release holds (never for a load).
    pub fn verify_entry(
        &self,
        src: &dyn RegistrySource,
        e: &IndexEntry,
    ) -> Result<VerifiedManifest> {
        let limit = self.limits().manifest;
        let path = layout::manifest(&e.manifest);
        let what = format!("manifest of {} {} ({})", e.module, e.sm, path);
        // 6a. Attested: the build statement the entry names lists exactly this file.
        let statement = self
            .statements
            .get(&e.statement)
            .filter(|s| {
                s.attested.get(&e.manifest).is_some_and(|a| {
                    (&a.module, a.sm, a.kind, a.manifest_size)
                        == (&e.module, e.sm, e.kind, e.manifest_size)
                })
            })
            .ok_or_else(|| Error::NotAttested {
                what: what.clone(),
                statement: e.statement.short(),
            })?;
        // 6b. Exactly the listed bytes (size bounds the read, then blake3).
        if e.manifest_size > limit {
            return Err(Error::TooLarge {
                what,
                limit,
                actual: e.manifest_size,
            });
        }
        let bytes = read_exact_signed(src, &path, e.manifest_size, &e.manifest, &what)?;
        let manifest: Manifest = crate::json::parse(&bytes, limit, &what)?;
        // The one schema rule: v2 with its globals, or v1 (signed before globals were).
        manifest.check_schema().map_err(|message| Error::Json {
            what: what.clone(),
            message,
        })?;
        // 6c. Mix-and-match: it describes the module, target, kind and identity listed.
        let id = &manifest.identity;
        let identity = id.digest();
        if (&id.module, id.sm, id.kind, identity) != (&e.module, e.sm, e.kind, e.identity) {
            return Err(Error::MixAndMatch {
                what,
                listed: format!(
                    "{} {} {} identity {}",
                    e.module,
                    e.sm,
                    e.kind,
                    e.identity.short()
                ),
                found: format!(
                    "{} {} {} identity {}",
                    id.module,
                    id.sm,
                    id.kind,
                    identity.short()
                ),
            });
        }
        // 6c'. The in-toto form also names each blob as a subject (for tools that check
        // subjects, not manifests): it must be the blob the manifest names.
        if let Some(&(blob, size)) = statement.blobs.get(&e.manifest)
            && (blob, size) != (manifest.module_digest, manifest.size)
        {
            return Err(Error::MixAndMatch {
                what,
                listed: format!(
                    "blob subject {} ({size} bytes) in build statement {}",
                    blob.short(),
                    e.statement.short()
                ),
                found: format!(
                    "blob {} ({} bytes) in the manifest",
                    manifest.module_digest.short(),
                    manifest.size
                ),
            });
        }
        if manifest.channel != self.index.channel {
            return Err(Error::Channel {
                what,
                required: self.index.channel.to_string(),
                found: manifest.channel.to_string(),
            });
        }
        // 6d. Production: a promotion record of a reviewer threshold covers this manifest
        // and its schedule version.
        let promoted_by = match self.index.channel {
            Channel::Dev => Vec::new(),
            // (A research index cannot get here: its trust root is refused at step 1.)
            Channel::Production | Channel::Research => self.promotion_for(e, &manifest)?,
        };
        Ok(VerifiedManifest {
            manifest,
            entry: e.clone(),
            signers: statement.signers.clone(),
            promoted_by,
            team: statement.team.clone(),
        })
    }

    /// What a production verifier would refuse for lack of promotion, whatever this
    /// registry's channel: for every entry whose manifest verifies (step 6 without 6d), the
    /// [`Error::NotPromoted`] naming its module, target, manifest digest and what is
    /// missing. `cargo xtask verify --production` lists these when it refuses a registry,
    /// so a dev release shows exactly what its promotion would take.
    pub fn promotion_gaps(&self, src: &dyn RegistrySource) -> Result<Vec<Error>> {
        let mut gaps = Vec::new();
        for e in &self.index.entries {
            let m = self.verify_entry(src, e)?;
            if let Err(gap) = self.promotion_for(e, m.manifest()) {
                gaps.push(gap);
            }
        }
        Ok(gaps)
    }

    /// Step 6d: a promotion record that covers this entry ([`Promotion::covers`], the one
    /// rule the publisher also applies), or why none does.
    ///
    /// [`Promotion::covers`]: crate::metadata::Promotion::covers
    fn promotion_for(&self, e: &IndexEntry, manifest: &Manifest) -> Result<Vec<KeyId>> {
        let schedule = manifest.identity.schedule_version;
        if let Some(p) = self
            .promotions
            .iter()
            .find(|p| p.promotion.covers(&e.module, schedule, &e.manifest))
        {
            return Ok(p.signers.clone());
        }
        let of_module: Vec<&VerifiedPromotion> = self
            .promotions
            .iter()
            .filter(|p| p.promotion.module == e.module)
            .collect();
        let reason = match of_module
            .iter()
            .find(|p| p.promotion.manifests.contains(&e.manifest))
        {
            _ if of_module.is_empty() => "no promotion record for this module".to_string(),
            Some(p) => format!(
                "promoted at schedule version {}, the manifest has {schedule}",
                p.promotion.schedule_version
            ),
            None => format!(
                "the module's {} promotion record(s) cover other manifests (a promotion binds exact manifest digests)",
                of_module.len()
            ),
        };
        Err(Error::NotPromoted {
            module: e.module.to_string(),
            target: e.sm.to_string(),
            manifest: e.manifest.to_string(),
            reason,
        })
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Steps 7 and 8 for one module: reads the blob (size first, at most `size + 1` bytes),
    /// checks its blake3, then its content (a cubin's ELF SM, PTX text).
    fn verify_blob(
        &self,
        src: &dyn RegistrySource,
        m: &VerifiedManifest,
    ) -> Result<VerifiedModule> {
        let limits = &self.limits;
        let man = &m.manifest;
        let label = man.label();
        // Size bound: a signed size above the blob limit is refused before any read.
        if man.size > limits.blob {
            return Err(Error::TooLarge {
                what: format!("{label} blob"),
                limit: limits.blob,
                actual: man.size,
            });
        }
        // Integrity: exactly the signed size, exactly the signed digest.
        let bytes = read_exact_signed_in_place(
            src,
            &layout::blob(&man.module_digest),
            man.size,
            &man.module_digest,
            &format!("{label} blob"),
        )?;
        // Content: a cubin for exactly the claimed SM, or PTX text for the claimed target,
        // holding exactly the signed kernels with their signed launch ABI.
        crate::content::check(man, &bytes)?;
        Ok(VerifiedModule {
            manifest: man.clone(),
            bytes,
        })
    }
}
