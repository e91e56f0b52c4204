//! A CUDA device: its retained primary context and its identity.

use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{self, CUdevice_attribute};
use cudarc::driver::{CudaContext, CudaStream, DriverError, result};

use super::{CudaError, require_driver};

/// Identity of a device, read once when it is opened (telemetry, module selection).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeviceInfo {
    /// Device ordinal as this process sees it (after `CUDA_VISIBLE_DEVICES`).
    pub ordinal: usize,
    /// Marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// The device UUID (`cuDeviceGetUuid_v2`); stable across processes and renumbering.
    pub uuid: [u8; 16],
    /// Compute capability, major (9 for sm_90).
    pub cc_major: u32,
    /// Compute capability, minor (0 for sm_90).
    pub cc_minor: u32,
    /// Number of streaming multiprocessors (132 on an H200).
    pub sm_count: u32,
    /// CUDA version the driver supports, as `cuDriverGetVersion` gives it (13000 = 13.0).
    pub driver_version: i32,
}

impl DeviceInfo {
    /// The exact SM target this device runs, e.g. `sm_90` for compute capability 9.0.
    ///
    /// The arch-specific variant (`sm_90a`) runs on the same device; which one a module
    /// must be is the manifest's business.
    pub fn sm(&self) -> String {
        format!("sm_{}{}", self.cc_major, self.cc_minor)
    }

    /// The UUID in `nvidia-smi -L` form: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub fn uuid_string(&self) -> String {
        let mut out = String::from("GPU-");
        for (i, b) in self.uuid.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                out.push('-');
            }
            out.push_str(&format!("{b:02x}"));
        }
        out
    }

    /// The driver version as `major.minor` (e.g. "13.0").
    pub fn driver_version_string(&self) -> String {
        format!(
            "{}.{}",
            self.driver_version / 1000,
            self.driver_version % 1000 / 10
        )
    }
}

/// An opened device: its retained primary context and its [`DeviceInfo`].
///
/// Dropping the last clone of the context releases the primary context (cudarc does that);
/// modules loaded into it hold their own `Arc` of the context, so it outlives them.
#[derive(Debug, Clone)]
pub struct Device {
    ctx: Arc<CudaContext>,
    info: DeviceInfo,
}

impl Device {
    /// Opens device `ordinal`: initialises the driver, retains the device's primary context
    /// and reads its identity.
    ///
    /// Errors: [`CudaError::DriverMissing`] without libcuda (never a panic),
    /// [`CudaError::NoDevice`] when no device has that ordinal, [`CudaError::Driver`] when a
    /// driver call fails. Creating the primary context takes a few hundred milliseconds:
    /// open once per process.
    pub fn open(ordinal: usize) -> Result<Device, CudaError> {
        // 1. The driver library must be loadable; cudarc would panic otherwise.
        require_driver()?;
        // 2. Initialise the driver; "no device" is an answer, not a driver failure.
        if let Err(e) = result::init() {
            return Err(no_device_or(ordinal, "cuInit", e));
        }
        // 3. The ordinal must exist (cudarc casts it to a C int; this bounds it).
        let count = visible_devices()?;
        if ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        // 4. Retain the primary context (shared with any other user of the device in this
        //    process) and make it current on this thread.
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| CudaError::driver("cuDevicePrimaryCtxRetain", e))?;
        // 5. Read the identity.
        let info = read_info(&ctx)?;
        Ok(Device { ctx, info })
    }

    /// The device's primary context; pass it to [`LoadedModule`](super::LoadedModule) loads
    /// and use it to make streams and allocations.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Makes this device's context current on the calling thread (a no-op when it is).
    pub fn make_current(&self) -> Result<(), CudaError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))
    }

    /// The device's identity, read when it was opened.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// A new non-blocking stream on this device's context.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, CudaError> {
        self.ctx
            .new_stream()
            .map_err(|e| CudaError::driver("cuStreamCreate", e))
    }
}

/// The CUDA version the driver supports, as `cuDriverGetVersion` gives it (13000 = 13.0).
///
/// Needs no device: `cuInit` is attempted first and its own failure (e.g. no device
/// visible) does not stop the version from being read. The value is cached per process.
pub fn driver_version() -> Result<i32, CudaError> {
    static VERSION: OnceLock<i32> = OnceLock::new();
    if let Some(v) = VERSION.get() {
        return Ok(*v);
    }
    require_driver()?;
    // A failing cuInit (no device, container without GPU access) still leaves the version
    // query meaningful, so its result is deliberately not used here.
    let _ = result::init();
    let mut version: std::ffi::c_int = 0;
    // SAFETY: libcuda is loaded (checked above); the out-pointer is a live, aligned local
    // c_int that the call writes once.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(|e| CudaError::driver("cuDriverGetVersion", e))?;
    Ok(*VERSION.get_or_init(|| version))
}

