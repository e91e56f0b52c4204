// Template kernels of a multi-scalar multiplication (MSM) over a BLS12-381-style curve,
// written the way elliptic-curve provers write them: the field and point types live in a
// namespace, each with `mem_t`, the layout it has in a table in memory, and the kernels are
// templates over those types and over compile-time choices (a table of bases in constant
// memory or none, which coordinate of an extension element, how points are represented,
// window sizes and field constants), instantiated explicitly.
//
// Their symbols carry every kind of template argument nvcc mangles (issue 44, item 3): null
// pointers to nested and substituted types, addresses of variables, data members, member
// functions and function templates, null pointers to members, `nullptr`, enums, negative and
// wide integer literals, bool, char and nested templates. kernels/foreign/templates.toml
// names them as c++filt and as cpp_demangle spell them. The arithmetic is a toy (limbs are
// not reduced): each kernel writes something checkable into its output buffer.
#include <cstdint>

#include "foreign/launch.cuh"

namespace b12 {

// A base-field element: four 32-bit limbs (a toy width), and its layout in memory.
struct fp_t {
    struct mem_t {
        uint32_t limb[4];
    };
    uint32_t limb[4];

    __device__ static fp_t load(const mem_t& m) {
        fp_t r;
        for (int i = 0; i < 4; i++) r.limb[i] = m.limb[i];
        return r;
    }
    // The low limb: what the kernels write out.
    __device__ uint32_t low() const { return limb[0]; }
};

// The quadratic extension Fp2 = Fp[u] / (u^2 + 1): two base-field coordinates, and its
// layout in memory (itself made of the base field's layout).
struct fp2_t {
    struct mem_t {
        fp_t::mem_t c0, c1;
    };
    fp_t c0, c1;

    __device__ static fp2_t load(const mem_t& m) { return {fp_t::load(m.c0), fp_t::load(m.c1)}; }
    __device__ uint32_t low() const { return c0.low() ^ c1.low(); }
};

// How a kernel's output points are represented.
enum class form_t : uint8_t { affine = 0, jacobian = 1, xyzz = 2 };
// Which group the points are in: an unscoped enum, as older prover code writes them.
enum group_t { g1 = 1, g2 = 2 };

// A point in extended Jacobian coordinates (X, Y, ZZ, ZZZ) over the field F.
template <class F>
struct xyzz_t {
    F x, y, zz, zzz;
};

// The buckets of one Pippenger window of WBITS bits: one point per digit.
template <class P, unsigned WBITS>
struct bucket_t {
    static constexpr unsigned count = 1u << WBITS;
    P p[count];
};

// The low limbs of G1's generator x, in constant memory: a table of one base.
__constant__ fp_t::mem_t G1_X = {{0xdb22c6bbu, 0xfb3af00au, 0xf97a1aefu, 0x6c55e83fu}};

// x reduced by a small modulus M: the per-limb step a kernel may be given as a template
// argument (a function template's address).
template <uint32_t M>
__device__ uint32_t reduce(uint32_t x) {
    return x % M;
}

}  // namespace b12

namespace msm {

// out[i] = the low limb of base i, read from BASES (a table in constant memory) or, when
// BASES is nullptr, from `bases` (a table the caller passes). M is F's memory layout.
template <class F, class M, const M* BASES>
__global__ void load_bases(uint32_t* out, const M* bases, uint32_t n) {
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride()) {
        if constexpr (BASES != nullptr) {
            out[i] = F::load(BASES[0]).low() + i;
        } else {
            out[i] = F::load(bases[i]).low();
        }
    }
}
template __global__ void load_bases<b12::fp2_t, b12::fp2_t::mem_t, nullptr>(
    uint32_t*, const b12::fp2_t::mem_t*, uint32_t);
template __global__ void load_bases<b12::fp_t, b12::fp_t::mem_t, &b12::G1_X>(
    uint32_t*, const b12::fp_t::mem_t*, uint32_t);

// out[i] = the low limb of one coordinate of xs[i] (COORD, a pointer to a data member), or
// of the element folded (COORD null).
template <class F, b12::fp_t F::*COORD>
__global__ void coordinate(uint32_t* out, const F* xs, uint32_t n) {
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride()) {
        if constexpr (COORD != nullptr) {
            out[i] = (xs[i].*COORD).low();
        } else {
            out[i] = xs[i].low();
        }
    }
}
template __global__ void coordinate<b12::fp2_t, &b12::fp2_t::c1>(uint32_t*, const b12::fp2_t*,
                                                                 uint32_t);
template __global__ void coordinate<b12::fp2_t, nullptr>(uint32_t*, const b12::fp2_t*, uint32_t);

// out[i] = READ(xs[i]), READ a const member function of F.
template <class F, uint32_t (F::*READ)() const>
__global__ void read_with(uint32_t* out, const F* xs, uint32_t n) {
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride())
        out[i] = (xs[i].*READ)();
}
template __global__ void read_with<b12::fp2_t, &b12::fp2_t::low>(uint32_t*, const b12::fp2_t*,
                                                                 uint32_t);

