//! The publish algorithm, written once over a [`Store`]: what a release is ([`SignedBuild`],
//! [`Release`]), how the next index is derived from the current one (exact release sets,
//! `since`, no-op publishes), and the order of writes that keeps every reader on a whole
//! release.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cuda_aot::digest::check_hashed;
use cuda_aot::metadata::{
    DocRef, Document, Index, IndexEntry, IndexRef, Promotion, RoleName, Time, Timestamp,
};
use cuda_aot::provenance::{Attestation, Statement, open_build};
use cuda_aot::source::{RegistrySource, layout};
use cuda_aot::state::TrustState;
use cuda_aot::trust::{VerifiedRoot, decode_unverified};
use cuda_aot::verify::{Options, verify_metadata};
use cuda_aot::{Channel, Digest, Limits, Manifest, SecretKey};

use crate::error::{Error, Result};

/// Where a registry is stored, as the publish algorithm needs it. The directory
/// ([`crate::DirRegistry`]) is one implementation; a remote store is another.
pub trait Store {
    /// Read access (the same checks a client applies).
    fn source(&self) -> &dyn RegistrySource;
    /// Writes a content-addressed file (blob, manifest, statement, promotion) unless it
    /// already holds exactly these bytes; returns whether it wrote. Atomic.
    fn put_content(&self, rel: &str, bytes: &[u8]) -> Result<bool>;
    /// Stores a trust root file at `root/<N>.root.json` unless it holds exactly these
    /// bytes; a different file of the same version is [`Error::RootConflict`].
    fn put_root(&self, version: u64, bytes: &[u8]) -> Result<()>;
    /// Makes a release visible: creates the index file `index_rel` only if it does not
    /// exist, then replaces `timestamp.json` only if it is still the file whose blake3 is
    /// `base_timestamp` (`None`: no timestamp yet). A lost race is [`Error::Conflict`]
    /// (`version` and `base` are for its message).
    fn commit(&self, c: &Commit<'_>) -> Result<()>;
    /// Replaces `timestamp.json` only if it is still the file `base_timestamp`.
    fn replace_timestamp(&self, bytes: &[u8], base_timestamp: Option<Digest>) -> Result<()>;
    /// Where this store is, for messages.
    fn describe(&self) -> String;
    /// True when an index file written by a publisher that died before its timestamp
    /// stays in the store (it has no lock to clear it under, as an object store): the next
    /// publish then takes the first free index version above the current one instead of
    /// failing on that file forever. Nothing references such a file; the timestamp's
    /// compare-and-swap still lets exactly one of two racing publishers commit.
    fn keeps_uncommitted_indexes(&self) -> bool {
        false
    }
}

/// One commit of a release (see [`Store::commit`]).
#[derive(Debug, Clone)]
pub struct Commit<'a> {
    /// `index/<N>.index.json`.
    pub index_rel: String,
    /// The signed index file.
    pub index: &'a [u8],
    /// The signed timestamp file.
    pub timestamp: &'a [u8],
    /// blake3 of the timestamp file this release was prepared on.
    pub base_timestamp: Option<Digest>,
    /// The index version being created.
    pub version: u64,
    /// The index version it was prepared on.
    pub base: u64,
}

/// One module of a build: its manifest file and the blob it describes.
#[derive(Debug, Clone)]
pub struct BuiltModule {
    manifest: Manifest,
    manifest_file: Vec<u8>,
    blob: Vec<u8>,
}

impl BuiltModule {
    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
}

/// A whole build, as the builder signed it: one build statement over every manifest, and
/// each manifest's blob. Only [`SignedBuild::new`] makes one, after checking the builder
/// threshold against a trust root and every manifest and blob against the statement.
#[derive(Debug, Clone)]
pub struct SignedBuild {
    statement: Attestation,
    provenance: Option<Statement>,
    statement_file: Vec<u8>,
    modules: Vec<BuiltModule>,
    sources: BTreeMap<Digest, Vec<u8>>,
}

