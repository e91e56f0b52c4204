//! `cuda_aot_runtime`: a registry verified and opened for one device (`cuda_aot::Runtime`),
//! its modules, counters and device, and the kernel and global look-ups from C.

use std::ffi::{CString, c_char};
use std::path::Path;

use crate::cuda_types::CUctx_st;
use crate::global::Global;
use crate::kernel::Kernel;
use crate::last_error::{Failure, c_string, entry, guard};
use crate::policy::{Policy, null_handle};
use crate::report::{ModuleInfo, ModuleStrings, null};
use crate::status::Status;
use crate::verify::path_arg;

/// A registry verified against a trust root and opened for one CUDA device: each module's
/// binary selected for exactly this device and verified, loaded once per process (at
/// `cuda_aot_runtime_preload` or on first use). Opaque to C; made by
/// `cuda_aot_runtime_open` or `cuda_aot_runtime_open_devices`, released by
/// `cuda_aot_runtime_free`. Thread-safe: every function taking a `const cuda_aot_runtime*`
/// may be called from several threads at once. Kernels and globals taken from it keep
/// their module loaded after the runtime is freed.
pub struct Runtime {
    inner: cuda_aot::Runtime,
    device_name: CString,
    device_sm: CString,
    device_uuid: CString,
    modules: Vec<ModuleStrings>,
}

impl Runtime {
    fn new(inner: cuda_aot::Runtime) -> Runtime {
        let d = inner.device();
        let modules = inner.selected().map(ModuleStrings::of).collect();
        Runtime {
            device_name: c_string(&d.name),
            device_sm: c_string(&d.sm()),
            device_uuid: c_string(&d.uuid_string()),
            modules,
            inner,
        }
    }
}

/// The counters of a runtime (`cuda_aot::Counters`), as `cuda_aot_runtime_counters` fills
/// them.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    /// Manifests verified (signatures, index entry) at open.
    pub modules_verified: u64,
    /// Modules handed to the driver by this runtime.
    pub modules_loaded: u64,
    /// Requests for a module that was already loaded in this process.
    pub cache_hits: u64,
    /// Blob bytes hashed during verification.
    pub bytes_hashed: u64,
    /// Time spent verifying, in nanoseconds.
    pub verify_time_ns: u64,
    /// Time spent in the driver's load calls, in nanoseconds.
    pub driver_time_ns: u64,
    /// Modules loaded as PTX through the driver JIT (compatibility mode).
    pub compat_loads: u64,
    /// Signed documents whose signature threshold was checked at open (constant in the
    /// number of modules).
    pub signatures_checked: u64,
}

/// The device of a runtime, as `cuda_aot_runtime_device` describes it. The strings belong
/// to the runtime: valid until it is freed.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceInfo {
    /// The device ordinal in this process (after `CUDA_VISIBLE_DEVICES`).
    pub ordinal: usize,
    /// The device's name (`NVIDIA H200`).
    pub name: *const c_char,
    /// The exact SM (`sm_90`).
    pub sm: *const c_char,
    /// The UUID as `nvidia-smi -L` prints it (`GPU-...`).
    pub uuid: *const c_char,
    /// Compute capability, major (9 for sm_90).
    pub cc_major: u32,
    /// Compute capability, minor.
    pub cc_minor: u32,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// The driver's CUDA version as `cuDriverGetVersion` gives it (13000 for 13.0).
    pub driver_version: i32,
}

/// The runtime behind a handle, or the error for NULL.
///
/// # Safety
///
/// `rt` is NULL or a live runtime.
pub(crate) unsafe fn live<'a>(rt: *const Runtime) -> Result<&'a Runtime, Failure> {
    // SAFETY: NULL or live (see # Safety).
    unsafe { rt.as_ref() }.ok_or_else(|| null_handle("runtime"))
}

