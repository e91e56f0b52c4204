// cuda_aot.hpp: a header-only C++ layer over the C ABI of cuda-aot (cuda_aot.h): RAII
// handles that free themselves, errors as exceptions carrying the `Fix:` advice, and a
// variadic launch that checks every argument's size against the kernel's signed launch
// ABI before the driver runs. C++17. See docs/capi.md.
//
//   auto rt = cuda_aot::Runtime::open(".cuda-aot/registry", ".cuda-aot/dev-keys/root.json",
//                                     cuda_aot::Policy::development());
//   rt.preload();
//   auto add = rt.kernel("field_ops", "gl_add");
//   add.launch(cuda_aot::dim(blocks), cuda_aot::dim(256), stream, a, b, out, n);
//
// Every call that fails throws cuda_aot::Error (a std::runtime_error): what() is the
// message, fix() the advice, status() the stable cuda_aot_status.
#ifndef CUDA_AOT_HPP
#define CUDA_AOT_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_aot.h"

namespace cuda_aot {

/// A failed call: the status, the message (what()) and the `Fix:` advice.
class Error : public std::runtime_error {
public:
    Error(cuda_aot_status status, const std::string &message, std::string fix)
        : std::runtime_error(message), status_(status), fix_(std::move(fix)) {}
    /// The stable status code.
    cuda_aot_status status() const noexcept { return status_; }
    /// Its name, e.g. "CUDA_AOT_STATUS_LAUNCH".
    const char *status_name() const noexcept { return cuda_aot_status_name(status_); }
    /// What to do about it.
    const std::string &fix() const noexcept { return fix_; }

private:
    cuda_aot_status status_;
    std::string fix_;
};

namespace detail {

/// Throws the last error of this thread unless `status` is OK.
inline void check(cuda_aot_status status) {
    if (status != CUDA_AOT_STATUS_OK) {
        throw Error(status, cuda_aot_last_error_message(), cuda_aot_last_error_fix());
    }
}

/// The deleter of a handle type: its one free function.
template <class T, void (*Free)(T *)> struct Deleter {
    void operator()(T *p) const noexcept { Free(p); }
};

template <class T, void (*Free)(T *)> using Owned = std::unique_ptr<T, Deleter<T, Free>>;

} // namespace detail

/// A grid or block extent.
inline cuda_aot_dim3 dim(uint32_t x, uint32_t y = 1, uint32_t z = 1) { return {x, y, z}; }

/// What a runtime accepts and how it loads (cuda_aot_policy). Copied by Runtime::open, so it
/// may be changed or dropped after.
class Policy {
public:
    /// Development: dev-signed registries, exact-SM cubins only.
    static Policy development() { return Policy(CUDA_AOT_POLICY_PRESET_DEVELOPMENT); }
    /// Production: production-signed registries, every module promoted, exact-SM cubins.
    static Policy production() { return Policy(CUDA_AOT_POLICY_PRESET_PRODUCTION); }
    /// The labelled PTX compatibility mode (driver JIT) for modules without an exact cubin.
    Policy &allow_ptx() { return set(cuda_aot_policy_allow_ptx(p_.get())); }
    /// Keep the rollback state in `path`.
    Policy &state_file(const std::string &path) {
        return set(cuda_aot_policy_state_file(p_.get(), path.c_str()));
    }
    /// Keep no rollback state (tests and throwaway hosts only).
    Policy &without_rollback_protection() {
        return set(cuda_aot_policy_without_rollback_protection(p_.get()));
    }
    /// Accept an expired timestamp up to `seconds` after the last fresh verification.
    Policy &offline_grace(uint64_t seconds) {
        return set(cuda_aot_policy_offline_grace(p_.get(), seconds));
    }
    /// The device Runtime::open opens.
    Policy &device(std::size_t ordinal) { return set(cuda_aot_policy_device(p_.get(), ordinal)); }
    /// cuModuleLoadData (CUDA_AOT_LOAD_API_MODULE) or cuLibraryLoadData (_LIBRARY).
    Policy &load_api(cuda_aot_load_api api) {
        return set(cuda_aot_policy_load_api(p_.get(), static_cast<int32_t>(api)));
    }
    /// The C handle (owned by this object).
    const cuda_aot_policy *get() const noexcept { return p_.get(); }

private:
    explicit Policy(cuda_aot_policy_preset preset) {
        cuda_aot_policy *p = nullptr;
        detail::check(cuda_aot_policy_new(static_cast<int32_t>(preset), &p));
        p_.reset(p);
    }
    Policy &set(cuda_aot_status status) {
        detail::check(status);
        return *this;
    }
    detail::Owned<cuda_aot_policy, cuda_aot_policy_free> p_;
};

/// A kernel with its signed launch ABI (cuda_aot_kernel). Movable, not copyable.
class Kernel {
public:
    explicit Kernel(cuda_aot_kernel *k) : k_(k) {}
    /// The demangled name (or the symbol of an extern "C" kernel).
    std::string name() const { return cuda_aot_kernel_name(k_.get()); }
    /// The entry symbol.
    std::string symbol() const { return cuda_aot_kernel_symbol(k_.get()); }
    /// The driver's CUfunction, for a host's own cuLaunchKernel (unchecked).
    CUfunc_st *function() const noexcept { return cuda_aot_kernel_function(k_.get()); }
    /// The CUkernel when loaded with cuLibraryLoadData, else nullptr.
    CUkern_st *cu_kernel() const noexcept { return cuda_aot_kernel_cu_kernel(k_.get()); }
    /// The signed parameter layout, in declaration order.
    std::vector<cuda_aot_param> params() const {
        std::vector<cuda_aot_param> v(cuda_aot_kernel_param_count(k_.get()));
        for (std::size_t i = 0; i < v.size(); i++) {
            detail::check(cuda_aot_kernel_param(k_.get(), i, &v[i]));
        }
        return v;
    }
    /// The signed __launch_bounds__ (0: none).
    uint32_t max_threads() const noexcept { return cuda_aot_kernel_max_threads(k_.get()); }

