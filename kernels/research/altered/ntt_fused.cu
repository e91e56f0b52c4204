// altered/ntt_fused.cu: a deliberately broken copy of ../ntt_fused.cu, never
// promoted. In ntt_stages the twiddle index forgets the tile's low bits (l),
// which only matters from the second fused launch on (s0 > 0): the 2^1 and
// 2^10 cases pass, 2^13 differs after launch 2. It exists to show that the
// parity runner stops at the first differing output and that `promote`
// refuses the failed report (kernels/tests/parity_gpu.rs, docs/gpu-review.sh).
// A test (xtask/tests/promote.rs,
// issue_17_the_altered_kernel_is_ntt_fused_with_one_line_changed) keeps it
// equal to ../ntt_fused.cu below this comment except for the one line marked
// ALTERED; change ../ntt_fused.cu, then copy it here and alter that line again.

// ntt_fused.cu (research): the radix-2 NTT of ../cuda/ntt.cu with several
// butterfly stages per launch, in shared memory.
//
// The released `ntt` module makes one launch per stage: every stage reads and
// writes all n elements in global memory (log_n round trips). Here one launch
// runs up to CUDA_AOT_TILE_LOG consecutive stages on tiles of
// 2^CUDA_AOT_TILE_LOG elements held in static shared memory, so a 2^20-point
// transform makes 1 + ceil(20 / TILE_LOG) launches and global round trips
// instead of 1 + 20. Same arithmetic, same twiddle table, same result, element
// for element: the parity spec (research.toml) holds it to the CPU reference
// (kernels/src/research.rs, `ntt_stages`) after every launch and to the
// released transform's reference (`ntt::forward`) at the end.
//
// Stages [s0, s0 + k) only combine elements whose indices differ in bits
// [s0, s0 + k): for fixed low bits l < 2^s0 and high bits h, the 2^k elements
//   i(m) = h * 2^(s0 + k) + m * 2^s0 + l,   m in [0, 2^k)
// form an independent tile, and stage s0 + t acts on the tile's local index m
// exactly as a stage t of a 2^k-point transform, with twiddle
//   w = twiddles[(m mod 2^t) * 2^s0 << (log_n - 1 - (s0 + t))].
//
// Launch: 1-D, blockDim.x <= CUDA_AOT_BLOCK, any grid (grid-stride over
// tiles; n / 2^k tiles). Composition (host), after ntt_bit_reverse:
//   for s0 = 0; s0 < log_n; s0 += TILE_LOG:
//       ntt_stages(data, twiddles, log_n, s0, min(TILE_LOG, log_n - s0))
// Out-of-range arguments (log_n outside [1, 32], stages = 0 or above
// TILE_LOG, s0 + stages > log_n) return without touching memory.

#include "goldilocks.cuh"

#ifndef CUDA_AOT_BLOCK
#define CUDA_AOT_BLOCK 256
#endif
#ifndef CUDA_AOT_TILE_LOG
#define CUDA_AOT_TILE_LOG 10
#endif

#define TILE (1u << CUDA_AOT_TILE_LOG)

// The same permutation as ntt.cu's ntt_bit_reverse (own copy: a module is one
// source file and the research module must stand alone).
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

// Stages [s0, s0 + stages) of the decimation-in-time transform, one tile of
// 2^stages elements per block iteration, in shared memory.
extern "C" __global__ void __launch_bounds__(CUDA_AOT_BLOCK)
ntt_stages(unsigned long long* data, const unsigned long long* twiddles, unsigned int log_n,
           unsigned int s0, unsigned int stages) {
    __shared__ unsigned long long tile[TILE];
    if (log_n == 0 || log_n > 32 || stages == 0 || stages > CUDA_AOT_TILE_LOG || s0 >= log_n ||
        stages > log_n - s0) {
        return;
    }
    const unsigned long long n = 1ull << log_n;
    const unsigned int size = 1u << stages;          // elements per tile
    const unsigned long long low = 1ull << s0;       // tiles per high block
    const unsigned long long tiles = n >> stages;
    for (unsigned long long t = blockIdx.x; t < tiles; t += gridDim.x) {
        const unsigned long long l = t & (low - 1);
        const unsigned long long h = t >> s0;
        const unsigned long long base = (h << (s0 + stages)) + l;
        for (unsigned int m = threadIdx.x; m < size; m += blockDim.x) {
            tile[m] = data[base + ((unsigned long long)m << s0)];
        }
        __syncthreads();
        for (unsigned int st = 0; st < stages; ++st) {
            const unsigned int half = 1u << st;
            const unsigned int shift = log_n - 1 - (s0 + st);
            for (unsigned int j = threadIdx.x; j < size / 2; j += blockDim.x) {
                const unsigned int k = j & (half - 1);
                const unsigned int i0 = ((j >> st) << (st + 1)) + k;
                const unsigned int i1 = i0 + half;
                // Global butterfly index within the stage s0 + st: k_global = k * 2^s0 + l.
                const unsigned long long kg = ((unsigned long long)k << s0); // ALTERED: forgets the low bits l
                const unsigned long long w = twiddles[kg << shift];
                const unsigned long long u = tile[i0];
                const unsigned long long v = goldilocks::mul(tile[i1], w);
                tile[i0] = goldilocks::add(u, v);
                tile[i1] = goldilocks::sub(u, v);
            }
            __syncthreads();
        }
        for (unsigned int m = threadIdx.x; m < size; m += blockDim.x) {
            data[base + ((unsigned long long)m << s0)] = tile[m];
        }
        __syncthreads();
    }
}
