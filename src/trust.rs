//! Signature thresholds (counted here and nowhere else), trust-root validation and root
//! rotation.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use std::collections::BTreeSet;

use crate::envelope::{Envelope, PayloadType, pae};
use crate::error::{Error, Result};
use crate::keys::KeyId;
use crate::limits::Limits;
use crate::metadata::{Role, RoleName, Root};

/// A trust root whose signatures and consistency were checked. Only this module makes one.
#[derive(Debug, Clone)]
pub struct VerifiedRoot {
    root: Root,
    bytes: Vec<u8>,
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

    /// Checks that a threshold of `role`'s keys signed `env`, and returns the payload bytes.
    ///
    /// This is the one place signatures are counted: key ids are derived from the trusted
    /// keys, each valid signature counts its key once, and signatures by keys of other
    /// roles or unknown keys never count (they are named in the error).
    pub fn verify_role(&self, env: &Envelope, role: RoleName, what: &str) -> Result<Signed> {
        verify_threshold(&self.root, env, role, what)
    }
}

/// A payload whose signature threshold was met.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The exact payload bytes.
    pub payload: Vec<u8>,
    /// The distinct keys of the role whose signatures verified.
    pub signers: Vec<KeyId>,
}

fn verify_threshold(root: &Root, env: &Envelope, role: RoleName, what: &str) -> Result<Signed> {
    let payload = env.payload_bytes(what)?;
    let message = pae(&env.payload_type, &payload);
    let wanted: &Role = root.roles.get(role);
    let mut valid: BTreeSet<KeyId> = BTreeSet::new();
    let mut foreign = Vec::new();
    for s in &env.signatures {
        let candidate = wanted.keys.iter().find(|k| k.key_id().hex() == s.keyid);
        let sig = B64.decode(&s.sig).unwrap_or_default();
        match candidate {
            Some(k) if k.verify_strict(&message, &sig) => {
                valid.insert(k.key_id());
            }
            Some(k) => foreign.push((k.key_id().short(), format!("{role} key, invalid signature"))),
            None => {
                let short = s.keyid.chars().take(12).collect::<String>();
                let other = RoleName::ALL.into_iter().find(|r| {
                    root.roles
                        .get(*r)
                        .keys
                        .iter()
                        .any(|k| k.key_id().hex() == s.keyid && k.verify_strict(&message, &sig))
                });
                let is = match other {
                    Some(r) => format!("a {r} key, not a {role} key"),
                    None => "unknown key".to_string(),
                };
                foreign.push((short, is));
            }
        }
    }
    if (valid.len() as u64) < u64::from(wanted.threshold) {
        return Err(Error::Threshold {
            what: what.into(),
            role: role.to_string(),
            valid: valid.len(),
            threshold: wanted.threshold,
            foreign,
        });
    }
    Ok(Signed {
        payload,
        signers: valid.into_iter().collect(),
    })
}

/// Checks a root's internal consistency: schema, thresholds, distinct keys, builder and
/// reviewer keys disjoint.
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
        let role = root.roles.get(r);
        let ids: BTreeSet<KeyId> = role.keys.iter().map(|k| k.key_id()).collect();
        if ids.len() != role.keys.len() {
            return bad(format!("the {r} role lists the same key twice"));
        }
        if role.threshold == 0 || role.threshold as usize > role.keys.len() {
            return bad(format!(
                "the {r} threshold {} must be between 1 and its {} key(s)",
                role.threshold,
                role.keys.len()
            ));
        }
    }
    let builders: BTreeSet<KeyId> = root.roles.builder.keys.iter().map(|k| k.key_id()).collect();
    if let Some(shared) = root
        .roles
        .reviewer
        .keys
        .iter()
        .find(|k| builders.contains(&k.key_id()))
    {
        return bad(format!(
            "key {} is both a builder and a reviewer key",
            shared.key_id()
        ));
    }
    Ok(())
}

/// Verifies a trust root given out of band (the client's configured trust anchor): it must
/// be consistent and signed by a threshold of its own root keys.
pub fn verify_anchor(bytes: &[u8], limits: &Limits, what: &str) -> Result<VerifiedRoot> {
    let env = Envelope::parse(bytes, limits.root, PayloadType::Root, what)?;
    let payload = env.payload_bytes(what)?;
    let root: Root = crate::json::parse(&payload, limits.root, what)?;
    check_consistent(&root)?;
    verify_threshold(&root, &env, RoleName::Root, what)?;
    Ok(VerifiedRoot {
        root,
        bytes: bytes.to_vec(),
    })
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
    let env = Envelope::parse(next, limits.root, PayloadType::Root, what)?;
    let payload = env.payload_bytes(what)?;
    let root: Root = crate::json::parse(&payload, limits.root, what)?;
    let to = root.version;
    if to != from + 1 {
        return Err(Error::RootRotation {
            from,
            to,
            reason: format!("version must be exactly {}", from + 1),
        });
    }
    check_consistent(&root)?;
    let by_old = verify_threshold(&trusted.root, &env, RoleName::Root, what);
    if let Err(e) = by_old {
        return Err(Error::RootRotation {
            from,
            to,
            reason: format!("not signed by a threshold of root v{from}'s root keys: {e}"),
        });
    }
    let by_new = verify_threshold(&root, &env, RoleName::Root, what);
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
    })
}
