//! CPU reference of the sponge library (`kernels/foreign/src/sponge/`, the six-file,
//! device-linked module `foreign_sponge`): the same permutation, absorb, Merkle level,
//! mix and squeeze as its kernels, element for element, over BabyBear ([`BB31_P`]).
//!
//! ```
//! use cuda_aot_kernels::sponge::{absorb, merkle_level, permute, init, DOMAIN_LEAF};
//! // Hashing an empty row is the leaf domain's initial state, unpermuted.
//! assert_eq!(absorb(&[], 0, 1), init(DOMAIN_LEAF)[..4]);
//! // Two children make one parent.
//! assert_eq!(merkle_level(&[1, 2, 3, 4, 5, 6, 7, 8]).len(), 4);
//! let mut s = init(DOMAIN_LEAF);
//! permute(&mut s);
//! assert_ne!(s, init(DOMAIN_LEAF));
//! ```

use crate::foreign::BB31_P;

/// State width, rate and rounds (`sponge::WIDTH`, `RATE`, `ROUNDS`).
pub const WIDTH: usize = 8;
/// Elements absorbed or squeezed per permutation.
pub const RATE: usize = 4;
/// Rounds of the permutation.
pub const ROUNDS: usize = 6;
/// The leaf domain's tag.
pub const DOMAIN_LEAF: u32 = 1;
/// The inner node domain's tag.
pub const DOMAIN_NODE: u32 = 2;