/// A required string argument (a module, kernel or global name).
///
/// # Safety
///
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn name_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null and NUL-terminated (see # Safety).
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_str()
        .map_err(|e| {
            Failure::invalid_argument(
                format!("{what} is not UTF-8 ({e})"),
                format!("pass {what} as it is written in the manifest (UTF-8)"),
            )
        })
}

/// Reads the trust root file (capped as the runtime caps it).
pub(crate) fn trust_bytes(path: &Path, policy: &cuda_aot::Policy) -> Result<Vec<u8>, Failure> {
    Ok(cuda_aot::fs::read_capped(
        path,
        policy.limits.root,
        "trust root",
    )?)
}

/// Verifies the registry folder `registry` against the trust root file `trust_root` and
/// opens it for the device the policy names (`cuda_aot_policy_device`, 0 by default), as
/// `cuda_aot::Runtime::open` does: the root chain, the timestamp (expiry, no rollback),
/// the index, build statements and promotions, then for each module the binary for exactly
/// this device's SM (PTX only if the policy allows it), the driver floor, and the selected
/// manifests and blobs (digest, size, ELF SM, kernels, launch ABI, globals). Nothing is
/// loaded yet (see `cuda_aot_runtime_preload`). A registry error is reported before a
/// driver error, so a host without a GPU still learns that its registry is wrong. The
/// versions seen are saved in the policy's rollback state file.
///
/// `policy` NULL means the development preset's defaults. On success `*out` is the new
/// runtime (free it with `cuda_aot_runtime_free`); on failure it is NULL and the last error
/// names the module, target and file concerned, with its `Fix:`.
///
/// # Safety
///
/// `registry`, `trust_root` are NULL or NUL-terminated strings; `policy` is NULL or a live
/// policy; `out` is NULL or points to a writable `cuda_aot_runtime*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_runtime_open(
    registry: *const c_char,
    trust_root: *const c_char,
    policy: *const Policy,
    out: *mut *mut Runtime,
) -> Status {
    entry(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: non-null and writable (see # Safety).
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: each argument is as # Safety says.
        let (registry, trust, policy) = unsafe {
            (
                path_arg(registry, "registry")?,
                path_arg(trust_root, "trust_root")?,
                policy_of(policy),
            )
        };
        let trust = trust_bytes(&trust, &policy)?;
        let rt = cuda_aot::Runtime::open(&registry, &trust, policy)?;
        // SAFETY: as above; the caller frees it with cuda_aot_runtime_free.
        unsafe { out.write(Box::into_raw(Box::new(Runtime::new(rt)))) };
        Ok(())
    })
}

/// `cuda_aot_runtime_open` of a kernel bundle compiled into the program (the
/// `cuda-aot.bundle` file a build wrote with `cuda-aot-build`, embedded with `#embed`,
/// `xxd -i` or a linker section), verified against the trust root file's bytes, with no file
/// read: the same checks and rollback rules as a registry folder. The bundle is used in
/// place: the driver is handed these very bytes, so they must stay valid and unchanged
/// while any runtime opened from them lives (a `static const` array does). Align the
/// bundle to 64 bytes so that the driver gets aligned cubins.
///
/// A bundle that is empty, damaged or not a bundle (`CUDA_AOT_STATUS_MALFORMED`), or made
/// for another trust root (`CUDA_AOT_STATUS_UNTRUSTED_KEY`), is refused before the driver
/// is touched. `policy` NULL means the development preset's defaults. On success `*out` is
/// the new runtime (free it with `cuda_aot_runtime_free`); on failure it is NULL.
///
/// # Safety
///
/// `bundle` is NULL or points to `bundle_len` bytes that stay valid and unchanged while
/// the runtime lives; `trust_root` is NULL or points to `trust_root_len` bytes (read during
/// the call only); `policy` is NULL or a live policy; `out` is NULL or points to a writable
/// `cuda_aot_runtime*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_runtime_open_embedded(
    bundle: *const u8,
    bundle_len: usize,
    trust_root: *const u8,
    trust_root_len: usize,
    policy: *const Policy,
    out: *mut *mut Runtime,
) -> Status {
    entry(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: non-null and writable (see # Safety).
        unsafe { out.write(std::ptr::null_mut()) };
        if bundle.is_null() {
            return Err(null("bundle"));
        }
        if trust_root.is_null() {
            return Err(null("trust_root"));
        }
        // SAFETY: `bundle` points to `bundle_len` bytes that outlive every runtime opened
        // from them (the caller's promise, # Safety): the runtime may borrow them as long
        // as the program runs; `trust_root` points to `trust_root_len` bytes for this call.
        let (bundle, trust, policy): (&'static [u8], &[u8], _) = unsafe {
            (
                std::slice::from_raw_parts(bundle, bundle_len),
                std::slice::from_raw_parts(trust_root, trust_root_len),
                policy_of(policy),
            )
        };
        let rt = cuda_aot::Runtime::open_embedded(bundle, trust, policy)?;
        // SAFETY: as above; the caller frees it with cuda_aot_runtime_free.
        unsafe { out.write(Box::into_raw(Box::new(Runtime::new(rt)))) };
        Ok(())
    })
}

