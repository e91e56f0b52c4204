// merkle.cu: one layer of a binary SHA-256 Merkle tree.
//
// CPU reference: kernels/src/merkle.rs (layer, layer_bytes).
// Launch: any grid, blockDim.x <= CUDA_AOT_BLOCK, 1-D; grid-stride, one
// thread per parent. `children` holds 64 * n_parents bytes (node 2i then
// node 2i + 1 for parent i), `parents` receives 32 * n_parents bytes. Both
// must be 4-byte aligned (cuMemAlloc gives 256) and must not overlap.

#include "sha256.cuh"

#ifndef CUDA_AOT_BLOCK
#define CUDA_AOT_BLOCK 128
#endif

// parents[32 i .. 32 i + 32) = SHA-256(children[64 i .. 64 i + 64)).
extern "C" __global__ void __launch_bounds__(CUDA_AOT_BLOCK)
merkle_layer(const unsigned char* children, unsigned char* parents, unsigned int n_parents) {
    const unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n_parents; i += stride) {
        sha256::hash64(children + 64 * i, parents + 32 * i);
    }
}
