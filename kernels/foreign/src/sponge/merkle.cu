// One level of a Merkle tree: each parent is the permutation of its two children's digests
// in the node domain.
#include "foreign/sponge.cuh"

/// parents[i] = compress(children[2i], children[2i+1]), 4-element digests, i < n_parents.
extern "C" __global__ void sponge_merkle_level(uint32_t* parents, const uint32_t* children,
                                               uint32_t n_parents) {
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_parents) return;
    sponge::state_t s;
    sponge::init(s, sponge::DOMAIN_NODE);
    const uint32_t* left = children + 8ull * i;
    for (int k = 0; k < 8; k++) s.w[k] = sponge::add(s.w[k], left[k]);
    sponge::permute(s);
    for (int k = 0; k < 4; k++) parents[4ull * i + k] = s.w[k];
}
