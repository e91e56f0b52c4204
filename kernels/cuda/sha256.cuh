// sha256.cuh: SHA-256 (FIPS 180-4) of one 64-byte message, as a Merkle node
// needs: hash(left child || right child).
//
// A 64-byte message is one full block followed by one padding block
// (0x80, zeros, then the bit length 512 as a big-endian 64-bit integer).
// CPU reference: kernels/src/merkle.rs (the `sha2` crate).
#pragma once

namespace sha256 {

// Round constants, FIPS 180-4 section 4.2.2.
static __constant__ const unsigned int K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

// Initial hash value, FIPS 180-4 section 5.3.3.
static __constant__ const unsigned int H0[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

__device__ __forceinline__ unsigned int rotr(unsigned int x, unsigned int n) {
    return __funnelshift_r(x, x, n);
}

// Big-endian <-> native (little-endian) 32-bit word.
__device__ __forceinline__ unsigned int byte_swap(unsigned int x) {
    return __byte_perm(x, 0, 0x0123);
}

// One compression of the 16-word block `w` (big-endian words) into `state`.
// `w` is overwritten by the message schedule, kept as a 16-word ring.
__device__ __forceinline__ void compress(unsigned int state[8], unsigned int w[16]) {
    unsigned int a = state[0], b = state[1], c = state[2], d = state[3];
    unsigned int e = state[4], f = state[5], g = state[6], h = state[7];
#pragma unroll
    for (int t = 0; t < 64; ++t) {
        if (t >= 16) {
            const unsigned int w15 = w[(t - 15) & 15];
            const unsigned int w2 = w[(t - 2) & 15];
            const unsigned int s0 = rotr(w15, 7) ^ rotr(w15, 18) ^ (w15 >> 3);
            const unsigned int s1 = rotr(w2, 17) ^ rotr(w2, 19) ^ (w2 >> 10);
            w[t & 15] = w[t & 15] + s0 + w[(t - 7) & 15] + s1;
        }
        const unsigned int big_s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        const unsigned int ch = (e & f) ^ (~e & g);
        const unsigned int t1 = h + big_s1 + ch + K[t] + w[t & 15];
        const unsigned int big_s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        const unsigned int maj = (a & b) ^ (a & c) ^ (b & c);
        const unsigned int t2 = big_s0 + maj;
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
}

// out[0..32) = SHA-256(in[0..64)). Both pointers must be 4-byte aligned; the
// words are loaded and stored 32 bits at a time and byte-swapped.
__device__ __forceinline__ void hash64(const unsigned char* in, unsigned char* out) {
    const unsigned int* in32 = reinterpret_cast<const unsigned int*>(in);
    unsigned int w[16];
#pragma unroll
    for (int t = 0; t < 16; ++t) {
        w[t] = byte_swap(in32[t]);
    }
    unsigned int state[8];
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        state[t] = H0[t];
    }
    compress(state, w);

    // Padding block of a 64-byte (512-bit) message.
    w[0] = 0x80000000u;
#pragma unroll
    for (int t = 1; t < 15; ++t) {
        w[t] = 0;
    }
    w[15] = 512;
    compress(state, w);

    unsigned int* out32 = reinterpret_cast<unsigned int*>(out);
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        out32[t] = byte_swap(state[t]);
    }
}

}  // namespace sha256
