// prover.cpp: a prover written in C++ on cuda-aot's C ABI (cuda_aot.hpp over cuda_aot.h).
//
// Opens the release registry (verified against its trust root, the cubin for exactly this
// device picked), fills a host-filled __constant__ table, launches kernels two ways and
// checks every result against a CPU reference written here:
//   - through the driver API: cuLaunchKernel on the kernel's CUfunction (no check);
//   - through cuda_aot.hpp: Kernel::launch, which checks each argument's size against the
//     signed launch ABI first;
// and shows that a wrong-size argument and a wrong-size table are refused before the
// driver runs. Memory and streams come from the CUDA runtime API (cudaMalloc,
// cudaStreamCreate), which shares the device's primary context with cuda-aot.
//
//   prover REGISTRY TRUST_ROOT [--production] [--library] [--state FILE]
//
// --production opens with the production policy (production-signed, every module
// promoted); --library loads through cuLibraryLoadData, so kernels also have a CUkernel.
//
// Build (docs/capi.md; CUDA = a CUDA toolkit folder with include/cuda.h and
// lib/libcudart_static.a, e.g. /usr/local/cuda or the pinned one under .cuda-aot/toolkit):
//   cargo xtask install-capi --prefix .cuda-aot/capi
//   c++ -std=c++17 -O2 examples/cpp/prover.cpp -I.cuda-aot/capi/include -I"$CUDA/include"
//       -L.cuda-aot/capi/lib -lcuda_aot_capi -Wl,-rpath,"$PWD/.cuda-aot/capi/lib"
//       "$CUDA/lib/libcudart_static.a" -ldl -lpthread -lrt -o prover-cpp
// (one command line).
//
// Exit status: 0 when every check passed, 1 when one failed or the registry could not be
// opened (the error and its Fix: line are printed), 2 for bad arguments.

#include <cuda.h>
#include <cuda_runtime.h>

#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_aot.hpp"

namespace {

// Goldilocks, p = 2^64 - 2^32 + 1: the CPU references.
constexpr uint64_t P = 0xFFFFFFFF00000001ull;

uint64_t add(uint64_t a, uint64_t b) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(a) + b) % P);
}
uint64_t mul(uint64_t a, uint64_t b) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) % P);
}
uint64_t power(uint64_t b, uint64_t e) {
    uint64_t r = 1;
    for (b %= P; e; e >>= 1, b = mul(b, b)) {
        if (e & 1) {
            r = mul(r, b);
        }
    }
    return r;
}

// Canonical pseudo-random field elements (xorshift64*).
std::vector<uint64_t> random_elements(std::size_t n, uint64_t seed) {
    std::vector<uint64_t> v(n);
    for (auto &x : v) {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        x = (seed * 0x2545F4914F6CDD1Dull) % P;
    }
    return v;
}

// Device memory from the CUDA runtime API; freed at scope exit.
struct DeviceBuffer {
    explicit DeviceBuffer(const std::vector<uint64_t> &host) : n(host.size()) {
        cuda(cudaMalloc(&ptr, n * sizeof(uint64_t)), "cudaMalloc");
        cuda(cudaMemcpy(ptr, host.data(), n * sizeof(uint64_t), cudaMemcpyHostToDevice),
             "cudaMemcpy");
    }
    ~DeviceBuffer() { cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer &operator=(const DeviceBuffer &) = delete;
    std::vector<uint64_t> read() const {
        std::vector<uint64_t> host(n);
        cuda(cudaMemcpy(host.data(), ptr, n * sizeof(uint64_t), cudaMemcpyDeviceToHost),
             "cudaMemcpy");
        return host;
    }
    // The kernel parameter: a device pointer, 8 bytes.
    uint64_t *dev() const { return static_cast<uint64_t *>(ptr); }
    static void cuda(cudaError_t e, const char *what) {
        if (e != cudaSuccess) {
            throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
        }
    }
    void *ptr = nullptr;
    std::size_t n;
};

// cuLaunchKernel from the driver, found through the CUDA runtime (no link to libcuda).
using LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, CUstream, void **, void **);
LaunchKernel driver_launch() {
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    DeviceBuffer::cuda(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &fn, 12000,
                                                        cudaEnableDefault, &found),
                       "cudaGetDriverEntryPointByVersion(cuLaunchKernel)");
    if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
        throw std::runtime_error("the driver has no cuLaunchKernel");
    }
    return reinterpret_cast<LaunchKernel>(fn);
}

