// The one definition of the NTT context's tables (declared in foreign/ntt_context.cuh).
#include "foreign/ntt_context.cuh"

namespace ntt {
__constant__ bb31_t twiddles[1u << (MAX_LG_N - 1)];
__constant__ bb31_t scale;
__device__ unsigned long long stages_run = 0;
}  // namespace ntt