/// Refuses with [`CudaError::DriverTooOld`] when the driver is older than `needed`
/// (`cuDriverGetVersion` form, e.g. 12040) for `feature`, before an entry point it lacks
/// is called (cudarc would panic on the missing symbol). The runtime's loader and the
/// bench crate's bare loaders both check through it.
pub fn need_driver(needed: i32, feature: &'static str) -> Result<(), CudaError> {
    let found = driver_version()?;
    if found < needed {
        Err(CudaError::DriverTooOld {
            feature,
            needed,
            found,
        })
    } else {
        Ok(())
    }
}

/// How many CUDA devices this process sees (0 when the driver sees none).
pub fn device_count() -> Result<usize, CudaError> {
    require_driver()?;
    match result::init() {
        Ok(()) => visible_devices(),
        Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => Ok(0),
        Err(e) => Err(CudaError::driver("cuInit", e)),
    }
}

/// `cuDeviceGetCount`, after a successful `cuInit`.
fn visible_devices() -> Result<usize, CudaError> {
    let count =
        result::device::get_count().map_err(|e| CudaError::driver("cuDeviceGetCount", e))?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// `CUDA_ERROR_NO_DEVICE` becomes [`CudaError::NoDevice`]; anything else stays a driver error.
fn no_device_or(ordinal: usize, op: &'static str, e: DriverError) -> CudaError {
    if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE {
        CudaError::NoDevice { ordinal, count: 0 }
    } else {
        CudaError::driver(op, e)
    }
}

fn read_info(ctx: &Arc<CudaContext>) -> Result<DeviceInfo, CudaError> {
    let attr = |a: CUdevice_attribute| -> Result<u32, CudaError> {
        let v = ctx
            .attribute(a)
            .map_err(|e| CudaError::driver("cuDeviceGetAttribute", e))?;
        Ok(u32::try_from(v).unwrap_or(0))
    };
    let name = ctx
        .name()
        .map_err(|e| CudaError::driver("cuDeviceGetName", e))?;
    let uuid = ctx
        .uuid()
        .map_err(|e| CudaError::driver("cuDeviceGetUuid_v2", e))?;
    // c_char is i8 or u8 depending on the target; either way the bits are the UUID byte.
    #[allow(clippy::unnecessary_cast)]
    let uuid: [u8; 16] = uuid.bytes.map(|b| b as u8);
    Ok(DeviceInfo {
        ordinal: ctx.ordinal(),
        name,
        uuid,
        cc_major: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        cc_minor: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        sm_count: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        driver_version: driver_version()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::driver_present;

    /// Without a driver every entry point says so; with one (the GPU host) the same calls
    /// answer with the driver's view. Either way something is checked.
    #[test]
    fn without_a_driver_every_entry_point_says_driver_missing() {
        if driver_present() {
            let version = driver_version().expect("a present driver reports its version");
            assert!(version >= 12000, "driver CUDA version {version}");
            let count = device_count().expect("a present driver counts its devices");
            match Device::open(0) {
                Ok(d) => assert!(count >= 1 && d.info().cc_major >= 5, "{:?}", d.info()),
                Err(e) => assert!(
                    count == 0
                        && matches!(e, CudaError::NoDevice { .. } | CudaError::Driver { .. }),
                    "{e}"
                ),
            }
            return;
        }
        let err = Device::open(0).expect_err("no driver on this host");
        assert_eq!(err, CudaError::DriverMissing);
        assert!(err.to_string().contains("libcuda"), "{err}");
        assert!(
            err.fix().contains("install the NVIDIA driver"),
            "{}",
            err.fix()
        );
        assert_eq!(driver_version(), Err(CudaError::DriverMissing));
        assert_eq!(device_count(), Err(CudaError::DriverMissing));
    }

    #[test]
    fn info_formats_sm_uuid_and_driver() {
        let info = DeviceInfo {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            uuid: [
                0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0, 1, 2, 3, 4, 5, 6, 7,
            ],
            cc_major: 9,
            cc_minor: 0,
            sm_count: 132,
            driver_version: 13000,
        };
        assert_eq!(info.sm(), "sm_90");
        assert_eq!(
            info.uuid_string(),
            "GPU-abcdef01-2345-6789-0001-020304050607"
        );
        assert_eq!(info.driver_version_string(), "13.0");
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn open_device_0_reads_its_identity() {
        let device = Device::open(0).expect("open device 0");
        let info = device.info();
        println!(
            "device: {info:?} {} {} driver {}",
            info.sm(),
            info.uuid_string(),
            info.driver_version_string()
        );
        assert!(!info.name.is_empty());
        assert!(info.cc_major >= 7, "{info:?}");
        assert!(info.sm_count > 0);
        assert!(info.driver_version >= 12000, "{info:?}");
        assert_ne!(info.uuid, [0; 16]);
        assert_eq!(driver_version(), Ok(info.driver_version));
        assert!(device_count().unwrap() >= 1);
        // A second open shares the primary context.
        let again = Device::open(0).unwrap();
        assert_eq!(again.context().cu_ctx(), device.context().cu_ctx());
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn open_past_the_last_ordinal_is_no_device() {
        let count = device_count().unwrap();
        let err = Device::open(count + 7).expect_err("no such device");
        assert_eq!(
            err,
            CudaError::NoDevice {
                ordinal: count + 7,
                count
            }
        );
    }
}