/// `cuda_aot_runtime_open` for several devices of this process (`devices`, `count`
/// ordinals): the registry is verified once, every device gets its own selection,
/// driver-floor check, modules and counters; blobs shared by devices of one SM are read
/// and hashed once. The policy's own device is ignored. On success `out[i]` is the runtime
/// of `devices[i]` (free each with `cuda_aot_runtime_free`); on failure every `out[i]` is
/// NULL.
///
/// # Safety
///
/// `registry`, `trust_root` are NULL or NUL-terminated strings; `policy` is NULL or a live
/// policy; `devices` is NULL or points to `count` ordinals; `out` is NULL or points to
/// `count` writable `cuda_aot_runtime*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_runtime_open_devices(
    registry: *const c_char,
    trust_root: *const c_char,
    policy: *const Policy,
    devices: *const usize,
    count: usize,
    out: *mut *mut Runtime,
) -> Status {
    entry(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        if devices.is_null() {
            return Err(null("devices"));
        }
        if count == 0 {
            return Err(Failure::invalid_argument(
                "count is 0",
                "pass at least one device ordinal",
            ));
        }
        // SAFETY: `out` points to `count` writable slots (see # Safety).
        let slots = unsafe { std::slice::from_raw_parts_mut(out, count) };
        slots.fill(std::ptr::null_mut());
        // SAFETY: `devices` points to `count` ordinals; the strings and policy are as
        // # Safety says.
        let (ordinals, registry, trust, policy) = unsafe {
            (
                std::slice::from_raw_parts(devices, count),
                path_arg(registry, "registry")?,
                path_arg(trust_root, "trust_root")?,
                policy_of(policy),
            )
        };
        let trust = trust_bytes(&trust, &policy)?;
        let runtimes = cuda_aot::Runtime::open_devices(&registry, &trust, policy, ordinals)?;
        for (slot, rt) in slots.iter_mut().zip(runtimes) {
            *slot = Box::into_raw(Box::new(Runtime::new(rt)));
        }
        Ok(())
    })
}

/// The policy behind a handle, or the development preset for NULL.
///
/// # Safety
///
/// `policy` is NULL or a live policy.
pub(crate) unsafe fn policy_of(policy: *const Policy) -> cuda_aot::Policy {
    // SAFETY: NULL or live (see # Safety).
    unsafe { policy.as_ref() }.map_or_else(cuda_aot::Policy::development, |p| p.inner.clone())
}

/// Loads every selected module now (at startup, before the first request): each exactly
/// once per process and device, however many runtimes or threads ask.
///
/// # Safety
///
/// `rt` is NULL or a live runtime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_runtime_preload(rt: *const Runtime) -> Status {
    entry(|| {
        // SAFETY: NULL or live (see # Safety).
        Ok(unsafe { live(rt) }?.inner.preload()?)
    })
}

