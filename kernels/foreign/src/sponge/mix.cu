// A column mix over the field class, with the matrix an inline template function builds
// and a lane weight from a static table: out = M * in (4 elements per vector) times the
// lane's weight.
#include "foreign/sponge.cuh"

namespace sponge {

template <class F>
__device__ void mix4(const uint32_t* in, uint32_t* out) {
    mat4_t<F> m;
    load_mix(m);
    for (int r = 0; r < 4; r++) {
        uint32_t acc = 0;
        for (int c = 0; c < 4; c++) acc = add(acc, mul(m.m[r][c].v, in[c]));
        out[r] = mul(acc, lane_weight(r));
    }
}

}  // namespace sponge

/// vectors of 4 elements, n of them, mixed in place into `out`.
extern "C" __global__ void sponge_mix(uint32_t* out, const uint32_t* in, uint32_t n) {
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) sponge::mix4<sponge::felt_t>(in + 4ull * i, out + 4ull * i);
}
