// Template kernels instantiated for two fields (Goldilocks and BabyBear), with device
// assert()s, the way an external prover writes them: C++ names, no extern "C".
#include <fields/bb31_t.cuh>
#include <fields/gl64_t.cuh>
#include <foreign/launch.cuh>

namespace fields {

// out[i] = a[i] * b[i]
template <typename F>
__global__ void __launch_bounds__(FOREIGN_BLOCK)
vec_mul(F* out, const F* a, const F* b, uint32_t n) {
    assert(out != nullptr && a != nullptr && b != nullptr);
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride())
        out[i] = a[i] * b[i];
}

// y[i] = alpha * x[i] + y[i]; alpha is passed by value: 8 bytes for gl64_t, 4 for bb31_t.
template <typename F>
__global__ void __launch_bounds__(FOREIGN_BLOCK)
vec_axpy(F* y, F alpha, const F* x, uint32_t n) {
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride())
        y[i] = alpha * x[i] + y[i];
}

template __global__ void vec_mul<gl64_t>(gl64_t*, const gl64_t*, const gl64_t*, uint32_t);
template __global__ void vec_mul<bb31_t>(bb31_t*, const bb31_t*, const bb31_t*, uint32_t);
template __global__ void vec_axpy<gl64_t>(gl64_t*, gl64_t, const gl64_t*, uint32_t);
template __global__ void vec_axpy<bb31_t>(bb31_t*, bb31_t, const bb31_t*, uint32_t);

}  // namespace fields

namespace ntt {

// In-place bit-reversal permutation of 2^lg_n elements.
template <typename F>
__global__ void __launch_bounds__(FOREIGN_BLOCK)
bit_rev_permutation(F* d, uint32_t lg_n) {
    assert(lg_n <= 31);
    const uint32_t n = 1u << lg_n;
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride()) {
        uint32_t r = foreign::bit_reverse(i, lg_n);
        if (i < r) {
            F t = d[i];
            d[i] = d[r];
            d[r] = t;
        }
    }
}

template __global__ void bit_rev_permutation<gl64_t>(gl64_t*, uint32_t);
template __global__ void bit_rev_permutation<bb31_t>(bb31_t*, uint32_t);

}  // namespace ntt