/// Fills `*out` with a snapshot of the runtime's counters.
///
/// # Safety
///
/// `rt` is NULL or a live runtime; `out` is NULL or points to a writable
/// `cuda_aot_counters`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_runtime_counters(
    rt: *const Runtime,
    out: *mut Counters,
) -> Status {
    entry(|| {
        // SAFETY: NULL or live (see # Safety).
        let rt = unsafe { live(rt) }?;
        if out.is_null() {
            return Err(null("out"));
        }
        let c = rt.inner.counters();
        let ns = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: non-null and writable (see # Safety).
        unsafe {
            out.write(Counters {
                modules_verified: c.modules_verified,
                modules_loaded: c.modules_loaded,
                cache_hits: c.cache_hits,
                bytes_hashed: c.bytes_hashed,
                verify_time_ns: ns(c.verify_time),
                driver_time_ns: ns(c.driver_time),
                compat_loads: c.compat_loads,
                signatures_checked: c.signatures_checked,
            })
        };
        Ok(())
    })
}

/// Fills `*out` with the runtime's device (its strings belong to the runtime).
///
/// # Safety
///
/// `rt` is NULL or a live runtime; `out` is NULL or points to a writable
/// `cuda_aot_device_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_runtime_device(
    rt: *const Runtime,
    out: *mut DeviceInfo,
) -> Status {
    entry(|| {
        // SAFETY: NULL or live (see # Safety).
        let rt = unsafe { live(rt) }?;
        if out.is_null() {
            return Err(null("out"));
        }
        let d = rt.inner.device();
        // SAFETY: non-null and writable (see # Safety).
        unsafe {
            out.write(DeviceInfo {
                ordinal: d.ordinal,
                name: rt.device_name.as_ptr(),
                sm: rt.device_sm.as_ptr(),
                uuid: rt.device_uuid.as_ptr(),
                cc_major: d.cc_major,
                cc_minor: d.cc_minor,
                sm_count: d.sm_count,
                driver_version: d.driver_version,
            })
        };
        Ok(())
    })
}

/// The device's primary context (a `CUcontext`), which every module of the runtime lives
/// in: the one the CUDA runtime API uses on this device too, so memory from `cudaMalloc`
/// and streams from `cudaStreamCreate` work with the runtime's kernels. NULL for a NULL
/// runtime. Valid while the runtime lives.
///
/// # Safety
///
/// `rt` is NULL or a live runtime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_runtime_context(rt: *const Runtime) -> *mut CUctx_st {
    guard(std::ptr::null_mut(), || {
        // SAFETY: NULL or live (see # Safety).
        unsafe { rt.as_ref() }.map_or(std::ptr::null_mut(), |rt| {
            rt.inner.context().cu_ctx().cast::<CUctx_st>()
        })
    })
}

/// The verified index version the runtime opened (0 for a NULL runtime).
///
/// # Safety
///
/// `rt` is NULL or a live runtime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_runtime_index_version(rt: *const Runtime) -> u64 {
    guard(0, || {
        // SAFETY: NULL or live (see # Safety).
        unsafe { rt.as_ref() }.map_or(0, |rt| rt.inner.index_version())
    })
}

/// How many modules the runtime selected for its device (0 for a NULL runtime).
///
/// # Safety
///
/// `rt` is NULL or a live runtime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_runtime_module_count(rt: *const Runtime) -> usize {
    guard(0, || {
        // SAFETY: NULL or live (see # Safety).
        unsafe { rt.as_ref() }.map_or(0, |rt| rt.modules.len())
    })
}

