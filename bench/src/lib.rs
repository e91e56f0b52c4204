//! cuda-aot-bench: bare driver loads with no cuda-aot checks around them, the baseline
//! that `cargo xtask bench-load` measures the runtime's verified load against.
//!
//! A crate of its own so that no prover can reach unverified loaders: the runtime crate
//! has no such entry point in any build (`tests/no_bench_loaders.rs` checks its compiled
//! libraries). Only the image checks that keep the driver from reading past a buffer are
//! shared with the runtime (`cuda_aot::cuda::check_cubin`, `ptx_with_nul`).

#![deny(missing_docs)]

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, result};

use cuda_aot::cuda::{CudaError, check_cubin, ptx_with_nul, require_driver};

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

/// The cubin `image` copied into a fresh buffer just before the clock starts, then loaded
/// and unloaded as [`time_module_load`] does. Reported next to the load in place: on the
/// H200 host a freshly copied image loads a few per cent faster than the bytes as read.
pub fn time_cubin_load_from_copy(
    ctx: &Arc<CudaContext>,
    image: &[u8],
) -> Result<Duration, CudaError> {
    require_driver()?;
    check_cubin(image)?;
    let copy: Box<[u8]> = image.into();
    time_load(ctx, &copy)
}

/// The timed `cuModuleLoadData` of a checked image (a complete cubin or NUL-terminated
/// PTX), followed by its unload.
fn time_load(ctx: &Arc<CudaContext>, image: &[u8]) -> Result<Duration, CudaError> {
    ctx.bind_to_thread()
        .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))?;
    let start = Instant::now();
    // SAFETY: libcuda is loaded and `ctx` is current on this thread; both callers checked
    // `image` (a complete cubin, or NUL-terminated PTX), which outlives the call.
    let module = unsafe { result::module::load_data(image.as_ptr().cast::<c_void>()) };
    let took = start.elapsed();
    let module = module.map_err(|e| CudaError::driver("cuModuleLoadData", e))?;
    // SAFETY: `module` was just loaded into the current context and nothing else uses it.
    unsafe { result::module::unload(module) }
        .map_err(|e| CudaError::driver("cuModuleUnload", e))?;
    Ok(took)
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
                let name =
                    std::ffi::CString::new(k.as_str()).map_err(|_| CudaError::InvalidName {
                        what: "kernel name",
                        value: k.escape_debug().to_string(),
                        reason: "holds a NUL byte",
                    })?;
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
