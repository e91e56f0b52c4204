//! Offline verification of a registry, in the order the trust model fixes:
//! trust root (and its rotation chain) → timestamp → bundle index → manifests, and, per
//! module when it is needed, blob (size first, then blake3, then the cubin's ELF SM).
//!
//! Nothing is saved until every step passed: the caller persists [`VerifiedIndex::state`]
//! only after it has also verified the blobs it uses.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::envelope::{Envelope, PayloadType};
use crate::error::{Error, Result};
use crate::identity::{Channel, Manifest};
use crate::keys::KeyId;
use crate::limits::Limits;
use crate::metadata::{Index, IndexEntry, RoleName, Time, Timestamp};
use crate::source::{RegistrySource, layout, read_exact_signed, read_required};
use crate::state::TrustState;
use crate::trust::{VerifiedRoot, rotate, verify_anchor};

/// How to verify: the clock, its explicit skew allowance, byte limits and the channel the
/// caller requires.
#[derive(Debug, Clone)]
pub struct Options {
    /// The verifier's notion of now.
    pub now: Time,
    /// How far past an expiry a document is still accepted. Explicit and reported: zero
    /// unless the operator sets it.
    pub skew: Duration,
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
            limits: Limits::default(),
            required_channel: None,
        }
    }
}

/// A manifest whose envelope, builder signatures and index entry were checked.
#[derive(Debug, Clone)]
pub struct VerifiedManifest {
    manifest: Manifest,
    entry: IndexEntry,
    signers: Vec<KeyId>,
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
    /// The builder keys whose signatures counted.
    pub fn signers(&self) -> &[KeyId] {
        &self.signers
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

/// The result of verifying a registry's metadata: the trusted root, timestamp, index and
/// every manifest.
#[derive(Debug, Clone)]
pub struct VerifiedIndex {
    root: VerifiedRoot,
    timestamp: Timestamp,
    index: Index,
    manifests: Vec<VerifiedManifest>,
    state: TrustState,
    skew: Duration,
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
    /// Every manifest the index lists, verified.
    pub fn manifests(&self) -> &[VerifiedManifest] {
        &self.manifests
    }
    /// The trust state to persist once the caller's blob checks passed too.
    pub fn state(&self) -> TrustState {
        self.state
    }
    /// The clock-skew allowance this verification used (to be logged).
    pub fn skew(&self) -> Duration {
        self.skew
    }

    /// Step 6 and 7 for one module: reads the blob (size first, at most `size + 1` bytes),
    /// checks its blake3, and for a cubin checks the ELF SM against the claimed target.
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

/// Checks that a cubin's ELF header records exactly the SM (and `a` variant) claimed.
pub fn check_elf_sm(man: &Manifest, bytes: &[u8]) -> Result<()> {
    let id = &man.identity;
    let info = crate::elf::inspect(bytes).map_err(|reason| Error::NotCubin {
        what: man.label(),
        reason,
    })?;
    let actual = info.target();
    if actual != id.sm {
        return Err(Error::ElfSmMismatch {
            module: id.module.to_string(),
            claimed: id.sm.to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(())
}

/// Steps 1-5: verifies the registry's metadata and every manifest it lists.
///
/// `anchor` is the trust root file the caller trusts out of band; `seen` the versions
/// seen before (rollback protection).
pub fn verify_index(
    src: &dyn RegistrySource,
    anchor: &[u8],
    seen: TrustState,
    opts: &Options,
) -> Result<VerifiedIndex> {
    verify_index_for(src, anchor, seen, opts, &|entries| {
        Ok((0..entries.len()).collect())
    })
}

/// Like [`verify_index`], but step 5 verifies only the manifests of the index entries
/// that `wanted` picks (the index signature already covers every entry's digest). The
/// runtime uses it to check the builder signatures of the modules it will load, not of
/// every target in the bundle.
pub fn verify_index_for(
    src: &dyn RegistrySource,
    anchor: &[u8],
    seen: TrustState,
    opts: &Options,
    wanted: &dyn Fn(&[IndexEntry]) -> Result<Vec<usize>>,
) -> Result<VerifiedIndex> {
    let limits = &opts.limits;
    // 1. Trust root: the anchor must be self-consistent and signed by its own root keys.
    let anchor = verify_anchor(anchor, limits, "trust root")?;
    // 2. Rotation: walk root/<N+1>.root.json while present, each signed by old and new keys.
    let root = walk_root_chain(src, anchor, limits)?;
    check_not_rolled_back("trust root", seen.root, root.root().version)?;
    check_not_expired(
        &format!("trust root v{}", root.root().version),
        root.root().expires,
        opts,
    )?;
    check_channel("trust root", root.root().channel, opts)?;
    // 3. Timestamp: publisher threshold, not expired, not older than the last seen.
    let timestamp = verify_timestamp(src, &root, seen, opts)?;
    // 4. Index: exactly the bytes the timestamp names, publisher threshold, same version.
    let index = verify_index_file(src, &root, &timestamp, seen, opts)?;
    // 5. Manifests: listed digest, builder threshold, and describing what the index lists.
    let picked = wanted(&index.entries)?;
    let manifests = verify_manifests(src, &root, &index, &picked, opts)?;
    let state = seen.max(TrustState {
        root: root.root().version,
        timestamp: timestamp.version,
        index: index.version,
    });
    Ok(VerifiedIndex {
        root,
        timestamp,
        index,
        manifests,
        state,
        skew: opts.skew,
    })
}

fn walk_root_chain(
    src: &dyn RegistrySource,
    mut trusted: VerifiedRoot,
    limits: &Limits,
) -> Result<VerifiedRoot> {
    loop {
        let next = trusted.root().version + 1;
        let path = layout::root(next);
        match src.read_at_most(&path, limits.root)? {
            None => return Ok(trusted),
            Some(b) if b.len() as u64 > limits.root => {
                return Err(Error::TooLarge {
                    what: path,
                    limit: limits.root,
                    actual: b.len() as u64,
                });
            }
            Some(b) => trusted = rotate(&trusted, &b, limits, &path)?,
        }
    }
}

fn verify_timestamp(
    src: &dyn RegistrySource,
    root: &VerifiedRoot,
    seen: TrustState,
    opts: &Options,
) -> Result<Timestamp> {
    let what = layout::TIMESTAMP;
    let bytes = read_required(src, what, opts.limits.timestamp, "timestamp")?;
    let env = Envelope::parse(&bytes, opts.limits.timestamp, PayloadType::Timestamp, what)?;
    let payload = root.verify_role(&env, RoleName::Publisher, what)?.payload;
    let ts: Timestamp = crate::json::parse(&payload, opts.limits.timestamp, what)?;
    check_schema(what, &ts.schema, Timestamp::SCHEMA)?;
    check_not_rolled_back("timestamp", seen.timestamp, ts.version)?;
    check_not_expired(&format!("timestamp v{}", ts.version), ts.expires, opts)?;
    Ok(ts)
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
    let env = Envelope::parse(&bytes, opts.limits.index, PayloadType::Index, &path)?;
    let payload = root.verify_role(&env, RoleName::Publisher, &path)?.payload;
    let index: Index = crate::json::parse(&payload, opts.limits.index, &path)?;
    check_schema(&path, &index.schema, Index::SCHEMA)?;
    if index.version != ts.index.version {
        return Err(Error::VersionMismatch {
            what: format!("{path} (named by timestamp v{})", ts.version),
            expected: ts.index.version,
            got: index.version,
        });
    }
    check_not_rolled_back("index", seen.index, index.version)?;
    check_not_expired(&format!("index v{}", index.version), index.expires, opts)?;
    check_channel(&path, index.channel, opts)?;
    if index.channel != root.root().channel {
        return Err(Error::Channel {
            what: path,
            required: root.root().channel.to_string(),
            found: index.channel.to_string(),
        });
    }
    if index.entries.len() > opts.limits.index_entries {
        return Err(Error::TooLarge {
            what: format!("{path} entries"),
            limit: opts.limits.index_entries as u64,
            actual: index.entries.len() as u64,
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

fn verify_manifests(
    src: &dyn RegistrySource,
    root: &VerifiedRoot,
    index: &Index,
    picked: &[usize],
    opts: &Options,
) -> Result<Vec<VerifiedManifest>> {
    let limit = opts.limits.manifest;
    let mut out = Vec::with_capacity(picked.len());
    for e in picked.iter().filter_map(|i| index.entries.get(*i)) {
        let path = layout::manifest(&e.manifest);
        let what = format!("manifest of {} {} ({})", e.module, e.sm, path);
        if e.manifest_size > limit {
            return Err(Error::TooLarge {
                what,
                limit,
                actual: e.manifest_size,
            });
        }
        // Mix-and-match: only the exact file the index lists is accepted.
        let bytes = read_exact_signed(src, &path, e.manifest_size, &e.manifest, &what)?;
        let env = Envelope::parse(&bytes, limit, PayloadType::Manifest, &what)?;
        let signed = root.verify_role(&env, RoleName::Builder, &what)?;
        let manifest: Manifest = crate::json::parse(&signed.payload, limit, &what)?;
        check_schema(&what, &manifest.schema, Manifest::SCHEMA)?;
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
        if manifest.channel != index.channel {
            return Err(Error::Channel {
                what,
                required: index.channel.to_string(),
                found: manifest.channel.to_string(),
            });
        }
        out.push(VerifiedManifest {
            manifest,
            entry: e.clone(),
            signers: signed.signers,
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
            message: format!("schema {got:?}, expected {want:?}"),
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
    if opts.now.0 > expires.0 + opts.skew {
        return Err(Error::Expired {
            what: what.into(),
            expires: expires.to_string(),
            now: opts.now.to_string(),
            skew_secs: opts.skew.as_secs(),
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
