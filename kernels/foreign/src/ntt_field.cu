// The field operations of the NTT module, compiled on their own and reached from the
// kernels' file through the device link.
#include "foreign/ntt_context.cuh"

namespace ntt {
__device__ bb31_t mul(bb31_t a, bb31_t b) { return a * b; }

__device__ void butterfly(bb31_t& a, bb31_t& b, bb31_t w) {
    bb31_t t = mul(b, w);
    bb31_t neg_t = bb31_t{t.v == 0 ? 0u : bb31_t::P - t.v};
    b = a + neg_t;
    a = a + t;
}
}  // namespace ntt
