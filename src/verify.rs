//! Offline verification of a registry, in the order the trust model fixes, for every caller
//! (runtime, `verify`, `sync`, the server's publish checks, OCI, benches): 1. trust root
//! and 2. its rotation chain → 3. timestamp → 4. bundle index → 5. build statements and
//! promotion records → 6. manifests → 7. blobs (size first, then blake3) → 8. their
//! content (the cubin's ELF SM, PTX text, the signed kernels and ABI).
//!
//! Steps 1-5 are [`verify_metadata`]; steps 6-8 are [`VerifiedIndex::complete`], for the
//! entries the caller selects ([`Select`]: all of them, or the runtime's per-device pick,
//! with its driver-floor check between steps 6 and 7); [`verify_all`] runs 1-8. Only the
//! value `complete` returns, [`Verified`], hands out the state to save: nothing can be
//! saved before every step passed.
//!
//! Signature checks per open are constant in the number of modules: one per document (the
//! root chain, the timestamp, the index, one per build statement and one per promotion
//! record); manifests and blobs are then authenticated by the digests those documents list.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::digest::Digest;
use crate::error::{Error, Result, escape_untrusted};
use crate::identity::Channel;
use crate::keys::KeyId;
use crate::limits::Limits;
use crate::manifest::Manifest;
use crate::metadata::{Attested, Index, IndexEntry, Promotion, Time, Timestamp};
use crate::provenance::Statement;
use crate::source::{RegistrySource, layout, read_exact_signed, read_required};
use crate::state::TrustState;
use crate::trust::{VerifiedRoot, verify_anchor};

mod floor;
mod outcome;

pub use floor::rollback_floor;
pub use outcome::{BeforeBlobs, Failed, Select, Verified};

/// How to verify: the clock, its explicit skew allowance, the offline grace, byte limits
/// and the channel the caller requires.
#[derive(Debug, Clone)]
pub struct Options {
    /// The verifier's notion of now.
    pub now: Time,
    /// How far past an expiry a document is still accepted. Explicit and reported: zero
    /// unless the operator sets it.
    pub skew: Duration,
    /// How long after the last fresh verification (recorded in the trust state) an expired
    /// timestamp is still accepted, with a warning: lets a prover host that synced a
    /// release and then lost its network keep starting. Zero unless the operator sets it.
    /// Roots, indexes and manifests get no grace.
    pub offline_grace: Duration,
    /// Byte caps per file kind.
    pub limits: Limits,
    /// Refuse documents of any other channel (production loaders require `Production`).
    pub required_channel: Option<Channel>,
    /// A rebuilder's view ([`VerifiedRoot::awaiting_builders`]): a build statement needs one
    /// listed builder's signature instead of the root's builder threshold, because the
    /// rebuild adds the next. Every other check is made. Never set by a loader: a release
    /// awaiting its rebuild is not loadable.
    pub awaiting_rebuild: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            now: Time::now(),
            skew: Duration::ZERO,
            offline_grace: Duration::ZERO,
            limits: Limits::default(),
            required_channel: None,
            awaiting_rebuild: false,
        }
    }
}

impl Options {
    /// For a publisher reading back its own registry: every check except expiry and the
    /// freeze bound (an expired registry is exactly what a publisher comes to fix).
    pub fn ignoring_expiry() -> Options {
        Options {
            skew: Duration::MAX,
            ..Options::default()
        }
    }
}

/// Whether the timestamp was current, or accepted within the offline grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// The timestamp had not expired (within the skew allowance).
    Fresh,
    /// The timestamp expired at `expired`; accepted because the registry was last verified
    /// fresh recently enough. It stops being accepted after `deadline`.
    Grace {
        /// When the timestamp expired.
        expired: Time,
        /// When the offline grace ends.
        deadline: Time,
    },
}

/// A manifest whose file, build statement, index entry (and promotion, in production)
/// were checked.
#[derive(Debug, Clone)]
pub struct VerifiedManifest {
    manifest: Manifest,
    entry: IndexEntry,
    signers: Vec<KeyId>,
    promoted_by: Vec<KeyId>,
}

impl VerifiedManifest {
    /// The manifest payload.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    /// The index entry that lists it.
    pub fn entry(&self) -> &IndexEntry {
        &self.entry
    }
    /// The builder keys whose signatures on its build statement counted.
    pub fn signers(&self) -> &[KeyId] {
        &self.signers
    }
    /// The reviewer keys whose promotion record covers it (production channel).
    pub fn promoted_by(&self) -> &[KeyId] {
        &self.promoted_by
    }
}

/// A module whose bytes passed every check; the only thing the loader accepts.
#[derive(Debug, Clone)]
pub struct VerifiedModule {
    manifest: Manifest,
    bytes: Arc<[u8]>,
}

impl VerifiedModule {
    /// The manifest that vouches for these bytes.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    /// The verified blob bytes, held in memory: the loader never re-reads a path.
    pub fn bytes(&self) -> &Arc<[u8]> {
        &self.bytes
    }
}

/// A build statement whose builder threshold was met.
#[derive(Debug, Clone)]
struct VerifiedStatement {
    attested: BTreeMap<Digest, Attested>,
    /// The in-toto form: each manifest's blob subject (digest, size).
    blobs: BTreeMap<Digest, (Digest, u64)>,
    signers: Vec<KeyId>,
    /// The in-toto statement (`None` for the earlier form): its provenance names the
    /// sources a rebuilder or a mirror fetches.
    statement: Option<Statement>,
}

