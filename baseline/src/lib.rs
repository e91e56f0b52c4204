//! cuda-aot-baseline: bare driver loads with no cuda-aot checks around them, the baseline
//! that `cargo xtask bench-load` measures the runtime's verified load against.
//!
//! A crate of its own so that no prover can reach unverified loaders: the runtime crate
//! has no such entry point in any build (the `compile_fail` doctests of its `cuda` module,
//! `src/cuda/mod.rs`, fail if one comes back). Only the image checks that keep the driver
//! from reading past a buffer are shared with the runtime (`cuda_aot::cuda::check_cubin`,
//! `ptx_with_nul`).

#![deny(missing_docs)]

mod contexts;

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, result, sys};

use cuda_aot::cuda::{
    CudaError, check_cubin, driver_name, need_driver, ptx_with_nul, require_driver,
};

pub use contexts::{ModuleKernels, extra_contexts, time_ready_in_contexts};

/// Loads `image` with a bare `cuModuleLoadData` into `ctx`, unloads it again, and returns
/// the time of the load call alone. A cubin is loaded straight from `image` (what a prover
/// does with the bytes it read); PTX (`ptx = true`) is NUL-terminated into a copy before
/// the clock starts and compiled by the driver's JIT inside the timed call.
pub fn time_module_load(
    ctx: &Arc<CudaContext>,
    image: &[u8],
    ptx: bool,
) -> Result<Duration, CudaError> {
    require_driver()?;
    if ptx {
        let text = ptx_with_nul(image)?;
        time_load(ctx, &text)
    } else {
        check_cubin(image)?;
        time_load(ctx, image)
    }
}

/// The cubin `image` copied into a new heap allocation before the clock starts (outside
/// the timed call), then loaded and unloaded as [`time_module_load`] does; the copy is freed
/// after the unload. Reported next to the load in place (`*_bare_fresh_copy_vs_in_place`):
/// in the committed H200 runs such a copy loads 1.5–6 % faster than the runtime's verified
/// bytes in place, for reasons bench-load's `copy_*` rows take apart (docs/gpu.md).
pub fn time_cubin_load_from_copy(
    ctx: &Arc<CudaContext>,
    image: &[u8],
) -> Result<Duration, CudaError> {
    require_driver()?;
    check_cubin(image)?;
    let copy: Box<[u8]> = image.into();
    time_load(ctx, &copy)
}

/// The cubin `image` copied into a new heap allocation *inside* the clock, then loaded, as a
/// prover that copies the bytes it read before handing them to the driver would: the time
/// covers the copy and the `cuModuleLoadData`; the module is unloaded and the copy freed
/// after the clock stops.
pub fn time_cubin_load_copying(
    ctx: &Arc<CudaContext>,
    image: &[u8],
) -> Result<Duration, CudaError> {
    require_driver()?;
    check_cubin(image)?;
    bind(ctx)?;
    let start = Instant::now();
    let copy: Box<[u8]> = image.into();
    // SAFETY: `ctx` is current on this thread; `copy` holds the bytes of `image`, a complete
    // cubin (checked above), and lives until after the unload.
    let module = unsafe { load_checked(&copy) };
    let took = start.elapsed();
    // SAFETY: the module was just loaded into the current context; nothing else holds it.
    unsafe { unload(module?) }?;
    drop(copy);
    Ok(took)
}

/// The timed `cuModuleLoadData` of a checked image (a complete cubin or NUL-terminated
/// PTX), followed by its unload.
fn time_load(ctx: &Arc<CudaContext>, image: &[u8]) -> Result<Duration, CudaError> {
    bind(ctx)?;
    let start = Instant::now();
    // SAFETY: `ctx` is current on this thread; both callers checked `image` (a complete
    // cubin, or NUL-terminated PTX), which outlives the call.
    let module = unsafe { load_checked(image) };
    let took = start.elapsed();
    // SAFETY: the module was just loaded into the current context; nothing else holds it.
    unsafe { unload(module?) }?;
    Ok(took)
}

/// Makes `ctx` current on this thread (cudarc's check first, so it reports an error recorded
/// on the context).
fn bind(ctx: &CudaContext) -> Result<(), CudaError> {
    ctx.bind_to_thread()
        .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))
}

/// `cuModuleLoadData` of `image` into the current context.
///
/// # Safety
///
/// libcuda is loaded, a context is current on this thread, and `image` is a checked image
/// (a complete cubin: `check_cubin`; or NUL-terminated PTX: `ptx_with_nul`), so the driver's
/// reads stay inside it.
unsafe fn load_checked(image: &[u8]) -> Result<sys::CUmodule, CudaError> {
    // SAFETY: the caller's guarantees; `image` outlives the call.
    unsafe { result::module::load_data(image.as_ptr().cast::<c_void>()) }
        .map_err(|e| CudaError::driver("cuModuleLoadData", e))
}

/// `cuModuleUnload` of `module`.
///
/// # Safety
///
/// `module` was loaded into the context current on this thread, nothing else uses it, and it
/// is unloaded exactly once (here).
unsafe fn unload(module: sys::CUmodule) -> Result<(), CudaError> {
    // SAFETY: the caller's guarantees.
    unsafe { result::module::unload(module) }.map_err(|e| CudaError::driver("cuModuleUnload", e))
}