impl SignedBuild {
    /// Checks `statement_file` (a builder-signed build statement, in either form
    /// [`cuda_aot::provenance::open_build`] reads) against `root`, and
    /// pairs each attested manifest with its file and blob from `files` (manifest file
    /// bytes, blob bytes): every manifest the statement lists must be given exactly once,
    /// match its attested size and blake3, and describe its blob (size, blake3).
    pub fn new(
        root: &VerifiedRoot,
        statement_file: Vec<u8>,
        files: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Self> {
        let limits = Limits::default();
        let opened = open_build(root, &statement_file, limits.statement, "build statement")?;
        let (statement, provenance) = (opened.attestation, opened.statement);
        // Every manifest and blob hashed once, on several threads when the build is large.
        let bytes = files
            .iter()
            .map(|(m, b)| (m.len() + b.len()) as u64)
            .fold(0u64, u64::saturating_add);
        let threads = cuda_aot::parallel::threads_for(files.len(), bytes);
        let digests = cuda_aot::parallel::try_map(&files, threads, |(m, b)| {
            Ok::<_, std::convert::Infallible>((Digest::of(m), Digest::of(b)))
        })
        .unwrap_or_else(|never| match never {});
        let mut by_digest: BTreeMap<Digest, (Vec<u8>, Vec<u8>, Digest)> = BTreeMap::new();
        for ((m, b), (md, bd)) in files.into_iter().zip(digests) {
            by_digest.insert(md, (m, b, bd));
        }
        let mut modules = Vec::with_capacity(statement.manifests.len());
        for a in &statement.manifests {
            let what = format!("manifest of {} {}", a.module, a.sm);
            let Some((manifest_file, blob, blob_digest)) = by_digest.remove(&a.manifest) else {
                return Err(Error::Core(cuda_aot::Error::Missing {
                    what,
                    path: format!("a manifest file with blake3 {}", a.manifest),
                }));
            };
            // Found by its digest: the size is what remains to check.
            check_hashed(
                &what,
                manifest_file.len() as u64,
                || a.manifest,
                a.manifest_size,
                &a.manifest,
            )?;
            let manifest: Manifest = cuda_aot::json::parse(&manifest_file, limits.manifest, &what)?;
            let id = &manifest.identity;
            if (&id.module, id.sm, id.kind) != (&a.module, a.sm, a.kind)
                || manifest.channel != statement.channel
            {
                return Err(Error::Core(cuda_aot::Error::MixAndMatch {
                    what,
                    listed: format!("{} {} {} {}", a.module, a.sm, a.kind, statement.channel),
                    found: format!("{} {} {} {}", id.module, id.sm, id.kind, manifest.channel),
                }));
            }
            check_hashed(
                &format!("{} blob", manifest.label()),
                blob.len() as u64,
                || blob_digest,
                manifest.size,
                &manifest.module_digest,
            )
            .map_err(|e| Error::BlobMismatch {
                module: id.module.to_string(),
                target: id.sm.to_string(),
                reason: e.to_string(),
            })?;
            if let Some(&(d, size)) = statement.blobs.get(&a.manifest)
                && (d, size) != (manifest.module_digest, manifest.size)
            {
                return Err(Error::BlobMismatch {
                    module: id.module.to_string(),
                    target: id.sm.to_string(),
                    reason: format!(
                        "the build statement's blob subject is {} ({size} bytes), the manifest's blob {} ({} bytes)",
                        d.short(),
                        manifest.module_digest.short(),
                        manifest.size
                    ),
                });
            }
            modules.push(BuiltModule {
                manifest,
                manifest_file,
                blob,
            });
        }
        if let Some((d, _)) = by_digest.into_iter().next() {
            return Err(Error::Core(cuda_aot::Error::NotAttested {
                what: format!("manifest file {d}"),
                statement: Digest::of(&statement_file).short(),
            }));
        }
        Ok(SignedBuild {
            statement,
            provenance,
            statement_file,
            modules,
            sources: BTreeMap::new(),
        })
    }

    /// The source files (and the spec) the build statement's provenance names, each with
    /// its name, blake3 and size: what [`SignedBuild::add_source`] must be given before
    /// the build can be published, so a rebuilder finds them in the registry.
    pub fn sources_named(&self) -> Vec<(String, Digest, u64)> {
        self.provenance.as_ref().map_or_else(Vec::new, |s| {
            s.predicate
                .sources()
                .into_iter()
                .map(|(d, h, n)| (d.name.clone(), h, n))
                .collect()
        })
    }

    /// Adds one source file the provenance names (checked by size and blake3); a file it
    /// does not name is refused.
    pub fn add_source(&mut self, bytes: Vec<u8>) -> Result<()> {
        let d = Digest::of(&bytes);
        let named = self
            .sources_named()
            .into_iter()
            .find(|(_, h, n)| *h == d && *n == bytes.len() as u64);
        if named.is_none() {
            return Err(Error::Core(cuda_aot::Error::NotAttested {
                what: format!("source file {d} ({} bytes)", bytes.len()),
                statement: Digest::of(&self.statement_file).short(),
            }));
        }
        self.sources.insert(d, bytes);
        Ok(())
    }

    /// The first named source not added yet.
    fn missing_source(&self) -> Option<(String, Digest)> {
        self.sources_named()
            .into_iter()
            .find(|(_, d, _)| !self.sources.contains_key(d))
            .map(|(name, d, _)| (name, d))
    }

    /// The modules of the build.
    pub fn modules(&self) -> &[BuiltModule] {
        &self.modules
    }

    /// The channel of the build.
    pub fn channel(&self) -> Channel {
        self.statement.channel
    }
}

/// What to publish: one signed build, and the promotion records of its production modules.
#[derive(Debug, Clone)]
pub struct Release {
    /// The build.
    pub build: SignedBuild,
    /// Reviewer-signed promotion records (files), checked against the trust root.
    pub promotions: Vec<Vec<u8>>,
}

/// Settings of one publish.
#[derive(Debug, Clone)]
pub struct PublishOptions {
    /// The publisher's clock.
    pub now: Time,
    /// Lifetime of the timestamp (short: clients refuse a registry nobody refreshes).
    pub timestamp_ttl: Duration,
    /// Lifetime of the index.
    pub index_ttl: Duration,
    /// Keep the current index's entries for (module, target, kind) this release does not
    /// hold. Off by default: the next index holds exactly this release.
    pub keep_unlisted: bool,
    /// The versions of this registry already seen where the publisher runs (its verify
    /// state). A registry started afresh (no timestamp yet: deleted and published again)
    /// numbers its first index and timestamp above them, so no client that saw the old
    /// line, that machine's own verifier included, refuses the new one as a rollback.
    pub seen: TrustState,
    /// Byte caps and the root-chain cap for what the publisher reads back (the registry's
    /// current files, the release's records).
    pub limits: Limits,
    /// Publish a release whose build statement one listed builder signed although the
    /// trust root wants more ([`cuda_aot::trust::VerifiedRoot::awaiting_builders`]): for a
    /// candidate registry an independent rebuilder reads; clients refuse it until the
    /// co-signed statement is published. Off by default.
    pub awaiting_rebuild: bool,
}

impl Default for PublishOptions {
    fn default() -> Self {
        PublishOptions {
            now: Time::now(),
            timestamp_ttl: Duration::from_secs(7 * 86_400),
            index_ttl: Duration::from_secs(365 * 86_400),
            keep_unlisted: false,
            seen: TrustState::default(),
            limits: Limits::default(),
            awaiting_rebuild: false,
        }
    }
}

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The index version now current (the old one when `unchanged`).
    pub index_version: u64,
    /// The timestamp version now current.
    pub timestamp_version: u64,
    /// True when the release equals what the registry already serves: nothing was
    /// committed, no version changed.
    pub unchanged: bool,
    /// Blobs written by this publish.
    pub blobs_written: usize,
    /// Blobs already present with the right content (idempotent re-publish).
    pub blobs_reused: usize,
    /// Entries of the current index.
    pub entries: usize,
    /// Entries of the previous index that this index no longer lists.
    pub removed: usize,
    /// A timestamp that no publisher key of the trust root signed was set aside (after a
    /// rotation of the publisher keys): this publish started a new version line.
    pub recovered: bool,
    /// The registry held no release yet and its versions continue above the ones already
    /// seen ([`PublishOptions::seen`]): the highest index version seen before.
    pub continued_after: Option<u64>,
}

