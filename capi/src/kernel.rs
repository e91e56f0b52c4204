//! `cuda_aot_kernel`: a kernel of a loaded module with its signed launch ABI, its driver
//! handles, and the checked launch (`cuda_aot_kernel_launch`).

use std::ffi::{CString, c_char, c_void};

use cuda_aot::cuda::KernelArg;

use crate::cuda_types::{CUfunc_st, CUkern_st, CUstream_st};
use crate::last_error::{Failure, c_string, entry, guard};
use crate::policy::null_handle;
use crate::report::null;
use crate::status::Status;

/// A kernel of a loaded module, with the launch ABI its manifest signs. Opaque to C; made
/// by `cuda_aot_runtime_kernel`, released by `cuda_aot_kernel_free`. Keeps its module
/// loaded while it lives; immutable, so several threads may use one kernel at once.
pub struct Kernel {
    inner: cuda_aot::cuda::Kernel,
    name: CString,
    symbol: CString,
}

impl Kernel {
    /// A handle of a kernel that came through the runtime (so it carries its signed ABI).
    pub(crate) fn new(inner: cuda_aot::cuda::Kernel) -> Kernel {
        Kernel {
            name: c_string(inner.display_name()),
            symbol: c_string(inner.name()),
            inner,
        }
    }
}

/// One parameter of a kernel's signed launch ABI.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ParamInfo {
    /// Byte offset of the parameter in the parameter buffer.
    pub offset: usize,
    /// Size of the parameter in bytes (8 for a pointer, 4 for an `unsigned int`, the
    /// `sizeof` of a struct passed by value).
    pub size: usize,
}

/// A launch geometry (grid or block), like CUDA's `dim3`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Dim3 {
    /// x extent.
    pub x: u32,
    /// y extent.
    pub y: u32,
    /// z extent.
    pub z: u32,
}

/// The kernel behind a handle, or the error for NULL.
///
/// # Safety
///
/// `k` is NULL or a live kernel.
unsafe fn live<'a>(k: *const Kernel) -> Result<&'a Kernel, Failure> {
    // SAFETY: NULL or live (see # Safety).
    unsafe { k.as_ref() }.ok_or_else(|| null_handle("kernel"))
}

/// The kernel's name as messages show it: the demangled C++ name for a C++ kernel, else
/// its symbol. `""` for NULL. Owned by the kernel.
///
/// # Safety
///
/// `k` is NULL or a live kernel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_kernel_name(k: *const Kernel) -> *const c_char {
    guard(c"".as_ptr(), || {
        // SAFETY: NULL or live (see # Safety).
        unsafe { k.as_ref() }.map_or(c"".as_ptr(), |k| k.name.as_ptr())
    })
}

/// The kernel's entry symbol (the mangled name for a C++ kernel). `""` for NULL. Owned by
/// the kernel.
///
/// # Safety
///
/// `k` is NULL or a live kernel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_kernel_symbol(k: *const Kernel) -> *const c_char {
    guard(c"".as_ptr(), || {
        // SAFETY: NULL or live (see # Safety).
        unsafe { k.as_ref() }.map_or(c"".as_ptr(), |k| k.symbol.as_ptr())
    })
}

/// The kernel's driver handle (`CUfunction`) in the runtime's context, for a host's own
/// `cuLaunchKernel` (which checks nothing: prefer `cuda_aot_kernel_launch`). NULL for NULL.
/// Valid while this kernel handle lives.
///
/// # Safety
///
/// `k` is NULL or a live kernel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_kernel_function(k: *const Kernel) -> *mut CUfunc_st {
    guard(std::ptr::null_mut(), || {
        // SAFETY: NULL or live (see # Safety).
        unsafe { k.as_ref() }.map_or(std::ptr::null_mut(), |k| {
            k.inner.cu_function().cast::<CUfunc_st>()
        })
    })
}

/// The context-independent kernel handle (`CUkernel`) when the module was loaded with
/// `CUDA_AOT_LOAD_API_LIBRARY` (`cuLibraryLoadData`); NULL with `cuModuleLoadData` (the
/// default) and for NULL. Valid while this kernel handle lives.
///
/// # Safety
///
/// `k` is NULL or a live kernel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_kernel_cu_kernel(k: *const Kernel) -> *mut CUkern_st {
    guard(std::ptr::null_mut(), || {
        // SAFETY: NULL or live (see # Safety).
        unsafe { k.as_ref() }
            .and_then(|k| k.inner.cu_kernel())
            .map_or(std::ptr::null_mut(), |h| h.cast::<CUkern_st>())
    })
}

/// The number of parameters of the kernel's signed launch ABI (0 for NULL).
///
/// # Safety
///
/// `k` is NULL or a live kernel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_kernel_param_count(k: *const Kernel) -> usize {
    guard(0, || {
        // SAFETY: NULL or live (see # Safety).
        unsafe { k.as_ref() }
            .and_then(|k| k.inner.signed_abi())
            .map_or(0, |a| a.params.len())
    })
}

