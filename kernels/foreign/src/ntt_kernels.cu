// The NTT kernels of the `foreign_ntt` module: they read the twiddle tables ntt_context.cu
// defines and call the field code ntt_field.cu defines, through the device link.
#include "foreign/launch.cuh"
#include "foreign/ntt_context.cuh"

// One radix-2 decimation-in-time stage over `data` (2^lg_n elements, bit-reversed input):
// butterflies of span 2^stage, twiddle w^(j * 2^(MAX_LG_N - 1 - stage)).
extern "C" __global__ void ntt_dit_stage(bb31_t* data, uint32_t lg_n, uint32_t stage) {
    const uint32_t half = 1u << stage;
    const uint32_t pairs = 1u << (lg_n - 1);
    for (uint32_t k = foreign::global_id(); k < pairs; k += foreign::grid_stride()) {
        const uint32_t j = k & (half - 1);
        const uint32_t i = ((k >> stage) << (stage + 1)) | j;
        const bb31_t w = ntt::twiddles[j << (ntt::MAX_LG_N - 1 - stage)];
        ntt::butterfly(data[i], data[i + half], w);
    }
    if (foreign::global_id() == 0) {
        atomicAdd(&ntt::stages_run, 1ull);
    }
}

// data[i] *= scale (the host sets `scale`, n^-1 after an inverse transform).
extern "C" __global__ void ntt_scale(bb31_t* data, uint32_t n) {
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride()) {
        data[i] = ntt::mul(data[i], ntt::scale);
    }
}

// data[i] = data[i]^e, square-and-multiply through ntt::mul (a call into ntt_field.cu per
// step unless link-time optimisation inlines it): with e = p - 2 it is the batch inversion
// provers run before an inverse transform.
extern "C" __global__ void ntt_pow(bb31_t* data, uint32_t n, uint32_t e) {
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride()) {
        bb31_t base = data[i];
        bb31_t acc = bb31_t{1u};
        for (uint32_t bits = e; bits != 0; bits >>= 1) {
            if (bits & 1u) {
                acc = ntt::mul(acc, base);
            }
            base = ntt::mul(base, base);
        }
        data[i] = acc;
    }
}

namespace ntt {
// The bit-reversal permutation of a transform of 2^LG_N elements, a template over the size
// as provers write it: its symbol is _ZN3ntt11bit_reverseILj10EEEvP6bb31_t, which
// cpp_demangle spells ntt::bit_reverse<(unsigned int)10> and c++filt ntt::bit_reverse<10u>.
template <uint32_t LG_N>
__global__ void bit_reverse(bb31_t* data) {
    for (uint32_t i = foreign::global_id(); i < (1u << LG_N); i += foreign::grid_stride()) {
        const uint32_t j = foreign::bit_reverse(i, LG_N);
        if (i < j) {
            const bb31_t t = data[i];
            data[i] = data[j];
            data[j] = t;
        }
    }
}
template __global__ void bit_reverse<10>(bb31_t*);
}  // namespace ntt