/// The steps of a publish, in order. A publisher killed after any of them leaves a
/// registry that still verifies at the previous version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Every blob is stored.
    Blobs,
    /// Every manifest, statement and promotion record is stored.
    Manifests,
    /// The publish lock is held (directory store).
    Locked,
    /// The next index file exists (created only if absent).
    Index,
    /// `timestamp.json` names the new index: the release is visible.
    Timestamp,
}

impl Step {
    /// The step's name (used by the test pause hook).
    pub fn as_str(&self) -> &'static str {
        match self {
            Step::Blobs => "blobs",
            Step::Manifests => "manifests",
            Step::Locked => "locked",
            Step::Index => "index",
            Step::Timestamp => "timestamp",
        }
    }
}

/// The registry's current state as the publisher sees it, verified against the trust root
/// (expiry aside: an expired registry is what a publisher fixes).
struct Base {
    root: VerifiedRoot,
    timestamp: Option<(Timestamp, Digest)>,
    index: Option<Index>,
    /// The current index's promotion records (verified with it).
    promotions: Vec<(DocRef, Promotion)>,
    recovered: bool,
}

/// Reads and verifies the current state of `store` against `anchor` (walking the
/// registry's root chain), for a publisher holding `publisher`.
fn base(
    store: &dyn Store,
    anchor: &[u8],
    publisher: &[&SecretKey],
    limits: &Limits,
) -> Result<Base> {
    let src = store.source();
    let anchor_root = cuda_aot::trust::verify_anchor(anchor, limits, "trust root")?;
    let raw_ts = src.read_at_most(layout::TIMESTAMP, limits.timestamp)?;
    // A registry awaiting its rebuild is read too: publishing the co-signed statement is
    // what completes it (a publish that is not itself awaiting checks every statement the
    // next index keeps against the full builder threshold).
    let opts = Options {
        limits: *limits,
        awaiting_rebuild: true,
        ..Options::ignoring_expiry()
    };
    let (root, timestamp, index, recovered) = match raw_ts {
        None => (walk(src, anchor_root, limits)?, None, None, false),
        Some(ts_file) => match verify_metadata(src, anchor, TrustState::default(), &opts) {
            Ok(v) => {
                let ts = v.timestamp().clone();
                (
                    v.root().clone(),
                    Some((ts, Digest::of(&ts_file))),
                    Some(v.index().clone()),
                    false,
                )
            }
            // The timestamp is signed by no publisher key of the newest root: the keys were
            // rotated (after a compromise, perhaps with inflated versions). Start a new
            // version line; clients discard their saved versions on the same rotation.
            Err(cuda_aot::Error::Threshold {
                valid: 0,
                role: RoleName::Publisher,
                ..
            }) => {
                let root = walk(src, anchor_root, limits)?;
                let digest = Digest::of(&ts_file);
                let ts = decode_unverified::<Timestamp>(&ts_file, limits.timestamp, "timestamp")
                    .ok()
                    .map(|t| (t, digest));
                (root, ts, None, true)
            }
            Err(e) => return Err(e.into()),
        },
    };
    let mut promotions = Vec::new();
    for r in index.as_ref().map_or(&[][..], |i: &Index| &i.promotions) {
        let path = layout::promotion(&r.digest);
        let file = cuda_aot::source::read_exact_signed(src, &path, r.size, &r.digest, &path)?;
        promotions.push((
            *r,
            root.open::<Promotion>(&file, limits.promotion, &path)?.doc,
        ));
    }
    let keys = &root.root().roles.publisher.keys;
    if let Some(k) = publisher.iter().find(|k| !keys.contains(&k.public())) {
        return Err(Error::NotPublisher {
            key: k.public().key_id().short(),
            root: root.root().version,
        });
    }
    Ok(Base {
        root,
        timestamp,
        index,
        promotions,
        recovered,
    })
}

