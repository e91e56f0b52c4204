//! Signature thresholds (counted here and nowhere else), the one opener of signed
//! documents, trust-root validation and root rotation.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use std::collections::BTreeSet;

use crate::envelope::{Envelope, pae};
use crate::error::{Error, ForeignSignature, ForeignSigner, Result, escape_untrusted};
use crate::identity::Channel;
use crate::keys::KeyId;
use crate::limits::Limits;
use crate::metadata::{Document, Role, RoleName, Root};
use crate::source::{RegistrySource, layout};

/// A trust root whose signatures and consistency were checked. Only this module makes one.
#[derive(Debug, Clone)]
pub struct VerifiedRoot {
    root: Root,
    bytes: Vec<u8>,
    /// [`Limits::max_signatures`] of the verification that made it: every envelope this
    /// root opens is held to it.
    max_signatures: usize,
}

impl VerifiedRoot {
    /// The root payload.
    pub fn root(&self) -> &Root {
        &self.root
    }
    /// The exact signed file bytes (to persist the newest trusted root).
    pub fn file_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// A rebuilder's view of this root: a build statement needs the signature of one of the
    /// listed builder keys instead of the builder threshold (the rebuilder is about to add
    /// the next; a publisher may publish a release awaiting it, which clients refuse until
    /// it is co-signed). Every other role and key is unchanged. Never for loading.
    pub fn awaiting_builders(&self) -> VerifiedRoot {
        let mut view = self.clone();
        view.root.roles.builder.threshold = 1;
        view
    }

    /// A delegated team's view of this root (issue 46), for the team's publisher: build
    /// statements and promotion records need the team's `builder` and `reviewer` keys, as
    /// its delegation lists them, instead of the root's. Never for loading: a verifier finds
    /// each module's owner itself.
    pub fn for_team(&self, builder: &Role, reviewer: &Role) -> VerifiedRoot {
        let mut view = self.clone();
        view.root.roles.builder = builder.clone();
        view.root.roles.reviewer = reviewer.clone();
        view
    }

    /// Checks that a threshold of `role`'s keys signed `env`, and returns the payload bytes.
    ///
    /// This is the one place signatures are counted: key ids are derived from the trusted
    /// keys, each valid signature counts its key once, and signatures by keys of other
    /// roles or unknown keys never count (they are named in the error).
    pub fn verify_role(&self, env: &Envelope, role: RoleName, what: &str) -> Result<Signed> {
        verify_threshold(&self.root, env, role, self.max_signatures, what)
    }

    /// Opens a document of kind `T` signed by a delegated role whose keys for `T`'s signer
    /// are `keys` (a team's publisher keys for its metadata, issue 46), in the same four
    /// steps as [`VerifiedRoot::open`]; signatures are counted by the same function, each
    /// distinct key once.
    pub fn open_delegated<T: Document>(
        &self,
        bytes: &[u8],
        keys: &Role,
        limit: u64,
        what: &str,
    ) -> Result<Opened<T>> {
        let env = Envelope::parse(bytes, limit, T::PAYLOAD_TYPE, what)?;
        let signed =
            verify_threshold_of(&self.root, keys, &env, T::SIGNER, self.max_signatures, what)?;
        let doc = parse_payload::<T>(&signed.payload, limit, what)?;
        Ok(Opened {
            doc,
            signers: signed.signers,
        })
    }

    /// Opens a signed document of kind `T` from its file bytes, in four steps:
    ///
    /// 1. envelope: bounded strict JSON, payload type exactly `T`'s;
    /// 2. signatures: a threshold of `T`'s signing role over the exact payload bytes (before
    ///    the payload is parsed at all);
    /// 3. payload: bounded strict JSON (duplicated keys and unknown fields refused) as `T`;
    /// 4. schema tag exactly `T`'s.
    pub fn open<T: Document>(&self, bytes: &[u8], limit: u64, what: &str) -> Result<Opened<T>> {
        let env = Envelope::parse(bytes, limit, T::PAYLOAD_TYPE, what)?;
        let signed = verify_threshold(&self.root, &env, T::SIGNER, self.max_signatures, what)?;
        let doc = parse_payload::<T>(&signed.payload, limit, what)?;
        Ok(Opened {
            doc,
            signers: signed.signers,
        })
    }
}

