//! Loading modules from in-memory bytes: the driver handle of a loaded module and its owner,
//! which every [`Kernel`] and [`DeviceGlobal`] taken from it shares.
//!
//! Only bytes are loaded, never a path: the runtime hands over the bytes it verified, so what
//! the driver sees is what was checked. A cubin must be a complete CUDA ELF; fatbins are
//! refused because they may carry PTX that the driver would JIT silently. PTX goes through
//! [`LoadedModule::load_ptx`] and stays labelled as such ([`ImageKind::Ptx`]).

use std::ffi::c_void;
use std::fmt;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::Arc;

use cudarc::driver::sys::{self};
use cudarc::driver::{CudaContext, result};

use super::global::DeviceGlobal;
use super::image::{check_cubin, ptx_with_nul};
use super::kernel::Kernel;
use super::{CudaError, need_driver, require_driver};
use crate::identity::Kind;
use crate::source::Bytes;
use crate::verify::VerifiedModule;

/// Which driver entry point loads a module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LoadApi {
    /// `cuModuleLoadData`: the module belongs to one context.
    Module,
    /// `cuLibraryLoadData` (CUDA 12.0+): context-independent loading; kernels are placed in
    /// a context when looked up ([`LoadedModule::function`]).
    Library,
}

/// What the bytes of a loaded module were.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageKind {
    /// A per-SM cubin (production).
    Cubin,
    /// PTX, compiled by the driver's JIT at load time (labelled compatibility mode).
    Ptx,
}

impl fmt::Display for ImageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ImageKind::Cubin => "cubin",
            ImageKind::Ptx => "ptx",
        })
    }
}

/// The loaded module handle.
pub(super) enum Handle {
    Module(sys::CUmodule),
    Library(sys::CUlibrary),
}

/// Owns the driver handle; unloads it on drop. Shared (`Arc`) by the [`LoadedModule`] and
/// every [`Kernel`] taken from it, so it is unloaded after the last of them is gone.
pub(super) struct Owner {
    pub(super) handle: Handle,
    /// The context the module (or, for libraries, its kernels) lives in; kept alive here.
    pub(super) ctx: Arc<CudaContext>,
    pub(super) kind: ImageKind,
    /// The exact bytes given to the driver, kept until after unload: the driver copies them
    /// at load (documented for `cuLibraryLoadData`), this copy makes that a non-issue.
    image: Bytes,
}

// SAFETY: the handles are plain driver handles, not tied to the thread that created them:
// CUDA allows using a module, library or function from any thread once the owning context is
// current on that thread, and every use here first binds `ctx` (`bind_to_thread`) on the
// calling thread. `Owner` has no interior mutability; the driver synchronises its own state.
unsafe impl Send for Owner {}
// SAFETY: as for `Send`; shared use only reads the handles and calls thread-safe driver
// entry points after binding the context on the calling thread.
unsafe impl Sync for Owner {}

impl Drop for Owner {
    fn drop(&mut self) {
        let status = match self.handle {
            Handle::Module(module) => {
                // Bind without cudarc's `bind_to_thread`, which would consume an error recorded
                // on the context by someone else; `cuModuleUnload` acts on the current context.
                // SAFETY: `ctx` is alive (we hold an Arc), so its CUcontext is a valid handle.
                let bound = unsafe { result::ctx::set_current(self.ctx.cu_ctx()) };
                // SAFETY: `module` came from a successful cuModuleLoadData in `ctx`, and is
                // unloaded exactly once: here, when the last Arc of its owner goes. No Kernel
                // can outlive this (each holds an Arc of the owner).
                bound.and_then(|()| unsafe { result::module::unload(module) })
            }
            // SAFETY: `library` came from a successful cuLibraryLoadData and is unloaded
            // exactly once, here; no Kernel outlives it (each holds an Arc of the owner).
            // cuLibraryUnload needs no current context.
            Handle::Library(library) => unsafe { sys::cuLibraryUnload(library) }.result(),
        };
        // Drop cannot return it; like cudarc's own types, leave it on the context, where the
        // next cudarc call on it reports it.
        self.ctx.record_err(status);
    }
}

/// A module loaded into a context from in-memory bytes; unloaded when it and every
/// [`Kernel`] taken from it are dropped.
pub struct LoadedModule {
    owner: Arc<Owner>,
}

impl fmt::Debug for LoadedModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedModule")
            .field("api", &self.api())
            .field("kind", &self.owner.kind)
            .field("ordinal", &self.owner.ctx.ordinal())
            .field("image_len", &self.owner.image.len())
            .finish()
    }
}

