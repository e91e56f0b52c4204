// A small sponge hash over BabyBear, written as a prover's device-linked hash library is
// written: the state type and its constant initial values in this header, the round
// constants in one file (sponge/tables.cu), the permutation in another (sponge/permute.cu,
// never inlined into its callers: a real call with its own stack frame), and kernels in
// three more files that call it across the device link. Built as one module of six files
// with -rdc=true (kernels/foreign/foreign.toml, `foreign_sponge`); the CPU reference is
// cuda_aot_kernels::sponge.
//
// The inline functions below assign constexpr-built aggregates (`s = state_t(...)`): under
// -rdc=true cicc keeps each such constant as a WEAK `.nv.global.init` object named after
// the function (`_ZN6sponge4initERNS_7state_tEj$0`). Those are the compiler's, not the
// library's: the signed globals are exactly RC, ROT, permutations and `lane_weight`'s
// static table.
#pragma once
#include <cstdint>

namespace sponge {

/// BabyBear, p = 2^31 - 2^27 + 1.
constexpr uint32_t P = 0x78000001u;
/// State width in field elements, rate (absorbed per permutation) and rounds.
constexpr int WIDTH = 8;
constexpr int RATE = 4;
constexpr int ROUNDS = 6;
/// Domain tags: a leaf absorbed from a row, an inner Merkle node.
constexpr uint32_t DOMAIN_LEAF = 1;
constexpr uint32_t DOMAIN_NODE = 2;

__device__ __forceinline__ uint32_t add(uint32_t a, uint32_t b) {
    uint32_t s = a + b;
    return s >= P ? s - P : s;
}

__device__ __forceinline__ uint32_t mul(uint32_t a, uint32_t b) {
    return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) % P);
}

/// Eight field elements.
struct state_t {
    uint32_t w[WIDTH];
    __device__ state_t() {}
    __device__ constexpr state_t(uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t e,
                                 uint32_t f, uint32_t g, uint32_t h)
        : w{a, b, c, d, e, f, g, h} {}
};

/// A 4x4 matrix over a field type F that is built from a word.
template <class F>
struct mat4_t {
    F m[4][4];
    __device__ mat4_t() {}
    __device__ constexpr mat4_t(F a0, F a1, F a2, F a3, F b0, F b1, F b2, F b3, F c0, F c1,
                                F c2, F c3, F d0, F d1, F d2, F d3)
        : m{{a0, a1, a2, a3}, {b0, b1, b2, b3}, {c0, c1, c2, c3}, {d0, d1, d2, d3}} {}
};

/// A field element with a constexpr constructor, as field classes have.
struct felt_t {
    uint32_t v;
    __device__ felt_t() {}
    __device__ constexpr felt_t(uint32_t x) : v(x) {}
};

/// The initial state of a domain: fixed constants, the tag added to the last element.
__device__ inline void init(state_t& s, uint32_t domain) {
    s = state_t(0x0a09e667u, 0x3b67ae85u, 0x3c6ef372u, 0x254ff53au, 0x510e527fu, 0x1b05688cu,
                0x1f83d9abu, 0x5be0cd19u);
    s.w[WIDTH - 1] = add(s.w[WIDTH - 1], domain);
}

/// The mixing matrix of `sponge_mix` (an MDS-style circulant).
template <class F>
__device__ inline void load_mix(mat4_t<F>& m) {
    m = mat4_t<F>(F(2), F(3), F(1), F(1), F(1), F(2), F(3), F(1), F(1), F(1), F(2), F(3),
                  F(3), F(1), F(1), F(2));
}

/// A lane's weight, from a table local to this inline function (a user-declared static:
/// WEAK under -rdc=true, like cicc's objects, yet signed as the library's global).
__device__ inline uint32_t lane_weight(uint32_t lane) {
    static const uint32_t K[4] = {7, 11, 13, 17};
    return K[lane & 3];
}

/// Round constants (sponge/tables.cu): ROUNDS rows of WIDTH elements.
extern __constant__ uint32_t RC[ROUNDS][WIDTH];
/// The rotation of each round's linear layer (sponge/tables.cu).
extern __constant__ uint32_t ROT[ROUNDS];
/// Permutations run since the host last reset it (sponge/tables.cu, initialised to 0).
extern __device__ unsigned long long permutations;

/// The permutation (sponge/permute.cu): ROUNDS rounds of constants, x^7, and a rotated
/// mix. Never inlined: callers in other files reach it through the device link.
__device__ __noinline__ void permute(state_t& s);

/// Hashes `len` elements into a 4-element digest (sponge/absorb.cu).
__device__ void hash_row(const uint32_t* row, uint32_t len, uint32_t* digest);

}  // namespace sponge