/// A signed document whose threshold was met, parsed.
#[derive(Debug, Clone)]
pub struct Opened<T> {
    /// The document.
    pub doc: T,
    /// The distinct keys of the signing role whose signatures verified.
    pub signers: Vec<KeyId>,
}

/// Steps 3 and 4 of [`VerifiedRoot::open`]: strict JSON as `T`, schema tag checked.
fn parse_payload<T: Document>(payload: &[u8], limit: u64, what: &str) -> Result<T> {
    let doc: T = crate::json::parse(payload, limit, what)?;
    if doc.schema() != T::SCHEMA {
        return Err(Error::Json {
            what: what.into(),
            message: format!(
                "schema {:?}, expected {:?}",
                escape_untrusted(doc.schema()),
                T::SCHEMA
            ),
        });
    }
    Ok(doc)
}

/// Parses a signed document of kind `T` WITHOUT checking its signatures: for a publisher
/// reading back what it wrote itself, never for a decision a client relies on.
pub fn decode_unverified<T: Document>(bytes: &[u8], limit: u64, what: &str) -> Result<T> {
    Ok(decode_envelope::<T>(bytes, limit, what)?.1)
}

/// Like [`decode_unverified`], also returning the envelope: for a signer adding its
/// signature to a record another key holder started (a co-signing reviewer). Its
/// signatures are still only counted by [`VerifiedRoot::open`].
pub fn decode_envelope<T: Document>(bytes: &[u8], limit: u64, what: &str) -> Result<(Envelope, T)> {
    let env = Envelope::parse(bytes, limit, T::PAYLOAD_TYPE, what)?;
    let doc = parse_payload(&env.payload_bytes(what)?, limit, what)?;
    Ok((env, doc))
}

/// A payload whose signature threshold was met.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The exact payload bytes.
    pub payload: Vec<u8>,
    /// The distinct keys of the role whose signatures verified.
    pub signers: Vec<KeyId>,
}

fn verify_threshold(
    root: &Root,
    env: &Envelope,
    role: RoleName,
    max_signatures: usize,
    what: &str,
) -> Result<Signed> {
    verify_threshold_of(root, root.roles.get(role), env, role, max_signatures, what)
}

/// [`verify_threshold`] against `wanted`, the keys `role` has here: the root's own, or a
/// delegated team's (the root's roles still name a foreign signer).
fn verify_threshold_of(
    root: &Root,
    wanted: &Role,
    env: &Envelope,
    role: RoleName,
    max_signatures: usize,
    what: &str,
) -> Result<Signed> {
    let payload = env.payload_bytes(what)?;
    let message = pae(&env.payload_type, &payload);
    let mut valid: BTreeSet<KeyId> = BTreeSet::new();
    let mut foreign = Vec::new();
    if env.signatures.len() > max_signatures {
        return Err(Error::TooLarge {
            what: format!("{what} signatures"),
            limit: max_signatures as u64,
            actual: env.signatures.len() as u64,
        });
    }
    for s in &env.signatures {
        let candidate = wanted.keys.iter().find(|k| k.key_id().hex() == s.keyid);
        let sig = B64.decode(&s.sig).unwrap_or_default();
        match candidate {
            Some(k) if k.verify_strict(&message, &sig) => {
                valid.insert(k.key_id());
            }
            Some(k) => foreign.push(ForeignSignature {
                key: k.key_id().short(),
                signer: ForeignSigner::InvalidSignature,
            }),
            None => {
                // The key id is only a hint from the file: escaped before it is shown.
                let short = escape_untrusted(&s.keyid.chars().take(12).collect::<String>());
                let other = RoleName::ALL.into_iter().find(|r| {
                    root.roles
                        .get(*r)
                        .keys
                        .iter()
                        .any(|k| k.key_id().hex() == s.keyid && k.verify_strict(&message, &sig))
                });
                foreign.push(ForeignSignature {
                    key: short,
                    signer: other.map_or(ForeignSigner::UnknownKey, ForeignSigner::OtherRole),
                });
            }
        }
    }
    if (valid.len() as u64) < u64::from(wanted.threshold) {
        return Err(Error::Threshold {
            what: what.into(),
            role,
            valid: valid.len(),
            threshold: wanted.threshold,
            foreign,
            trusted: wanted.keys.iter().map(|k| k.key_id().short()).collect(),
        });
    }
    Ok(Signed {
        payload,
        signers: valid.into_iter().collect(),
    })
}

