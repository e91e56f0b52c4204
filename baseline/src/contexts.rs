//! Kernels made ready in several contexts of one device: each module loaded into every
//! context (`cuModuleLoadData`, what one runtime per device does today) against each module
//! loaded once and its kernels placed in every context (`cuLibraryLoadData`,
//! context-independent loading). bench-load's `*_ctx*` rows.
//!
//! Both ways run the same steps per kernel and context, through the same layer (the driver
//! with no cuda-aot checks around it), so their ratio is the driver's answer alone. The
//! runtime's `LoadedModule` cannot stand in for the library side: a library it loads answers
//! kernel lookups for the one context it was loaded in.

use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, result, sys};

use cuda_aot::cuda::{CudaError, LoadApi, check_cubin, driver_name, need_driver, require_driver};

use super::{bind, load_checked, unload};

/// One module to make ready: its cubin and the symbols of its kernels (from its signed
/// manifest).
pub type ModuleKernels<'a> = (&'a [u8], &'a [String]);

/// `count` new contexts on device `ordinal` (`cuCtxCreate`; not the primary context, which a
/// process has once per device), each destroyed when its last `Arc` is dropped. They stand
/// in for the contexts of several devices. The last one created is current on this thread
/// afterwards.
pub fn extra_contexts(ordinal: usize, count: usize) -> Result<Vec<Arc<CudaContext>>, CudaError> {
    require_driver()?;
    // cudarc creates them with cuCtxCreate_v4 under its CUDA 13 bindings.
    need_driver(12050, "cuCtxCreate_v4")?;
    (0..count)
        .map(|_| {
            CudaContext::new_non_primary(ordinal, 0)
                .map_err(|e| CudaError::driver("cuCtxCreate_v4", e))
        })
        .collect()
}

