//! The publish algorithm, written once over a [`Store`]: what a release is ([`SignedBuild`],
//! [`Release`]), how the next index is derived from the current one (exact release sets,
//! `since`, no-op publishes), and the order of writes that keeps every reader on a whole
//! release.

mod base;
mod build;
mod next;
mod overlay;
mod pause;
mod team;

use std::time::Duration;

use cuda_aot::metadata::{
    DocRef, Document, Index, IndexEntry, IndexRef, Promotion, Time, Timestamp,
};
use cuda_aot::provenance::open_build;
use cuda_aot::source::{RegistrySource, layout};
use cuda_aot::state::TrustState;
use cuda_aot::trust::VerifiedRoot;
use cuda_aot::{Channel, Digest, Limits, SecretKey};

use crate::error::{Error, Result};
// The server checks a publish request against the registry's newest root.
#[cfg(feature = "net")]
pub(crate) use base::walk;
use base::{Base, base};
pub use build::{BuiltModule, SignedBuild};
use next::{Versions, next_entries, next_version, next_versions};
pub(crate) use overlay::Overlay;
pub(crate) use pause::pause_point;
use team::Teams;
pub use team::{Delegated, TeamPublish, publish_delegations, team_root};

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
    /// How often a team's publish lost the race to another publisher and built again on
    /// the newer index ([`publish_as`]).
    pub retries: u64,
}

/// The steps of a publish, in order. A publisher killed after any of them leaves a
/// registry that still verifies: at the previous version, or after [`Step::Timestamp`] or
/// [`Step::Pushed`] at the new one (after `Pushed`, without its OCI referrers yet).
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
    /// OCI only: the artifact's manifest is on its tag, its attestations are not attached
    /// yet (another publisher may move the tag in between).
    Pushed,
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
            Step::Pushed => "pushed",
        }
    }
}

/// Stores `anchor` (a signed trust root file, checked within `limits`) unless the
/// registry holds it already.
pub fn ensure_root(store: &dyn Store, anchor: &[u8], limits: &Limits) -> Result<u64> {
    let root = cuda_aot::trust::verify_anchor(anchor, limits, "trust root")?;
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
    publish_as(
        store,
        anchor,
        release,
        publisher,
        &Delegated::default(),
        opts,
    )
}

/// [`publish`] under delegations (issue 46): `delegated` may put a new delegations file in
/// force and name the team the release is for. A team's release lists that team's modules
/// (its metadata, signed here with the team's publisher keys) and leaves every other
/// owner's entries in the index; its build statement and promotion records are checked
/// against the team's builder and reviewer keys. Before anything is committed, the next
/// index's metadata is verified as a client will (the owner of every module found by the
/// search), so a publish never makes a registry its clients refuse. A team's publish that
/// loses the race to another publisher builds on the new index and tries again (up to
/// [`TEAM_RETRIES`] times): two teams publishing at once both land.
pub fn publish_as(
    store: &dyn Store,
    anchor: &[u8],
    release: &Release,
    publisher: &[&SecretKey],
    delegated: &Delegated<'_>,
    opts: &PublishOptions,
) -> Result<Published> {
    let team = delegated.team.is_some();
    let (r, retries) = retry_lost_races(
        || publish_once(store, anchor, release, publisher, delegated, opts),
        |e| team && matches!(e, Error::Conflict { .. }),
    );
    r.map(|p| Published { retries, ..p })
}

/// Runs `attempt` again while it fails with a lost race (`lost`), up to [`TEAM_RETRIES`]
/// times, apart in time (longer each try, and by process) so two publishers retrying do
/// not collide again. Returns the last result and the retries made. The one retry loop of a
/// team's publish, on every store (an OCI tag's, which has no compare-and-swap, included).
pub fn retry_lost_races<T, E>(
    mut attempt: impl FnMut() -> std::result::Result<T, E>,
    lost: impl Fn(&E) -> bool,
) -> (std::result::Result<T, E>, u64) {
    let mut retries = 0;
    loop {
        match attempt() {
            Err(e) if lost(&e) && retries < TEAM_RETRIES => {
                retries += 1;
                std::thread::sleep(Duration::from_millis(
                    50 * retries + u64::from(std::process::id() % 50),
                ));
            }
            r => return (r, retries),
        }
    }
}

