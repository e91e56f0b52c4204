//! `cuda_aot_global`: a device global of a loaded module (a `__constant__` or `__device__`
//! variable) with its signed size, and copies to and from it that must be exactly that size.

use std::ffi::{CString, c_char, c_void};

use crate::last_error::{Failure, c_string, entry, guard};
use crate::policy::null_handle;
use crate::report::null;
use crate::status::Status;

/// A device global of a loaded module: its device address and the size its manifest signs.
/// Opaque to C; made by `cuda_aot_runtime_global`, released by `cuda_aot_global_free`.
/// Keeps its module loaded while it lives.
pub struct Global {
    inner: cuda_aot::cuda::DeviceGlobal,
    name: CString,
}

impl Global {
    /// A handle of a global that came through the runtime (so its size is the signed one).
    pub(crate) fn new(inner: cuda_aot::cuda::DeviceGlobal) -> Global {
        Global {
            name: c_string(inner.name()),
            inner,
        }
    }
}

/// The global behind a handle, or the error for NULL.
///
/// # Safety
///
/// `g` is NULL or a live global.
unsafe fn live<'a>(g: *const Global) -> Result<&'a Global, Failure> {
    // SAFETY: NULL or live (see # Safety).
    unsafe { g.as_ref() }.ok_or_else(|| null_handle("global"))
}

/// The global's name as the manifest signs it (the demangled C++ name, e.g.
/// `poseidon::ROUND_CONSTANTS`). `""` for NULL. Owned by the global.
///
/// # Safety
///
/// `g` is NULL or a live global.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_global_name(g: *const Global) -> *const c_char {
    guard(c"".as_ptr(), || {
        // SAFETY: NULL or live (see # Safety).
        unsafe { g.as_ref() }.map_or(c"".as_ptr(), |g| g.name.as_ptr())
    })
}

/// The global's size in bytes, as signed (and equal to what the driver reports); 0 for
/// NULL.
///
/// # Safety
///
/// `g` is NULL or a live global.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_global_size(g: *const Global) -> usize {
    // SAFETY: NULL or live (see # Safety).
    guard(0, || unsafe { g.as_ref() }.map_or(0, |g| g.inner.size()))
}

/// The global's device address (a `CUdeviceptr`) in the runtime's context, for a kernel
/// argument or a host's own stream-ordered copy; 0 for NULL. Valid while this handle lives.
///
/// # Safety
///
/// `g` is NULL or a live global.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_global_device_ptr(g: *const Global) -> u64 {
    guard(0, || {
        // SAFETY: NULL or live (see # Safety).
        unsafe { g.as_ref() }.map_or(0, |g| g.inner.device_ptr())
    })
}

/// Copies `size` bytes from `src` into the global (synchronously, `cuMemcpyHtoD`). Refused
/// with `CUDA_AOT_STATUS_LAUNCH` before the driver runs unless `size` is exactly the
/// global's signed size. Fill tables after `cuda_aot_runtime_preload` and before the first
/// launch that reads them.
///
/// # Safety
///
/// `g` is NULL or a live global; `src` is NULL or valid for reads of `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_global_write(
    g: *const Global,
    src: *const c_void,
    size: usize,
) -> Status {
    entry(|| {
        // SAFETY: NULL or live (see # Safety).
        let g = unsafe { live(g) }?;
        if src.is_null() {
            return Err(null("src"));
        }
        // SAFETY: `src` is valid for reads of `size` bytes (see # Safety).
        let bytes = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), size) };
        g.inner
            .write(bytes)
            .map_err(|e| Failure::from(cuda_aot::Error::from(e)))
    })
}

/// Copies the global into `dst` (`size` bytes, synchronously, `cuMemcpyDtoH`). Refused
/// with `CUDA_AOT_STATUS_LAUNCH` before the driver runs unless `size` is exactly the
/// global's signed size.
///
/// # Safety
///
/// `g` is NULL or a live global; `dst` is NULL or valid for writes of `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_global_read(
    g: *const Global,
    dst: *mut c_void,
    size: usize,
) -> Status {
    entry(|| {
        // SAFETY: NULL or live (see # Safety).
        let g = unsafe { live(g) }?;
        if dst.is_null() {
            return Err(null("dst"));
        }
        // SAFETY: `dst` is valid for writes of `size` bytes (see # Safety).
        let out = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), size) };
        g.inner
            .read(out)
            .map_err(|e| Failure::from(cuda_aot::Error::from(e)))
    })
}

/// Frees a global handle (NULL is accepted).
///
/// # Safety
///
/// `g` is NULL or a global not freed before, which no other thread uses; it must not be
/// used after (nor its device address).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_global_free(g: *mut Global) {
    guard((), || {
        if !g.is_null() {
            // SAFETY: made by Box::into_raw in cuda_aot_runtime_global, freed once.
            drop(unsafe { Box::from_raw(g) });
        }
    })
}
