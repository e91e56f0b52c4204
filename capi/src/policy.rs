//! `cuda_aot_policy`: what a runtime opened from C accepts and how it loads (the runtime's
//! `cuda_aot::Policy`), built from a preset and changed by one setter per option.

use std::time::Duration;

use cuda_aot::cuda::LoadApi;

use crate::last_error::{Failure, entry, guard};
use crate::status::Status;
use crate::verify::path_arg;

/// The preset a policy starts from (`cuda_aot::Policy::development()` or `production()`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyPreset {
    /// Development: dev-signed registries (what `cargo xtask release` makes on a fresh
    /// clone), cubins for the exact SM only.
    Development = 0,
    /// Production: production-signed registries only, every module promoted, cubins for the
    /// exact SM only.
    Production = 1,
}

/// The driver entry point that loads modules.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadApiChoice {
    /// `cuModuleLoadData`, into the device's primary context (the default).
    Module = 0,
    /// `cuLibraryLoadData` (driver for CUDA 12.0 or newer): context-independent loading;
    /// kernels then also have a `CUkernel` (`cuda_aot_kernel_cu_kernel`).
    Library = 1,
}

/// A policy: which registries and binaries a runtime accepts, where it keeps its rollback
/// state and how it loads. Opaque to C; made by `cuda_aot_policy_new`, changed by the
/// `cuda_aot_policy_*` setters, released by `cuda_aot_policy_free`. Opening a runtime
/// copies it, so it may be freed (or changed) right after. Not for concurrent changes: a
/// policy is one thread's until it is only read.
pub struct Policy {
    pub(crate) inner: cuda_aot::Policy,
}

/// A null handle argument.
pub(crate) fn null_handle(what: &str) -> Failure {
    Failure::invalid_argument(
        format!("{what} is NULL"),
        format!("pass the {what} handle the library made (and has not freed)"),
    )
}

/// Runs a setter on a live policy.
///
/// # Safety
///
/// `policy` is NULL or a live policy of `cuda_aot_policy_new` no other thread changes.
unsafe fn set(
    policy: *mut Policy,
    change: impl FnOnce(cuda_aot::Policy) -> Result<cuda_aot::Policy, Failure>,
) -> Status {
    entry(|| {
        // SAFETY: NULL or live and not shared for writing (see # Safety).
        let p = unsafe { policy.as_mut() }.ok_or_else(|| null_handle("policy"))?;
        p.inner = change(p.inner.clone())?;
        Ok(())
    })
}

/// Makes a policy from `preset` (`CUDA_AOT_POLICY_PRESET_DEVELOPMENT` or `_PRODUCTION`)
/// with the runtime's defaults: device 0, the exact SM's cubin only (no PTX), the per-user
/// rollback state file (the one `cargo xtask verify` shares), no offline grace,
/// `cuModuleLoadData`. On success `*out` is the new policy (free it with
/// `cuda_aot_policy_free`).
///
/// # Safety
///
/// `out` is NULL or points to a writable `cuda_aot_policy*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_policy_new(preset: i32, out: *mut *mut Policy) -> Status {
    entry(|| {
        if out.is_null() {
            return Err(crate::report::null("out"));
        }
        // SAFETY: non-null and writable (see # Safety).
        unsafe { out.write(std::ptr::null_mut()) };
        let inner = match preset {
            p if p == PolicyPreset::Development as i32 => cuda_aot::Policy::development(),
            p if p == PolicyPreset::Production as i32 => cuda_aot::Policy::production(),
            other => {
                return Err(Failure::invalid_argument(
                    format!("unknown policy preset {other}"),
                    "pass CUDA_AOT_POLICY_PRESET_DEVELOPMENT or CUDA_AOT_POLICY_PRESET_PRODUCTION",
                ));
            }
        };
        // SAFETY: as above; the caller frees it with cuda_aot_policy_free.
        unsafe { out.write(Box::into_raw(Box::new(Policy { inner }))) };
        Ok(())
    })
}