/// How often a team's publish builds again on a newer index after losing a race.
pub const TEAM_RETRIES: u64 = 8;

fn publish_once(
    store: &dyn Store,
    anchor: &[u8],
    release: &Release,
    publisher: &[&SecretKey],
    delegated: &Delegated<'_>,
    opts: &PublishOptions,
) -> Result<Published> {
    // 1. The registry has a trust root; its current state verifies for this publisher.
    let base = read_base(store, anchor, publisher, opts)?;
    let build = &release.build;
    let channel = base.root.root().channel;
    // The delegations this publish leaves in force, and the team it is for.
    let modules = build
        .modules
        .iter()
        .map(|m| m.manifest.identity.module.to_string())
        .collect();
    let teams = Teams::prepare(store, &base, delegated, &modules, opts)?;
    // 2. The release fits the registry: channel, newest builders (a team's own, for a
    //    team's release), sources, promotions.
    let signers = match teams.as_ref().and_then(|t| t.team.as_ref()) {
        Some(d) => &base.root.for_team(&d.builder, &d.reviewer),
        None => &base.root,
    };
    let promotions = check_release(store, signers, release, channel, opts)?;
    // 3. Blobs and sources are stored (pause point `blobs`).
    let (written, reused) = store_blobs(store, build)?;
    // 4. Manifests, the statement and promotion records are stored (pause `manifests`),
    //    with the delegated metadata this publish signs.
    for (r, bytes) in teams.iter().flat_map(|t| &t.new_files) {
        store.put_content(&layout::team(&r.digest), bytes)?;
    }
    let statement = store_records(store, build, &promotions)?;
    // 5. The versions this publish starts from and the index version it creates.
    let v = next_versions(store, &base, opts)?;
    // The next index's entries, statements and promotion records.
    let keep = |e: &IndexEntry| opts.keep_unlisted || teams.as_ref().is_some_and(|t| t.keeps(e));
    let (entries, statements, promotion_refs, removed) =
        next_entries(&base, build, statement, &promotions, v.version, &keep);
    let team_refs = teams.as_ref().map_or(Vec::new(), |t| t.refs());
    // 6. Statements kept from the current index meet the builder threshold.
    //    (Under delegations each has its owner's keys: the check before the commit.)
    if teams.is_none() {
        check_kept_statements(store, &base, &statements, &statement, v.base_index, opts)?;
    }
    // Production: every module is promoted.
    if channel == Channel::Production {
        check_promoted(build, &promotions, &base)?;
    }
    // A release equal to what the registry serves commits nothing.
    let unchanged = base.index.as_ref().is_some_and(|old| {
        old.channel == channel
            && old.statements == statements
            && old.promotions == promotion_refs
            && old.entries == entries
            && old.teams == team_refs
    });
    if unchanged && !base.recovered {
        return Ok(Published {
            index_version: v.base_index,
            timestamp_version: v.base_ts,
            unchanged: true,
            blobs_written: written,
            blobs_reused: reused,
            entries: entries.len(),
            removed: 0,
            recovered: false,
            continued_after: None,
            retries: 0,
        });
    }
    let index = Index {
        schema: Index::SCHEMA.into(),
        version: v.version,
        expires: opts.now.plus(opts.index_ttl),
        channel,
        statements,
        promotions: promotion_refs,
        entries,
        teams: team_refs,
    };
    // 7. The index and its timestamp are signed, checked as a client will when anything is
    //    delegated, and committed (pause points in the store).
    let timestamp_version = commit_index(store, &base, &index, publisher, opts, &v, anchor)?;
    Ok(Published {
        index_version: v.version,
        timestamp_version,
        unchanged: false,
        blobs_written: written,
        blobs_reused: reused,
        entries: index.entries.len(),
        removed,
        recovered: base.recovered,
        continued_after: v.continued_after,
        retries: 0,
    })
}

/// Step 1 of [`publish`]: the registry has a trust root, its current state verifies for
/// `publisher`, and the versions it has seen can still grow.
fn read_base(
    store: &dyn Store,
    anchor: &[u8],
    publisher: &[&SecretKey],
    opts: &PublishOptions,
) -> Result<Base> {
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
    Ok(base)
}

