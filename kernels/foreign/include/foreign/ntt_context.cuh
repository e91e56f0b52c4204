// The NTT context shared by the files of the `foreign_ntt` module, the way a prover built
// as relocatable device code shares it: the tables are declared here `extern` and defined
// once, in ntt_context.cu; the field's multiply is declared here and defined once, in
// ntt_field.cu. The build device-links the three files into one cubin per SM; the host
// fills the twiddle tables through `Module::global` before the first launch.
#pragma once
#include <cstdint>

#include "fields/bb31_t.cuh"

namespace ntt {
/// log2 of the largest transform the tables serve.
constexpr uint32_t MAX_LG_N = 10;

/// Forward twiddles, w^i for i < 2^(MAX_LG_N-1), w a primitive 2^MAX_LG_N-th root of unity:
/// filled by the host (all zeros until then).
extern __constant__ bb31_t twiddles[1u << (MAX_LG_N - 1)];

/// The scaling applied after a transform (n^-1 for an inverse one): filled by the host.
extern __constant__ bb31_t scale;

/// How many stage launches ran since the host last reset it (initialised to 0).
extern __device__ unsigned long long stages_run;

/// The field multiply, defined in ntt_field.cu (not inlined across files: a real call
/// through the device link).
__device__ bb31_t mul(bb31_t a, bb31_t b);

/// a + b and a - b of one butterfly.
__device__ void butterfly(bb31_t& a, bb31_t& b, bb31_t w);
}  // namespace ntt