    /// Launches on `stream` (nullptr: the default stream of the runtime's context) with no
    /// dynamic shared memory. Each argument is passed by value, as the kernel's parameter:
    /// its sizeof must be the signed size of that parameter (a device pointer is 8 bytes, an
    /// `unsigned int` 4), else Error with CUDA_AOT_STATUS_LAUNCH is thrown before the driver
    /// runs. Returns once the launch is queued.
    template <class... Args>
    void launch(cuda_aot_dim3 grid, cuda_aot_dim3 block, CUstream_st *stream,
                const Args &...args) const {
        launch_shared(grid, block, 0, stream, args...);
    }

    /// launch() with `shared_mem_bytes` of dynamic shared memory.
    template <class... Args>
    void launch_shared(cuda_aot_dim3 grid, cuda_aot_dim3 block, uint32_t shared_mem_bytes,
                       CUstream_st *stream, const Args &...args) const {
        static_assert((std::is_trivially_copyable<Args>::value && ...),
                      "kernel arguments are copied as bytes: pass trivially copyable values");
        std::array<void *, sizeof...(Args)> ptrs{
            {const_cast<void *>(static_cast<const void *>(std::addressof(args)))...}};
        std::array<std::size_t, sizeof...(Args)> sizes{{sizeof(Args)...}};
        detail::check(cuda_aot_kernel_launch(k_.get(), grid, block, shared_mem_bytes, stream,
                                             ptrs.data(), sizes.data(), sizeof...(Args)));
    }

