//! blake3 digests, written `blake3:<64 hex>`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// A blake3 digest of bytes (a blob, a signed file, a canonical identity).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// Hashes `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Digest(*blake3::hash(bytes).as_bytes())
    }
    /// Lower-case hex, 64 characters (used in registry paths).
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
    /// The first 12 hex characters, for tables and logs.
    pub fn short(&self) -> String {
        self.hex()[..12].to_string()
    }
}

/// Checks bytes against the size and blake3 a signed document lists for them: size first,
/// then the digest. The one such check of the workspace (verifier, publisher, signer).
pub fn check_blob(what: &str, bytes: &[u8], size: u64, digest: &Digest) -> crate::Result<()> {
    let got = bytes.len() as u64;
    if got != size {
        return Err(Error::SizeMismatch {
            what: what.into(),
            expected: size,
            actual: got,
            at_least: got > size,
        });
    }
    let actual = Digest::of(bytes);
    if actual != *digest {
        return Err(Error::DigestMismatch {
            what: what.into(),
            expected: digest.to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(())
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "blake3:{}", self.hex())
    }
}
impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Digest {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::InvalidName {
            kind: "digest",
            value: s.escape_debug().to_string(),
            reason: "expected blake3:<64 lower-case hex>",
        };
        let h = s.strip_prefix("blake3:").ok_or_else(bad)?;
        if h.len() != 64
            || !h
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(h, &mut out).map_err(|_| bad())?;
        Ok(Digest(out))
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_upper_case() {
        let d = Digest::of(b"abc");
        assert_eq!(d.to_string().parse::<Digest>().unwrap(), d);
        assert_eq!(
            d.hex(),
            "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
        assert!(
            d.to_string()
                .to_uppercase()
                .replace("BLAKE3", "blake3")
                .parse::<Digest>()
                .is_err()
        );
        assert!("sha256:00".parse::<Digest>().is_err());
    }
}