/// Declares a loader that takes raw bytes: public only in builds with the `research`
/// feature (the research loop loads what NVRTC just compiled). A production build reaches
/// the driver only through [`LoadedModule::load_verified`], which takes the verifier's
/// proof; the benchmarks' bare loads live in the `cuda-aot-baseline` crate.
macro_rules! byte_loader {
    ($(#[$m:meta])* fn $name:ident $($rest:tt)*) => {
        #[cfg(feature = "research")]
        $(#[$m])* pub fn $name $($rest)*
        #[cfg(not(feature = "research"))]
        #[allow(dead_code, reason = "used by the crate's tests and feature builds")]
        $(#[$m])* pub(crate) fn $name $($rest)*
    };
}

impl LoadedModule {
    /// Loads a module that passed verification into `ctx`, from its verified in-memory
    /// bytes (shared, not copied). A cubin's structure was checked by the verifier (the
    /// same ELF reader as [`crate::elf::check_structure`]) when the [`VerifiedModule`] was
    /// made, so it is not parsed again here; PTX is NUL-terminated for the driver.
    pub fn load_verified(
        ctx: &Arc<CudaContext>,
        module: &VerifiedModule,
        api: LoadApi,
    ) -> Result<Self, CudaError> {
        match module.manifest().identity.kind {
            Kind::Cubin => Self::load(ctx, module.bytes().clone(), api, ImageKind::Cubin),
            Kind::Ptx => {
                let text = ptx_with_nul(module.bytes())?;
                Self::load(ctx, Bytes::Read(text.into()), api, ImageKind::Ptx)
            }
        }
    }
}

impl LoadedModule {
    byte_loader! {
    /// Loads a cubin (a CUDA ELF for one SM) from `image` into `ctx`.
    ///
    /// The bytes are checked to be a complete CUDA ELF first (magic, class, machine, and
    /// every header, section and segment within the buffer, since the driver is given a
    /// pointer without a length), then copied and handed to `cuModuleLoadData` or
    /// `cuLibraryLoadData`. Fatbins and PTX are refused ([`CudaError::BadImage`]): no
    /// silent JIT. A cubin for another SM fails with `CUDA_ERROR_NO_BINARY_FOR_GPU`
    /// ([`CudaError::is_no_binary_for_gpu`]); with [`LoadApi::Library`] possibly only at
    /// [`LoadedModule::function`].
    fn load_cubin(
        ctx: &Arc<CudaContext>,
        image: &[u8],
        api: LoadApi,
    ) -> Result<Self, CudaError> {
        check_cubin(image)?;
        Self::load(ctx, Bytes::Read(image.into()), api, ImageKind::Cubin)
    }
    }

    byte_loader! {
    /// Loads PTX text into `ctx`; the driver JIT-compiles it for the device (milliseconds to
    /// hundreds of milliseconds). The text is copied and NUL-terminated as the driver
    /// requires; NUL bytes inside it and binary images are refused.
    fn load_ptx(ctx: &Arc<CudaContext>, ptx: &[u8], api: LoadApi) -> Result<Self, CudaError> {
        let text = ptx_with_nul(ptx)?;
        Self::load(ctx, Bytes::Read(text.into()), api, ImageKind::Ptx)
    }
    }

    fn load(
        ctx: &Arc<CudaContext>,
        image: Bytes,
        api: LoadApi,
        kind: ImageKind,
    ) -> Result<Self, CudaError> {
        require_driver()?;
        let handle = match api {
            LoadApi::Module => {
                bind(ctx)?;
                // SAFETY: libcuda is loaded and `ctx` is current on this thread. `image` is a
                // complete cubin (check_cubin: every header, section and segment lies inside
                // the buffer) or NUL-terminated PTX text without inner NULs (ptx_with_nul), so
                // the driver's reads stay inside the allocation, which outlives the call (it
                // is kept until after unload).
                let module = unsafe { result::module::load_data(image.as_ptr().cast::<c_void>()) };
                Handle::Module(module.map_err(|e| CudaError::driver("cuModuleLoadData", e))?)
            }
            LoadApi::Library => {
                need_driver(12000, "cuLibraryLoadData")?;
                let mut library = MaybeUninit::<sys::CUlibrary>::uninit();
                // SAFETY: libcuda is loaded and new enough to export cuLibraryLoadData. `image`
                // is a checked image as above and outlives the call; no JIT or library options
                // are passed (null arrays with count 0); the out-pointer is a live local.
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
                Handle::Library(unsafe { library.assume_init() })
            }
        };
        Ok(LoadedModule {
            owner: Arc::new(Owner {
                handle,
                ctx: ctx.clone(),
                kind,
                image,
            }),
        })
    }

    /// Looks up the kernel `name` (its extern "C" entry name) for this module's context.
    ///
    /// `cuModuleGetFunction`, or for libraries `cuLibraryGetKernel` + `cuKernelGetFunction`.
    /// On drivers for CUDA 12.4+ the kernel is then loaded onto the device now
    /// (`cuFuncLoad`), so lazy loading cannot move a failure or its cost to the first
    /// launch, and its parameter layout is read (`cuFuncGetParamInfo`) so launches can
    /// check their parameter count. Errors name the kernel.
    pub fn function(&self, name: &str) -> Result<Kernel, CudaError> {
        Kernel::lookup(&self.owner, name)
    }

    /// Looks up the device global `symbol` (its mangled name for a C++ variable) for this
    /// module's context: `cuModuleGetGlobal`, or for libraries `cuLibraryGetGlobal` (the
    /// copy for the current context). The handle has the address and the size the driver
    /// reports; [`DeviceGlobal::with_signed_size`] checks that against a manifest.
    pub fn global(&self, symbol: &str) -> Result<DeviceGlobal, CudaError> {
        DeviceGlobal::lookup(&self.owner, symbol)
    }

    /// The entry point that loaded the module.
    pub fn api(&self) -> LoadApi {
        match self.owner.handle {
            Handle::Module(_) => LoadApi::Module,
            Handle::Library(_) => LoadApi::Library,
        }
    }

    /// Whether the module was a cubin or PTX.
    pub fn kind(&self) -> ImageKind {
        self.owner.kind
    }

    /// The context the module is loaded into.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.owner.ctx
    }

    /// Size of the image handed to the driver, in bytes (PTX: including the added NUL).
    pub fn image_len(&self) -> usize {
        self.owner.image.len()
    }
}

/// Makes `ctx` current on this thread (cudarc; also reports an error cudarc recorded on the
/// context earlier, e.g. from a `Drop`).
pub(super) fn bind(ctx: &CudaContext) -> Result<(), CudaError> {
    ctx.bind_to_thread()
        .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::{CudaStream, ParamInfo};
    use cudarc::driver::sys::CUdeviceptr;
    use cudarc::driver::{CudaSlice, DevicePtrMut};

    #[test]
    fn handles_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<LoadedModule>();
        send_sync::<Kernel>();
        send_sync::<DeviceGlobal>();
        send_sync::<crate::cuda::Device>();
    }

    // ---- on a GPU ------------------------------------------------------------------------

    /// `add_one(unsigned long long *data, unsigned int n)`: `data[i] += 1` for `i < n`.
    /// Hand-written PTX (ISA 7.5, sm_75) so the test needs no compiler; the driver JITs it
    /// for whatever device runs the test.
    const ADD_ONE_PTX: &str = r#"
.version 7.5
.target sm_75
.address_size 64

.visible .entry add_one(
    .param .u64 add_one_param_0,
    .param .u32 add_one_param_1
)
{
    .reg .pred  %p<2>;
    .reg .b32   %r<6>;
    .reg .b64   %rd<6>;

    ld.param.u64    %rd1, [add_one_param_0];
    ld.param.u32    %r2, [add_one_param_1];
    mov.u32         %r3, %ctaid.x;
    mov.u32         %r4, %ntid.x;
    mov.u32         %r5, %tid.x;
    mad.lo.s32      %r1, %r3, %r4, %r5;
    setp.ge.u32     %p1, %r1, %r2;
    @%p1 bra        DONE;
    cvta.to.global.u64  %rd2, %rd1;
    mul.wide.u32    %rd3, %r1, 8;
    add.s64         %rd4, %rd2, %rd3;
    ld.global.u64   %rd5, [%rd4];
    add.s64         %rd5, %rd5, 1;
    st.global.u64   [%rd4], %rd5;
DONE:
    ret;
}
"#;

    /// How a caller passes a device buffer and a scalar: the `CUdeviceptr` from
    /// `device_ptr_mut` (its guard kept until the launch is queued) and the scalar by address.
    ///
    /// # Safety
    ///
    /// `kernel` must be `add_one(unsigned long long *, unsigned int)` and `data` must hold at
    /// least `n` elements.
    unsafe fn launch_add_one(
        kernel: &Kernel,
        stream: &CudaStream,
        data: &mut CudaSlice<u64>,
        n: u32,
    ) -> Result<(), CudaError> {
        let (mut data_ptr, _written) = data.device_ptr_mut(stream);
        let mut n_param = n;
        let mut params = [
            (&mut data_ptr as *mut CUdeviceptr).cast::<c_void>(),
            (&mut n_param as *mut u32).cast::<c_void>(),
        ];
        // SAFETY: the params are a device pointer and a u32, matching add_one's signature;
        // the caller guarantees `data` holds `n` elements; `_written` records the write on
        // `stream` after the launch is queued.
        unsafe { kernel.launch(stream, (n.div_ceil(128), 1, 1), (128, 1, 1), 0, &mut params) }
    }

    fn add_one_on_device(api: LoadApi) {
        let device = crate::cuda::Device::open(0).expect("open device 0");
        let module = LoadedModule::load_ptx(device.context(), ADD_ONE_PTX.as_bytes(), api)
            .expect("load PTX");
        assert_eq!(module.api(), api);
        assert_eq!(module.kind(), ImageKind::Ptx);
        let kernel = module.function("add_one").expect("add_one");
        drop(module); // the kernel keeps the module loaded
        if device.info().driver_version >= 12040 {
            assert_eq!(
                kernel.params(),
                Some(
                    &[
                        ParamInfo { offset: 0, size: 8 },
                        ParamInfo { offset: 8, size: 4 }
                    ][..]
                )
            );
        }
        let attrs = kernel.attributes().expect("attributes");
        println!("{api:?}: {attrs:?}");
        assert_eq!(
            attrs.binary_version,
            device.info().cc_major * 10 + device.info().cc_minor
        );
        assert!(attrs.max_threads_per_block >= 128);

        let stream = device.new_stream().unwrap();
        let host: Vec<u64> = (0..1000).collect();
        let mut data = stream.clone_htod(&host).unwrap();
        // SAFETY: `kernel` is add_one and `data` holds 1000 elements.
        unsafe { launch_add_one(&kernel, &stream, &mut data, 1000) }.expect("launch");
        let back = stream.clone_dtoh(&data).unwrap();
        assert_eq!(back, (1..1001).collect::<Vec<u64>>());

        // Refused before the driver: wrong parameter count.
        if kernel.params().is_some() {
            let mut n = 1u32;
            let mut params = [(&mut n as *mut u32).cast::<c_void>()];
            // SAFETY: refused before any launch (count mismatch), nothing is read.
            let err = unsafe { kernel.launch(&stream, (1, 1, 1), (1, 1, 1), 0, &mut params) }
                .unwrap_err();
            assert_eq!(
                err,
                CudaError::ParamCount {
                    function: "add_one".into(),
                    expected: 2,
                    actual: 1
                }
            );
        }
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn ptx_kernel_runs_through_module_api() {
        add_one_on_device(LoadApi::Module);
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn ptx_kernel_runs_through_library_api() {
        add_one_on_device(LoadApi::Library);
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn missing_kernel_is_named_in_the_error() {
        let device = crate::cuda::Device::open(0).unwrap();
        for api in [LoadApi::Module, LoadApi::Library] {
            let module =
                LoadedModule::load_ptx(device.context(), ADD_ONE_PTX.as_bytes(), api).unwrap();
            let err = module.function("no_such_kernel").unwrap_err();
            assert!(err.is_not_found(), "{api:?}: {err}");
            assert!(err.to_string().contains("\"no_such_kernel\""), "{err}");
        }
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn damaged_images_never_reach_the_driver() {
        let device = crate::cuda::Device::open(0).unwrap();
        let mut cut = b"\x7fELF\x02\x01\x01".to_vec();
        cut.resize(100, 0);
        cut[18] = 190; // EM_CUDA, then tables that point nowhere
        cut[40] = 0xff;
        cut[60] = 3;
        let err = LoadedModule::load_cubin(device.context(), &cut, LoadApi::Module).unwrap_err();
        assert!(matches!(err, CudaError::BadImage { .. }), "{err}");
        let err =
            LoadedModule::load_cubin(device.context(), ADD_ONE_PTX.as_bytes(), LoadApi::Module)
                .unwrap_err();
        assert!(
            matches!(err, CudaError::BadImage { .. }),
            "PTX through load_cubin: {err}"
        );
    }

    /// What the exact-SM selection and the ELF check protect against, seen at the driver.
    #[test]
    #[ignore = "needs a CUDA device"]
    fn the_driver_refuses_another_architectures_cubin() {
        let device = crate::cuda::Device::open(0).unwrap();
        let sm_120 = include_bytes!("../../tests/data/elf/add_sm_120.cubin");
        let err = LoadedModule::load_cubin(device.context(), sm_120, LoadApi::Module)
            .err()
            .unwrap();
        assert!(err.is_no_binary_for_gpu(), "{err}");
        println!("driver: {err}");
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn kernels_are_usable_from_other_threads() {
        let device = crate::cuda::Device::open(0).unwrap();
        let module =
            LoadedModule::load_ptx(device.context(), ADD_ONE_PTX.as_bytes(), LoadApi::Module)
                .unwrap();
        let kernel = module.function("add_one").unwrap();
        let ctx = device.context().clone();
        std::thread::spawn(move || {
            let stream = ctx.new_stream().unwrap();
            let mut data = stream.clone_htod(&[41u64]).unwrap();
            // SAFETY: `kernel` is add_one and `data` holds 1 element.
            unsafe { launch_add_one(&kernel, &stream, &mut data, 1) }.unwrap();
            assert_eq!(stream.clone_dtoh(&data).unwrap(), vec![42]);
        })
        .join()
        .unwrap();
    }
}
