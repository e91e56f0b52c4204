//! Offline verification of a registry, in the order the trust model fixes: trust root (and
//! its rotation chain) → timestamp → bundle index → build statements and promotion records
//! → manifests, and, per module when it is needed, blob (size first, then blake3, then its
//! content: the cubin's ELF SM, PTX text).
//!
//! Nothing is saved until every step passed: the caller persists [`VerifiedIndex::state`]
//! only after it has also verified the blobs it uses.
//!
//! Signature checks per open are constant in the number of modules: one per document (the
//! root chain, the timestamp, the index, one per build statement and one per promotion
//! record); manifests and blobs are then authenticated by the digests those documents list.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::identity::{Channel, Manifest};
use crate::keys::KeyId;
use crate::limits::Limits;
use crate::metadata::{Attested, BuildStatement, Index, IndexEntry, Promotion, Time, Timestamp};
use crate::source::{RegistrySource, layout, read_exact_signed, read_required};
use crate::state::TrustState;
use crate::trust::{VerifiedRoot, rotate, verify_anchor};

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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            now: Time::now(),
            skew: Duration::ZERO,
            offline_grace: Duration::ZERO,
            limits: Limits::default(),
            required_channel: None,
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
    signers: Vec<KeyId>,
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
    /// The manifests verified so far (every entry after [`verify_index`]; those picked after
    /// [`VerifiedIndex::verify_entries`]).
    pub fn manifests(&self) -> &[VerifiedManifest] {
        &self.manifests
    }
    /// The trust state to persist once the caller's blob checks passed too.
    pub fn state(&self) -> TrustState {
        self.state
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

    /// Step 6 for the index entries at `picked`: each manifest is exactly the file the
    /// index lists, attested by its build statement, describing what the index lists, of
    /// the index's channel, and (production channel) covered by a promotion record.
    pub fn verify_entries(&mut self, src: &dyn RegistrySource, picked: &[usize]) -> Result<()> {
        for &i in picked {
            let Some(e) = self.index.entries.get(i) else {
                continue;
            };
            let m = self.verify_entry(src, e)?;
            self.manifests.push(m);
        }
        Ok(())
    }

    /// Step 6 for one entry (see [`VerifiedIndex::verify_entries`]), without recording it.
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
        check_schema(&what, &manifest.schema, Manifest::SCHEMA)?;
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
            Channel::Production => self.promotion_for(e, &manifest)?,
        };
        Ok(VerifiedManifest {
            manifest,
            entry: e.clone(),
            signers: statement.signers.clone(),
            promoted_by,
        })
    }

    fn promotion_for(&self, e: &IndexEntry, manifest: &Manifest) -> Result<Vec<KeyId>> {
        let of_module: Vec<&VerifiedPromotion> = self
            .promotions
            .iter()
            .filter(|p| p.promotion.module == e.module)
            .collect();
        let missing = |reason: String| Error::NotPromoted {
            module: e.module.to_string(),
            target: e.sm.to_string(),
            manifest: e.manifest.to_string(),
            reason,
        };
        if of_module.is_empty() {
            return Err(missing("no promotion record for this module".into()));
        }
        let Some(p) = of_module
            .iter()
            .find(|p| p.promotion.manifests.contains(&e.manifest))
        else {
            return Err(missing(format!(
                "the module's {} promotion record(s) cover other manifests (a promotion binds exact manifest digests)",
                of_module.len()
            )));
        };
        if p.promotion.schedule_version != manifest.identity.schedule_version {
            return Err(missing(format!(
                "promoted at schedule version {}, the manifest has {}",
                p.promotion.schedule_version, manifest.identity.schedule_version
            )));
        }
        Ok(p.signers.clone())
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Steps 7 and 8 for one module: reads the blob (size first, at most `size + 1` bytes),
    /// checks its blake3, then its content (a cubin's ELF SM, PTX text).
    pub fn load_module(
        &self,
        src: &dyn RegistrySource,
        m: &VerifiedManifest,
        limits: &Limits,
    ) -> Result<VerifiedModule> {
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

/// Steps 1-6: verifies the registry's metadata and every manifest it lists.
///
/// `anchor` is the trust root file the caller trusts out of band; `seen` the state saved
/// before (rollback protection, offline grace).
pub fn verify_index(
    src: &dyn RegistrySource,
    anchor: &[u8],
    seen: TrustState,
    opts: &Options,
) -> Result<VerifiedIndex> {
    let mut index = verify_metadata(src, anchor, seen, opts)?;
    let all: Vec<usize> = (0..index.index.entries.len()).collect();
    index.verify_entries(src, &all)?;
    Ok(index)
}

/// Steps 1-5: the trust root and its rotation chain, the timestamp, the index, its build
/// statements and promotion records. No manifest is read yet: the runtime picks the entries
/// for its device from the verified index and verifies only those
/// ([`VerifiedIndex::verify_entries`]).
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
    check_not_expired(
        &format!("trust root v{}", root.root().version),
        root.root().expires,
        opts,
    )?;
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
    let statements = verify_statements(src, &root, &index, limits)?;
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

fn walk_root_chain(
    src: &dyn RegistrySource,
    mut trusted: VerifiedRoot,
    seen: TrustState,
    limits: &Limits,
) -> Result<Walked> {
    let mut rotations = 0;
    let mut publisher_rotated = false;
    while let Some(next) = trusted.root().version.checked_add(1) {
        let path = layout::root(next);
        let Some(bytes) = src.read_at_most(&path, limits.root)? else {
            break;
        };
        if bytes.len() as u64 > limits.root {
            return Err(Error::TooLarge {
                what: path,
                limit: limits.root,
                actual: bytes.len() as u64,
            });
        }
        let rotated = rotate(&trusted, &bytes, limits, &path)?;
        let keys = |r: &VerifiedRoot| -> BTreeSet<KeyId> {
            r.root()
                .roles
                .publisher
                .keys
                .iter()
                .map(|k| k.key_id())
                .collect()
        };
        if next > seen.root && keys(&rotated) != keys(&trusted) {
            publisher_rotated = true;
        }
        trusted = rotated;
        rotations += 1;
    }
    Ok(Walked {
        root: trusted,
        rotations,
        publisher_rotated,
    })
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
        let opened = root.open::<BuildStatement>(&bytes, limits.statement, &what)?;
        if opened.doc.channel != index.channel {
            return Err(Error::Channel {
                what,
                required: index.channel.to_string(),
                found: opened.doc.channel.to_string(),
            });
        }
        let attested = opened
            .doc
            .manifests
            .into_iter()
            .map(|a| (a.manifest, a))
            .collect();
        out.insert(
            r.digest,
            VerifiedStatement {
                attested,
                signers: opened.signers,
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

fn check_schema(what: &str, got: &str, want: &str) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::Json {
            what: what.into(),
            message: format!(
                "schema {:?}, expected {want:?}",
                crate::error::escape_untrusted(got)
            ),
        })
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
