//! Loading modules from in-memory bytes, and their kernels.
//!
//! Only bytes are loaded, never a path: the runtime hands over the bytes it verified, so what
//! the driver sees is what was checked. A cubin must be a complete CUDA ELF; fatbins are
//! refused because they may carry PTX that the driver would JIT silently. PTX goes through
//! [`LoadedModule::load_ptx`] and stays labelled as such ([`ImageKind::Ptx`]).

use std::ffi::{CString, c_void};
use std::fmt;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaStream, result};

use super::image::{check_cubin, ptx_with_nul};
use super::{CudaError, driver_version, need_driver, require_driver};
use crate::identity::Kind;
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

/// Place and size of one kernel parameter in the parameter buffer (`cuFuncGetParamInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ParamInfo {
    /// Byte offset of the parameter.
    pub offset: usize,
    /// Size of the parameter in bytes (8 for a pointer, 4 for an `unsigned int`).
    pub size: usize,
}

/// Static properties of a kernel as the driver loaded it (`cuFuncGetAttribute`), for
/// telemetry and for checking launch geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelAttributes {
    /// Registers per thread.
    pub num_regs: u32,
    /// Largest block (threads) this kernel can be launched with on this device.
    pub max_threads_per_block: u32,
    /// Statically allocated shared memory per block, in bytes.
    pub shared_size_bytes: u32,
    /// Constant memory used, in bytes.
    pub const_size_bytes: u32,
    /// Local memory per thread, in bytes (non-zero means spills or local arrays).
    pub local_size_bytes: u32,
    /// Largest dynamic shared memory a launch may ask for, in bytes.
    pub max_dynamic_shared_size_bytes: u32,
    /// PTX virtual architecture the kernel was compiled from, e.g. 90.
    pub ptx_version: u32,
    /// SM of the binary the driver runs, e.g. 90: the cubin's SM, or the device's SM when
    /// the driver JIT-compiled PTX.
    pub binary_version: u32,
}

/// The loaded module handle.
enum Handle {
    Module(sys::CUmodule),
    Library(sys::CUlibrary),
}