/// Checks a root's internal consistency: schema, thresholds, distinct keys, builder and
/// reviewer keys disjoint, a freeze bound.
fn check_consistent(root: &Root) -> Result<()> {
    let bad = |reason: String| {
        Err(Error::BadRoot {
            version: root.version,
            reason,
        })
    };
    if root.schema != Root::SCHEMA {
        return bad(format!(
            "schema {:?}, expected {:?}",
            root.schema,
            Root::SCHEMA
        ));
    }
    for r in RoleName::ALL {
        check_role(root.roles.get(r), r.as_str()).or_else(bad)?;
    }
    if let Some(d) = &root.delegations {
        check_role(d, "delegations").or_else(bad)?;
    }
    if root.channel == Channel::Research {
        return bad(
            "the research channel labels run-time compiled builds, which never leave their process; a trust root is dev or production"
                .into(),
        );
    }
    if root.max_expiry.timestamp_days == 0 || root.max_expiry.index_days == 0 {
        return bad("max_expiry must allow at least one day".into());
    }
    check_builders_apart(&root.roles.builder, &root.roles.reviewer).or_else(bad)
}

/// The rule every set of role keys meets, a trust root's or a delegated team's: no key
/// listed twice (one signature must never count twice), a threshold between 1 and the
/// keys. The error names the role as `name`.
pub(crate) fn check_role(role: &Role, name: &str) -> std::result::Result<(), String> {
    let ids: BTreeSet<KeyId> = role.keys.iter().map(|k| k.key_id()).collect();
    if ids.len() != role.keys.len() {
        return Err(format!("the {name} role lists the same key twice"));
    }
    if role.threshold == 0 || role.threshold as usize > role.keys.len() {
        return Err(format!(
            "the {name} threshold {} must be between 1 and its {} key(s)",
            role.threshold,
            role.keys.len()
        ));
    }
    Ok(())
}

/// Builders and reviewers share no key (a builder must not promote its own build).
pub(crate) fn check_builders_apart(
    builder: &Role,
    reviewer: &Role,
) -> std::result::Result<(), String> {
    let builders: BTreeSet<KeyId> = builder.keys.iter().map(|k| k.key_id()).collect();
    match reviewer
        .keys
        .iter()
        .find(|k| builders.contains(&k.key_id()))
    {
        Some(shared) => Err(format!(
            "key {} is both a builder and a reviewer key",
            shared.key_id()
        )),
        None => Ok(()),
    }
}

/// Verifies a trust root given out of band (the client's configured trust anchor): it must
/// be consistent and signed by a threshold of its own root keys.
pub fn verify_anchor(bytes: &[u8], limits: &Limits, what: &str) -> Result<VerifiedRoot> {
    let env = Envelope::parse(bytes, limits.root, Root::PAYLOAD_TYPE, what)?;
    // Self-signed: the keys that verify it are in the payload, so it is parsed first.
    let root: Root = parse_payload(&env.payload_bytes(what)?, limits.root, what)?;
    check_consistent(&root)?;
    verify_threshold(&root, &env, RoleName::Root, limits.max_signatures, what)?;
    Ok(VerifiedRoot {
        root,
        bytes: bytes.to_vec(),
        max_signatures: limits.max_signatures,
    })
}

