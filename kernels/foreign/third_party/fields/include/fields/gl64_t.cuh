// Goldilocks field element, p = 2^64 - 2^32 + 1, in the style of an external field library:
// a struct with operators, included from another tree than the kernels (`-I`).
// Written for cuda-aot's foreign-kernel corpus.
#pragma once
#include <cstdint>

struct gl64_t {
    uint64_t v;  // canonical: v < P

    static constexpr uint64_t P = 0xFFFFFFFF00000001ull;

    __host__ __device__ static gl64_t from(uint64_t x) { return gl64_t{x >= P ? x - P : x}; }

    __device__ friend gl64_t operator+(gl64_t a, gl64_t b) {
        uint64_t s = a.v + b.v;
        // On carry, 2^64 = 2^32 - 1 (mod P).
        if (s < a.v) s += 0xFFFFFFFFull;
        return from(s);
    }

    __device__ friend gl64_t operator*(gl64_t a, gl64_t b) {
        uint64_t lo = a.v * b.v;
        uint64_t hi = __umul64hi(a.v, b.v);
        // hi * 2^64 + lo with 2^64 = 2^32 - 1 and 2^96 = -1 (mod P).
        uint64_t hi_hi = hi >> 32, hi_lo = hi & 0xFFFFFFFFull;
        uint64_t t = lo - hi_hi;
        if (lo < hi_hi) t -= 0xFFFFFFFFull;  // borrow: add P = subtract 2^32 - 1 mod 2^64
        uint64_t u = hi_lo * 0xFFFFFFFFull;
        uint64_t r = t + u;
        if (r < t) r += 0xFFFFFFFFull;
        return from(r);
    }
};
