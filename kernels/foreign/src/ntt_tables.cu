// The NTT twiddle table, defined once for every file that declares it `extern` (the way a
// relocatable-device-code prover shares tables between files: see ntt_stage.cu).
#include <cstdint>

__constant__ uint32_t ntt_twiddles[16] = {
    1u, 0x6f9d9a4eu, 0x2c1a5d3fu, 0x5e0b3c71u, 0x13f2e8a9u, 0x7a44d0c5u, 0x0be7f1d3u, 0x39c2a6b7u,
    0x48d1f00du, 0x21a9c3e5u, 0x6b3e0d19u, 0x1d5c7a2fu, 0x57f60b83u, 0x0e91d4c7u, 0x3a2b6e5du, 0x64c8f1a1u,
};