/// The initial state before the domain tag (`sponge::init`).
const IV: [u32; WIDTH] = [
    0x0a09_e667,
    0x3b67_ae85,
    0x3c6e_f372,
    0x254f_f53a,
    0x510e_527f,
    0x1b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// The round constants, `sponge::RC` (sponge/tables.cu).
pub const RC: [[u32; WIDTH]; ROUNDS] = [
    [
        0x1b2c3d4e, 0x05f60718, 0x292a3b4c, 0x5d6e7f01, 0x12233445, 0x56677889, 0x1aabbccd,
        0x0eeff001,
    ],
    [
        0x31415926, 0x53589793, 0x23846264, 0x33832795, 0x02884197, 0x16939937, 0x51058209,
        0x74944592,
    ],
    [
        0x27182818, 0x28459045, 0x23536028, 0x74713526, 0x62497757, 0x24709369, 0x59957496,
        0x69676277,
    ],
    [
        0x14142135, 0x62373095, 0x04880168, 0x72420969, 0x08074688, 0x33031251, 0x06715744,
        0x61443092,
    ],
    [
        0x17320508, 0x07568877, 0x29352744, 0x63406711, 0x45234898, 0x10034132, 0x52305489,
        0x68163122,
    ],
    [
        0x16180339, 0x08874989, 0x48482045, 0x48864389, 0x44364546, 0x30321432, 0x51172407,
        0x51029731,
    ],
];

/// Each round's rotation, `sponge::ROT`.
pub const ROT: [u32; ROUNDS] = [1, 3, 5, 2, 7, 4];

/// `sponge_mix`'s matrix (`sponge::load_mix`) and lane weights (`lane_weight`'s table).
const MIX: [[u32; 4]; 4] = [[2, 3, 1, 1], [1, 2, 3, 1], [1, 1, 2, 3], [3, 1, 1, 2]];
const LANE_WEIGHT: [u32; 4] = [7, 11, 13, 17];

fn add(a: u32, b: u32) -> u32 {
    ((u64::from(a) + u64::from(b)) % u64::from(BB31_P)) as u32
}

fn mul(a: u32, b: u32) -> u32 {
    ((u64::from(a) * u64::from(b)) % u64::from(BB31_P)) as u32
}

/// A domain's initial state (`sponge::init`).
pub fn init(domain: u32) -> [u32; WIDTH] {
    let mut s = IV;
    s[WIDTH - 1] = add(s[WIDTH - 1], domain);
    s
}

/// The permutation (`sponge::permute`): per round, x^7 of each element plus its round
/// constant, then `s_i = 2 row_i + row_{(i + ROT) mod 8}`.
pub fn permute(s: &mut [u32; WIDTH]) {
    for r in 0..ROUNDS {
        let row: [u32; WIDTH] = std::array::from_fn(|i| {
            let x = add(s[i], RC[r][i]);
            let x2 = mul(x, x);
            let x4 = mul(x2, x2);
            mul(mul(x4, x2), x)
        });
        for i in 0..WIDTH {
            s[i] = add(add(row[i], row[i]), row[(i + ROT[r] as usize) % WIDTH]);
        }
    }
}

/// One row's digest (`sponge::hash_row`): RATE elements absorbed per permutation.
fn hash_row(row: &[u32]) -> [u32; RATE] {
    let mut s = init(DOMAIN_LEAF);
    for chunk in row.chunks(RATE) {
        for (i, x) in chunk.iter().enumerate() {
            s[i] = add(s[i], *x);
        }
        permute(&mut s);
    }
    std::array::from_fn(|i| s[i])
}

/// `sponge_absorb`: the 4-element digest of each of `n_rows` rows of `len` elements.
pub fn absorb(rows: &[u32], len: usize, n_rows: usize) -> Vec<u32> {
    (0..n_rows)
        .flat_map(|r| hash_row(&rows[r * len..(r + 1) * len]))
        .collect()
}

/// How many permutations `sponge_absorb` runs for `n_rows` rows of `len` elements (what
/// the module's `sponge::permutations` counter adds).
pub fn absorb_permutations(len: usize, n_rows: usize) -> u64 {
    (n_rows * len.div_ceil(RATE)) as u64
}

/// `sponge_merkle_level`: each parent digest from two 4-element children.
pub fn merkle_level(children: &[u32]) -> Vec<u32> {
    children
        .chunks_exact(2 * RATE)
        .flat_map(|pair| {
            let mut s = init(DOMAIN_NODE);
            for (k, x) in pair.iter().enumerate() {
                s[k] = add(s[k], *x);
            }
            permute(&mut s);
            s[..RATE].to_vec()
        })
        .collect()
}

/// `sponge_mix`: each 4-element vector times the mix matrix, lane by lane weighted.
pub fn mix(input: &[u32]) -> Vec<u32> {
    input
        .chunks_exact(4)
        .flat_map(|v| {
            (0..4).map(move |r| {
                let acc = (0..4).fold(0, |acc, c| add(acc, mul(MIX[r][c], v[c])));
                mul(acc, LANE_WEIGHT[r])
            })
        })
        .collect()
}

/// `sponge_squeeze`: each row's digest extended to `out_len` elements.
pub fn squeeze(rows: &[u32], len: usize, n_rows: usize, out_len: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(n_rows * out_len);
    for r in 0..n_rows {
        let digest = hash_row(&rows[r * len..(r + 1) * len]);
        let mut s = init(DOMAIN_LEAF + DOMAIN_NODE);
        for (k, d) in digest.iter().enumerate() {
            s[k] = add(s[k], *d);
        }
        let mut produced = 0;
        while produced < out_len {
            permute(&mut s);
            let take = RATE.min(out_len - produced);
            out.extend_from_slice(&s[..take]);
            produced += take;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_are_canonical_field_elements() {
        // `sponge::add` assumes both operands below p.
        assert!(IV.iter().chain(RC.iter().flatten()).all(|x| *x < BB31_P));
    }

    #[test]
    fn rows_that_differ_hash_differently_and_squeeze_starts_from_the_digest() {
        let rows: Vec<u32> = (0..24).collect();
        let d = absorb(&rows, 6, 4);
        assert_eq!(d.len(), 16);
        assert_ne!(d[..4], d[4..8]);
        assert_eq!(absorb_permutations(6, 4), 8);
        assert_eq!(squeeze(&rows, 6, 4, 10).len(), 40);
        assert_eq!(mix(&[1, 0, 0, 0]), [14, 11, 13, 51]);
    }
}
