// A Poseidon2-style permutation over BabyBear whose constants live in device globals that
// the host fills once after loading, before the first launch: the way provers ship round
// constants, MDS matrices and NTT twiddles. cuda-aot signs every global's size, memory
// space and initialisation (issue 19, item 4); the GPU tests (tests/foreign.rs) fill the
// tables through Module::global, run the kernels and compare with a CPU reference.
//
// Globals (sizeof each, as the manifests sign them):
//   poseidon::ROUND_CONSTANTS  __constant__  256 bytes  filled by the host
//   poseidon::MDS              __constant__  256 bytes  filled by the host
//   poseidon::PARAMS           __device__     16 bytes  initialised {8, 8, tag}
//   poseidon::PERMUTATIONS     __device__      8 bytes  zero: a counter the kernels bump
//   poseidon::SCRATCH          __device__   4096 bytes  zero: a table the kernels write
#include <cstdint>

namespace poseidon {

constexpr uint32_t P = 0x78000001u;  // BabyBear: 2^31 - 2^27 + 1
constexpr int WIDTH = 8;
constexpr int ROUNDS = 8;
constexpr int SCRATCH_LEN = 1024;

struct Params {
    uint32_t rounds;      // how many of the ROUNDS rows to apply
    uint32_t width;       // always WIDTH: a check the host can read back
    uint64_t domain_tag;  // added to lane 0 before the first round
};
static_assert(sizeof(Params) == 16, "Params is 16 bytes on host and device");

__constant__ uint32_t ROUND_CONSTANTS[ROUNDS][WIDTH];
__constant__ uint32_t MDS[WIDTH][WIDTH];
__device__ Params PARAMS = {ROUNDS, WIDTH, 0x706f736569646f6eull};  // "poseidon"
__device__ unsigned long long PERMUTATIONS;
__device__ uint32_t SCRATCH[SCRATCH_LEN];

__device__ __forceinline__ uint32_t add(uint32_t a, uint32_t b) {
    uint32_t s = a + b;  // a, b < P < 2^31: no overflow
    return s >= P ? s - P : s;
}

__device__ __forceinline__ uint32_t mul(uint32_t a, uint32_t b) {
    return static_cast<uint32_t>(static_cast<uint64_t>(a) * b % P);
}

__device__ __forceinline__ uint32_t sbox(uint32_t x) {  // x^7
    uint32_t x2 = mul(x, x);
    uint32_t x3 = mul(x2, x);
    uint32_t x6 = mul(x3, x3);
    return mul(x6, x);
}

}  // namespace poseidon

// One permutation per thread: `states` holds n_states states of WIDTH canonical elements.
extern "C" __global__ void poseidon_permute(uint32_t* states, uint32_t n_states) {
    using namespace poseidon;
    uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_states) return;
    uint32_t s[WIDTH];
    for (int i = 0; i < WIDTH; i++) s[i] = states[t * WIDTH + i];
    s[0] = add(s[0], static_cast<uint32_t>(PARAMS.domain_tag % P));
    uint32_t rounds = PARAMS.rounds < ROUNDS ? PARAMS.rounds : ROUNDS;
    for (uint32_t r = 0; r < rounds; r++) {
        for (int i = 0; i < WIDTH; i++) s[i] = sbox(add(s[i], ROUND_CONSTANTS[r][i]));
        uint32_t m[WIDTH];
        for (int i = 0; i < WIDTH; i++) {
            uint32_t acc = 0;
            for (int j = 0; j < WIDTH; j++) acc = add(acc, mul(MDS[i][j], s[j]));
            m[i] = acc;
        }
        for (int i = 0; i < WIDTH; i++) s[i] = m[i];
    }
    for (int i = 0; i < WIDTH; i++) states[t * WIDTH + i] = s[i];
    atomicAdd(&PERMUTATIONS, 1ull);
}

// SCRATCH[i] = input[i] * MDS[0][i % WIDTH] + ROUND_CONSTANTS[0][i % WIDTH], for i < n
// (at most SCRATCH_LEN): a table the host reads back through Module::global.
extern "C" __global__ void poseidon_absorb(const uint32_t* input, uint32_t n) {
    using namespace poseidon;
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || i >= SCRATCH_LEN) return;
    SCRATCH[i] = add(mul(input[i], MDS[0][i % WIDTH]), ROUND_CONSTANTS[0][i % WIDTH]);
}