/// A source file (or the spec) that a verified build statement's provenance names, read
/// from the registry and checked against its recorded size and blake3.
#[derive(Debug, Clone)]
pub struct VerifiedSource {
    /// Its path relative to the build's source root, as the provenance records it (not
    /// checked as a path: a rebuilder that lays it out checks it).
    pub name: String,
    /// Its blake3 (`sources/blake3/<hex>`).
    pub digest: Digest,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// A build statement the index lists, as verified: what a rebuilder starts from.
#[derive(Debug, Clone, Copy)]
pub struct VerifiedBuild<'a> {
    /// The statement file's blake3 (`statements/blake3/<hex>`).
    pub file: Digest,
    /// The distinct builder keys whose signatures verified.
    pub signers: &'a [KeyId],
    /// The in-toto statement (`None` for the earlier `cuda-aot/build/v1` form, which
    /// records no provenance).
    pub statement: Option<&'a Statement>,
}

/// A promotion record whose reviewer threshold was met.
#[derive(Debug, Clone)]
struct VerifiedPromotion {
    promotion: Promotion,
    signers: Vec<KeyId>,
}

/// The result of verifying a registry's metadata: the trusted root, timestamp, index, build
/// statements, promotions and the manifests verified so far.
#[derive(Debug, Clone)]
pub struct VerifiedIndex {
    root: VerifiedRoot,
    timestamp: Timestamp,
    index: Index,
    statements: BTreeMap<Digest, VerifiedStatement>,
    promotions: Vec<VerifiedPromotion>,
    manifests: Vec<VerifiedManifest>,
    state: TrustState,
    freshness: Freshness,
    skew: Duration,
    signature_checks: u64,
    discarded: Option<TrustState>,
    limits: Limits,
}

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
    /// The manifests verified so far: none after [`verify_metadata`]; the selected ones
    /// once [`VerifiedIndex::complete`] passed.
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
    /// The saved versions that were discarded because a root rotation replaced the
    /// publisher keys (recovery from a stolen publisher key), if any.
    pub fn discarded_state(&self) -> Option<TrustState> {
        self.discarded
    }

    /// Until when this registry stays loadable for a verifier with `grace` offline grace
    /// and this verification's skew, if nothing is republished: the earliest of the root's
    /// and the index's expiry, and the timestamp's expiry extended by the grace (counted
    /// from this verification, which is fresh, or from the last fresh one).
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
        ts.min(self.index.expires.plus(self.skew))
            .min(self.root.root().expires.plus(self.skew))
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
            for (i, m) in &manifests {
                check(*i, m).map_err(|error| Failed::at(error, m.entry(), None))?;
            }
        }
        // 7-8. Blobs and their content (on several threads when the bundle is large).
        let bytes = manifests
            .iter()
            .map(|(_, m)| m.manifest().size)
            .fold(0u64, u64::saturating_add);
        let modules = {
            let this = &self;
            crate::parallel::try_map(&manifests, threads(manifests.len(), bytes), |(i, m)| {
                let module = this.load_module(src, m).map_err(|error| {
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
    fn load_module(
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
        let bytes = read_exact_signed(
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
            bytes: bytes.into(),
        })
    }
}

/// Steps 1-8 for every entry: [`verify_metadata`], then [`VerifiedIndex::complete`] of
/// [`Select::all`] with the verified bytes kept.
///
/// `anchor` is the trust root file the caller trusts out of band; `seen` the state saved
/// before (rollback protection, offline grace).
pub fn verify_all(
    src: &(dyn RegistrySource + Sync),
    anchor: &[u8],
    seen: TrustState,
    opts: &Options,
) -> std::result::Result<Verified, Failed> {
    verify_metadata(src, anchor, seen, opts)
        .map_err(Failed::from)?
        .complete(src, Select::all().keep_bytes())
}

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
    let walked = walk_root_chain(src, anchor, seen, limits)?;
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
        false => seen,
    };
    // 3. Timestamp: publisher threshold, within the freeze bound, fresh (or within the
    //    offline grace), not older than the last seen.
    let (timestamp, freshness) = verify_timestamp(src, &root, seen_versions, opts)?;
    checks += 1;
    // 4. Index: exactly the bytes the timestamp names, publisher threshold, same version,
    //    within the freeze bound, not expired, the root's channel, no duplicate entries.
    let index = verify_index_file(src, &root, &timestamp, seen_versions, opts)?;
    checks += 1;
    // 5. Build statements and promotion records the index lists: builder (reviewer)
    //    threshold each, the index's channel.
    let statements = match opts.awaiting_rebuild {
        false => verify_statements(src, &root, &index, limits)?,
        true => verify_statements(src, &root.awaiting_builders(), &index, limits)?,
    };
    let promotions = verify_promotions(src, &root, &index, limits)?;
    checks += (statements.len() + promotions.len()) as u64;
    let mut state = seen_versions.max(TrustState {
        root: root.root().version,
        timestamp: timestamp.version,
        index: index.version,
        fresh_at: None,
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
    })
}

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
    seen: TrustState,
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
    seen: TrustState,
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
    seen: TrustState,
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
        let opened = crate::provenance::open_build(root, &bytes, limits.statement, &what)?;
        let a = opened.attestation;
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
        let opened = root.open::<Promotion>(&bytes, limits.promotion, &what)?;
        out.push(VerifiedPromotion {
            promotion: opened.doc,
            signers: opened.signers,
        });
    }
    Ok(out)
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