int failures = 0;
bool library = false;
void check(const std::string &what, bool ok) {
    std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
    if (!ok) {
        failures++;
    }
}

unsigned grid_for(std::size_t n, unsigned block) {
    return static_cast<unsigned>((n + block - 1) / block);
}

// field_ops: a host-filled table, both launch paths, and the refusals.
void field_ops(const cuda_aot::Runtime &rt, cudaStream_t stream) {
    const unsigned n = 1u << 20;
    const auto x = random_elements(n, 1), y = random_elements(n, 2);
    DeviceBuffer dx(x), dy(y), dout(std::vector<uint64_t>(n, 0));
    auto gl_mul = rt.kernel("field_ops", "gl_mul");
    auto gl_axpy = rt.kernel("field_ops", "gl_axpy");
    auto gl_poly_eval = rt.kernel("field_ops", "gl_poly_eval");
    const unsigned block = gl_mul.max_threads() ? gl_mul.max_threads() : 256;
    check(std::string("gl_mul has ") +
              (library ? "a CUkernel (cuLibraryLoadData)" : "no CUkernel (cuModuleLoadData)") +
              " and a CUfunction; signed ABI of " + std::to_string(gl_mul.params().size()) +
              " parameters, at most " + std::to_string(block) + " threads",
          (gl_mul.cu_kernel() != nullptr) == library && gl_mul.function() != nullptr &&
              gl_mul.params().size() == 4 && gl_mul.params()[3].size == 4);

    // 1. The driver API, unchecked: cuLaunchKernel on the CUfunction cuda-aot loaded.
    {
        uint64_t *a = dx.dev(), *b = dy.dev(), *out = dout.dev();
        unsigned count = n;
        void *params[] = {&a, &b, &out, &count};
        CUresult r = driver_launch()(gl_mul.function(), grid_for(n, block), 1, 1, block, 1, 1,
                                     0, reinterpret_cast<CUstream>(stream), params, nullptr);
        DeviceBuffer::cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        const auto got = dout.read();
        bool ok = r == CUDA_SUCCESS;
        for (unsigned i = 0; ok && i < n; i++) {
            ok = got[i] == mul(x[i], y[i]);
        }
        check("gl_mul (2^20) through cuLaunchKernel on cuda_aot_kernel_function()", ok);
    }

    // 2. cuda_aot.hpp: every argument's size checked against the signed ABI.
    {
        const uint64_t alpha = 0x123456789abcdef1ull % P;
        gl_axpy.launch(cuda_aot::dim(grid_for(n, block)), cuda_aot::dim(block), stream, alpha,
                       dx.dev(), dy.dev(), dout.dev(), n);
        DeviceBuffer::cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        const auto got = dout.read();
        bool ok = true;
        for (unsigned i = 0; ok && i < n; i++) {
            ok = got[i] == add(mul(alpha, x[i]), y[i]);
        }
        check("gl_axpy (2^20) through cuda_aot::Kernel::launch", ok);
    }

    // 3. A __constant__ table the host fills: gl_poly_coeffs, signed as 64 bytes.
    auto coeffs_global = rt.global("field_ops", "gl_poly_coeffs");
    std::array<uint64_t, 8> coeffs{};
    for (std::size_t k = 0; k < coeffs.size(); k++) {
        coeffs[k] = random_elements(k + 1, 40 + k)[k];
    }
    coeffs_global.write(coeffs);
    std::array<uint64_t, 8> back{};
    coeffs_global.read(back);
    check("gl_poly_coeffs: " + std::to_string(coeffs_global.size()) +
              " bytes written and read back through cuda_aot_global",
          back == coeffs && coeffs_global.size() == sizeof(coeffs));
    {
        gl_poly_eval.launch(cuda_aot::dim(grid_for(n, block)), cuda_aot::dim(block), stream,
                            dx.dev(), dout.dev(), n);
        DeviceBuffer::cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        const auto got = dout.read();
        bool ok = true;
        for (unsigned i = 0; ok && i < n; i++) {
            uint64_t acc = coeffs[7];
            for (int k = 6; k >= 0; k--) {
                acc = add(mul(acc, x[i]), coeffs[k]);
            }
            ok = got[i] == acc;
        }
        check("gl_poly_eval (2^20) with the host-filled table, through Kernel::launch", ok);
    }

    // 4. Refused before the driver runs: a size_t count where the kernel takes an
    // unsigned int (8 bytes for 4), and a table one element short.
    {
        const auto before = dout.read();
        const std::size_t wrong_n = n;
        try {
            gl_poly_eval.launch(cuda_aot::dim(grid_for(n, block)), cuda_aot::dim(block), stream,
                                dx.dev(), dy.dev(), wrong_n);
            check("a wrong-size argument is refused", false);
        } catch (const cuda_aot::Error &e) {
            DeviceBuffer::cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            std::printf("     refused: %s (%s)\n     Fix: %s\n", e.what(), e.status_name(),
                        e.fix().c_str());
            check("a size_t argument for an unsigned int parameter is refused with "
                  "CUDA_AOT_STATUS_LAUNCH and the kernel did not run",
                  e.status() == CUDA_AOT_STATUS_LAUNCH && dout.read() == before &&
                      dy.read() == y);
        }
        try {
            coeffs_global.write(std::array<uint64_t, 7>{});
            check("a short table is refused", false);
        } catch (const cuda_aot::Error &e) {
            coeffs_global.read(back);
            std::printf("     refused: %s (%s)\n", e.what(), e.status_name());
            check("a 56-byte write to the 64-byte table is refused and the table is unchanged",
                  e.status() == CUDA_AOT_STATUS_LAUNCH && back == coeffs);
        }
    }
}