/// Allows the labelled PTX compatibility mode: a module without a cubin for the device's
/// exact SM loads its PTX through the driver JIT (counted in `compat_loads`, logged).
/// Refused with production registries unless the release ships PTX for that module.
///
/// # Safety
///
/// `policy` is NULL or a live policy that no other thread uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_policy_allow_ptx(policy: *mut Policy) -> Status {
    // SAFETY: forwarded (see # Safety).
    unsafe { set(policy, |p| Ok(p.with_ptx_compatibility())) }
}

/// Keeps the rollback state in the file `path` (created on first use) instead of the
/// per-user default.
///
/// # Safety
///
/// `policy` is NULL or a live policy that no other thread uses meanwhile; `path` is NULL
/// or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_policy_state_file(
    policy: *mut Policy,
    path: *const std::ffi::c_char,
) -> Status {
    // SAFETY: forwarded (see # Safety).
    unsafe {
        set(policy, |p| {
            let path = path_arg(path, "path")?;
            Ok(p.with_state_file(path))
        })
    }
}

/// Keeps no rollback state at all: an older release than one already seen is then
/// accepted. Logged as a warning at every open; meant for tests and throwaway hosts.
///
/// # Safety
///
/// `policy` is NULL or a live policy that no other thread uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_policy_without_rollback_protection(
    policy: *mut Policy,
) -> Status {
    // SAFETY: forwarded (see # Safety).
    unsafe { set(policy, |p| Ok(p.without_rollback_protection())) }
}

/// Offline grace: an expired timestamp is still accepted up to `seconds` after the last
/// fresh verification recorded in the rollback state, with a warning naming the deadline.
/// 0 (the default) accepts no expired timestamp.
///
/// # Safety
///
/// `policy` is NULL or a live policy that no other thread uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_policy_offline_grace(
    policy: *mut Policy,
    seconds: u64,
) -> Status {
    // SAFETY: forwarded (see # Safety).
    unsafe {
        set(policy, |p| {
            Ok(p.with_offline_grace(Duration::from_secs(seconds)))
        })
    }
}

/// The CUDA device ordinal `cuda_aot_runtime_open` opens (0 by default; after
/// `CUDA_VISIBLE_DEVICES`). `cuda_aot_runtime_open_devices` ignores it.
///
/// # Safety
///
/// `policy` is NULL or a live policy that no other thread uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_policy_device(policy: *mut Policy, ordinal: usize) -> Status {
    // SAFETY: forwarded (see # Safety).
    unsafe {
        set(policy, |p| {
            Ok(cuda_aot::Policy {
                device: ordinal,
                ..p
            })
        })
    }
}

/// The driver entry point modules are loaded with: `CUDA_AOT_LOAD_API_MODULE`
/// (`cuModuleLoadData`, the default) or `CUDA_AOT_LOAD_API_LIBRARY`
/// (`cuLibraryLoadData`).
///
/// # Safety
///
/// `policy` is NULL or a live policy that no other thread uses meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_policy_load_api(policy: *mut Policy, api: i32) -> Status {
    // SAFETY: forwarded (see # Safety).
    unsafe {
        set(policy, |p| {
            let load_api = match api {
                a if a == LoadApiChoice::Module as i32 => LoadApi::Module,
                a if a == LoadApiChoice::Library as i32 => LoadApi::Library,
                other => {
                    return Err(Failure::invalid_argument(
                        format!("unknown load API {other}"),
                        "pass CUDA_AOT_LOAD_API_MODULE or CUDA_AOT_LOAD_API_LIBRARY",
                    ));
                }
            };
            Ok(cuda_aot::Policy { load_api, ..p })
        })
    }
}

/// Frees a policy (NULL is accepted). Runtimes opened with it keep their own copy.
///
/// # Safety
///
/// `policy` is NULL or a policy of `cuda_aot_policy_new` not freed before; it must not be
/// used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_policy_free(policy: *mut Policy) {
    guard((), || {
        if !policy.is_null() {
            // SAFETY: made by Box::into_raw in cuda_aot_policy_new, freed once (# Safety).
            drop(unsafe { Box::from_raw(policy) });
        }
    })
}
