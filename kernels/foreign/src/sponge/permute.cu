// The sponge permutation. The linear layer rotates by a round's ROT, a value known only at
// run time, so its scratch row lives in this function's own stack frame: callers in other
// files need that frame on top of theirs (the kernel's whole stack, which nvlink computes
// over the call graph and the manifest signs).
#include "foreign/sponge.cuh"

namespace sponge {

__device__ __noinline__ void permute(state_t& s) {
    uint32_t row[WIDTH];
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < WIDTH; i++) {
            uint32_t x = add(s.w[i], RC[r][i]);
            uint32_t x2 = mul(x, x);
            uint32_t x4 = mul(x2, x2);
            row[i] = mul(mul(x4, x2), x);  // x^7
        }
        uint32_t rot = ROT[r];
        for (int i = 0; i < WIDTH; i++) {
            // s_i = 2 * row_i + row_{(i + rot) mod WIDTH}
            s.w[i] = add(add(row[i], row[i]), row[(i + rot) % WIDTH]);
        }
    }
    atomicAdd(&permutations, 1ull);
}

}  // namespace sponge
