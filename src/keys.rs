//! ed25519 keys: public keys in a one-line text form, key ids derived by the verifier,
//! and the signing half used by the tools.

use curve25519_dalek::edwards::CompressedEdwardsY;
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// An ed25519 public key, written `ed25519:<64 hex>`.
///
/// Only canonically encoded, torsion-free points are accepted, so one secret key has exactly
/// one public key that verifies its signatures: a key plus a small-order point would
/// otherwise pass `verify_strict` as a second, "distinct" key and let one secret meet a
/// threshold of two alone.
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
    /// Parses 32 raw bytes; refuses invalid, non-canonical, weak (small-order) and
    /// torsioned points.
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<Self, Error> {
        let bad = |reason: &str| Error::BadKey {
            what: format!("public key ed25519:{}", hex::encode(bytes)),
            reason: reason.into(),
        };
        let point = CompressedEdwardsY(*bytes)
            .decompress()
            .ok_or_else(|| bad("not a point on the curve"))?;
        if point.compress().as_bytes() != bytes {
            return Err(bad(
                "not canonically encoded (another encoding of the same point)",
            ));
        }
        if point.is_small_order() {
            return Err(bad("weak (small-order) key"));
        }
        if !point.is_torsion_free() {
            return Err(bad(
                "has a small-order (torsion) component: the same secret key would count as two keys",
            ));
        }
        let vk = VerifyingKey::from_bytes(bytes).map_err(|e| bad(&e.to_string()))?;
        Ok(PublicKey(vk))
    }
    /// The 32 raw key bytes (RFC 8032 encoding).
    pub fn as_bytes(&self) -> &[u8; 32] {
        self.0.as_bytes()
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
pub(crate) mod tests {
    use super::*;

    /// A key from the OS random source: no key of a test is ever fixed.
    pub(crate) fn key() -> SecretKey {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).unwrap();
        SecretKey::from_seed(seed)
    }

    #[test]
    fn text_form_round_trips_and_key_id_is_derived() {
        let k = key();
        let p = k.public();
        let text = p.to_string();
        assert!(text.starts_with("ed25519:") && text.len() == 8 + 64);
        assert_eq!(text.parse::<PublicKey>().unwrap(), p);
        assert_eq!(p.key_id(), text.parse::<PublicKey>().unwrap().key_id());
        assert_ne!(p.key_id(), key().public().key_id());
        let sig = k.sign(b"msg");
        assert!(p.verify_strict(b"msg", &sig));
        assert!(!p.verify_strict(b"msh", &sig));
    }

    /// Issue 10, finding 1: a key A and A plus the point of order 2 both verify signatures
    /// made with A's secret (for about half of all messages, verify_strict included): one
    /// secret would count as two keys. The twin must never be accepted as a key.
    #[test]
    fn issue_10_a_key_plus_a_torsion_point_is_refused() {
        use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT, EIGHT_TORSION};
        use curve25519_dalek::scalar::{Scalar, clamp_integer};
        use sha2::{Digest as _, Sha512};
        let seed = [9u8; 32];
        let k = SecretKey::from_seed(seed);
        let h = Sha512::digest(seed);
        let a = Scalar::from_bytes_mod_order(clamp_integer(h[..32].try_into().unwrap()));
        let a_point = CompressedEdwardsY(*k.public().0.as_bytes())
            .decompress()
            .unwrap();
        assert_eq!(a_point, ED25519_BASEPOINT_POINT * a);
        let twin = (a_point + EIGHT_TORSION[4]).compress().to_bytes();
        // Sign "as the twin" with A's secret: the challenge hashes the twin's encoding.
        let sign_as_twin = |m: &[u8]| {
            let wide = |parts: &[&[u8]]| {
                let mut d = Sha512::new();
                for p in parts {
                    d.update(p);
                }
                Scalar::from_bytes_mod_order_wide(&d.finalize().into())
            };
            let r = wide(&[&h[32..], m]);
            let big_r = (ED25519_BASEPOINT_POINT * r).compress().to_bytes();
            let c = wide(&[&big_r, &twin, m]);
            let mut sig = [0u8; 64];
            sig[..32].copy_from_slice(&big_r);
            sig[32..].copy_from_slice((r + c * a).as_bytes());
            ed25519_dalek::Signature::from_bytes(&sig)
        };
        let vk = VerifyingKey::from_bytes(&twin).unwrap();
        let verified = (0u32..64)
            .filter(|i| {
                vk.verify_strict(&i.to_le_bytes(), &sign_as_twin(&i.to_le_bytes()))
                    .is_ok()
            })
            .count();
        assert!(
            verified > 0,
            "the attack should work against a bare verify_strict (it verified none of 64)"
        );
        let err = PublicKey::from_bytes(&twin).unwrap_err();
        assert!(err.to_string().contains("torsion"), "{err}");
        assert!(PublicKey::from_bytes(k.public().0.as_bytes()).is_ok());
    }

    #[test]
    fn a_non_canonical_encoding_is_refused() {
        // y = p + 1 (non-canonical encoding of y = 1, the identity, with an unreduced y).
        let mut b = [0xffu8; 32];
        b[0] = 0xee;
        b[31] = 0x7f;
        let err = PublicKey::from_bytes(&b).unwrap_err();
        assert!(
            err.to_string().contains("canonical") || err.to_string().contains("weak"),
            "{err}"
        );
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