// The NTT of 2^10 elements against the DFT by definition, X_k = sum_j x_j w^(jk).
void ntt(const cuda_aot::Runtime &rt, const std::string &module, cudaStream_t stream) {
    const unsigned log_n = 10, n = 1u << log_n;
    const auto x = random_elements(n, 3);
    const uint64_t w = power(7, (P - 1) >> log_n);
    std::vector<uint64_t> twiddles(n / 2);
    for (unsigned t = 0; t < n / 2; t++) {
        twiddles[t] = power(w, t);
    }
    DeviceBuffer data(x), tw(twiddles);
    auto bit_reverse = rt.kernel(module, "ntt_bit_reverse");
    const unsigned block = bit_reverse.max_threads() ? bit_reverse.max_threads() : 256;
    bit_reverse.launch(cuda_aot::dim(grid_for(n, block)), cuda_aot::dim(block), stream,
                       data.dev(), log_n);
    if (module == "ntt") {
        auto butterfly = rt.kernel(module, "ntt_butterfly");
        for (unsigned stage = 0; stage < log_n; stage++) {
            butterfly.launch(cuda_aot::dim(grid_for(n / 2, block)), cuda_aot::dim(block), stream,
                             data.dev(), static_cast<const uint64_t *>(tw.dev()), log_n, stage);
        }
    } else {
        // ntt_fused: one launch does all 10 stages in one shared-memory tile (tile_log 10).
        auto stages = rt.kernel(module, "ntt_stages");
        stages.launch(cuda_aot::dim(1), cuda_aot::dim(block), stream, data.dev(),
                      static_cast<const uint64_t *>(tw.dev()), log_n, 0u, log_n);
    }
    DeviceBuffer::cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const auto got = data.read();
    bool ok = true;
    for (unsigned k = 0; ok && k < n; k++) {
        uint64_t acc = 0;
        const uint64_t wk = power(w, k);
        uint64_t wjk = 1;
        for (unsigned j = 0; j < n; j++, wjk = mul(wjk, wk)) {
            acc = add(acc, mul(x[j], wjk));
        }
        ok = got[k] == acc;
    }
    check(module + " forward (2^10) equals the DFT by definition", ok);
}

} // namespace

