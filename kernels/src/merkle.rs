//! CPU reference for `cuda/merkle.cu`: one layer of a binary SHA-256 Merkle
//! tree, `parent[i] = SHA-256(child[2i] || child[2i + 1])`.

use sha2::{Digest, Sha256};

/// The size of one node (a SHA-256 digest), in bytes.
pub const NODE_BYTES: usize = 32;

/// The parents of `children`, pairing them in order.
///
/// # Panics
///
/// If `children` has an odd length.
pub fn layer(children: &[[u8; NODE_BYTES]]) -> Vec<[u8; NODE_BYTES]> {
    assert!(
        children.len().is_multiple_of(2),
        "a Merkle layer needs an even number of children, got {}",
        children.len()
    );
    children
        .chunks_exact(2)
        .map(|pair| {
            Sha256::new()
                .chain_update(pair[0])
                .chain_update(pair[1])
                .finalize()
                .into()
        })
        .collect()
}

/// What `merkle_layer` writes: `children` is the flat device buffer
/// (`64 * n_parents` bytes), the result the flat `parents` buffer
/// (`32 * n_parents` bytes).
///
/// # Panics
///
/// If `children.len()` is not a multiple of 64.
pub fn layer_bytes(children: &[u8]) -> Vec<u8> {
    assert!(
        children.len().is_multiple_of(2 * NODE_BYTES),
        "a flat Merkle layer needs a multiple of 64 bytes, got {}",
        children.len()
    );
    children
        .chunks_exact(2 * NODE_BYTES)
        .flat_map(Sha256::digest)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::XorShift;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn known_vector_sha256_of_64_zero_bytes() {
        let parents = layer(&[[0; 32], [0; 32]]);
        assert_eq!(parents.len(), 1);
        assert_eq!(
            hex(&parents[0]),
            "f5a5fd42d16a20302798ef6ed309979b43003d2320d9f0e8ea9831a92759fb4b"
        );
    }

    #[test]
    fn known_vector_sha256_of_bytes_0_to_63() {
        let message: Vec<u8> = (0..64).collect();
        assert_eq!(
            hex(&layer_bytes(&message)),
            "fdeab9acf3710362bd2658cdc9a29e8f9c757fcf9811603a8c447cd1d9151108"
        );
    }

    #[test]
    fn layer_matches_manual_sha256() {
        let mut rng = XorShift::new(99);
        let flat = rng.bytes(64 * 17);
        let children: Vec<[u8; 32]> = flat
            .chunks_exact(32)
            .map(|c| c.try_into().unwrap())
            .collect();
        let parents = layer(&children);
        assert_eq!(parents.len(), 17);
        for (i, parent) in parents.iter().enumerate() {
            let expected: [u8; 32] = Sha256::digest(&flat[64 * i..64 * i + 64]).into();
            assert_eq!(*parent, expected, "parent {i}");
        }
        assert_eq!(layer_bytes(&flat), parents.concat());
        // Order matters: swapping the children changes the parent.
        assert_ne!(layer(&[children[1], children[0]])[0], parents[0]);
    }

    #[test]
    fn empty_layer() {
        assert!(layer(&[]).is_empty());
        assert!(layer_bytes(&[]).is_empty());
    }

    #[test]
    #[should_panic(expected = "multiple of 64 bytes")]
    fn flat_layer_needs_whole_pairs() {
        layer_bytes(&[0; 96]);
    }
}