/// Owns the driver handle; unloads it on drop. Shared (`Arc`) by the [`LoadedModule`] and
/// every [`Kernel`] taken from it, so it is unloaded after the last of them is gone.
struct Owner {
    handle: Handle,
    /// The context the module (or, for libraries, its kernels) lives in; kept alive here.
    ctx: Arc<CudaContext>,
    kind: ImageKind,
    /// The exact bytes given to the driver, kept until after unload: the driver copies them
    /// at load (documented for `cuLibraryLoadData`), this copy makes that a non-issue.
    image: Arc<[u8]>,
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
/// proof; the benchmarks' bare loads live in the `cuda-aot-bench` crate.
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
                Self::load(ctx, text.into(), api, ImageKind::Ptx)
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
        Self::load(ctx, image.into(), api, ImageKind::Cubin)
    }
    }

    byte_loader! {
    /// Loads PTX text into `ctx`; the driver JIT-compiles it for the device (milliseconds to
    /// hundreds of milliseconds). The text is copied and NUL-terminated as the driver
    /// requires; NUL bytes inside it and binary images are refused.
    fn load_ptx(ctx: &Arc<CudaContext>, ptx: &[u8], api: LoadApi) -> Result<Self, CudaError> {
        let text = ptx_with_nul(ptx)?;
        Self::load(ctx, text.into(), api, ImageKind::Ptx)
    }
    }

    fn load(
        ctx: &Arc<CudaContext>,
        image: Arc<[u8]>,
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
        let c_name = kernel_name(name)?;
        require_driver()?;
        let owner = &self.owner;
        bind(&owner.ctx)?;
        let (func, cu_kernel) = match owner.handle {
            Handle::Module(module) => {
                // SAFETY: `module` is loaded (the owner is alive) in `ctx`, which is current.
                let func = unsafe { result::module::get_function(module, c_name) }
                    .map_err(|e| CudaError::function(name, "cuModuleGetFunction", e))?;
                (func, None)
            }
            Handle::Library(library) => {
                let mut kernel = MaybeUninit::<sys::CUkernel>::uninit();
                // SAFETY: `library` is loaded (the owner is alive); `c_name` is a
                // NUL-terminated string that outlives the call; the out-pointer is a live local.
                unsafe { sys::cuLibraryGetKernel(kernel.as_mut_ptr(), library, c_name.as_ptr()) }
                    .result()
                    .map_err(|e| CudaError::function(name, "cuLibraryGetKernel", e))?;
                // SAFETY: the call succeeded, so it wrote the handle.
                let kernel = unsafe { kernel.assume_init() };
                let mut func = MaybeUninit::<sys::CUfunction>::uninit();
                // SAFETY: `kernel` belongs to the live library; `ctx` is current, so the
                // function handle returned is the one for `ctx`.
                unsafe { sys::cuKernelGetFunction(func.as_mut_ptr(), kernel) }
                    .result()
                    .map_err(|e| CudaError::function(name, "cuKernelGetFunction", e))?;
                // SAFETY: the call succeeded, so it wrote the handle.
                (unsafe { func.assume_init() }, Some(kernel))
            }
        };
        let mut params = None;
        if driver_version()? >= 12040 {
            // SAFETY: `func` is a live function of this module in the current context; the
            // driver exports cuFuncLoad from CUDA 12.4 on (checked above).
            unsafe { sys::cuFuncLoad(func) }
                .result()
                .map_err(|e| CudaError::function(name, "cuFuncLoad", e))?;
            // SAFETY: as above; cuFuncGetParamInfo exists from CUDA 12.4 on.
            params = unsafe { param_layout(func) }.map(Arc::from);
        }
        Ok(Kernel {
            func,
            cu_kernel,
            name: Arc::from(name),
            params,
            signed: None,
            owner: self.owner.clone(),
        })
    }

    /// Looks up the device global `symbol` (its mangled name for a C++ variable) for this
    /// module's context: `cuModuleGetGlobal`, or for libraries `cuLibraryGetGlobal` (the
    /// copy for the current context). The handle has the address and the size the driver
    /// reports; [`DeviceGlobal::with_signed_size`] checks that against a manifest.
    pub fn global(&self, symbol: &str) -> Result<DeviceGlobal, CudaError> {
        let c_name = global_name(symbol)?;
        require_driver()?;
        let owner = &self.owner;
        bind(&owner.ctx)?;
        let (mut ptr, mut size) = (0 as sys::CUdeviceptr, 0usize);
        let (op, status) = match owner.handle {
            // SAFETY: `module` is loaded (the owner is alive) in `ctx`, which is current;
            // `c_name` is NUL-terminated and outlives the call; the out-pointers are live
            // locals.
            Handle::Module(module) => ("cuModuleGetGlobal", unsafe {
                sys::cuModuleGetGlobal_v2(&mut ptr, &mut size, module, c_name.as_ptr())
            }),
            // SAFETY: `library` is loaded (the owner is alive); the context it answers for
            // is current; the name and out-pointers are as above.
            Handle::Library(library) => ("cuLibraryGetGlobal", unsafe {
                sys::cuLibraryGetGlobal(&mut ptr, &mut size, library, c_name.as_ptr())
            }),
        };
        status
            .result()
            .map_err(|e| CudaError::global(symbol, op, e))?;
        Ok(DeviceGlobal {
            ptr,
            size,
            module: Arc::from(""),
            name: Arc::from(symbol),
            owner: self.owner.clone(),
        })
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

/// A device global (`__constant__` or `__device__` variable) of a [`LoadedModule`], in the
/// module's context: its address and size, and synchronous copies from and to the host.
///
/// Every copy must be exactly the global's size: anything else is refused
/// ([`CudaError::GlobalSize`]) before the driver is called. Holds an `Arc` of the module's
/// owner, so the module (and the address) stays valid while the handle lives.
///
/// The copies are synchronous (`cuMemcpyHtoD` / `cuMemcpyDtoH` on the context's legacy
/// default stream): they return once the bytes are copied, and kernels launched afterwards,
/// on any stream, see them. They do not wait for kernels still running on non-blocking
/// streams: fill tables before the first launch (after `preload`), or synchronise first.
#[derive(Clone)]
pub struct DeviceGlobal {
    ptr: sys::CUdeviceptr,
    size: usize,
    /// The module, for messages (empty when the handle did not come through the runtime).
    module: Arc<str>,
    /// The name to show: the demangled name when signed, else the symbol.
    name: Arc<str>,
    owner: Arc<Owner>,
}

// SAFETY: a device address and a size are plain values; every copy binds the owner's
// context on the calling thread first, and the owner (an Arc) keeps the module loaded.
unsafe impl Send for DeviceGlobal {}
// SAFETY: as for `Send`; `&DeviceGlobal` only reads its fields and calls thread-safe
// driver entry points after binding the context.
unsafe impl Sync for DeviceGlobal {}

impl fmt::Debug for DeviceGlobal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceGlobal")
            .field("module", &self.module)
            .field("name", &self.name)
            .field("size", &self.size)
            .field("ordinal", &self.owner.ctx.ordinal())
            .finish()
    }
}