/// Loads every image with a bare `cuModuleLoadData` into `ctx`, one after another, keeping
/// them all loaded until the clock stops (the way a prover holds its modules), then unloads
/// them. Returns the time of the loads alone.
pub fn time_modules_kept(ctx: &Arc<CudaContext>, images: &[&[u8]]) -> Result<Duration, CudaError> {
    require_driver()?;
    for image in images {
        check_cubin(image)?;
    }
    ctx.bind_to_thread()
        .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))?;
    let mut loaded = Vec::with_capacity(images.len());
    let start = Instant::now();
    for image in images {
        // SAFETY: libcuda is loaded and `ctx` is current on this thread; every image is a
        // complete cubin (check_cubin above) that outlives the call.
        match unsafe { result::module::load_data(image.as_ptr().cast::<c_void>()) } {
            Ok(m) => loaded.push(m),
            Err(e) => {
                unload_all(&loaded);
                return Err(CudaError::driver("cuModuleLoadData", e));
            }
        }
    }
    let took = start.elapsed();
    unload_all(&loaded);
    Ok(took)
}

fn unload_all(modules: &[cudarc::driver::sys::CUmodule]) {
    for m in modules {
        // SAFETY: each module was loaded into the current context above and is unloaded
        // exactly once; nothing else holds it.
        let _ = unsafe { result::module::unload(*m) };
    }
}

/// The bare start-up of a prover that uses the driver without cuda-aot: the primary context
/// of device `ordinal` (what `CudaContext::new` does), then each image loaded with
/// `cuModuleLoadData` and each named kernel looked up, everything kept until dropped.
pub struct BareStartup {
    ctx: Arc<CudaContext>,
    modules: Vec<cudarc::driver::sys::CUmodule>,
    kernels: usize,
}

impl BareStartup {
    /// Creates the context of `ordinal` and loads `images` (bytes and kernel symbols).
    pub fn run(ordinal: usize, images: &[(Vec<u8>, Vec<String>)]) -> Result<Self, CudaError> {
        require_driver()?;
        let trace = std::env::var_os("CUDA_AOT_STARTUP_TRACE").is_some();
        let t = Instant::now();
        if trace {
            // cuInit on its own, so the trace splits driver start from context creation.
            // SAFETY: libcuda is loaded; cuInit may be called any number of times.
            unsafe { cudarc::driver::sys::cuInit(0) }
                .result()
                .map_err(|e| CudaError::driver("cuInit", e))?;
            eprintln!(
                "bare start-up: device {ordinal} cuInit returned after {} us",
                t.elapsed().as_micros()
            );
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| CudaError::driver("cuCtxCreate", e))?;
        if trace {
            eprintln!(
                "bare start-up: device {ordinal} context in {} us",
                t.elapsed().as_micros()
            );
        }
        ctx.bind_to_thread()
            .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))?;
        let mut me = BareStartup {
            ctx,
            modules: Vec::with_capacity(images.len()),
            kernels: 0,
        };
        for (image, kernels) in images {
            check_cubin(image)?;
            // SAFETY: libcuda is loaded and the context is current on this thread; `image` is
            // a complete cubin that outlives the call.
            let m = unsafe { result::module::load_data(image.as_ptr().cast::<c_void>()) }
                .map_err(|e| CudaError::driver("cuModuleLoadData", e))?;
            me.modules.push(m);
            for k in kernels {
                let name = driver_name("kernel name", k)?;
                // SAFETY: `m` was just loaded into the current context and is not freed.
                unsafe { result::module::get_function(m, name) }
                    .map_err(|e| CudaError::function(k, "cuModuleGetFunction", e))?;
                me.kernels += 1;
            }
        }
        Ok(me)
    }

    /// How many kernels were looked up.
    pub fn kernels(&self) -> usize {
        self.kernels
    }
}

impl Drop for BareStartup {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            unload_all(&self.modules);
        }
    }
}

/// The driver's module loading mode in this process (`cuModuleGetLoadingMode`): `"LAZY"`
/// (functions placed on the device at first use, the default since CUDA 12.2) or `"EAGER"`
/// (every function at module load), as `CUDA_MODULE_LOADING` chose it when the driver
/// initialised. bench-load's start-up probes check it against what they were started with.
pub fn module_loading_mode() -> Result<String, CudaError> {
    require_driver()?;
    need_driver(11070, "cuModuleGetLoadingMode")?;
    result::init().map_err(|e| CudaError::driver("cuInit", e))?;
    // Read as the enum's u32 representation, so that a value this cudarc does not know is
    // reported instead of being an invalid enum.
    let mut mode: u32 = 0;
    // SAFETY: libcuda is loaded, initialised and exports the entry point (checked above); the
    // out-pointer is a live, aligned u32, the representation of `CUmoduleLoadingMode`
    // (`#[repr(u32)]`), which the call writes once.
    unsafe { sys::cuModuleGetLoadingMode((&mut mode as *mut u32).cast()) }
        .result()
        .map_err(|e| CudaError::driver("cuModuleGetLoadingMode", e))?;
    const EAGER: u32 = sys::CUmoduleLoadingMode::CU_MODULE_EAGER_LOADING as u32;
    const LAZY: u32 = sys::CUmoduleLoadingMode::CU_MODULE_LAZY_LOADING as u32;
    Ok(match mode {
        EAGER => "EAGER".into(),
        LAZY => "LAZY".into(),
        other => format!("unknown ({other})"),
    })
}