int main(int argc, char **argv) {
    if (argc < 3) {
        std::fprintf(stderr,
                     "usage: %s REGISTRY TRUST_ROOT [--production] [--library] [--state FILE]\n",
                     argv[0]);
        return 2;
    }
    bool production = false;
    const char *state = nullptr;
    for (int i = 3; i < argc; i++) {
        if (std::strcmp(argv[i], "--production") == 0) {
            production = true;
        } else if (std::strcmp(argv[i], "--library") == 0) {
            library = true;
        } else if (std::strcmp(argv[i], "--state") == 0 && i + 1 < argc) {
            state = argv[++i];
        } else {
            std::fprintf(stderr, "unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    try {
        auto policy = production ? cuda_aot::Policy::production()
                                 : cuda_aot::Policy::development();
        if (state) {
            policy.state_file(state);
        }
        if (library) {
            policy.load_api(CUDA_AOT_LOAD_API_LIBRARY);
        }
        auto rt = cuda_aot::Runtime::open(argv[1], argv[2], policy);
        rt.preload();
        const auto d = rt.device();
        std::printf("device %zu: %s (%s), driver %d; index v%" PRIu64 ", %s policy\n",
                    d.ordinal, d.name, d.sm, d.driver_version, rt.index_version(),
                    production ? "production" : "development");
        for (const auto &m : rt.modules()) {
            std::printf("  loaded %-12s %-7s %-5s %8" PRIu64 " bytes %s\n", m.module, m.target,
                        m.kind, m.size, m.digest);
        }
        cudaStream_t stream = nullptr;
        DeviceBuffer::cuda(cudaSetDevice(static_cast<int>(d.ordinal)), "cudaSetDevice");
        DeviceBuffer::cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                           "cudaStreamCreate");
        int ran = 0;
        if (rt.has("field_ops")) {
            field_ops(rt, stream);
            ran++;
        }
        for (const char *m : {"ntt", "ntt_fused"}) {
            if (rt.has(m)) {
                ntt(rt, m, stream);
                ran++;
            }
        }
        // The several-devices form, here with this one device: one verification, one
        // runtime per ordinal; its kernels run like the first runtime's.
        if (rt.has("field_ops")) {
            auto rts = cuda_aot::Runtime::open_devices(argv[1], argv[2], policy, {d.ordinal});
            rts.at(0).preload();
            const unsigned n = 4096;
            const auto a = random_elements(n, 7), b = random_elements(n, 8);
            DeviceBuffer da(a), db(b), dout(std::vector<uint64_t>(n, 0));
            auto gl_add = rts.at(0).kernel("field_ops", "gl_add");
            gl_add.launch(cuda_aot::dim(grid_for(n, 256)), cuda_aot::dim(256), stream, da.dev(),
                          db.dev(), dout.dev(), n);
            DeviceBuffer::cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            const auto got = dout.read();
            bool ok = rts.size() == 1 && rts[0].device().ordinal == d.ordinal;
            for (unsigned i = 0; ok && i < n; i++) {
                ok = got[i] == add(a[i], b[i]);
            }
            check("gl_add (4096) through a runtime of Runtime::open_devices({" +
                      std::to_string(d.ordinal) + "})",
                  ok);
        }
        cudaStreamDestroy(stream);
        const auto c = rt.counters();
        std::printf("counters: %" PRIu64 " modules verified, %" PRIu64 " loaded, %" PRIu64
                    " signature checks, %" PRIu64 " PTX loads\n",
                    c.modules_verified, c.modules_loaded, c.signatures_checked,
                    c.compat_loads);
        if (ran == 0) {
            std::fprintf(stderr, "error: the registry holds none of field_ops, ntt, ntt_fused\n");
            return 1;
        }
    } catch (const cuda_aot::Error &e) {
        std::fprintf(stderr, "error: %s (%s)\nFix: %s\n", e.what(), e.status_name(),
                     e.fix().c_str());
        return 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    std::printf("%s\n", failures == 0 ? "all checks passed" : "SOME CHECKS FAILED");
    return failures == 0 ? 0 : 1;
}