/// Fills `*out` with parameter `i` of the kernel's signed launch ABI (offset and size).
///
/// # Safety
///
/// `k` is NULL or a live kernel; `out` is NULL or points to a writable `cuda_aot_param`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_kernel_param(
    k: *const Kernel,
    i: usize,
    out: *mut ParamInfo,
) -> Status {
    entry(|| {
        // SAFETY: NULL or live (see # Safety).
        let k = unsafe { live(k) }?;
        if out.is_null() {
            return Err(null("out"));
        }
        let params = k
            .inner
            .signed_abi()
            .map_or(&[][..], |a| a.params.as_slice());
        let p = params.get(i).ok_or_else(|| {
            Failure::invalid_argument(
                format!(
                    "kernel {}: parameter index {i} is out of range ({} parameters)",
                    k.inner.display_name(),
                    params.len()
                ),
                "pass an index below cuda_aot_kernel_param_count()",
            )
        })?;
        // SAFETY: non-null and writable (see # Safety).
        unsafe {
            out.write(ParamInfo {
                offset: p.offset,
                size: p.size,
            })
        };
        Ok(())
    })
}

/// The largest block (threads) the kernel was compiled for (`__launch_bounds__`), as
/// signed; 0 when it sets no bound, and for NULL.
///
/// # Safety
///
/// `k` is NULL or a live kernel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_kernel_max_threads(k: *const Kernel) -> u32 {
    guard(0, || {
        // SAFETY: NULL or live (see # Safety).
        unsafe { k.as_ref() }
            .and_then(|k| k.inner.signed_abi())
            .and_then(|a| a.max_threads)
            .unwrap_or(0)
    })
}

/// Enqueues the kernel (`cuLaunchKernel`) after checking the launch against its signed
/// ABI, before the driver is called: `count` must be the kernel's parameter count, each
/// `arg_sizes[i]` the size of its parameter `i`, the block at most the signed bound, and
/// `stream` a stream of the runtime's context (NULL, `CU_STREAM_LEGACY` or
/// `CU_STREAM_PER_THREAD` for that context's default stream; a `cudaStream_t` of the
/// device works too). A refused launch returns `CUDA_AOT_STATUS_LAUNCH` naming the kernel
/// and the parameter. `args[i]` points to the value of parameter `i`, as for
/// `cuLaunchKernel` (for a device buffer, a pointer to its `CUdeviceptr`); the driver copies
/// the values during the call. Returns once the launch is queued.
///
/// # Safety
///
/// `k` is NULL or a live kernel; `args` and `arg_sizes` are NULL (only with `count` 0) or
/// point to `count` entries; each `args[i]` points to a live value of `arg_sizes[i]` bytes
/// of the type the kernel's parameter has; every device pointer among them is valid for
/// every access the kernel makes with this geometry until it finishes; `stream` is NULL,
/// a default-stream handle or a live stream.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuda_aot_kernel_launch(
    k: *const Kernel,
    grid: Dim3,
    block: Dim3,
    shared_mem_bytes: u32,
    stream: *mut CUstream_st,
    args: *const *mut c_void,
    arg_sizes: *const usize,
    count: usize,
) -> Status {
    entry(|| {
        // SAFETY: NULL or live (see # Safety).
        let k = unsafe { live(k) }?;
        if count > 0 && (args.is_null() || arg_sizes.is_null()) {
            return Err(null(if args.is_null() { "args" } else { "arg_sizes" }));
        }
        let (ptrs, sizes): (&[*mut c_void], &[usize]) = if count == 0 {
            (&[], &[])
        } else {
            // SAFETY: both point to `count` entries (see # Safety).
            unsafe {
                (
                    std::slice::from_raw_parts(args, count),
                    std::slice::from_raw_parts(arg_sizes, count),
                )
            }
        };
        let mut kargs: Vec<KernelArg<'_>> = ptrs
            .iter()
            .zip(sizes)
            // SAFETY: each pointer is a live value of its size (see # Safety).
            .map(|(p, s)| unsafe { KernelArg::from_raw(*p, *s) })
            .collect();
        // SAFETY: forwarded from this function's contract (see # Safety).
        unsafe {
            k.inner.launch_args_on_raw_stream(
                stream.cast(),
                (grid.x, grid.y, grid.z),
                (block.x, block.y, block.z),
                shared_mem_bytes,
                &mut kargs,
            )
        }
        .map_err(|e| Failure::from(cuda_aot::Error::from(e)))
    })
}

/// Frees a kernel handle (NULL is accepted); its module stays loaded while the runtime or
/// other handles use it.
///
/// # Safety
///
/// `k` is NULL or a kernel not freed before, which no other thread uses; it must not be
/// used after (nor its `CUfunction`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_kernel_free(k: *mut Kernel) {
    guard((), || {
        if !k.is_null() {
            // SAFETY: made by Box::into_raw in cuda_aot_runtime_kernel, freed once.
            drop(unsafe { Box::from_raw(k) });
        }
    })
}