/// Makes every kernel of `modules` ready to launch in every context of `contexts` and
/// returns the time that took: from the first driver call to the last `cuFuncLoad`, with
/// every module and library still loaded. They are unloaded after the clock stops.
///
/// - [`LoadApi::Module`]: in each context in turn, `cuModuleLoadData` of each image, then
///   `cuModuleGetFunction` + `cuFuncLoad` of each of its kernels.
/// - [`LoadApi::Library`]: `cuLibraryLoadData` of each image once, then in each context
///   `cuLibraryGetKernel` + `cuKernelGetFunction` + `cuFuncLoad` of each kernel.
///
/// `cuFuncLoad` (as the runtime's `LoadedModule::function` calls it) puts each kernel on the
/// device now, so under lazy loading neither way leaves work for the first launch. Images
/// are checked (`check_cubin`) and names converted before the clock starts. Errors name the
/// driver entry point and, for a kernel, the kernel.
pub fn time_ready_in_contexts(
    contexts: &[Arc<CudaContext>],
    modules: &[ModuleKernels<'_>],
    api: LoadApi,
) -> Result<Duration, CudaError> {
    require_driver()?;
    need_driver(12040, "cuFuncLoad")?;
    if api == LoadApi::Library {
        need_driver(12000, "cuLibraryLoadData")?;
    }
    for (image, _) in modules {
        check_cubin(image)?;
    }
    let names = modules
        .iter()
        .map(|(_, kernels)| {
            kernels
                .iter()
                .map(|k| Ok((k.as_str(), driver_name("kernel name", k)?)))
                .collect::<Result<Vec<_>, CudaError>>()
        })
        .collect::<Result<Vec<_>, CudaError>>()?;
    // Room for every handle, so that the timed loop does not grow a vector.
    let mut loaded = Loaded {
        modules: Vec::with_capacity(contexts.len() * modules.len()),
        libraries: Vec::with_capacity(modules.len()),
    };
    let start = Instant::now();
    match api {
        LoadApi::Module => {
            for ctx in contexts {
                bind(ctx)?;
                for ((image, _), kernels) in modules.iter().zip(&names) {
                    // SAFETY: `ctx` is current on this thread; `image` is a complete cubin
                    // (checked above) that outlives the call.
                    let module = unsafe { load_checked(image) }?;
                    loaded.modules.push((ctx.clone(), module));
                    for (k, name) in kernels {
                        let mut func = MaybeUninit::<sys::CUfunction>::uninit();
                        // SAFETY: `module` is loaded in the current context (it is unloaded
                        // only after the clock); `name` is NUL-terminated and outlives the
                        // call; the out-pointer is a live local.
                        unsafe {
                            sys::cuModuleGetFunction(func.as_mut_ptr(), module, name.as_ptr())
                        }
                        .result()
                        .map_err(|e| CudaError::function(k, "cuModuleGetFunction", e))?;
                        // SAFETY: the call succeeded, so it wrote the handle.
                        func_load(unsafe { func.assume_init() }, k)?;
                    }
                }
            }
        }
        LoadApi::Library => {
            for (image, _) in modules {
                let mut library = MaybeUninit::<sys::CUlibrary>::uninit();
                // SAFETY: libcuda is loaded and exports cuLibraryLoadData (checked above).
                // `image` is a complete cubin (checked above) that outlives the call; no JIT
                // or library options are passed (null arrays with count 0); the out-pointer
                // is a live local.
                unsafe {
                    sys::cuLibraryLoadData(
                        library.as_mut_ptr(),
                        image.as_ptr().cast::<c_void>(),
                        ptr::null_mut(),
                        ptr::null_mut(),
                        0,
                        ptr::null_mut(),
                        ptr::null_mut(),
                        0,
                    )
                }
                .result()
                .map_err(|e| CudaError::driver("cuLibraryLoadData", e))?;
                // SAFETY: the call succeeded, so it wrote the handle.
                loaded.libraries.push(unsafe { library.assume_init() });
            }
            for ctx in contexts {
                bind(ctx)?;
                for (&library, kernels) in loaded.libraries.iter().zip(&names) {
                    for (k, name) in kernels {
                        let mut kernel = MaybeUninit::<sys::CUkernel>::uninit();
                        // SAFETY: `library` is loaded (unloaded only after the clock);
                        // `name` is NUL-terminated and outlives the call; the out-pointer is
                        // a live local.
                        unsafe {
                            sys::cuLibraryGetKernel(kernel.as_mut_ptr(), library, name.as_ptr())
                        }
                        .result()
                        .map_err(|e| CudaError::function(k, "cuLibraryGetKernel", e))?;
                        let mut func = MaybeUninit::<sys::CUfunction>::uninit();
                        // SAFETY: the lookup succeeded, so `kernel` is written and belongs to
                        // the live library; `ctx` is current, so the function returned is the
                        // one for `ctx`; the out-pointer is a live local.
                        unsafe {
                            sys::cuKernelGetFunction(func.as_mut_ptr(), kernel.assume_init())
                        }
                        .result()
                        .map_err(|e| CudaError::function(k, "cuKernelGetFunction", e))?;
                        // SAFETY: the call succeeded, so it wrote the handle.
                        func_load(unsafe { func.assume_init() }, k)?;
                    }
                }
            }
        }
    }
    let took = start.elapsed();
    loaded.unload()?;
    Ok(took)
}

/// `cuFuncLoad`: the kernel `k` on the device now, not at its first launch.
fn func_load(func: sys::CUfunction, k: &str) -> Result<(), CudaError> {
    // SAFETY: `func` was just returned by the driver for the current context, whose module
    // or library stays loaded until after the clock; cuFuncLoad exists from CUDA 12.4 on
    // (time_ready_in_contexts checks that first).
    unsafe { sys::cuFuncLoad(func) }
        .result()
        .map_err(|e| CudaError::function(k, "cuFuncLoad", e))
}

/// What one timed run loaded: unloaded by [`Loaded::unload`] after the clock, or when
/// dropped on an error path.
struct Loaded {
    /// Modules and the context each was loaded into.
    modules: Vec<(Arc<CudaContext>, sys::CUmodule)>,
    libraries: Vec<sys::CUlibrary>,
}

impl Loaded {
    /// Unloads everything (each module in its own context), going on past a failure, and
    /// returns the first error.
    fn unload(&mut self) -> Result<(), CudaError> {
        let mut first = Ok(());
        for (ctx, module) in self.modules.drain(..) {
            // Bound without cudarc's check, which would report (and consume) an error
            // recorded on the context by someone else.
            // SAFETY: `ctx` is alive (we hold an Arc), so its handle is valid.
            let done = unsafe { result::ctx::set_current(ctx.cu_ctx()) }
                .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))
                // SAFETY: `module` was loaded into `ctx`, now current; it is unloaded exactly
                // once (drained from the list), and no function of it is used afterwards.
                .and_then(|()| unsafe { unload(module) });
            first = first.and(done);
        }
        for library in self.libraries.drain(..) {
            // SAFETY: `library` came from a successful cuLibraryLoadData and is unloaded
            // exactly once (drained from the list); cuLibraryUnload needs no current context.
            let done = unsafe { sys::cuLibraryUnload(library) }
                .result()
                .map_err(|e| CudaError::driver("cuLibraryUnload", e));
            first = first.and(done);
        }
        first
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // Only reached with something left on an error path, which already carries the
        // error worth reporting.
        let _ = self.unload();
    }
}
