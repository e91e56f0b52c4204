// field_ops.cu: elementwise Goldilocks arithmetic over device arrays.
//
// CPU reference: kernels/src/goldilocks.rs (add_vec, mul_vec, axpy, poly_eval).
// Launch: any grid, blockDim.x <= CUDA_AOT_BLOCK, 1-D; the loops are
// grid-stride, so every i in [0, n) is handled once whatever the grid.
// `out` may be the same array as an input (in place), but must not partially
// overlap one. Inputs may hold any 64-bit value; outputs are canonical (< p).
#include "goldilocks.cuh"

#ifndef CUDA_AOT_BLOCK
#define CUDA_AOT_BLOCK 256
#endif

// The coefficients gl_poly_eval evaluates, c[0] + c[1] x + ... + c[7] x^7: a table the
// host fills once after loading the module (it is not initialised here), like the round
// constants and twiddle tables of real provers. Entries must be canonical (< p).
#define GL_POLY_TERMS 8
__constant__ unsigned long long gl_poly_coeffs[GL_POLY_TERMS];

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

// out[i] = sum_k gl_poly_coeffs[k] * x[i]^k mod p (Horner), with the host-filled table.
extern "C" __global__ void __launch_bounds__(CUDA_AOT_BLOCK)
gl_poly_eval(const unsigned long long* x, unsigned long long* out, unsigned int n) {
    const unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned long long acc = gl_poly_coeffs[GL_POLY_TERMS - 1];
        for (int k = GL_POLY_TERMS - 2; k >= 0; k--) {
            acc = goldilocks::add(goldilocks::mul(acc, x[i]), gl_poly_coeffs[k]);
        }
        out[i] = acc;
    }
}