// out[i] = the point representation and group a kernel was built for, tagged with i.
template <b12::form_t FORM, b12::group_t GROUP>
__global__ void describe(uint32_t* out, uint32_t n) {
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride())
        out[i] = (uint32_t(FORM) << 24) | (uint32_t(GROUP) << 16) | (i & 0xffffu);
}
template __global__ void describe<b12::form_t::xyzz, b12::g2>(uint32_t*, uint32_t);

// out[i] = FINAL(xs[i]) for a device function FINAL, or xs[i] unchanged when FINAL is
// nullptr (an `auto` template parameter: the type of nullptr itself).
template <auto FINAL>
__global__ void finalise(uint32_t* out, const uint32_t* xs, uint32_t n) {
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride()) {
        if constexpr (FINAL == nullptr) {
            out[i] = xs[i];
        } else {
            out[i] = FINAL(xs[i]);
        }
    }
}
template __global__ void finalise<nullptr>(uint32_t*, const uint32_t*, uint32_t);
template __global__ void finalise<&b12::reduce<7u>>(uint32_t*, const uint32_t*, uint32_t);

// Signed-digit recoding of 64-bit scalar limbs: out[i] = ((in[i] & MASK) % MODULUS) shifted
// left by SHIFT (right when negative), plus OFFSET and FLOOR (both negative here).
template <int SHIFT, long OFFSET, unsigned long MODULUS, long long FLOOR, unsigned long long MASK,
          unsigned WINDOWS>
__global__ void recode(uint64_t* out, const uint64_t* in, uint32_t n) {
    for (uint32_t i = foreign::global_id(); i < n && i < WINDOWS; i += foreign::grid_stride()) {
        const uint64_t d = (in[i] & MASK) % MODULUS;
        const uint64_t s = SHIFT < 0 ? d >> -SHIFT : d << SHIFT;
        out[i] = s + uint64_t(OFFSET) + uint64_t(FLOOR);
    }
}
// The Goldilocks modulus 2^64 - 2^32 + 1 and a mask of all 64 bits: the widest literals.
template __global__ void recode<-5, -3l, 0xffffffff00000001ul, -6ll, 0xffffffffffffffffull,
                                4294967295u>(uint64_t*, const uint64_t*, uint32_t);

// out[i] = the high half of in[i] * R plus BIAS, with 128-bit constants: R = 2^64 + 1 and
// BIAS = -2^70 (wider than any 64-bit literal).
template <unsigned __int128 R, __int128 BIAS>
__global__ void fold_wide(uint64_t* out, const uint64_t* in, uint32_t n) {
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride()) {
        const unsigned __int128 x = (unsigned __int128)in[i] * R;
        out[i] = uint64_t((x >> 64) + (unsigned __int128)BIAS);
    }
}
template __global__ void fold_wide<((unsigned __int128)1 << 64) + 1, -((__int128)1 << 70)>(
    uint64_t*, const uint64_t*, uint32_t);

// out[i] = a tag of lane i: TAG in the top byte, then LANE, then i + DELTA, negated when
// NEGATE.
template <bool NEGATE, char TAG, signed char DELTA, unsigned char LANE>
__global__ void tag_lanes(uint32_t* out, uint32_t n) {
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride()) {
        const uint32_t low = (i + uint32_t(int32_t(DELTA))) & 0xffffu;
        out[i] = (uint32_t(uint8_t(TAG)) << 24) | (uint32_t(LANE) << 16) |
                 (NEGATE ? (0x10000u - low) & 0xffffu : low);
    }
}
template __global__ void tag_lanes<true, 'G', -1, 200>(uint32_t*, uint32_t);
template __global__ void tag_lanes<false, 'H', 3, 0>(uint32_t*, uint32_t);

// Bucket accumulation of one window: out[b] = the low limb of bucket b's ZZ after
// adding points[i] to bucket digits[i] (B, a nested template: buckets of xyzz points).
template <class B>
__global__ void accumulate(uint32_t* out, const uint32_t* digits, const uint32_t* points,
                           uint32_t n) {
    for (uint32_t b = foreign::global_id(); b < B::count; b += foreign::grid_stride()) {
        uint32_t zz = 0;
        for (uint32_t i = 0; i < n; i++)
            if (digits[i] % B::count == b) zz += points[i];
        out[b] = zz;
    }
}
template __global__ void accumulate<b12::bucket_t<b12::xyzz_t<b12::fp2_t>, 4u>>(uint32_t*,
                                                                               const uint32_t*,
                                                                               const uint32_t*,
                                                                               uint32_t);

// Clears n points of type P<F> (P a template template parameter) and writes each point's
// size in 32-bit words to out.
template <template <class> class P, class F>
__global__ void clear_points(uint32_t* out, P<F>* points, uint32_t n) {
    for (uint32_t i = foreign::global_id(); i < n; i += foreign::grid_stride()) {
        points[i] = P<F>{};
        out[i] = sizeof(P<F>) / sizeof(uint32_t);
    }
}
template __global__ void clear_points<b12::xyzz_t, b12::fp_t>(uint32_t*, b12::xyzz_t<b12::fp_t>*,
                                                              uint32_t);

}  // namespace msm
