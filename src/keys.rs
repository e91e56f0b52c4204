//! ed25519 keys: public keys in a one-line text form, key ids derived by the verifier,
//! and the signing half used by the tools.

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// An ed25519 public key, written `ed25519:<64 hex>`. Weak (small-order) keys are refused.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(VerifyingKey);

/// A key id: blake3 of the public key, computed by whoever verifies. A key id found in a
/// signed file is only a hint for lookup and is never trusted as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId([u8; 32]);

impl KeyId {
    /// 64 hex characters.
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
    /// The first 12 hex characters, for messages.
    pub fn short(&self) -> String {
        self.hex()[..12].to_string()
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.short())
    }
}

impl PublicKey {
    /// Parses 32 raw bytes; refuses invalid points and weak keys.
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<Self, Error> {
        let vk = VerifyingKey::from_bytes(bytes).map_err(|e| Error::BadKey {
            what: "public key".into(),
            reason: e.to_string(),
        })?;
        if vk.is_weak() {
            return Err(Error::BadKey {
                what: "public key".into(),
                reason: "weak (small-order) key".into(),
            });
        }
        Ok(PublicKey(vk))
    }
    /// The key id, derived from the key bytes.
    pub fn key_id(&self) -> KeyId {
        let mut h = blake3::Hasher::new();
        h.update(b"cuda-aot key id v1\ned25519\n");
        h.update(self.0.as_bytes());
        KeyId(*h.finalize().as_bytes())
    }
    /// Verifies `sig` over `message` with `verify_strict` (no malleable signatures).
    pub fn verify_strict(&self, message: &[u8], sig: &[u8]) -> bool {
        let Ok(sig) = ed25519_dalek::Signature::from_slice(sig) else {
            return false;
        };
        self.0.verify_strict(message, &sig).is_ok()
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ed25519:{}", hex::encode(self.0.as_bytes()))
    }
}
impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for PublicKey {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |reason: &str| Error::BadKey {
            what: format!("public key {:?}", s.escape_debug().to_string()),
            reason: reason.into(),
        };
        let h = s
            .trim()
            .strip_prefix("ed25519:")
            .ok_or_else(|| bad("expected ed25519:<64 hex>"))?;
        let mut b = [0u8; 32];
        hex::decode_to_slice(h, &mut b).map_err(|_| bad("expected ed25519:<64 hex>"))?;
        PublicKey::from_bytes(&b)
    }
}

impl Serialize for PublicKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
impl<'de> Deserialize<'de> for PublicKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The private half of a key. Held by tools only; the runtime never signs.
pub struct SecretKey(SigningKey);

impl SecretKey {
    /// From a 32-byte seed (e.g. from `getrandom`).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        SecretKey(SigningKey::from_bytes(&seed))
    }
    /// The 32-byte seed, for writing the key file.
    pub fn seed(&self) -> [u8; 32] {
        self.0.to_bytes()
    }
    /// The public key.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }
    /// Signs exact message bytes.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.0.sign(message).to_bytes()
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey({})", self.public().key_id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips_and_key_id_is_derived() {
        let k = SecretKey::from_seed([7; 32]);
        let p = k.public();
        let text = p.to_string();
        assert!(text.starts_with("ed25519:") && text.len() == 8 + 64);
        assert_eq!(text.parse::<PublicKey>().unwrap(), p);
        assert_eq!(p.key_id(), text.parse::<PublicKey>().unwrap().key_id());
        assert_ne!(p.key_id(), SecretKey::from_seed([8; 32]).public().key_id());
        let sig = k.sign(b"msg");
        assert!(p.verify_strict(b"msg", &sig));
        assert!(!p.verify_strict(b"msh", &sig));
    }

    #[test]
    fn weak_keys_are_refused() {
        // The identity point (small order).
        let mut id = [0u8; 32];
        id[0] = 1;
        let err = PublicKey::from_bytes(&id).unwrap_err();
        assert!(err.to_string().contains("weak"), "{err}");
    }
}
