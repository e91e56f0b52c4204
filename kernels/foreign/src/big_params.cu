// Kernels taking large structs by value, as provers pass round constants, twiddle tables
// and layer descriptions (CUDA 12.1+ allows 32,764 bytes of parameters). The sizes are fixed
// by static_assert: xtask/tests/foreign_kernels.rs checks the signed layouts against them.
#include <cstdint>
#include <cstddef>

// Poseidon2-style round constants for a width-16 permutation over a 64-bit field:
// 32 rounds x 16 lanes x 8 bytes = 4,096 bytes.
struct RoundConstants {
    uint64_t rc[32][16];
};
static_assert(sizeof(RoundConstants) == 4096, "4 KiB");

// An NTT stage description: 2,048 twiddles of 4 bytes and a trailing count: 8,196 bytes.
struct StageTwiddles {
    uint32_t w[2048];
    uint32_t count;
};
static_assert(sizeof(StageTwiddles) == 8196, "8 KiB + 4");
static_assert(offsetof(StageTwiddles, count) == 8192, "count after the table");

// A whole layer's worth of packed leaf bytes: 32,000 bytes, the largest a kernel can take
// beside one pointer.
struct LeafBlock {
    uint8_t bytes[32000];
};
static_assert(sizeof(LeafBlock) == 32000, "32,000 bytes");

extern "C" __global__ void add_round_constants(RoundConstants rc, uint64_t* state, int round) {
    int lane = threadIdx.x % 16;
    state[blockIdx.x * 16 + lane] += rc.rc[round % 32][lane];
}

// A struct followed by scalars: the scalars' offsets come after the 8,196-byte struct.
extern "C" __global__ void twiddle_stage(uint32_t* data, StageTwiddles tw, uint32_t n, uint8_t shift) {
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && i < tw.count) {
        data[i] = (data[i] * tw.w[i % 2048]) >> shift;
    }
}

extern "C" __global__ void sum_leaf_block(LeafBlock block, uint32_t* out) {
    uint32_t acc = 0;
    for (int i = threadIdx.x; i < 32000; i += blockDim.x) {
        acc += block.bytes[i];
    }
    atomicAdd(out, acc);
}
