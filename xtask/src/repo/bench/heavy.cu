// The heavy corpus of `cargo xtask bench --shared-cache`: prover-style Montgomery
// multiplication over 12- and 8-limb fields, fully unrolled chains of it, so one job takes
// seconds of nvcc time per SM. Each module of the generated spec is this file with its own
// geometry (variant: constants; rounds: the chain length), so their identities differ.
#include <cstdint>
#ifndef CUDA_AOT_VARIANT
#define CUDA_AOT_VARIANT 0
#endif
#ifndef CUDA_AOT_ROUNDS
#define CUDA_AOT_ROUNDS 24
#endif
template <int N> struct Fp { uint32_t v[N]; };

template <int N>
__device__ __forceinline__ Fp<N> mont_mul(const Fp<N>& a, const Fp<N>& b, const Fp<N>& p, uint32_t inv) {
  uint32_t t[N + 2];
#pragma unroll
  for (int i = 0; i < N + 2; i++) t[i] = 0;
#pragma unroll
  for (int i = 0; i < N; i++) {
    uint64_t c = 0;
#pragma unroll
    for (int j = 0; j < N; j++) {
      uint64_t s = (uint64_t)a.v[j] * b.v[i] + t[j] + c;
      t[j] = (uint32_t)s; c = s >> 32;
    }
    uint64_t s = (uint64_t)t[N] + c; t[N] = (uint32_t)s; t[N + 1] = (uint32_t)(s >> 32);
    uint32_t m = t[0] * inv;
    c = ((uint64_t)m * p.v[0] + t[0]) >> 32;
#pragma unroll
    for (int j = 1; j < N; j++) {
      uint64_t s2 = (uint64_t)m * p.v[j] + t[j] + c;
      t[j - 1] = (uint32_t)s2; c = s2 >> 32;
    }
    s = (uint64_t)t[N] + c; t[N - 1] = (uint32_t)s; t[N] = t[N + 1] + (uint32_t)(s >> 32);
  }
  Fp<N> r;
#pragma unroll
  for (int i = 0; i < N; i++) r.v[i] = t[i];
  return r;
}

template <int N, int R>
__device__ __forceinline__ Fp<N> chain(Fp<N> x, const Fp<N>& y, const Fp<N>& p, uint32_t inv) {
#pragma unroll
  for (int r = 0; r < R; r++) {
    x = mont_mul<N>(x, x, p, inv);
    x = mont_mul<N>(x, y, p, inv);
  }
  return x;
}

__constant__ uint32_t MODULUS[12] = {0xffffaaab + CUDA_AOT_VARIANT, 0xb9feffff, 0xb153ffff, 0x1eabfffe, 0xf6b0f624, 0x6730d2a0, 0xf38512bf, 0x64774b84, 0x434bacd7, 0x4b1ba7b6, 0x397fe69a, 0x1a0111ea};

extern "C" __global__ void heavy_pow(uint32_t* out, const uint32_t* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Fp<12> p, x, y;
#pragma unroll
  for (int k = 0; k < 12; k++) { p.v[k] = MODULUS[k]; x.v[k] = in[i * 12 + k]; y.v[k] = in[((i + 1) % n) * 12 + k]; }
  x = chain<12, CUDA_AOT_ROUNDS>(x, y, p, 0xfffcfffd);
#pragma unroll
  for (int k = 0; k < 12; k++) out[i * 12 + k] = x.v[k];
}

extern "C" __global__ void heavy_mix(uint32_t* out, const uint32_t* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Fp<8> p, x, y;
#pragma unroll
  for (int k = 0; k < 8; k++) { p.v[k] = MODULUS[k + 4]; x.v[k] = in[i * 8 + k]; y.v[k] = in[((i + 3) % n) * 8 + k]; }
  x = chain<8, CUDA_AOT_ROUNDS * 2>(x, y, p, 0x89abcdef + CUDA_AOT_VARIANT);
#pragma unroll
  for (int k = 0; k < 8; k++) out[i * 8 + k] = x.v[k];
}