/// Walks the registry's root chain from `root` (each rotation checked, the chain capped:
/// [`cuda_aot::trust::walk_chain`]).
pub(crate) fn walk(
    src: &dyn RegistrySource,
    root: VerifiedRoot,
    limits: &Limits,
) -> Result<VerifiedRoot> {
    Ok(cuda_aot::trust::walk_chain(src, root, limits, |_, _| {})?)
}

/// Stores `anchor` (a signed trust root file) unless the registry holds it already.
pub fn ensure_root(store: &dyn Store, anchor: &[u8]) -> Result<u64> {
    let limits = Limits::default();
    let root = cuda_aot::trust::verify_anchor(anchor, &limits, "trust root")?;
    let version = root.root().version;
    store.put_root(version, anchor)?;
    Ok(version)
}

/// Publishes `release` as the next index version, signed by the `publisher` keys.
///
/// The next index lists exactly the release's modules (plus, with
/// [`PublishOptions::keep_unlisted`], the current entries it does not replace); an entry
/// keeps its `since` while its manifest is unchanged. A release equal to what the registry
/// serves commits nothing ([`Published::unchanged`]). Fails with [`Error::Conflict`] when
/// another publisher committed after this one read the current version; retrying then
/// succeeds.
pub fn publish(
    store: &dyn Store,
    anchor: &[u8],
    release: &Release,
    publisher: &[&SecretKey],
    opts: &PublishOptions,
) -> Result<Published> {
    let limits = &opts.limits;
    if store
        .source()
        .read_at_most(&layout::root(1), limits.root)?
        .is_none()
    {
        return Err(Error::NoRoot {
            path: store.describe().into(),
        });
    }
    let base = base(store, anchor, publisher, &opts.limits)?;
    // An empty registry continues above the versions this publisher has seen: refuse seen
    // versions that cannot grow before anything is written.
    let from_seen = (base.timestamp.is_none() || base.index.is_none()) && !base.recovered;
    if from_seen && opts.seen.index.max(opts.seen.timestamp) == u64::MAX {
        return Err(Error::SeenExhausted {
            index: opts.seen.index,
            timestamp: opts.seen.timestamp,
        });
    }
    let build = &release.build;
    let channel = base.root.root().channel;
    if build.channel() != channel {
        return Err(Error::Core(cuda_aot::Error::Channel {
            what: format!("build statement for {}", store.describe()),
            required: channel.to_string(),
            found: build.channel().to_string(),
        }));
    }
    // The statement was checked against the caller's root; check it against the newest.
    let builders = match opts.awaiting_rebuild {
        false => base.root.clone(),
        true => base.root.awaiting_builders(),
    };
    open_build(
        &builders,
        &build.statement_file,
        limits.statement,
        "build statement",
    )?;
    // A rebuilder finds in the registry every source the provenance names.
    if let Some((name, d)) = build.missing_source() {
        return Err(Error::Core(cuda_aot::Error::Missing {
            what: format!("source {name} that the build statement names"),
            path: layout::source(&d),
        }));
    }
    let promotions = release
        .promotions
        .iter()
        .map(|file| {
            let p = base
                .root
                .open::<Promotion>(file, limits.promotion, "promotion record")?
                .doc;
            Ok((file.as_slice(), p))
        })
        .collect::<Result<Vec<_>>>()?;

    let (mut written, mut reused) = (0, 0);
    for m in &build.modules {
        match store.put_content(&layout::blob(&m.manifest.module_digest), &m.blob)? {
            true => written += 1,
            false => reused += 1,
        }
    }
    for (d, bytes) in &build.sources {
        store.put_content(&layout::source(d), bytes)?;
    }
    pause_point(Step::Blobs);
    for m in &build.modules {
        store.put_content(
            &layout::manifest(&Digest::of(&m.manifest_file)),
            &m.manifest_file,
        )?;
    }
    let statement = DocRef {
        digest: Digest::of(&build.statement_file),
        size: build.statement_file.len() as u64,
    };
    store.put_content(&layout::statement(&statement.digest), &build.statement_file)?;
    for (file, _) in &promotions {
        store.put_content(&layout::promotion(&Digest::of(file)), file)?;
    }
    pause_point(Step::Manifests);

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
    let (entries, statements, promotion_refs, removed) = next_entries(
        &base,
        build,
        statement,
        &promotions,
        version,
        opts.keep_unlisted,
    );
    // Statements the next index keeps from the current one (--keep-unlisted) meet the
    // builder threshold too, unless this release is itself awaiting its rebuild.
    if !opts.awaiting_rebuild {
        for r in statements.iter().filter(|r| r.digest != statement.digest) {
            let path = layout::statement(&r.digest);
            let what = format!("build statement {path} kept from index v{base_index}");
            let file = cuda_aot::source::read_exact_signed(
                store.source(),
                &path,
                r.size,
                &r.digest,
                &what,
            )?;
            open_build(&base.root, &file, limits.statement, &what)?;
        }
    }
    if channel == Channel::Production {
        check_promoted(build, &promotions, &base)?;
    }
    let unchanged = base.index.as_ref().is_some_and(|old| {
        old.channel == channel
            && old.statements == statements
            && old.promotions == promotion_refs
            && old.entries == entries
    });
    if unchanged && !base.recovered {
        return Ok(Published {
            index_version: base_index,
            timestamp_version: base_ts,
            unchanged: true,
            blobs_written: written,
            blobs_reused: reused,
            entries: entries.len(),
            removed: 0,
            recovered: false,
            continued_after: None,
        });
    }
    let index = Index {
        schema: Index::SCHEMA.into(),
        version,
        expires: opts.now.plus(opts.index_ttl),
        channel,
        statements,
        promotions: promotion_refs,
        entries,
    };
    let index_file = sign(&index, publisher);
    let ts = Timestamp {
        schema: Timestamp::SCHEMA.into(),
        version: match base.recovered {
            false => next_version("timestamp", base_ts)?,
            true => version,
        },
        expires: opts.now.plus(opts.timestamp_ttl),
        index: IndexRef {
            version,
            digest: Digest::of(&index_file),
            size: index_file.len() as u64,
        },
    };
    let ts_file = sign(&ts, publisher);
    store.commit(&Commit {
        index_rel: layout::index(version),
        index: &index_file,
        timestamp: &ts_file,
        base_timestamp: base.timestamp.as_ref().map(|(_, d)| *d),
        version,
        base: base_index,
    })?;
    Ok(Published {
        index_version: version,
        timestamp_version: ts.version,
        unchanged: false,
        blobs_written: written,
        blobs_reused: reused,
        entries: index.entries.len(),
        removed,
        recovered: base.recovered,
        continued_after,
    })
}