impl DeviceGlobal {
    /// Attaches the size signed into the module's manifest, for `module`'s global `name`
    /// (its demangled name): the driver's size must be exactly the signed one
    /// ([`CudaError::GlobalDriverSize`] otherwise): what was signed is what was loaded.
    pub fn with_signed_size(
        mut self,
        module: &str,
        name: &str,
        signed: u64,
    ) -> Result<Self, CudaError> {
        if u64::try_from(self.size).ok() != Some(signed) {
            return Err(CudaError::GlobalDriverSize {
                module: module.to_string(),
                global: name.to_string(),
                signed,
                driver: self.size as u64,
            });
        }
        self.module = Arc::from(module);
        self.name = Arc::from(name);
        Ok(self)
    }

    /// The global's size in bytes (signed, and equal to the driver's).
    pub fn size(&self) -> usize {
        self.size
    }

    /// The global's device address in this module's context, e.g. to pass to a kernel or
    /// a stream-ordered copy. Valid while this handle (or a clone) lives.
    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// The name shown in messages (the demangled name when signed).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The context the global lives in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.owner.ctx
    }

    /// Copies `bytes` into the global. Refused before the driver unless `bytes` is exactly
    /// the global's size.
    pub fn write(&self, bytes: &[u8]) -> Result<(), CudaError> {
        self.check_size("write", bytes.len())?;
        // SAFETY: `bytes` is a live slice of exactly `len` bytes.
        unsafe { self.copy_in(bytes.as_ptr().cast(), bytes.len()) }
    }

    /// Copies `values` into the global, as their in-memory bytes (`#[repr(C)]` structs,
    /// integer arrays): refused before the driver unless `size_of_val(values)` is exactly
    /// the global's size. The values are read as bytes by the driver, never reinterpreted
    /// on the host, so any `Copy` type is sound here (padding included).
    pub fn write_values<T: Copy>(&self, values: &[T]) -> Result<(), CudaError> {
        let len = std::mem::size_of_val(values);
        self.check_size("write", len)?;
        // SAFETY: `values` is a live slice of `len` bytes; the driver only reads them.
        unsafe { self.copy_in(values.as_ptr().cast(), len) }
    }

    /// Copies the global into `out`. Refused before the driver unless `out` is exactly the
    /// global's size.
    pub fn read(&self, out: &mut [u8]) -> Result<(), CudaError> {
        self.check_size("read", out.len())?;
        require_driver()?;
        bind(&self.owner.ctx)?;
        // SAFETY: the context is current; `ptr` is the global's address in it (the owner
        // keeps the module loaded) and `size` its length, which is `out.len()` (checked);
        // `out` is a live, writable buffer of that length.
        unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr, out.len()) }
            .result()
            .map_err(|e| CudaError::global(&self.name, "cuMemcpyDtoH", e))
    }

    /// Copies `len` host bytes at `src` into the global, `len` having been checked.
    ///
    /// # Safety
    ///
    /// `src` must be valid for reads of `len` bytes, and `len` the global's size.
    unsafe fn copy_in(&self, src: *const c_void, len: usize) -> Result<(), CudaError> {
        require_driver()?;
        bind(&self.owner.ctx)?;
        // SAFETY: the context is current; `ptr` is the global's address in it (the owner
        // keeps the module loaded) and `len` its size; the caller guarantees `src`.
        unsafe { sys::cuMemcpyHtoD_v2(self.ptr, src, len) }
            .result()
            .map_err(|e| CudaError::global(&self.name, "cuMemcpyHtoD", e))
    }

    fn check_size(&self, op: &'static str, given: usize) -> Result<(), CudaError> {
        check_global_size(&self.module, &self.name, op, self.size, given)
    }
}

/// A copy of `given` bytes to or from a global of `size` bytes: refused unless equal.
fn check_global_size(
    module: &str,
    global: &str,
    op: &'static str,
    size: usize,
    given: usize,
) -> Result<(), CudaError> {
    if given == size {
        Ok(())
    } else {
        Err(CudaError::GlobalSize {
            module: module.to_string(),
            global: global.to_string(),
            op,
            signed: size,
            given,
        })
    }
}