    /// The C handle (owned by this object).
    const cuda_aot_kernel *get() const noexcept { return k_.get(); }

private:
    detail::Owned<cuda_aot_kernel, cuda_aot_kernel_free> k_;
};

/// A device global with its signed size (cuda_aot_global). Movable, not copyable.
class Global {
public:
    explicit Global(cuda_aot_global *g) : g_(g) {}
    /// The demangled name.
    std::string name() const { return cuda_aot_global_name(g_.get()); }
    /// The signed size in bytes.
    std::size_t size() const noexcept { return cuda_aot_global_size(g_.get()); }
    /// The device address (a CUdeviceptr).
    uint64_t device_ptr() const noexcept { return cuda_aot_global_device_ptr(g_.get()); }
    /// Copies `value` (its sizeof must be the signed size) into the global.
    template <class T> void write(const T &value) const {
        static_assert(std::is_trivially_copyable<T>::value, "globals are copied as bytes");
        detail::check(cuda_aot_global_write(g_.get(), std::addressof(value), sizeof(T)));
    }
    /// Copies the elements of `values` (their total size must be the signed size).
    template <class T> void write(const std::vector<T> &values) const {
        static_assert(std::is_trivially_copyable<T>::value, "globals are copied as bytes");
        detail::check(
            cuda_aot_global_write(g_.get(), values.data(), values.size() * sizeof(T)));
    }
    /// Copies the global into `out` (its sizeof must be the signed size).
    template <class T> void read(T &out) const {
        static_assert(std::is_trivially_copyable<T>::value, "globals are copied as bytes");
        detail::check(cuda_aot_global_read(g_.get(), std::addressof(out), sizeof(T)));
    }
    /// The C handle (owned by this object).
    const cuda_aot_global *get() const noexcept { return g_.get(); }

private:
    detail::Owned<cuda_aot_global, cuda_aot_global_free> g_;
};

/// A registry verified and opened for one device (cuda_aot_runtime). Movable, not copyable;
/// thread-safe for concurrent const calls.
class Runtime {
public:
    /// Verifies `registry` against the trust root file and opens it for the policy's device.
    static Runtime open(const std::string &registry, const std::string &trust_root,
                        const Policy &policy) {
        cuda_aot_runtime *rt = nullptr;
        detail::check(
            cuda_aot_runtime_open(registry.c_str(), trust_root.c_str(), policy.get(), &rt));
        return Runtime(rt);
    }
    /// Verifies a kernel bundle compiled into the program (`bundle`, `size` bytes that
    /// outlive the runtime: a static array) against the trust root's bytes and opens it for
    /// the policy's device; no file is read and the bundle is used in place.
    static Runtime open_embedded(const void *bundle, std::size_t size,
                                 const std::vector<unsigned char> &trust_root,
                                 const Policy &policy) {
        cuda_aot_runtime *rt = nullptr;
        detail::check(cuda_aot_runtime_open_embedded(
            static_cast<const uint8_t *>(bundle), size, trust_root.data(), trust_root.size(),
            policy.get(), &rt));
        return Runtime(rt);
    }
    /// Opens one runtime per device ordinal, verifying the registry once.
    static std::vector<Runtime> open_devices(const std::string &registry,
                                             const std::string &trust_root,
                                             const Policy &policy,
                                             const std::vector<std::size_t> &devices) {
        std::vector<cuda_aot_runtime *> raw(devices.size(), nullptr);
        detail::check(cuda_aot_runtime_open_devices(registry.c_str(), trust_root.c_str(),
                                                    policy.get(), devices.data(),
                                                    devices.size(), raw.data()));
        std::vector<Runtime> out;
        out.reserve(raw.size());
        for (cuda_aot_runtime *rt : raw) {
            out.push_back(Runtime(rt));
        }
        return out;
    }
    /// Loads every selected module now.
    void preload() const { detail::check(cuda_aot_runtime_preload(rt_.get())); }
    /// A snapshot of the counters.
    cuda_aot_counters counters() const {
        cuda_aot_counters c{};
        detail::check(cuda_aot_runtime_counters(rt_.get(), &c));
        return c;
    }
    /// The device (its strings live as long as this runtime).
    cuda_aot_device_info device() const {
        cuda_aot_device_info d{};
        detail::check(cuda_aot_runtime_device(rt_.get(), &d));
        return d;
    }
    /// The device's primary context (a CUcontext), shared with the CUDA runtime API.
    CUctx_st *context() const noexcept { return cuda_aot_runtime_context(rt_.get()); }
    /// The verified index version.
    uint64_t index_version() const noexcept { return cuda_aot_runtime_index_version(rt_.get()); }
    /// The selected modules (strings live as long as this runtime).
    std::vector<cuda_aot_module_info> modules() const {
        std::vector<cuda_aot_module_info> v(cuda_aot_runtime_module_count(rt_.get()));
        for (std::size_t i = 0; i < v.size(); i++) {
            detail::check(cuda_aot_runtime_module(rt_.get(), i, &v[i]));
        }
        return v;
    }
    /// Whether the runtime selected a module of this name.
    bool has(const std::string &module) const {
        for (const auto &m : modules()) {
            if (module == m.module) {
                return true;
            }
        }
        return false;
    }
    /// A kernel by symbol or demangled name.
    Kernel kernel(const std::string &module, const std::string &name) const {
        cuda_aot_kernel *k = nullptr;
        detail::check(cuda_aot_runtime_kernel(rt_.get(), module.c_str(), name.c_str(), &k));
        return Kernel(k);
    }
    /// A device global by symbol or demangled name.
    Global global(const std::string &module, const std::string &name) const {
        cuda_aot_global *g = nullptr;
        detail::check(cuda_aot_runtime_global(rt_.get(), module.c_str(), name.c_str(), &g));
        return Global(g);
    }
    /// The C handle (owned by this object).
    const cuda_aot_runtime *get() const noexcept { return rt_.get(); }

private:
    explicit Runtime(cuda_aot_runtime *rt) : rt_(rt) {}
    detail::Owned<cuda_aot_runtime, cuda_aot_runtime_free> rt_;
};

} // namespace cuda_aot

#endif // CUDA_AOT_HPP
