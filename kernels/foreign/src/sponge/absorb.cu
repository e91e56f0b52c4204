// Rows absorbed into digests: each thread hashes one row, RATE elements per permutation.
#include "foreign/sponge.cuh"

namespace sponge {

__device__ void hash_row(const uint32_t* row, uint32_t len, uint32_t* digest) {
    state_t s;
    init(s, DOMAIN_LEAF);
    for (uint32_t at = 0; at < len; at += RATE) {
        for (uint32_t i = 0; i < RATE && at + i < len; i++) {
            s.w[i] = add(s.w[i], row[at + i]);
        }
        permute(s);
    }
    for (int i = 0; i < RATE; i++) digest[i] = s.w[i];
}

}  // namespace sponge

/// digests[r*4..r*4+4] = hash of rows[r*len..(r+1)*len], for r < n_rows.
extern "C" __global__ void sponge_absorb(uint32_t* digests, const uint32_t* rows, uint32_t len,
                                         uint32_t n_rows) {
    uint32_t r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < n_rows) sponge::hash_row(rows + static_cast<uint64_t>(r) * len, len, digests + 4ull * r);
}
