// One source, built as two modules with different defines (like a prover's -DFEATURE_*
// variants): FIELD_GOLDILOCKS or FIELD_BABYBEAR picks the field, FEATURE_DERIVATIVE adds a
// kernel. Each variant has its own kernel set and its own mangled names.
#include <foreign/launch.cuh>

#if defined(FIELD_GOLDILOCKS)
#include <fields/gl64_t.cuh>
typedef gl64_t fr_t;
#elif defined(FIELD_BABYBEAR)
#include <fields/bb31_t.cuh>
typedef bb31_t fr_t;
#else
#error "define FIELD_GOLDILOCKS or FIELD_BABYBEAR"
#endif

namespace poly {

// out[i] = sum_k coeffs[k] * xs[i]^k (Horner), for n points; deg + 1 coefficients.
template <typename F>
__global__ void __launch_bounds__(FOREIGN_BLOCK)
eval(F* out, const F* coeffs, uint32_t deg, const F* xs, uint32_t n) {
    assert(coeffs != nullptr);
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride()) {
        F acc = coeffs[deg];
        for (uint32_t k = deg; k-- > 0;) acc = acc * xs[i] + coeffs[k];
        out[i] = acc;
    }
}
template __global__ void eval<fr_t>(fr_t*, const fr_t*, uint32_t, const fr_t*, uint32_t);

#if defined(FEATURE_DERIVATIVE)
// out[k] = (k + 1) * coeffs[k + 1] for k < deg.
template <typename F>
__global__ void __launch_bounds__(FOREIGN_BLOCK)
derivative(F* out, const F* coeffs, uint32_t deg) {
    for (uint32_t k = foreign::global_id(); k < deg; k += foreign::grid_stride())
        out[k] = F::from(k + 1) * coeffs[k + 1];
}
template __global__ void derivative<fr_t>(fr_t*, const fr_t*, uint32_t);
#endif

}  // namespace poly