/// Re-signs the timestamp for the current index with a new expiry and the next timestamp
/// version, without publishing anything else: what a publisher runs periodically so
/// clients do not refuse an unchanged registry as expired.
pub fn refresh_timestamp(
    store: &dyn Store,
    anchor: &[u8],
    publisher: &[&SecretKey],
    opts: &PublishOptions,
) -> Result<Timestamp> {
    let base = base(store, anchor, publisher, &opts.limits)?;
    let Some((current, digest)) = base.timestamp.filter(|_| !base.recovered) else {
        return Err(Error::Core(cuda_aot::Error::Missing {
            what: "timestamp signed by a current publisher key (publish a release first)".into(),
            path: format!("{}/{}", store.describe(), layout::TIMESTAMP),
        }));
    };
    let ts = Timestamp {
        version: next_version("timestamp", current.version)?,
        expires: opts.now.plus(opts.timestamp_ttl),
        ..current
    };
    store.replace_timestamp(&sign(&ts, publisher), Some(digest))?;
    Ok(ts)
}

/// Production: every module of the build must be covered by a promotion record (given
/// with this release or already in the registry) of its module and schedule version. The
/// verifier refuses anything else; the publisher says so before writing an index.
fn check_promoted(
    build: &SignedBuild,
    promotions: &[(&[u8], Promotion)],
    base: &Base,
) -> Result<()> {
    let all: Vec<&Promotion> = promotions
        .iter()
        .map(|(_, p)| p)
        .chain(base.promotions.iter().map(|(_, p)| p))
        .collect();
    for m in &build.modules {
        let d = Digest::of(&m.manifest_file);
        let id = &m.manifest.identity;
        if !all
            .iter()
            .any(|p| p.covers(&id.module, id.schedule_version, &d))
        {
            return Err(Error::Core(cuda_aot::Error::NotPromoted {
                module: id.module.to_string(),
                target: id.sm.to_string(),
                manifest: d.to_string(),
                reason: "no promotion record for this manifest comes with the release or is in the registry".into(),
            }));
        }
    }
    Ok(())
}