/// Step 2 of [`publish`]: the build is of the registry's `channel`, its statement meets the
/// builders of `root` (the newest trust root, or its view for the publishing team), every
/// source it names comes with it; returns the release's promotion records, opened against
/// `root`.
fn check_release<'r>(
    store: &dyn Store,
    root: &VerifiedRoot,
    release: &'r Release,
    channel: Channel,
    opts: &PublishOptions,
) -> Result<Vec<(&'r [u8], Promotion)>> {
    let limits = &opts.limits;
    let build = &release.build;
    if build.channel() != channel {
        return Err(Error::Core(cuda_aot::Error::Channel {
            what: format!("build statement for {}", store.describe()),
            required: channel.to_string(),
            found: build.channel().to_string(),
        }));
    }
    // The statement was checked against the caller's root; check it against the newest.
    let builders = match opts.awaiting_rebuild {
        false => root.clone(),
        true => root.awaiting_builders(),
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
    release
        .promotions
        .iter()
        .map(|file| {
            let p = root
                .open::<Promotion>(file, limits.promotion, "promotion record")?
                .doc;
            Ok((file.as_slice(), p))
        })
        .collect::<Result<Vec<_>>>()
}

/// Step 3 of [`publish`]: every blob, then every source file, is stored; returns how many
/// blobs were written and how many were already there. Then the pause point `blobs`.
fn store_blobs(store: &dyn Store, build: &SignedBuild) -> Result<(usize, usize)> {
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
    Ok((written, reused))
}

/// Step 4 of [`publish`]: every manifest, the build statement and the release's promotion
/// records are stored; returns the statement's reference. Then the pause point `manifests`.
fn store_records(
    store: &dyn Store,
    build: &SignedBuild,
    promotions: &[(&[u8], Promotion)],
) -> Result<DocRef> {
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
    for (file, _) in promotions {
        store.put_content(&layout::promotion(&Digest::of(file)), file)?;
    }
    pause_point(Step::Manifests);
    Ok(statement)
}

/// Step 6 of [`publish`]: statements the next index keeps from the current one
/// (--keep-unlisted) meet the builder threshold too, unless this release is itself
/// awaiting its rebuild.
fn check_kept_statements(
    store: &dyn Store,
    base: &Base,
    statements: &[DocRef],
    statement: &DocRef,
    base_index: u64,
    opts: &PublishOptions,
) -> Result<()> {
    let limits = &opts.limits;
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
    Ok(())
}

/// Step 7 of [`publish`]: signs `index` and the timestamp that names it, and commits both
/// ([`Store::commit`]); returns the timestamp version.
fn commit_index(
    store: &dyn Store,
    base: &Base,
    index: &Index,
    publisher: &[&SecretKey],
    opts: &PublishOptions,
    v: &Versions,
    anchor: &[u8],
) -> Result<u64> {
    let version = v.version;
    let index_file = sign(index, publisher);
    let ts = Timestamp {
        schema: Timestamp::SCHEMA.into(),
        version: match base.recovered {
            false => next_version("timestamp", v.base_ts)?,
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
    if base.root.root().delegations.is_some() || !index.teams.is_empty() {
        check_as_client(store, anchor, &index_file, &ts_file, version, opts)?;
    }
    store.commit(&Commit {
        index_rel: layout::index(version),
        index: &index_file,
        timestamp: &ts_file,
        base_timestamp: base.timestamp.as_ref().map(|(_, d)| *d),
        version,
        base: v.base_index,
    })?;
    Ok(ts.version)
}

/// The next index's metadata (steps 1-5: every statement and promotion against the keys
/// of its module's owner) verified as a client will, over the store with the new index and
/// timestamp laid on top, before anything is committed.
fn check_as_client(
    store: &dyn Store,
    anchor: &[u8],
    index_file: &[u8],
    ts_file: &[u8],
    version: u64,
    opts: &PublishOptions,
) -> Result<()> {
    let files = [
        (layout::index(version), index_file),
        (layout::TIMESTAMP.to_string(), ts_file),
    ]
    .into_iter()
    .collect();
    let overlay = Overlay {
        dir: store.source(),
        files,
    };
    let vopts = cuda_aot::verify::Options {
        limits: opts.limits,
        now: opts.now,
        awaiting_rebuild: opts.awaiting_rebuild,
        ..cuda_aot::verify::Options::default()
    };
    cuda_aot::verify::verify_metadata(&overlay, anchor, TrustState::default(), &vopts)?;
    Ok(())
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
