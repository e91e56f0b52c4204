// One NTT stage reading the twiddles another file defines (ntt_tables.cu). Built alone as
// a whole-program module it has no definition of the table: nvcc would compile a private,
// zero-filled copy (warning #20044-D), and the build refuses it
// (xtask/tests/foreign_kernels.rs, kernels/foreign/forgotten_table.toml).
#include <cstdint>

extern __constant__ uint32_t ntt_twiddles[16];

extern "C" __global__ void ntt_stage_mul(uint32_t* data, uint32_t n) {
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        data[i] = (uint32_t)(((uint64_t)data[i] * ntt_twiddles[i % 16]) % 0x78000001u);
    }
}