/// Signs `root` with `keys` and checks the file exactly as a client will before handing it
/// out: as a first root ([`verify_anchor`]), or as the rotation from `previous`
/// ([`rotate`]). The one way the tools make a trust root file (`cargo xtask trust-root`, the
/// dev root of a fresh clone), so none can write a root that its clients would refuse.
pub fn sign_root(
    root: &Root,
    keys: &[&crate::keys::SecretKey],
    previous: Option<&VerifiedRoot>,
    limits: &Limits,
) -> Result<Vec<u8>> {
    let file = crate::metadata::sign_doc(root, keys).to_bytes();
    match previous {
        Some(prev) => rotate(prev, &file, limits, "new root")?,
        None => verify_anchor(&file, limits, "new root")?,
    };
    Ok(file)
}

/// Verifies root N+1 against trusted root N: version exactly one higher, consistent, and
/// signed by a threshold of N's root keys and of its own root keys.
pub fn rotate(
    trusted: &VerifiedRoot,
    next: &[u8],
    limits: &Limits,
    what: &str,
) -> Result<VerifiedRoot> {
    let from = trusted.root.version;
    let env = Envelope::parse(next, limits.root, Root::PAYLOAD_TYPE, what)?;
    let root: Root = parse_payload(&env.payload_bytes(what)?, limits.root, what)?;
    let to = root.version;
    let want = from.checked_add(1).ok_or_else(|| Error::VersionOverflow {
        what: "trust root".into(),
        version: from,
    })?;
    if to != want {
        return Err(Error::RootRotation {
            from,
            to,
            reason: format!("version must be exactly {want}"),
        });
    }
    check_consistent(&root)?;
    let by_old = verify_threshold(
        &trusted.root,
        &env,
        RoleName::Root,
        limits.max_signatures,
        what,
    );
    if let Err(e) = by_old {
        return Err(Error::RootRotation {
            from,
            to,
            reason: format!("not signed by a threshold of root v{from}'s root keys: {e}"),
        });
    }
    let by_new = verify_threshold(&root, &env, RoleName::Root, limits.max_signatures, what);
    if let Err(e) = by_new {
        return Err(Error::RootRotation {
            from,
            to,
            reason: format!("not signed by a threshold of its own root keys: {e}"),
        });
    }
    Ok(VerifiedRoot {
        root,
        bytes: next.to_vec(),
        max_signatures: limits.max_signatures,
    })
}

/// Walks a registry's root chain from `trusted`: reads `root/<N+1>.root.json` while it is
/// present and verifies each rotation ([`rotate`]), at most
/// [`Limits::max_root_updates`] of them ([`Error::RootChainTooLong`] past that). The one
/// walk of a chain: `each(previous, next)` sees every rotation in order (a caller notes
/// what it needs, e.g. whether the publisher keys changed). Returns the newest root.
pub fn walk_chain(
    src: &dyn RegistrySource,
    mut trusted: VerifiedRoot,
    limits: &Limits,
    mut each: impl FnMut(&VerifiedRoot, &VerifiedRoot),
) -> Result<VerifiedRoot> {
    let from = trusted.root.version;
    let mut rotations: u64 = 0;
    while let Some(next) = trusted.root.version.checked_add(1) {
        let path = layout::root(next);
        let Some(bytes) = src.read_at_most(&path, limits.root)? else {
            break;
        };
        if rotations >= limits.max_root_updates {
            return Err(Error::RootChainTooLong {
                from,
                limit: limits.max_root_updates,
                next,
            });
        }
        if bytes.len() as u64 > limits.root {
            return Err(Error::TooLarge {
                what: path,
                limit: limits.root,
                actual: bytes.len() as u64,
            });
        }
        let rotated = rotate(&trusted, &bytes, limits, &path)?;
        each(&trusted, &rotated);
        trusted = rotated;
        rotations += 1;
    }
    Ok(trusted)
}