/// A kernel of a [`LoadedModule`], for the module's context.
///
/// Holds an `Arc` of the module's owner: the module stays loaded while any clone lives.
#[derive(Clone)]
pub struct Kernel {
    func: sys::CUfunction,
    /// The context-independent handle, when the module came through `cuLibraryLoadData`.
    cu_kernel: Option<sys::CUkernel>,
    name: Arc<str>,
    /// `None` when the driver cannot say (older than CUDA 12.4).
    params: Option<Arc<[ParamInfo]>>,
    /// The launch ABI signed into the module's manifest, when the kernel came through the
    /// runtime ([`Kernel::with_signed_abi`]).
    signed: Option<Arc<SignedAbi>>,
    owner: Arc<Owner>,
}

/// The launch ABI a kernel was signed with: what launches are checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedAbi {
    /// The name to use in errors (the demangled name for C++ kernels).
    pub display_name: String,
    /// Parameter layout in declaration order.
    pub params: Vec<ParamInfo>,
    /// Largest block (threads) the kernel was compiled for, when it sets a bound.
    pub max_threads: Option<u32>,
}

impl SignedAbi {
    /// The launch ABI a manifest signs for kernel `f`.
    pub fn of(f: &crate::identity::Function) -> SignedAbi {
        SignedAbi {
            display_name: f.display_name().to_string(),
            params: f
                .abi
                .params
                .iter()
                .map(|p| ParamInfo {
                    offset: p.offset as usize,
                    size: p.size as usize,
                })
                .collect(),
            max_threads: f.abi.max_threads,
        }
    }
}

/// One kernel argument for [`Kernel::launch_args`]: a pointer to the value and its size, so
/// the launch can compare the size with the kernel's signed parameter layout.
#[derive(Debug)]
pub struct KernelArg<'a> {
    ptr: *mut c_void,
    size: usize,
    _value: std::marker::PhantomData<&'a mut ()>,
}

impl<'a> KernelArg<'a> {
    /// An argument whose value is `value`: pass a `CUdeviceptr` (`u64`) for a device
    /// buffer, the scalar itself (`u32`, `u64`, a `#[repr(C)]` struct) otherwise.
    pub fn new<T: Copy>(value: &'a mut T) -> Self {
        KernelArg {
            ptr: (value as *mut T).cast(),
            size: std::mem::size_of::<T>(),
            _value: std::marker::PhantomData,
        }
    }
    /// An argument given as a pointer to its value and the value's size (a C caller's
    /// `void *args[]` and `size_t sizes[]`, checked against the signed layout like any
    /// other argument).
    ///
    /// # Safety
    ///
    /// `ptr` points to a live value of `size` bytes that stays valid for `'a`.
    pub unsafe fn from_raw(ptr: *mut c_void, size: usize) -> Self {
        KernelArg {
            ptr,
            size,
            _value: std::marker::PhantomData,
        }
    }
    /// The size in bytes of the value.
    pub fn size(&self) -> usize {
        self.size
    }
}

// SAFETY: a CUfunction is a driver handle usable from any thread once its context is
// current; every use here binds the owner's context first. The owner keeps the module (and
// so the handle) alive; the other fields are immutable and thread-safe.
unsafe impl Send for Kernel {}
// SAFETY: as for `Send`; `&Kernel` only reads the handle and calls thread-safe driver entry
// points after binding the context on the calling thread.
unsafe impl Sync for Kernel {}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name)
            .field("kind", &self.owner.kind)
            .field("ordinal", &self.owner.ctx.ordinal())
            .field("params", &self.params)
            .finish()
    }
}

impl Kernel {
    /// The kernel's entry name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernel's parameter layout as the driver reports it, in declaration order;
    /// `None` on drivers older than CUDA 12.4, which cannot report it.
    pub fn params(&self) -> Option<&[ParamInfo]> {
        self.params.as_deref()
    }

    /// The signed launch ABI this kernel's launches are checked against, if any.
    pub fn signed_abi(&self) -> Option<&SignedAbi> {
        self.signed.as_deref()
    }

    /// The name to show in messages: the signed display name, else the symbol.
    pub fn display_name(&self) -> &str {
        self.signed
            .as_ref()
            .map_or(&*self.name, |s| s.display_name.as_str())
    }

    /// Attaches the launch ABI signed into the module's manifest. Where the driver reports
    /// the kernel's parameter layout it must be exactly the signed one
    /// ([`CudaError::AbiMismatch`] otherwise): what was signed is what the driver loaded.
    pub fn with_signed_abi(mut self, abi: SignedAbi) -> Result<Self, CudaError> {
        if let Some(driver) = self.params.as_deref()
            && driver != abi.params.as_slice()
        {
            return Err(CudaError::AbiMismatch {
                function: abi.display_name,
                signed: describe(&abi.params),
                driver: describe(driver),
            });
        }
        self.signed = Some(Arc::new(abi));
        Ok(self)
    }

