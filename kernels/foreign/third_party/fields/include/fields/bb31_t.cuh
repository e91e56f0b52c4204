// BabyBear field element, p = 2^31 - 2^27 + 1 = 0x78000001, 4 bytes on the device.
// Written for cuda-aot's foreign-kernel corpus.
#pragma once
#include <cstdint>

struct bb31_t {
    uint32_t v;  // canonical: v < P

    static constexpr uint32_t P = 0x78000001u;

    __host__ __device__ static bb31_t from(uint32_t x) { return bb31_t{x % P}; }

    __device__ friend bb31_t operator+(bb31_t a, bb31_t b) {
        uint32_t s = a.v + b.v;  // < 2^32: both < 2^31
        return bb31_t{s >= P ? s - P : s};
    }

    __device__ friend bb31_t operator*(bb31_t a, bb31_t b) {
        return bb31_t{static_cast<uint32_t>((static_cast<uint64_t>(a.v) * b.v) % P)};
    }
};
