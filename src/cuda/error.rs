//! The error of the CUDA boundary: every driver status becomes a [`CudaError`] here, with the
//! operation, the driver's error name and its message as evidence.

use cudarc::driver::DriverError;
use cudarc::driver::sys::CUresult;

use crate::error::{DriverFault, Fault};
use crate::{Error, ErrorKind};

/// Everything the CUDA boundary can refuse or report.
///
/// Variants carry the evidence (driver entry point, error name such as
/// `CUDA_ERROR_NO_BINARY_FOR_GPU`, the driver's message, ordinals, kernel names).
/// [`CudaError::fix`] says what to do about it; a CLI prints it as `Fix: ...` under the error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// The CUDA driver library (`libcuda.so.1`) cannot be loaded on this host.
    ///
    /// Returned instead of calling into the driver: cudarc panics when a driver entry
    /// point is used without the library, so every entry point checks first.
    #[error("the CUDA driver library (libcuda.so / libcuda.so.1) cannot be loaded on this host")]
    DriverMissing,

    /// A driver call failed.
    #[error("{op} failed: {code:?}{}", paren(.message))]
    Driver {
        /// The driver entry point (e.g. `cuModuleLoadData`).
        op: &'static str,
        /// The driver's status (printed as its C name, e.g. `CUDA_ERROR_NO_BINARY_FOR_GPU`).
        code: CUresult,
        /// The driver's description of the error (empty when the driver could not say).
        message: String,
    },

    /// A driver call about one kernel (lookup, attribute query, launch) failed.
    #[error("kernel {function:?}: {op} failed: {code:?}{}", paren(.message))]
    Function {
        /// The kernel's entry name.
        function: String,
        /// The driver entry point (e.g. `cuModuleGetFunction`).
        op: &'static str,
        /// The driver's status (printed as its C name, e.g. `CUDA_ERROR_NOT_FOUND`).
        code: CUresult,
        /// The driver's description of the error (empty when the driver could not say).
        message: String,
    },

    /// No device has the requested ordinal.
    #[error("no CUDA device with ordinal {ordinal}: {count} device(s) visible")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports (0 when none is visible).
        count: usize,
    },

    /// A name handed to the driver is empty or holds a NUL byte.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidName {
        /// What the name is (e.g. "kernel name").
        what: &'static str,
        /// The offending value (escaped when printed).
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },

    /// Bytes refused before the driver saw them: not a complete CUDA ELF (cubin), or not
    /// PTX text.
    #[error("{what}: refused before loading: {reason}")]
    BadImage {
        /// What the bytes were supposed to be ("cubin" or "PTX").
        what: &'static str,
        /// What is wrong with them.
        reason: String,
    },

    /// The driver is older than a feature needs.
    #[error(
        "{feature} needs a driver for CUDA {}.{} or newer; this driver supports CUDA {}.{}",
        .needed / 1000, .needed % 1000 / 10, .found / 1000, .found % 1000 / 10
    )]
    DriverTooOld {
        /// The feature or entry point (e.g. `cuLibraryLoadData`).
        feature: &'static str,
        /// The lowest driver version that has it (`cuDriverGetVersion` form, e.g. 12000).
        needed: i32,
        /// This driver's version (e.g. 13000).
        found: i32,
    },

    /// A kernel was launched on a stream of another context than the one it was loaded into.
    #[error(
        "kernel {function:?} was loaded into the context of device {kernel_ordinal}, \
         but the stream belongs to {}",
        stream_ordinal.map_or("another context".to_string(), |o| format!("a context of device {o}"))
    )]
    ContextMismatch {
        /// The kernel's entry name.
        function: String,
        /// Device ordinal of the kernel's context.
        kernel_ordinal: usize,
        /// Device ordinal of the stream's context, where the driver can say (a raw stream
        /// on a driver older than CUDA 12.8 cannot).
        stream_ordinal: Option<usize>,
    },

    /// A launch passed another number of parameters than the kernel declares.
    #[error("kernel {function:?} declares {expected} parameter(s), the launch passed {actual}")]
    ParamCount {
        /// The kernel's entry name.
        function: String,
        /// Parameters the kernel declares (from `cuFuncGetParamInfo`).
        expected: usize,
        /// Parameter pointers the launch passed.
        actual: usize,
    },

    /// A launch argument's size is not the size of the kernel's parameter.
    #[error(
        "kernel {function:?}: parameter {index} is {expected} bytes, the launch passed {actual} bytes"
    )]
    ParamSize {
        /// The kernel (demangled name where known).
        function: String,
        /// The parameter's position (0-based).
        index: usize,
        /// The parameter's size in the signed layout.
        expected: usize,
        /// The size of the value passed.
        actual: usize,
    },

    /// A launch asked for more threads per block than the kernel was compiled for.
    #[error(
        "kernel {function:?}: a block of {threads} threads; the kernel is built for at most {max}"
    )]
    BlockTooLarge {
        /// The kernel.
        function: String,
        /// Threads per block asked for.
        threads: u64,
        /// The signed launch bound.
        max: u32,
    },

    /// The driver reports another parameter layout than the one signed into the manifest.
    #[error("kernel {function:?}: signed parameter layout {signed}, the driver reports {driver}")]
    AbiMismatch {
        /// The kernel.
        function: String,
        /// The signed layout (`offset:size`).
        signed: String,
        /// The driver's layout.
        driver: String,
    },

    /// A driver call about one device global (lookup, copy) failed.
    #[error("global {global:?}: {op} failed: {code:?}{}", paren(.message))]
    Global {
        /// The global (its symbol, or its demangled name once signed).
        global: String,
        /// The driver entry point (e.g. `cuModuleGetGlobal`).
        op: &'static str,
        /// The driver's status (printed as its C name, e.g. `CUDA_ERROR_NOT_FOUND`).
        code: CUresult,
        /// The driver's description of the error (empty when the driver could not say).
        message: String,
    },

    /// A copy to or from a device global was not exactly the global's size: refused
    /// before the driver was called.
    #[error(
        "{module}: global {global:?} is {signed} bytes (signed); a {op} of {given} bytes is refused before the driver"
    )]
    GlobalSize {
        /// The module.
        module: String,
        /// The global (demangled name).
        global: String,
        /// `"write"` or `"read"`.
        op: &'static str,
        /// The global's signed size.
        signed: usize,
        /// The size of the host buffer passed.
        given: usize,
    },

    /// The driver reports another size for a global than the one signed into the manifest.
    #[error("{module}: global {global:?}: signed size {signed} bytes, the driver reports {driver}")]
    GlobalDriverSize {
        /// The module.
        module: String,
        /// The global (demangled name).
        global: String,
        /// The signed size.
        signed: u64,
        /// What `cuModuleGetGlobal` / `cuLibraryGetGlobal` reports.
        driver: u64,
    },

    /// The runtime compiler library cannot be loaded (research builds only).
    #[cfg(feature = "research")]
    #[error("the NVRTC library (libnvrtc.so.13) cannot be loaded on this host")]
    CompilerMissing,

    /// Runtime compilation failed (research builds only).
    #[cfg(feature = "research")]
    #[error("NVRTC: program {program:?}: {op} failed: {code}{}", log_block(.log))]
    Compile {
        /// The program name given to NVRTC.
        program: String,
        /// The NVRTC entry point (e.g. `nvrtcCompileProgram`).
        op: &'static str,
        /// The NVRTC status name (e.g. `NVRTC_ERROR_COMPILATION`).
        code: String,
        /// The compiler log (empty when there is none).
        log: String,
    },
}