    /// The layout launches are checked against: the signed one, else the driver's.
    fn layout(&self) -> Option<&[ParamInfo]> {
        self.signed
            .as_ref()
            .map(|s| s.params.as_slice())
            .or(self.params.as_deref())
    }

    /// Checks a launch against the kernel's layout before the driver sees it.
    fn check_launch(
        &self,
        block: (u32, u32, u32),
        sizes: &[Option<usize>],
    ) -> Result<(), CudaError> {
        check_launch(
            self.display_name(),
            self.layout(),
            self.signed.as_ref().and_then(|s| s.max_threads),
            block,
            sizes,
        )
    }

    /// Enqueues the kernel like [`Kernel::launch`], after checking every argument's size
    /// against the kernel's parameter layout (the signed one when the kernel came through
    /// the runtime, else the driver's): a wrong argument is refused with
    /// [`CudaError::ParamSize`] naming the kernel and the parameter, before the driver is
    /// called; so is a block larger than the signed launch bound
    /// ([`CudaError::BlockTooLarge`]).
    ///
    /// # Safety
    ///
    /// As for [`Kernel::launch`], except that sizes are checked: each argument's value must
    /// have the type the kernel's parameter has, and every device pointer among them must be
    /// valid for every access the kernel makes with this geometry, until it finishes.
    pub unsafe fn launch_args(
        &self,
        stream: &CudaStream,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_mem_bytes: u32,
        args: &mut [KernelArg<'_>],
    ) -> Result<(), CudaError> {
        let sizes: Vec<Option<usize>> = args.iter().map(|a| Some(a.size)).collect();
        self.check_launch(block, &sizes)?;
        let mut params: Vec<*mut c_void> = args.iter().map(|a| a.ptr).collect();
        // SAFETY: forwarded from this function's contract; the sizes match the layout.
        unsafe { self.launch(stream, grid, block, shared_mem_bytes, &mut params) }
    }

    /// [`Kernel::launch_args`] on a raw driver stream: a `CUstream` the caller's own CUDA
    /// code made (C and C++ hosts, through the C ABI), or null for the legacy default
    /// stream of the kernel's context (`CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` are
    /// the default streams too). The same checks, before the driver is called: every
    /// argument's size against the signed layout, the block against the signed bound, and
    /// the stream's context (`cuStreamGetCtx`) against the kernel's
    /// ([`CudaError::ContextMismatch`]).
    ///
    /// # Safety
    ///
    /// As for [`Kernel::launch_args`]; and `stream` is null, one of the two default-stream
    /// handles, or a live stream the caller keeps alive until the launch is queued.
    pub unsafe fn launch_args_on_raw_stream(
        &self,
        stream: sys::CUstream,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_mem_bytes: u32,
        args: &mut [KernelArg<'_>],
    ) -> Result<(), CudaError> {
        let sizes: Vec<Option<usize>> = args.iter().map(|a| Some(a.size)).collect();
        self.check_launch(block, &sizes)?;
        require_driver()?;
        let ctx = &self.owner.ctx;
        bind(ctx)?;
        let default_stream = [0usize, 1, 2].contains(&(stream as usize));
        if !default_stream {
            let mut stream_ctx = MaybeUninit::<sys::CUcontext>::uninit();
            // SAFETY: `stream` is a live stream (see # Safety); the out-pointer is a live
            // local.
            unsafe { sys::cuStreamGetCtx(stream, stream_ctx.as_mut_ptr()) }
                .result()
                .map_err(|e| CudaError::function(&self.name, "cuStreamGetCtx", e))?;
            // SAFETY: the call succeeded, so it wrote the handle.
            if unsafe { stream_ctx.assume_init() } != ctx.cu_ctx() {
                return Err(CudaError::ContextMismatch {
                    function: self.display_name().to_string(),
                    kernel_ordinal: ctx.ordinal(),
                    stream_ordinal: stream_device(stream),
                });
            }
        }
        let mut params: Vec<*mut c_void> = args.iter().map(|a| a.ptr).collect();
        // SAFETY: `ctx` is current and is the stream's context (checked above, or the
        // context's own default stream); the argument count and sizes match the signed
        // layout (checked above); the rest is the caller's contract (# Safety).
        unsafe { self.enqueue(stream, grid, block, shared_mem_bytes, &mut params) }
    }

    /// `cuLaunchKernel` of this kernel on `stream`, every check done.
    ///
    /// # Safety
    ///
    /// The owner's context is current on this thread and is `stream`'s; `params` holds one
    /// pointer per parameter to a live value of its type; the device memory the kernel
    /// touches with this geometry is valid until it finishes.
    unsafe fn enqueue(
        &self,
        stream: sys::CUstream,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_mem_bytes: u32,
        params: &mut [*mut c_void],
    ) -> Result<(), CudaError> {
        // SAFETY: `func` belongs to the live module (we hold its owner); the rest is this
        // function's contract (# Safety).
        unsafe { result::launch_kernel(self.func, grid, block, shared_mem_bytes, stream, params) }
            .map_err(|e| CudaError::function(&self.name, "cuLaunchKernel", e))
    }

    /// Whether the kernel came from a cubin or from JIT-compiled PTX.
    pub fn kind(&self) -> ImageKind {
        self.owner.kind
    }

    /// The context the kernel belongs to; launch it on streams of this context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.owner.ctx
    }

    /// The raw function handle, for calls this module does not wrap. Valid while this
    /// `Kernel` (or a clone) lives; do not use it after.
    pub fn cu_function(&self) -> sys::CUfunction {
        self.func
    }

    /// The context-independent kernel handle (`CUkernel`) when the module was loaded with
    /// [`LoadApi::Library`] (`cuLibraryLoadData`); `None` for `cuModuleLoadData`. Valid
    /// while this `Kernel` (or a clone) lives.
    pub fn cu_kernel(&self) -> Option<sys::CUkernel> {
        self.cu_kernel
    }

    /// One attribute (`cuFuncGetAttribute`), as a non-negative number.
    pub fn attribute(&self, attribute: CUfunction_attribute) -> Result<u32, CudaError> {
        require_driver()?;
        bind(&self.owner.ctx)?;
        // SAFETY: `func` belongs to the live module (we hold its owner) and its context is
        // current on this thread.
        let value = unsafe { result::function::get_function_attribute(self.func, attribute) }
            .map_err(|e| CudaError::function(&self.name, "cuFuncGetAttribute", e))?;
        Ok(u32::try_from(value).unwrap_or(0))
    }

    /// The kernel's static properties (registers, limits, memory, PTX and binary versions).
    pub fn attributes(&self) -> Result<KernelAttributes, CudaError> {
        use CUfunction_attribute as A;
        Ok(KernelAttributes {
            num_regs: self.attribute(A::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            max_threads_per_block: self.attribute(A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            shared_size_bytes: self.attribute(A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
            const_size_bytes: self.attribute(A::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)?,
            local_size_bytes: self.attribute(A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
            max_dynamic_shared_size_bytes: self
                .attribute(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
            ptx_version: self.attribute(A::CU_FUNC_ATTRIBUTE_PTX_VERSION)?,
            binary_version: self.attribute(A::CU_FUNC_ATTRIBUTE_BINARY_VERSION)?,
        })
    }

    /// Enqueues the kernel on `stream` (`cuLaunchKernel`); returns once it is queued.
    ///
    /// `params` holds one pointer per kernel parameter, in declaration order, each pointing
    /// to the parameter's value: for a device buffer the `CUdeviceptr` (a `u64`) taken with
    /// [`DevicePtr::device_ptr`](cudarc::driver::DevicePtr::device_ptr) /
    /// [`DevicePtrMut::device_ptr_mut`](cudarc::driver::DevicePtrMut::device_ptr_mut), for a
    /// scalar the scalar itself. The driver copies the values during this call.
    ///
    /// Refused before the driver sees it: a stream of another context
    /// ([`CudaError::ContextMismatch`]), a parameter count other than the kernel's (signed
    /// layout, else the driver's: [`CudaError::ParamCount`]) and a block above the signed
    /// launch bound ([`CudaError::BlockTooLarge`]). [`Kernel::launch_args`] also checks
    /// each argument's size.
    ///
    /// ```ignore
    /// // `add_one(unsigned long long *data, unsigned int n)`; compiled in this file's tests.
    /// let mut data: CudaSlice<u64> = stream.clone_htod(&host)?;
    /// let (mut data_ptr, _written) = data.device_ptr_mut(&stream); // guard: keep until queued
    /// let mut n: u32 = host.len() as u32;
    /// let mut params = [
    ///     (&mut data_ptr as *mut CUdeviceptr).cast::<c_void>(),
    ///     (&mut n as *mut u32).cast::<c_void>(),
    /// ];
    /// // SAFETY: params match `add_one`'s signature; `data` holds `n` u64 on this stream.
    /// unsafe { kernel.launch(&stream, (n.div_ceil(256), 1, 1), (256, 1, 1), 0, &mut params)? };
    /// ```
    ///
    /// # Safety
    ///
    /// The caller guarantees that:
    /// - each `params[i]` points to a live, aligned value whose type and size are those of
    ///   the kernel's i-th parameter (a count check is not a type check);
    /// - every device pointer among them is valid on this stream's device for every access
    ///   the kernel makes with this geometry (grid, block, shared memory), and stays
    ///   allocated and free of conflicting host or other-stream access until the kernel has
    ///   finished in stream order (hold the `SyncOnDrop` guards from `device_ptr` /
    ///   `device_ptr_mut` until this call returns so cudarc orders other streams after it);
    /// - the kernel itself keeps its memory accesses within those buffers for this geometry.
    pub unsafe fn launch(
        &self,
        stream: &CudaStream,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_mem_bytes: u32,
        params: &mut [*mut c_void],
    ) -> Result<(), CudaError> {
        require_driver()?;
        let ctx = &self.owner.ctx;
        if stream.context().cu_ctx() != ctx.cu_ctx() {
            return Err(CudaError::ContextMismatch {
                function: self.name.to_string(),
                kernel_ordinal: ctx.ordinal(),
                stream_ordinal: Some(stream.context().ordinal()),
            });
        }
        self.check_launch(block, &vec![None; params.len()])?;
        bind(ctx)?;
        // SAFETY: `ctx` is current on this thread and is the stream's context (checked
        // above); the parameter count matches the kernel's where the driver reports it, so
        // the driver reads only `params.len()` pointers; what they point to, and the device
        // memory the kernel touches, is the caller's contract (see # Safety).
        unsafe { self.enqueue(stream.cu_stream(), grid, block, shared_mem_bytes, params) }
    }
}

/// Checks a launch against a kernel's parameter layout and launch bound: the argument count,
/// each argument's size where known (`None` for raw pointers), and the block's threads.
fn check_launch(
    function: &str,
    layout: Option<&[ParamInfo]>,
    max_threads: Option<u32>,
    block: (u32, u32, u32),
    sizes: &[Option<usize>],
) -> Result<(), CudaError> {
    if let Some(layout) = layout {
        if layout.len() != sizes.len() {
            return Err(CudaError::ParamCount {
                function: function.to_string(),
                expected: layout.len(),
                actual: sizes.len(),
            });
        }
        for (index, (p, size)) in layout.iter().zip(sizes).enumerate() {
            if let Some(size) = size
                && *size != p.size
            {
                return Err(CudaError::ParamSize {
                    function: function.to_string(),
                    index,
                    expected: p.size,
                    actual: *size,
                });
            }
        }
    }
    let threads = u64::from(block.0) * u64::from(block.1) * u64::from(block.2);
    if let Some(max) = max_threads
        && threads > u64::from(max)
    {
        return Err(CudaError::BlockTooLarge {
            function: function.to_string(),
            threads,
            max,
        });
    }
    Ok(())
}

/// The device of a raw stream, for messages (`cuStreamGetDevice`, CUDA 12.8+); `None` when
/// the driver cannot say.
fn stream_device(stream: sys::CUstream) -> Option<usize> {
    if driver_version().ok()? < 12080 {
        return None;
    }
    let mut device: sys::CUdevice = 0;
    // SAFETY: the driver exports cuStreamGetDevice from CUDA 12.8 on (checked above);
    // `stream` is a live stream (the caller's contract) and the out-pointer a live local.
    unsafe { sys::cuStreamGetDevice(stream, &mut device) }
        .result()
        .ok()?;
    usize::try_from(device).ok()
}

/// `offset:size` pairs for messages.
fn describe(params: &[ParamInfo]) -> String {
    let v: Vec<String> = params
        .iter()
        .map(|p| format!("{}:{}", p.offset, p.size))
        .collect();
    format!("[{}]", v.join(" "))
}

/// Makes `ctx` current on this thread (cudarc; also reports an error cudarc recorded on the
/// context earlier, e.g. from a `Drop`).
fn bind(ctx: &CudaContext) -> Result<(), CudaError> {
    ctx.bind_to_thread()
        .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))
}

/// The kernel's parameter layout: `cuFuncGetParamInfo` for index 0, 1, ... until the driver
/// says the index is out of range. `None` if the driver answers anything else.
///
/// # Safety
///
/// `func` must be a live function handle whose context is current on this thread, and the
/// driver must export `cuFuncGetParamInfo` (CUDA 12.4+).
unsafe fn param_layout(func: sys::CUfunction) -> Option<Vec<ParamInfo>> {
    // Kernel parameters are limited to 32 764 bytes, each at least one byte.
    const MAX_PARAMS: usize = 32_764;
    let mut out = Vec::new();
    for index in 0..=MAX_PARAMS {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: the caller guarantees `func` and the entry point; the out-pointers are
        // live locals.
        match unsafe { sys::cuFuncGetParamInfo(func, index, &mut offset, &mut size) } {
            sys::CUresult::CUDA_SUCCESS => out.push(ParamInfo { offset, size }),
            sys::CUresult::CUDA_ERROR_INVALID_VALUE => return Some(out),
            _ => return None,
        }
    }
    None
}

/// A global's symbol as the driver wants it: non-empty, no NUL.
fn global_name(name: &str) -> Result<CString, CudaError> {
    let invalid = |reason| CudaError::InvalidName {
        what: "global name",
        value: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("is empty"));
    }
    CString::new(name).map_err(|_| invalid("contains a NUL byte"))
}

/// A kernel name as the driver wants it: non-empty, no NUL.
fn kernel_name(name: &str) -> Result<CString, CudaError> {
    let invalid = |reason| CudaError::InvalidName {
        what: "kernel name",
        value: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("is empty"));
    }
    CString::new(name).map_err(|_| invalid("contains a NUL byte"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::sys::CUdeviceptr;
    use cudarc::driver::{CudaSlice, DevicePtrMut};

    #[test]
    fn kernel_names_are_checked_before_the_driver() {
        assert!(kernel_name("ntt_scale").is_ok());
        let err = kernel_name("a\0b").unwrap_err();
        assert_eq!(
            err,
            CudaError::InvalidName {
                what: "kernel name",
                value: "a\0b".into(),
                reason: "contains a NUL byte"
            }
        );
        assert!(kernel_name("").is_err());
    }

    #[test]
    fn launches_are_checked_against_the_layout_before_the_driver() {
        let layout = [
            ParamInfo { offset: 0, size: 8 },
            ParamInfo { offset: 8, size: 4 },
        ];
        let k = "fields::vec_axpy<bb31_t>";
        let ok = check_launch(
            k,
            Some(&layout),
            Some(256),
            (256, 1, 1),
            &[Some(8), Some(4)],
        );
        assert_eq!(ok, Ok(()));
        // A u64 where the kernel takes 4 bytes: named by kernel and parameter.
        assert_eq!(
            check_launch(k, Some(&layout), None, (1, 1, 1), &[Some(8), Some(8)]),
            Err(CudaError::ParamSize {
                function: k.into(),
                index: 1,
                expected: 4,
                actual: 8
            })
        );
        assert!(matches!(
            check_launch(k, Some(&layout), None, (1, 1, 1), &[Some(8)]),
            Err(CudaError::ParamCount {
                expected: 2,
                actual: 1,
                ..
            })
        ));
        // Raw pointers (sizes unknown) are checked for count only.
        assert_eq!(
            check_launch(k, Some(&layout), None, (1, 1, 1), &[None, None]),
            Ok(())
        );
        assert!(matches!(
            check_launch(k, Some(&layout), Some(256), (16, 16, 2), &[None, None]),
            Err(CudaError::BlockTooLarge {
                threads: 512,
                max: 256,
                ..
            })
        ));
        // No layout known (old driver, no manifest): nothing to compare.
        assert_eq!(
            check_launch(k, None, None, (1024, 1, 1), &[Some(3)]),
            Ok(())
        );
        let mut v = 7u32;
        assert_eq!(KernelArg::new(&mut v).size(), 4);
    }

    /// Issue 19, item 4: a copy of the wrong size is refused before the driver, naming
    /// the module, the global and both sizes.
    #[test]
    fn global_copies_of_the_wrong_size_are_refused_before_the_driver() {
        assert_eq!(check_global_size("m", "g", "write", 64, 64), Ok(()));
        let err =
            check_global_size("foreign_poseidon", "poseidon::MDS", "write", 64, 60).unwrap_err();
        assert_eq!(
            err,
            CudaError::GlobalSize {
                module: "foreign_poseidon".into(),
                global: "poseidon::MDS".into(),
                op: "write",
                signed: 64,
                given: 60
            }
        );
        let text = err.to_string();
        assert!(
            text.contains("foreign_poseidon")
                && text.contains("poseidon::MDS")
                && text.contains("64 bytes")
                && text.contains("60"),
            "{text}"
        );
        assert!(err.fix().contains("exactly"), "{}", err.fix());
        assert!(global_name("a\0b").is_err() && global_name("").is_err());
    }

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
