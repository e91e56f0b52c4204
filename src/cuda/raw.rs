//! Bare driver loads with no cuda-aot checks around them: the baseline that
//! `cargo xtask bench-load` measures the runtime's verified load against.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, result};

use super::image::{check_cubin, ptx_with_nul};
use super::{CudaError, require_driver};

/// Loads `image` with a bare `cuModuleLoadData` into `ctx`, unloads it again, and returns
/// the time of the load call alone. PTX (`ptx = true`) is NUL-terminated before the clock
/// starts and compiled by the driver's JIT inside the timed call.
pub fn time_module_load(
    ctx: &Arc<CudaContext>,
    image: &[u8],
    ptx: bool,
) -> Result<Duration, CudaError> {
    require_driver()?;
    let bytes: Box<[u8]> = if ptx {
        ptx_with_nul(image)?
    } else {
        check_cubin(image)?;
        image.into()
    };
    ctx.bind_to_thread()
        .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))?;
    let start = Instant::now();
    // SAFETY: libcuda is loaded and `ctx` is current on this thread; `bytes` is a complete
    // cubin (check_cubin) or NUL-terminated PTX, alive for the whole call.
    let module = unsafe { result::module::load_data(bytes.as_ptr().cast::<c_void>()) };
    let took = start.elapsed();
    let module = module.map_err(|e| CudaError::driver("cuModuleLoadData", e))?;
    // SAFETY: `module` was just loaded into the current context and nothing else uses it.
    unsafe { result::module::unload(module) }
        .map_err(|e| CudaError::driver("cuModuleUnload", e))?;
    Ok(took)
}
