// Shared kernel helpers of the foreign corpus: the project's own header tree, outside the
// sources folder (found through include_dirs, like a prover's `include/`).
#pragma once
#include <cassert>
#include <cstdint>

#ifndef FOREIGN_BLOCK
#define FOREIGN_BLOCK 256
#endif

namespace foreign {
__device__ __forceinline__ uint32_t global_id() { return blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ uint32_t grid_stride() { return gridDim.x * blockDim.x; }

__device__ __forceinline__ uint32_t bit_reverse(uint32_t i, uint32_t lg_n) {
    return lg_n == 0 ? 0 : __brev(i) >> (32 - lg_n);
}
}  // namespace foreign