fn paren(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(" ({message})")
    }
}

#[cfg(feature = "research")]
fn log_block(log: &str) -> String {
    let log = log.trim_end();
    if log.is_empty() {
        String::new()
    } else {
        format!("\n{log}")
    }
}

/// The driver's error name for a status, e.g. `CUDA_ERROR_NO_BINARY_FOR_GPU`: the binding's
/// enum variant name is the C name, so it needs no driver call and works without libcuda.
#[cfg(test)]
fn error_name(err: &DriverError) -> String {
    format!("{:?}", err.0)
}

/// The driver's description of a status (`cuGetErrorString`), or "" without a driver.
fn error_message(err: &DriverError) -> String {
    if !super::driver_present() {
        return String::new();
    }
    err.error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl CudaError {
    /// The kind of this error ([`crate::Error::kind`] for driver-layer errors): a launch or
    /// copy refused by a signed check is [`ErrorKind::Launch`], bytes the driver or the
    /// manifest disagree about are [`ErrorKind::BadContent`], a bad name is
    /// [`ErrorKind::InvalidArgument`], everything else (the driver failed, is missing or
    /// too old, no such device) is [`ErrorKind::Driver`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            CudaError::ContextMismatch { .. }
            | CudaError::ParamCount { .. }
            | CudaError::ParamSize { .. }
            | CudaError::BlockTooLarge { .. }
            | CudaError::GlobalSize { .. } => ErrorKind::Launch,
            CudaError::BadImage { .. }
            | CudaError::AbiMismatch { .. }
            | CudaError::GlobalDriverSize { .. } => ErrorKind::BadContent,
            CudaError::InvalidName { .. } => ErrorKind::InvalidArgument,
            CudaError::DriverMissing
            | CudaError::Driver { .. }
            | CudaError::Function { .. }
            | CudaError::NoDevice { .. }
            | CudaError::DriverTooOld { .. }
            | CudaError::Global { .. } => ErrorKind::Driver,
            #[cfg(feature = "research")]
            CudaError::CompilerMissing | CudaError::Compile { .. } => ErrorKind::Driver,
        }
    }

    /// A failed driver call (`op` is the entry point) as an error with its evidence.
    pub fn driver(op: &'static str, err: DriverError) -> Self {
        CudaError::Driver {
            op,
            code: err.0,
            message: error_message(&err),
        }
    }

    /// A failed driver call about the kernel `function`.
    pub fn function(function: &str, op: &'static str, err: DriverError) -> Self {
        CudaError::Function {
            function: function.to_owned(),
            op,
            code: err.0,
            message: error_message(&err),
        }
    }

    /// A failed driver call about the device global `global`.
    pub fn global(global: &str, op: &'static str, err: DriverError) -> Self {
        CudaError::Global {
            global: global.to_owned(),
            op,
            code: err.0,
            message: error_message(&err),
        }
    }

    /// The driver's status, for the variants that come from a driver call.
    pub fn code(&self) -> Option<CUresult> {
        match self {
            CudaError::Driver { code, .. }
            | CudaError::Function { code, .. }
            | CudaError::Global { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True when libcuda is not loadable on this host.
    pub fn is_driver_missing(&self) -> bool {
        matches!(self, CudaError::DriverMissing)
    }

    /// True when the driver found no code for this device in the image
    /// (`CUDA_ERROR_NO_BINARY_FOR_GPU`): a cubin built for another SM.
    ///
    /// With [`LoadApi::Library`](super::LoadApi::Library) the image is placed on a device
    /// lazily, so this may come from [`LoadedModule::function`](super::LoadedModule::function)
    /// rather than from the load.
    pub fn is_no_binary_for_gpu(&self) -> bool {
        self.code() == Some(CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU)
    }

    /// True when the image is not a valid image: the driver said `CUDA_ERROR_INVALID_IMAGE`,
    /// or the bytes were refused before the driver saw them ([`CudaError::BadImage`]).
    pub fn is_invalid_image(&self) -> bool {
        self.code() == Some(CUresult::CUDA_ERROR_INVALID_IMAGE)
            || matches!(self, CudaError::BadImage { .. })
    }

    /// True when a kernel name is not in the module (`CUDA_ERROR_NOT_FOUND`).
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(CUresult::CUDA_ERROR_NOT_FOUND)
    }

    /// What to do about the error (printed by a CLI as `Fix: ...`).
    pub fn fix(&self) -> String {
        match self {
            CudaError::DriverMissing => "install the NVIDIA driver on this host (it provides libcuda.so.1) or make it \
                 visible to the dynamic loader (ldconfig, LD_LIBRARY_PATH); in a container, start it with GPU access \
                 (NVIDIA Container Toolkit, --gpus). Hosts without a driver can only run the CPU-side checks"
                .into(),
            CudaError::NoDevice { count: 0, .. } => "no GPU is visible to this process: check nvidia-smi, \
                 CUDA_VISIBLE_DEVICES and, in a container, its GPU access"
                .into(),
            CudaError::NoDevice { count, .. } => format!(
                "use a device ordinal below {count}; check nvidia-smi and CUDA_VISIBLE_DEVICES, which renumbers devices"
            ),
            CudaError::Driver { code, .. } => code_fix(*code, None),
            CudaError::Function { code, function, .. } => code_fix(*code, Some(function)),
            CudaError::InvalidName { .. } => "kernel names are the extern \"C\" entry names listed in the module \
                 manifest: not empty, no NUL bytes"
                .into(),
            CudaError::BadImage { what: "PTX", .. } => "pass the PTX text exactly as published (ASCII text, no NUL \
                 bytes inside); cubins go through load_cubin"
                .into(),
            CudaError::BadImage { .. } => "pass the verified cubin bytes exactly as published (a complete CUDA ELF, \
                 not a fatbin or PTX); if they are truncated, fetch the module again from the registry or rebuild it \
                 (cargo xtask build)"
                .into(),
            CudaError::DriverTooOld { needed, .. } => format!(
                "upgrade the NVIDIA driver to one for CUDA {}.{} or newer, or load with LoadApi::Module",
                needed / 1000,
                needed % 1000 / 10
            ),
            CudaError::ContextMismatch { kernel_ordinal, .. } => format!(
                "launch on a stream of the context the module was loaded into (device {kernel_ordinal}), e.g. \
                 Device::context().new_stream(); load the module once per device"
            ),
            CudaError::ParamCount { .. } => "pass exactly one pointer per kernel parameter, in declaration order; \
                 check the launch wrapper against the kernel's signature and the manifest's schedule_version"
                .into(),
            CudaError::ParamSize { .. } => "pass each argument with the type the kernel declares \
                 (the manifest's signed launch ABI, shown by cargo xtask verify); a launch wrapper \
                 out of step with the kernel source must be updated, or the schedule_version bumped"
                .into(),
            CudaError::BlockTooLarge { max, .. } => format!(
                "launch with at most {max} threads per block (the kernel's __launch_bounds__), or rebuild it with a larger bound"
            ),
            CudaError::AbiMismatch { .. } | CudaError::GlobalDriverSize { .. } => "the module's bytes and its manifest disagree: rebuild and re-sign it (cargo xtask release)".into(),
            CudaError::Global { code, .. } => code_fix(*code, None),
            CudaError::GlobalSize { signed, .. } => format!(
                "copy exactly {signed} bytes, the size the manifest signs (the C++ type's sizeof, shown by cargo xtask verify): a host table out of step with the kernel source must be updated, or the schedule_version bumped"
            ),
            #[cfg(feature = "research")]
            CudaError::CompilerMissing => "install the CUDA toolkit's runtime compiler (libnvrtc.so.13, e.g. \
                 /usr/local/cuda/lib64) and add its folder to LD_LIBRARY_PATH; production builds do not need it"
                .into(),
            #[cfg(feature = "research")]
            CudaError::Compile { .. } => "fix the kernel source from the compiler log, or the options and \
                 architecture passed"
                .into(),
        }
    }
}

// The crate's Error holds a CudaError behind a trait object (error.rs `DriverFault`): code
// that never makes one, such as the registry's verification, links none of this module.
impl Fault for CudaError {
    fn fix(&self) -> String {
        CudaError::fix(self)
    }

    fn kind(&self) -> ErrorKind {
        CudaError::kind(self)
    }
}

impl From<CudaError> for DriverFault {
    fn from(e: CudaError) -> Self {
        DriverFault::new(e)
    }
}

// The driver layer's side of [`DriverFault`]: it alone knows what the trait object holds.
impl DriverFault {
    /// The driver layer's error, with its evidence (entry point, driver status, message).
    pub fn cuda(&self) -> &CudaError {
        self.fault()
            .downcast_ref()
            .expect("the driver layer's CudaError is the only Fault")
    }

    /// True when libcuda is not loadable on this host.
    pub fn is_driver_missing(&self) -> bool {
        self.cuda().is_driver_missing()
    }
}

impl From<CudaError> for Error {
    fn from(e: CudaError) -> Self {
        Error::Cuda(e.into())
    }
}

/// Advice for a driver status; `function` when the call was about one kernel.
fn code_fix(code: CUresult, function: Option<&str>) -> String {
    use CUresult::*;
    match code {
        CUDA_ERROR_NO_BINARY_FOR_GPU => "the module holds no code for this device's SM: build and publish a cubin \
             for this device's exact SM (e.g. sm_90 for compute capability 9.0) with cargo xtask build; cuda-aot \
             does not fall back to another SM or to PTX"
            .into(),
        CUDA_ERROR_INVALID_IMAGE => "the bytes are not a valid image for this driver: fetch the module again from \
             the registry (its digest is checked before loading) or rebuild it with the pinned toolkit \
             (cargo xtask build)"
            .into(),
        CUDA_ERROR_UNSUPPORTED_PTX_VERSION => "the PTX comes from a newer toolkit than this driver supports: \
             upgrade the driver, or load the cubin built for this SM"
            .into(),
        CUDA_ERROR_INVALID_PTX => "the PTX does not compile for this device: rebuild it with the pinned toolkit, \
             or load the cubin built for this SM"
            .into(),
        CUDA_ERROR_JIT_COMPILER_NOT_FOUND | CUDA_ERROR_JIT_COMPILATION_DISABLED => "PTX needs the driver's JIT \
             compiler, which this host lacks or disables: load the cubin built for this SM"
            .into(),
        CUDA_ERROR_NOT_FOUND => match function {
            Some(function) => format!(
                "the module has no kernel named {function:?}: check the manifest's function list and that the \
                 kernel is declared extern \"C\" (unmangled)"
            ),
            None => "a named object is not in the module: check the manifest against the module".into(),
        },
        CUDA_ERROR_OUT_OF_MEMORY => "the device is out of memory: free device memory or run fewer processes \
             on this GPU (nvidia-smi shows who holds it)"
            .into(),
        CUDA_ERROR_NO_DEVICE | CUDA_ERROR_INVALID_DEVICE => "check nvidia-smi and CUDA_VISIBLE_DEVICES".into(),
        CUDA_ERROR_INVALID_VALUE | CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES if function.is_some() => "check the \
             launch geometry against the kernel's limits (Kernel::attributes: max threads per block, registers, \
             shared memory) and the parameters against its signature"
            .into(),
        CUDA_ERROR_SYSTEM_DRIVER_MISMATCH | CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE => "the user-space driver \
             (libcuda) and the kernel module differ: reinstall the driver, or reboot after a driver upgrade"
            .into(),
        CUDA_ERROR_STUB_LIBRARY => {
            "the libcuda that was loaded is the toolkit's link stub (lib64/stubs), not a driver: \
             remove the stubs folder from LD_LIBRARY_PATH, and install the NVIDIA driver"
                .into()
        }
        CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER => {
            "this call needs a newer NVIDIA driver: upgrade the driver (cuda-aot targets CUDA 13.0)"
                .into()
        }
        _ => format!(
            "see the CUDA driver API documentation for {code:?}; nvidia-smi shows the device and driver state; \
             a sticky error (e.g. after an illegal address) needs a new process"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::sys::CUresult;

    #[test]
    fn driver_status_maps_to_its_c_name() {
        let cases = [
            (
                CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU,
                "CUDA_ERROR_NO_BINARY_FOR_GPU",
            ),
            (
                CUresult::CUDA_ERROR_INVALID_IMAGE,
                "CUDA_ERROR_INVALID_IMAGE",
            ),
            (CUresult::CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"),
            (CUresult::CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX"),
            (CUresult::CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"),
        ];
        for (status, name) in cases {
            assert_eq!(error_name(&DriverError(status)), name);
        }
    }

    #[test]
    fn driver_error_carries_op_and_code_and_predicates_see_it() {
        let e = CudaError::driver(
            "cuModuleLoadData",
            DriverError(CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU),
        );
        assert!(e.is_no_binary_for_gpu());
        assert!(!e.is_invalid_image());
        assert_eq!(e.code(), Some(CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU));
        let shown = e.to_string();
        assert!(
            shown.starts_with("cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU"),
            "{shown}"
        );
        assert!(e.fix().contains("exact SM"), "{}", e.fix());

        let e = CudaError::driver(
            "cuLibraryLoadData",
            DriverError(CUresult::CUDA_ERROR_INVALID_IMAGE),
        );
        assert!(e.is_invalid_image());
        assert!(!e.is_no_binary_for_gpu());

        let bad = CudaError::BadImage {
            what: "cubin",
            reason: "not an ELF".into(),
        };
        assert!(bad.is_invalid_image());
    }

    #[test]
    fn function_error_names_the_kernel() {
        let e = CudaError::function(
            "ntt_scale",
            "cuModuleGetFunction",
            DriverError(CUresult::CUDA_ERROR_NOT_FOUND),
        );
        assert!(e.is_not_found());
        let shown = e.to_string();
        assert!(
            shown.contains("\"ntt_scale\"") && shown.contains("cuModuleGetFunction"),
            "{shown}"
        );
        assert!(e.fix().contains("\"ntt_scale\""), "{}", e.fix());
        let e = CudaError::function(
            "k",
            "cuKernelGetFunction",
            DriverError(CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU),
        );
        assert!(
            e.is_no_binary_for_gpu(),
            "library loads report a foreign SM at lookup"
        );
    }

    #[test]
    fn driver_too_old_prints_versions() {
        let e = CudaError::DriverTooOld {
            feature: "cuLibraryLoadData",
            needed: 12000,
            found: 11080,
        };
        assert_eq!(
            e.to_string(),
            "cuLibraryLoadData needs a driver for CUDA 12.0 or newer; this driver supports CUDA 11.8"
        );
        assert!(e.fix().contains("CUDA 12.0"));
    }

    #[test]
    fn every_fix_is_actionable_and_never_says_skip() {
        let all = [
            CudaError::DriverMissing,
            CudaError::NoDevice {
                ordinal: 1,
                count: 0,
            },
            CudaError::NoDevice {
                ordinal: 3,
                count: 2,
            },
            CudaError::driver("cuInit", DriverError(CUresult::CUDA_ERROR_UNKNOWN)),
            CudaError::driver("cuInit", DriverError(CUresult::CUDA_ERROR_STUB_LIBRARY)),
            CudaError::InvalidName {
                what: "kernel name",
                value: "a\0b".into(),
                reason: "contains a NUL byte",
            },
            CudaError::BadImage {
                what: "PTX",
                reason: "x".into(),
            },
            CudaError::BadImage {
                what: "cubin",
                reason: "x".into(),
            },
            CudaError::DriverTooOld {
                feature: "f",
                needed: 12040,
                found: 12000,
            },
            CudaError::ContextMismatch {
                function: "k".into(),
                kernel_ordinal: 0,
                stream_ordinal: Some(1),
            },
            CudaError::ParamCount {
                function: "k".into(),
                expected: 2,
                actual: 1,
            },
            CudaError::ParamSize {
                function: "k".into(),
                index: 1,
                expected: 8,
                actual: 4,
            },
            CudaError::BlockTooLarge {
                function: "k".into(),
                threads: 512,
                max: 256,
            },
            CudaError::AbiMismatch {
                function: "k".into(),
                signed: "[0:8]".into(),
                driver: "[0:4]".into(),
            },
        ];
        for e in all {
            let fix = e.fix();
            assert!(fix.len() > 20, "{e}: {fix}");
            assert!(!fix.to_lowercase().contains("skip"), "{e}: {fix}");
            assert!(!fix.starts_with("Fix:"), "the CLI adds the prefix: {fix}");
        }
        assert!(CudaError::DriverMissing.fix().contains("libcuda.so.1"));
    }

    #[test]
    fn the_crate_error_carries_the_driver_error_whole() {
        let driver = CudaError::driver("cuInit", DriverError(CUresult::CUDA_ERROR_NO_DEVICE));
        let e: Error = driver.clone().into();
        assert!(matches!(&e, Error::Cuda(f) if f.cuda() == &driver));
        assert_eq!(e.to_string(), driver.to_string());
        assert_eq!(e.fix(), driver.fix());
        assert_eq!(e.kind(), driver.kind());

        let load = Error::Load {
            what: "ntt sm_90".into(),
            source: CudaError::DriverMissing.into(),
        };
        assert!(matches!(&load, Error::Load { source, .. } if source.is_driver_missing()));
        assert_eq!(load.fix(), CudaError::DriverMissing.fix());
        assert_eq!(load.kind(), ErrorKind::Driver);
        let source = std::error::Error::source(&load).expect("the driver's error is the source");
        assert_eq!(source.to_string(), CudaError::DriverMissing.to_string());
    }
}
