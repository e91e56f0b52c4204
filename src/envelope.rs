//! Signed envelopes over exact payload bytes, DSSE-style: signatures cover
//! `"DSSEv1" SP len(type) SP type SP len(body) SP body`, so nothing depends on JSON
//! canonicalisation and a signature for one kind of document never passes as another.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use std::fmt;

use crate::error::{Error, Result};
use crate::keys::SecretKey;

/// The kinds of signed document; each has its own payload type string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadType {
    /// A trust root (signed by root keys).
    Root,
    /// A bundle index / snapshot (publisher).
    Index,
    /// The timestamp (publisher).
    Timestamp,
    /// A build statement over every manifest of one build (builder).
    Build,
    /// A promotion record (reviewer).
    Promotion,
    /// An entry of a shared build cache (builder).
    CacheEntry,
    /// A shared build cache's dependency records of one job (builder).
    CacheRecords,
    /// A shared build cache's compiled file of a device-linked module (builder).
    CacheUnit,
    /// An in-toto statement: the build statement with its SLSA provenance (builder).
    InToto,
    /// A delegated team's metadata: its modules and its own delegations (the team's
    /// publisher keys, as its delegator lists them).
    Team,
}

impl PayloadType {
    /// The payload type string written in envelopes.
    pub fn as_str(&self) -> &'static str {
        match self {
            PayloadType::Root => "application/vnd.cuda-aot.root.v1+json",
            PayloadType::Index => "application/vnd.cuda-aot.index.v1+json",
            PayloadType::Timestamp => "application/vnd.cuda-aot.timestamp.v1+json",
            PayloadType::Build => "application/vnd.cuda-aot.build.v1+json",
            PayloadType::Promotion => "application/vnd.cuda-aot.promotion.v1+json",
            PayloadType::CacheEntry => "application/vnd.cuda-aot.cache-entry.v1+json",
            PayloadType::CacheRecords => "application/vnd.cuda-aot.cache-records.v1+json",
            PayloadType::CacheUnit => "application/vnd.cuda-aot.cache-unit.v1+json",
            PayloadType::InToto => "application/vnd.in-toto+json",
            PayloadType::Team => "application/vnd.cuda-aot.team.v1+json",
        }
    }
}

impl fmt::Display for PayloadType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The pre-authentication encoding: the exact bytes a signature covers.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + 32);
    out.extend_from_slice(
        format!(
            "DSSEv1 {} {} {} ",
            payload_type.len(),
            payload_type,
            payload.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(payload);
    out
}

/// One signature in an envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    /// Key id hint (hex). The verifier derives ids from the trusted keys and only uses
    /// this to find the candidate key.
    pub keyid: String,
    /// base64 of the 64-byte ed25519 signature.
    pub sig: String,
}

/// A signed document: payload bytes (base64), their type, and signatures over the PAE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Envelope {
    /// The payload type string.
    pub payload_type: String,
    /// base64 of the exact payload bytes.
    pub payload: String,
    /// Signatures over `pae(payload_type, payload)`.
    pub signatures: Vec<Signature>,
}

impl Envelope {
    /// Signs `payload` as `payload_type` with each of `keys`.
    pub fn sign(payload_type: PayloadType, payload: &[u8], keys: &[&SecretKey]) -> Envelope {
        let mut env = Envelope {
            payload_type: payload_type.as_str().into(),
            payload: B64.encode(payload),
            signatures: vec![],
        };
        let message = pae(&env.payload_type, payload);
        for k in keys {
            env.push_signature(k, &message);
        }
        env
    }

    /// Adds one more signature (e.g. a second root key co-signing a rotation). Fails when
    /// the payload of a parsed envelope is not base64.
    pub fn add_signature(&mut self, key: &SecretKey) -> Result<()> {
        let payload = self.payload_bytes("envelope")?;
        let message = pae(&self.payload_type, &payload);
        self.push_signature(key, &message);
        Ok(())
    }

    fn push_signature(&mut self, key: &SecretKey, message: &[u8]) {
        self.signatures.push(Signature {
            keyid: key.public().key_id().hex(),
            sig: B64.encode(key.sign(message)),
        });
    }

    /// Parses an envelope file (bounded, strict) and checks its payload type.
    pub fn parse(bytes: &[u8], limit: u64, expected: PayloadType, what: &str) -> Result<Envelope> {
        let env: Envelope = crate::json::parse(bytes, limit, what)?;
        if env.payload_type != expected.as_str() {
            return Err(Error::WrongPayloadType {
                what: what.into(),
                expected: expected.as_str().into(),
                actual: env.payload_type,
            });
        }
        Ok(env)
    }

    /// The decoded payload bytes.
    pub fn payload_bytes(&self, what: &str) -> Result<Vec<u8>> {
        B64.decode(&self.payload).map_err(|e| Error::Json {
            what: what.into(),
            message: format!("payload is not base64: {e}"),
        })
    }

    /// The on-disk bytes of this envelope.
    pub fn to_bytes(&self) -> Vec<u8> {
        crate::json::to_vec(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_dsse_spec_example() {
        // From the DSSE protocol description.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    #[test]
    fn wrong_payload_type_is_refused() {
        let k = crate::keys::tests::key();
        let env = Envelope::sign(PayloadType::Build, b"{}", &[&k]);
        let err =
            Envelope::parse(&env.to_bytes(), 1 << 16, PayloadType::Index, "index").unwrap_err();
        assert!(matches!(err, Error::WrongPayloadType { .. }), "{err}");
        assert!(Envelope::parse(&env.to_bytes(), 1 << 16, PayloadType::Build, "m").is_ok());
    }
}
