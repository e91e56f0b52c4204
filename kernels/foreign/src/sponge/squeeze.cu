// Squeezing: a digest extended to `out_len` elements, permuting between blocks of RATE;
// the seed is a row hashed by hash_row, which absorb.cu defines.
#include "foreign/sponge.cuh"

/// out[r*out_len..] = the squeeze of row r's digest, for r < n_rows.
extern "C" __global__ void sponge_squeeze(uint32_t* out, const uint32_t* rows, uint32_t len,
                                          uint32_t n_rows, uint32_t out_len) {
    uint32_t r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n_rows) return;
    uint32_t digest[4];
    sponge::hash_row(rows + static_cast<uint64_t>(r) * len, len, digest);
    sponge::state_t s;
    sponge::init(s, sponge::DOMAIN_LEAF + sponge::DOMAIN_NODE);
    for (int k = 0; k < 4; k++) s.w[k] = sponge::add(s.w[k], digest[k]);
    for (uint32_t at = 0; at < out_len; at += sponge::RATE) {
        sponge::permute(s);
        for (uint32_t k = 0; k < sponge::RATE && at + k < out_len; k++) {
            out[static_cast<uint64_t>(r) * out_len + at + k] = s.w[k];
        }
    }
}