fn sign<T: Document>(doc: &T, keys: &[&SecretKey]) -> Vec<u8> {
    cuda_aot::metadata::sign_doc(doc, keys).to_bytes()
}

fn next_version(what: &str, v: u64) -> Result<u64> {
    v.checked_add(1).ok_or_else(|| {
        Error::Core(cuda_aot::Error::VersionOverflow {
            what: what.into(),
            version: v,
        })
    })
}

/// After a publisher-key rotation: the lowest index version with no file yet (the files of
/// the old line, an attacker's included, stay untouched and unreferenced).
fn first_free_index(store: &dyn Store) -> Result<u64> {
    free_index_from(store, 1)
}

/// The lowest index version from `v` on with no file yet.
fn free_index_from(store: &dyn Store, mut v: u64) -> Result<u64> {
    while store.source().read_at_most(&layout::index(v), 0)?.is_some() {
        v = next_version("index", v)?;
    }
    Ok(v)
}

type Entries = (Vec<IndexEntry>, Vec<DocRef>, Vec<DocRef>, usize);

/// The next index's entries, statements and promotions, and how many current entries it
/// drops.
fn next_entries(
    base: &Base,
    build: &SignedBuild,
    statement: DocRef,
    promotions: &[(&[u8], Promotion)],
    version: u64,
    keep_unlisted: bool,
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
        match keep_unlisted {
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

/// Test hook for crash and race tests (cargo feature `test-hooks` only, never in release
/// binaries): with `CUDA_AOT_PUBLISH_PAUSE=<step>:<dir>`, the publisher announces
/// `<dir>/<step>.<pid>.reached` after that step and waits (up to a minute) for `<dir>/go`
/// before going on, so a test can kill it or line up two publishers.
#[cfg(feature = "test-hooks")]
pub(crate) fn pause_point(step: Step) {
    use std::path::Path;
    let Some(spec) = std::env::var_os("CUDA_AOT_PUBLISH_PAUSE") else {
        return;
    };
    let spec = spec.to_string_lossy().into_owned();
    let Some((name, dir)) = spec.split_once(':') else {
        return;
    };
    if name != step.as_str() {
        return;
    }
    let dir = Path::new(dir);
    let _ = std::fs::write(
        dir.join(format!("{name}.{}.reached", std::process::id())),
        b"",
    );
    for _ in 0..6000 {
        if dir.join("go").exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Without the `test-hooks` feature the pause points compile to nothing.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn pause_point(_step: Step) {}