/// Fills `*out` with the `i`-th selected module (in name order): its name, the target and
/// kind of the blob selected for this device, its digest and size.
///
/// # Safety
///
/// `rt` is NULL or a live runtime; `out` is NULL or points to a writable
/// `cuda_aot_module_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_runtime_module(
    rt: *const Runtime,
    i: usize,
    out: *mut ModuleInfo,
) -> Status {
    entry(|| {
        // SAFETY: NULL or live (see # Safety).
        let rt = unsafe { live(rt) }?;
        if out.is_null() {
            return Err(null("out"));
        }
        let m = rt.modules.get(i).ok_or_else(|| {
            Failure::invalid_argument(
                format!(
                    "module index {i} is out of range ({} modules)",
                    rt.modules.len()
                ),
                "pass an index below cuda_aot_runtime_module_count()",
            )
        })?;
        // SAFETY: non-null and writable (see # Safety).
        unsafe { out.write(m.info()) };
        Ok(())
    })
}

/// A look-up by module and name: `*out` cleared first, then set to a new handle of what
/// `find` returns.
///
/// # Safety
///
/// As for the functions that call it: `rt` NULL or live, `module` and `name` NULL or
/// NUL-terminated, `out` NULL or writable.
unsafe fn look_up<T>(
    rt: *const Runtime,
    module: *const c_char,
    name: *const c_char,
    out: *mut *mut T,
    find: impl FnOnce(&cuda_aot::Runtime, &str, &str) -> Result<T, Failure>,
) -> Status {
    entry(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: non-null and writable (see # Safety).
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: each argument is as # Safety says.
        let (rt, module, name) = unsafe {
            (
                live(rt)?,
                name_arg(module, "module")?,
                name_arg(name, "name")?,
            )
        };
        let handle = find(&rt.inner, module, name)?;
        // SAFETY: as above; the caller frees it with the handle's free function.
        unsafe { out.write(Box::into_raw(Box::new(handle))) };
        Ok(())
    })
}

/// The kernel `name` of module `module`, loading the module on first use: `name` is the
/// kernel's symbol, its demangled C++ name without parameters (`ntt::bit_rev<gl64_t>`) or
/// its full demangled signature, as the signed manifest records them. The kernel carries
/// its signed launch ABI, which `cuda_aot_kernel_launch` checks. On success `*out` is a new
/// kernel handle (free it with `cuda_aot_kernel_free`). An unknown name lists the module's
/// kernels; an ambiguous one lists the candidates.
///
/// # Safety
///
/// `rt` is NULL or a live runtime; `module`, `name` are NULL or NUL-terminated strings;
/// `out` is NULL or points to a writable `cuda_aot_kernel*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_runtime_kernel(
    rt: *const Runtime,
    module: *const c_char,
    name: *const c_char,
    out: *mut *mut Kernel,
) -> Status {
    // SAFETY: forwarded (see # Safety).
    unsafe {
        look_up(rt, module, name, out, |rt, module, name| {
            Ok(Kernel::new(rt.kernel(module, name)?))
        })
    }
}

/// The device global `name` (a `__constant__` or `__device__` variable) of module
/// `module`, by its symbol or demangled name as the signed manifest lists it, loading the
/// module on first use. The handle has the device address and the signed size; copies
/// through it must be exactly that size. On success `*out` is a new global handle (free it
/// with `cuda_aot_global_free`).
///
/// # Safety
///
/// `rt` is NULL or a live runtime; `module`, `name` are NULL or NUL-terminated strings;
/// `out` is NULL or points to a writable `cuda_aot_global*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_runtime_global(
    rt: *const Runtime,
    module: *const c_char,
    name: *const c_char,
    out: *mut *mut Global,
) -> Status {
    // SAFETY: forwarded (see # Safety).
    unsafe {
        look_up(rt, module, name, out, |rt, module, name| {
            Ok(Global::new(rt.module(module)?.global(name)?))
        })
    }
}

/// Frees a runtime (NULL is accepted). Kernels and globals taken from it stay valid (each
/// keeps its module loaded) until they are freed.
///
/// # Safety
///
/// `rt` is NULL or a runtime not freed before, which no other thread uses; it must not be
/// used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_runtime_free(rt: *mut Runtime) {
    guard((), || {
        if !rt.is_null() {
            // SAFETY: made by Box::into_raw in an open function, freed once (# Safety).
            drop(unsafe { Box::from_raw(rt) });
        }
    })
}
