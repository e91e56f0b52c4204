// ntt.cu: radix-2 number-theoretic transform over Goldilocks, in place,
// driven by the host with one launch per step.
//
// CPU reference: kernels/src/ntt.rs, which runs the same steps in the same
// order (bit_reverse, butterfly_stage, scale).
//   forward: ntt_bit_reverse, then ntt_butterfly for stage = 0 .. log_n - 1
//            with the table omega^t, t in [0, n/2).
//   inverse: the same with the table omega^-t, then ntt_scale by n^-1 mod p.
// Launch: any grid, blockDim.x <= CUDA_AOT_BLOCK, 1-D; grid-stride loops.
// log_n must lie in [1, 32] (32 is the 2-adicity of p - 1) and stage in
// [0, log_n); outside that the kernels return without touching memory
// (n = 1, log_n = 0, needs no launch at all). Indices are 64-bit, so
// n = 2^32 works.

#include "goldilocks.cuh"

#ifndef CUDA_AOT_BLOCK
#define CUDA_AOT_BLOCK 256
#endif

// Permutes data[0 .. 2^log_n) in place: data[i] <-> data[rev(i)], where rev
// reverses the low log_n bits. Only the thread with i < rev(i) swaps, so each
// pair is swapped exactly once and no two threads touch the same element.
extern "C" __global__ void __launch_bounds__(CUDA_AOT_BLOCK)
ntt_bit_reverse(unsigned long long* data, unsigned int log_n) {
    if (log_n == 0 || log_n > 32) {
        return;
    }
    const unsigned long long n = 1ull << log_n;
    const unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const unsigned long long r = __brevll(i) >> (64 - log_n);
        if (i < r) {
            const unsigned long long t = data[i];
            data[i] = data[r];
            data[r] = t;
        }
    }
}

// One Cooley-Tukey decimation-in-time stage, half = 2^stage. Thread j in
// [0, n/2) owns the butterfly (i0, i1 = i0 + half), with k = j mod half:
//   w = twiddles[k << (log_n - 1 - stage)]  (= omega_{2 half}^k)
//   (a[i0], a[i1]) = (u + v, u - v), u = a[i0], v = a[i1] * w.
// `twiddles` holds n/2 entries. Every element is touched by one thread only.
extern "C" __global__ void __launch_bounds__(CUDA_AOT_BLOCK)
ntt_butterfly(unsigned long long* data, const unsigned long long* twiddles, unsigned int log_n, unsigned int stage) {
    if (log_n == 0 || log_n > 32 || stage >= log_n) {
        return;
    }
    const unsigned long long half = 1ull << stage;
    const unsigned long long pairs = 1ull << (log_n - 1);
    const unsigned int twiddle_shift = log_n - 1 - stage;
    const unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long j = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; j < pairs; j += stride) {
        const unsigned long long k = j & (half - 1);
        const unsigned long long i0 = ((j >> stage) << (stage + 1)) + k;
        const unsigned long long i1 = i0 + half;
        const unsigned long long w = twiddles[k << twiddle_shift];
        const unsigned long long u = data[i0];
        const unsigned long long v = goldilocks::mul(data[i1], w);
        data[i0] = goldilocks::add(u, v);
        data[i1] = goldilocks::sub(u, v);
    }
}

// data[i] = data[i] * factor mod p for i in [0, n). As n is 32-bit, scale a
// 2^32-element array with two launches of n = 2^31 (data, data + 2^31).
extern "C" __global__ void __launch_bounds__(CUDA_AOT_BLOCK)
ntt_scale(unsigned long long* data, unsigned long long factor, unsigned int n) {
    const unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        data[i] = goldilocks::mul(data[i], factor);
    }
}
