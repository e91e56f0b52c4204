// field_ops.cu: elementwise Goldilocks arithmetic over device arrays.
//
// CPU reference: kernels/src/goldilocks.rs (add_vec, mul_vec, axpy).
// Launch: any grid, blockDim.x <= CUDA_AOT_BLOCK, 1-D; the loops are
// grid-stride, so every i in [0, n) is handled once whatever the grid.
// `out` may be the same array as an input (in place), but must not partially
// overlap one. Inputs may hold any 64-bit value; outputs are canonical (< p).
#include "goldilocks.cuh"

#ifndef CUDA_AOT_BLOCK
#define CUDA_AOT_BLOCK 256
#endif

// out[i] = a[i] + b[i] mod p.
extern "C" __global__ void __launch_bounds__(CUDA_AOT_BLOCK)
gl_add(const unsigned long long* a, const unsigned long long* b, unsigned long long* out, unsigned int n) {
    const unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = goldilocks::add(a[i], b[i]);
    }
}

// out[i] = a[i] * b[i] mod p.
extern "C" __global__ void __launch_bounds__(CUDA_AOT_BLOCK)
gl_mul(const unsigned long long* a, const unsigned long long* b, unsigned long long* out, unsigned int n) {
    const unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = goldilocks::mul(a[i], b[i]);
    }
}

// out[i] = alpha * x[i] + y[i] mod p.
extern "C" __global__ void __launch_bounds__(CUDA_AOT_BLOCK)
gl_axpy(unsigned long long alpha, const unsigned long long* x, const unsigned long long* y, unsigned long long* out,
        unsigned int n) {
    const unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = goldilocks::add(goldilocks::mul(alpha, x[i]), y[i]);
    }
}
