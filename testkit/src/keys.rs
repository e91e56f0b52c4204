//! Generated keys, the trust roots they make, and documents signed with them. Tests
//! generate every key: none is ever committed.

use std::time::Duration;

use cuda_aot::metadata::{Document, MaxExpiry, Role, Roles, Root, Time};
use cuda_aot::{Channel, SecretKey};

/// A fresh random key.
pub fn key() -> SecretKey {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("random bytes for a test key");
    SecretKey::from_seed(seed)
}

/// Signs any document with `signers`, as the bytes of its envelope.
pub fn sign_doc<T: Document>(doc: &T, signers: &[&SecretKey]) -> Vec<u8> {
    cuda_aot::metadata::sign_doc(doc, signers).to_bytes()
}

/// The keys of one trust root, one per role.
pub struct Keys {
    /// Signs roots (and their rotations).
    pub root: SecretKey,
    /// Signs build statements.
    pub builder: SecretKey,
    /// Signs promotions.
    pub reviewer: SecretKey,
    /// Signs indexes and timestamps.
    pub publisher: SecretKey,
}

impl Keys {
    /// Four fresh keys.
    pub fn new() -> Self {
        Keys {
            root: key(),
            builder: key(),
            reviewer: key(),
            publisher: key(),
        }
    }
}

impl Default for Keys {
    fn default() -> Self {
        Keys::new()
    }
}

/// A root payload listing `keys` with threshold 1 each, valid for a year.
pub fn root_payload(keys: &Keys, version: u64, channel: Channel) -> Root {
    let one = |k: &SecretKey| Role {
        keys: vec![k.public()],
        threshold: 1,
    };
    Root {
        schema: Root::SCHEMA.into(),
        version,
        expires: Time::now().plus(Duration::from_secs(86_400 * 365)),
        channel,
        max_expiry: MaxExpiry::DEFAULT,
        delegations: None,
        roles: Roles {
            root: one(&keys.root),
            builder: one(&keys.builder),
            reviewer: one(&keys.reviewer),
            publisher: one(&keys.publisher),
        },
    }
}

/// Signs a root payload with `signers`.
pub fn sign_root(root: &Root, signers: &[&SecretKey]) -> Vec<u8> {
    sign_doc(root, signers)
}

/// The signed trust root v1 of `keys` in `channel`, signed by its own root key.
pub fn root_file(keys: &Keys, channel: Channel) -> Vec<u8> {
    sign_root(&root_payload(keys, 1, channel), &[&keys.root])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_root_is_a_trust_anchor() {
        let keys = Keys::new();
        let file = root_file(&keys, Channel::Dev);
        let root = cuda_aot::trust::verify_anchor(&file, &Default::default(), "root").unwrap();
        assert_eq!(root.root().version, 1);
    }

    #[test]
    fn generated_keys_differ() {
        assert!(key().public() != key().public());
    }
}
