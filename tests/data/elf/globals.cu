// Device globals of every kind the ELF and PTX readers sort (src/elf.rs, src/ptx.rs tests).
#include <cassert>
#include <cstdio>

namespace tables {
struct Round { unsigned int c[3]; unsigned short tag; };  // 14 bytes, padded to 16
__constant__ unsigned int round_constants[8][16];          // 512 bytes, no initialiser
__constant__ Round rounds[4] = {{{1, 2, 3}, 9}};           // 64 bytes, initialised
__constant__ unsigned int zero = 0;                        // a zero initialiser: none
__device__ unsigned long long counter = 7;                 // initialised __device__
__device__ unsigned int scratch[256];                      // zero-filled __device__
static __device__ unsigned int hidden[3];                  // static: listed (whole program)
}
__device__ int target_v[4];
__constant__ int *address_of = &target_v[1];               // an address initialiser
template <int N> __device__ int per_n = N;                 // WEAK when instantiated twice

__device__ int bump() { static __device__ int calls; return ++calls; }

extern "C" __global__ void use_globals(float *out, int n) {
  int i = threadIdx.x;
  assert(i < 256);                                         // $str, __unnamed_1
  if (i == 0) printf("n=%d\n", n);                         // $str
  out[i] = sinf(out[i]) + tables::round_constants[i % 8][i % 16] + tables::rounds[i % 4].c[0] +
           tables::zero + tables::counter + tables::scratch[i] + tables::hidden[i % 3] +
           *address_of + per_n<1> + per_n<2> + bump();     // sinf: __cudart_i2opi_f
  tables::scratch[i] = n;
  tables::hidden[0] = n;
}
