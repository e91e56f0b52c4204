// goldilocks.cuh: arithmetic in the Goldilocks field, p = 2^64 - 2^32 + 1.
//
// Shared by field_ops.cu and ntt.cu. Every function accepts any 64-bit value,
// read as its residue mod p, and returns the canonical representative in
// [0, p). The CPU reference is kernels/src/goldilocks.rs, which computes the
// same values with u128 arithmetic; the tests there also run the reduction
// below, transcribed to Rust, against it.
#pragma once

namespace goldilocks {

// p = 2^64 - 2^32 + 1.
constexpr unsigned long long P = 0xFFFFFFFF00000001ull;
// 2^64 mod p = 2^32 - 1.
constexpr unsigned long long EPSILON = 0xFFFFFFFFull;

// Any 64-bit value to [0, p): one subtraction suffices because 2^64 < 2p.
__device__ __forceinline__ unsigned long long canonical(unsigned long long a) {
    return a >= P ? a - P : a;
}

__device__ __forceinline__ unsigned long long add(unsigned long long a, unsigned long long b) {
    a = canonical(a);
    b = canonical(b);
    const unsigned long long s = a + b;
    if (s < a) {
        // The sum wrapped: it lost 2^64, which is EPSILON mod p. As a, b < p,
        // s <= 2^64 - 2^33, so s + EPSILON < p and cannot wrap again.
        return s + EPSILON;
    }
    return canonical(s);
}

__device__ __forceinline__ unsigned long long sub(unsigned long long a, unsigned long long b) {
    a = canonical(a);
    b = canonical(b);
    const unsigned long long d = a - b;
    if (a < b) {
        // The difference wrapped: it gained 2^64, which is EPSILON mod p.
        // d - EPSILON = a - b + p, which lies in [1, p).
        return d - EPSILON;
    }
    return d;
}

// Reduces the 128-bit value hi * 2^64 + lo mod p.
//
// Write hi = hh * 2^32 + hl. As 2^64 = EPSILON and 2^96 = -1 mod p,
// hi * 2^64 + lo = lo - hh + hl * EPSILON (mod p).
__device__ __forceinline__ unsigned long long reduce128(unsigned long long lo, unsigned long long hi) {
    const unsigned long long hh = hi >> 32;
    const unsigned long long hl = hi & EPSILON;
    unsigned long long t0 = lo - hh;
    if (lo < hh) {
        // Wrapped: gained 2^64 = EPSILON mod p. Here t0 >= 2^64 - 2^32 + 1,
        // so subtracting EPSILON cannot wrap.
        t0 -= EPSILON;
    }
    // hl, EPSILON < 2^32, so the product fits in 64 bits.
    const unsigned long long t1 = hl * EPSILON;
    unsigned long long s = t0 + t1;
    if (s < t1) {
        // Wrapped: lost 2^64 = EPSILON mod p. Here s <= 2^64 - 2^33, so
        // adding EPSILON cannot wrap.
        s += EPSILON;
    }
    return canonical(s);
}

__device__ __forceinline__ unsigned long long mul(unsigned long long a, unsigned long long b) {
    return reduce128(a * b, __umul64hi(a, b));
}

}  // namespace goldilocks
