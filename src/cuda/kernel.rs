//! The kernels of a loaded module: lookup, attributes, the signed launch ABI and launches
//! checked against it (argument count and sizes, block size, the stream's context) before
//! the driver runs them.

use std::ffi::c_void;
use std::fmt;
use std::mem::MaybeUninit;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaStream, result};

use super::module::{Handle, ImageKind, Owner, bind};
use super::{CudaError, driver_name, driver_version, require_driver};

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

/// A kernel of a [`LoadedModule`](super::LoadedModule), for the module's context.
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
    /// Looks the kernel `name` up in the module `owner` holds ([`LoadedModule::function`]).
    pub(super) fn lookup(owner: &Arc<Owner>, name: &str) -> Result<Kernel, CudaError> {
        let c_name = driver_name("kernel name", name)?;
        require_driver()?;
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
            owner: owner.clone(),
        })
    }

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
    /// [`LoadApi::Library`](super::LoadApi::Library) (`cuLibraryLoadData`); `None` for `cuModuleLoadData`. Valid
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_are_checked_before_the_driver() {
        assert!(driver_name("kernel name", "ntt_scale").is_ok());
        let err = driver_name("kernel name", "a\0b").unwrap_err();
        assert_eq!(
            err,
            CudaError::InvalidName {
                what: "kernel name",
                value: "a\0b".into(),
                reason: "contains a NUL byte"
            }
        );
        assert!(driver_name("kernel name", "").is_err());
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
}
