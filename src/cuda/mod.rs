//! The CUDA driver boundary: the one module of the runtime that holds `unsafe`.
//!
//! Everything here goes through [`cudarc`]'s driver API with libcuda loaded dynamically, so
//! the crate builds and its CPU tests run on hosts without CUDA. cudarc *panics* when a
//! driver entry point is called without libcuda, so every entry point of this module first
//! checks [`driver_present`] and returns [`CudaError::DriverMissing`] instead.
//!
//! Layering, after cudarc's own `sys` / `result` / `safe`:
//!
//! - [`Device`] owns a retained primary context ([`CudaContext`]) and the device's identity
//!   ([`DeviceInfo`]).
//! - [`LoadedModule`] loads a module from in-memory bytes only (never from a path), with
//!   `cuModuleLoadData` or `cuLibraryLoadData` ([`LoadApi`]); its `Drop` unloads it.
//! - [`DeviceGlobal`] is a `__constant__` / `__device__` variable of a loaded module, with
//!   copies from and to the host checked against its size before the driver runs; it holds
//!   an `Arc` of the module's owner like a kernel.
//! - [`Kernel`] is a function of a loaded module; it holds an `Arc` of the module's owner,
//!   so the module cannot be unloaded while a kernel handle lives. Launching stays
//!   `unsafe`: no type here can check kernel arguments against a device-side signature.
//! - `research` (cargo feature `research` only) compiles CUDA C++ at run time. A default
//!   build contains no runtime-compiler entry point; a test below proves it.
//!
//! Every `unsafe` block carries a `// SAFETY:` comment and every `unsafe fn` a `# Safety`
//! section.
//!
//! No build of this crate has a loader of unchecked bytes for benchmarks: the bare-driver
//! baselines are the crate `cuda-aot-baseline`. These doctests run with whatever features
//! cargo unified into the crate (in `cargo test --workspace`, those of every member): the
//! image checks the baselines share compile, the baselines themselves do not.
//!
//! ```no_run
//! let _ = cuda_aot::cuda::check_cubin(b"\x7fELF");
//! ```
//!
//! ```compile_fail
//! let _ = cuda_aot::cuda::raw::time_module_load;
//! ```
//!
//! ```compile_fail
//! let _ = cuda_aot::cuda::BareStartup::run;
//! ```
//!
//! ```ignore
//! // The flow, as the runtime uses it (see `module.rs` tests for the compiled version).
//! let device = Device::open(0)?;                       // DriverMissing / NoDevice / Driver
//! let module = LoadedModule::load_verified(device.context(), &verified_module, LoadApi::Module)?;
//! let kernel = module.function("ntt_scale")?;          // names the kernel on failure
//! let stream = device.context().default_stream();
//! unsafe { kernel.launch(&stream, (blocks, 1, 1), (256, 1, 1), 0, &mut params)? };
//! ```

mod device;
mod error;
mod global;
mod image;
mod kernel;
mod module;
#[cfg(feature = "research")]
pub mod research;

use std::ffi::CString;
use std::sync::OnceLock;

pub use cudarc::driver::sys::CUdeviceptr;
pub use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
pub use device::{Device, DeviceInfo, device_count, driver_version, need_driver};
pub use error::CudaError;
pub use global::DeviceGlobal;
pub use image::{check_cubin, ptx_with_nul};
pub use kernel::{Kernel, KernelArg, KernelAttributes, ParamInfo, SignedAbi};
pub use module::{ImageKind, LoadApi, LoadedModule};

/// A name handed to the driver (`what`: "kernel name", "global name"), as the driver takes
/// it: NUL-terminated; an empty name or one holding a NUL byte is refused
/// ([`CudaError::InvalidName`]) before the driver sees it. The one check of every name the
/// runtime and the bench loaders pass to the driver.
pub fn driver_name(what: &'static str, name: &str) -> Result<CString, CudaError> {
    let invalid = |reason| CudaError::InvalidName {
        what,
        value: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("is empty"));
    }
    CString::new(name).map_err(|_| invalid("contains a NUL byte"))
}

/// Whether the CUDA driver library (libcuda) can be loaded on this host.
///
/// Checked once per process (the answer is cached); cheap afterwards. When this is
/// false, every entry point of this module returns [`CudaError::DriverMissing`].
pub fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // SAFETY: `is_culib_present` tries to dlopen the driver library under the same names
        // cudarc itself would load; loading runs the library's initialisers, which is what
        // using the driver at all requires. The handle is closed again, nothing is called.
        unsafe { cudarc::driver::sys::is_culib_present() }
    })
}

/// `Ok(())` when libcuda is loadable, [`CudaError::DriverMissing`] otherwise: what every
/// entry point checks before calling into the driver (cudarc panics without it).
pub fn require_driver() -> Result<(), CudaError> {
    if driver_present() {
        Ok(())
    } else {
        Err(CudaError::DriverMissing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_presence_is_stable_and_guards_entry_points() {
        let present = driver_present();
        assert_eq!(present, driver_present());
        assert_eq!(require_driver().is_ok(), present);
        if !present {
            assert_eq!(require_driver(), Err(CudaError::DriverMissing));
        }
    }

    /// The runtime compiler's name, built at run time so this test does not put it into the
    /// binary it scans.
    fn compiler_needle() -> Vec<u8> {
        b"owsud".iter().map(|b| b - 1).collect()
    }

    /// A default build must not be able to reach the runtime compiler: cudarc's dynamic
    /// loading looks symbols up by name (`nvrtcCreateProgram`, ...) and the library by name,
    /// so the name must not occur in the binary at all. Scans this test binary, which links
    /// every part of this module.
    #[cfg(not(feature = "research"))]
    #[test]
    fn default_build_has_no_runtime_compiler_entry_point() {
        let exe = std::env::current_exe().expect("path of the test binary");
        let bytes = std::fs::read(&exe).expect("read the test binary");
        let needle = compiler_needle();
        let hit = bytes
            .windows(needle.len())
            .position(|w| w == needle.as_slice());
        assert_eq!(
            hit,
            None,
            "{} names the runtime compiler at byte {hit:?}",
            exe.display()
        );
    }

    /// The same scan finds the name when the research feature is on, so the scan itself works.
    #[cfg(feature = "research")]
    #[test]
    fn research_build_names_the_runtime_compiler() {
        let _keep_linked = research::compile_ptx as fn(&str, &str, &str) -> _;
        let bytes = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let needle = compiler_needle();
        assert!(bytes.windows(needle.len()).any(|w| w == needle.as_slice()));
    }
}
