//! `cuda_aot_doctor`: what `cargo xtask doctor` reports, through the C ABI. For every module
//! of a registry, which blob would load on a device (described by its SM and driver, or the
//! policy's device probed) or why none would: the runtime's `DoctorReport` (the selection
//! and checks of `Runtime::open`, one module at a time, without loading anything), its
//! reasons, statuses and `Fix:` advice, and the same table the tool prints.

use std::ffi::{CString, c_char};

use cuda_aot::metadata::Time;
use cuda_aot::{DeviceSpec, DriverVersion, Target};

use crate::last_error::{Failure, c_string, entry, guard};
use crate::policy::Policy;
use crate::report::null;
use crate::runtime::{name_arg, policy_of, trust_bytes};
use crate::status::Status;
use crate::verify::path_arg;

/// What a registry gives one device: per module the blob that would load or why none
/// would, and the table `cargo xtask doctor` prints. Opaque to C; made by
/// `cuda_aot_doctor`, released by `cuda_aot_doctor_report_free`. Immutable, so several
/// threads may read one report at once.
pub struct DoctorReport {
    modules: Vec<DiagnosisStrings>,
    refused: usize,
    text: CString,
}

/// One module's diagnosis as C strings, kept alive by the report.
struct DiagnosisStrings {
    module: CString,
    available: CString,
    status: Status,
    /// Target, kind, driver floor and digest of what would load; `None` when nothing would.
    loads: Option<[CString; 4]>,
    reason: CString,
    fix: CString,
}

impl DiagnosisStrings {
    fn of(d: &cuda_aot::Diagnosis) -> DiagnosisStrings {
        let available: Vec<String> = d
            .available
            .iter()
            .map(|(t, k)| format!("{t} {k}"))
            .collect();
        let (status, loads, reason, fix) = match &d.outcome {
            Ok(m) => {
                let id = &m.identity;
                let loads = [
                    c_string(&id.sm.to_string()),
                    c_string(&id.kind.to_string()),
                    c_string(&id.driver_floor.to_string()),
                    c_string(&m.module_digest.to_string()),
                ];
                (Status::Ok, Some(loads), c_string(""), c_string(""))
            }
            Err(e) => (
                Status::from(e.kind()),
                None,
                c_string(&e.to_string()),
                c_string(&e.fix()),
            ),
        };
        DiagnosisStrings {
            module: c_string(&d.module),
            available: c_string(&available.join(", ")),
            status,
            loads,
            reason,
            fix,
        }
    }

    fn info(&self) -> Diagnosis {
        let at = |i: usize| {
            self.loads
                .as_ref()
                .map_or(std::ptr::null(), |l| l[i].as_ptr())
        };
        Diagnosis {
            module: self.module.as_ptr(),
            available: self.available.as_ptr(),
            status: self.status,
            target: at(0),
            kind: at(1),
            driver_floor: at(2),
            digest: at(3),
            reason: self.reason.as_ptr(),
            fix: self.fix.as_ptr(),
        }
    }
}

/// One module of a doctor report, as `cuda_aot_doctor_report_module` describes it. The
/// strings belong to the report: valid until it is freed, never to be freed by the caller.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Diagnosis {
    /// The module name (`ntt`).
    pub module: *const c_char,
    /// Every target and kind the registry has for it: `sm_80 cubin, sm_90 cubin`.
    pub available: *const c_char,
    /// `CUDA_AOT_STATUS_OK` when a blob would load; else the status `cuda_aot_runtime_open`
    /// would fail with for this module (`NO_TARGET`, `DRIVER`, `TAMPERED`, `POLICY`, ...).
    pub status: Status,
    /// The target that would load (`sm_90`, `sm_100f`, `compute_80` for PTX); NULL when
    /// nothing would.
    pub target: *const c_char,
    /// `cubin`, or `ptx` (labelled compatibility mode); NULL when nothing would load.
    pub kind: *const c_char,
    /// The CUDA driver version the blob needs at least (`13.0`); NULL when nothing would
    /// load.
    pub driver_floor: *const c_char,
    /// The blake3 of the blob, as signed (`blake3:<64 hex>`); NULL when nothing would load.
    pub digest: *const c_char,
    /// Why nothing would load (the runtime's message); `""` when a blob would.
    pub reason: *const c_char,
    /// What to do about it (printed after `Fix:`); `""` when a blob would load.
    pub fix: *const c_char,
}

/// Says, for every module of the registry folder `registry` verified against the trust
/// root file `trust_root` under `policy` (NULL: the development preset), which blob
/// `cuda_aot_runtime_open` would load on a device, or why it would load none: what `cargo
/// xtask doctor` reports, from the runtime's own selection and checks (`DoctorReport`). No
/// module is loaded and no rollback state is saved; expiry is checked as of now.
///
/// The device: `device_sm` names it by its plain SM (`"sm_89"`; `sm_90a`, `sm_100f` or
/// `compute_90` are `CUDA_AOT_STATUS_INVALID_ARGUMENT`), with `driver_version` its driver's
/// CUDA version as `cuDriverGetVersion` gives it (`12040` for 12.4; 0 when unknown: driver
/// floors are then not checked). With `device_sm` NULL the policy's device
/// (`cuda_aot_policy_device`, 0 by default) and this host's driver are probed, which needs
/// the CUDA driver (`CUDA_AOT_STATUS_DRIVER` otherwise); `driver_version` must then be 0.
///
/// On success `*out` is a new report (free it with `cuda_aot_doctor_report_free`), also
/// when some modules would not load: `cuda_aot_doctor_report_refused` counts them and each
/// one's `cuda_aot_diagnosis` holds its status, reason and fix. A registry refused as a
/// whole (signature, expiry, rollback, channel) fails the call as `cuda_aot_runtime_open`
/// would, with that status and `*out` NULL.
///
/// # Safety
///
/// `registry`, `trust_root` are NULL or NUL-terminated strings; `policy` is NULL or a live
/// policy; `device_sm` is NULL or a NUL-terminated string; `out` is NULL or points to a
/// writable `cuda_aot_doctor_report*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_doctor(
    registry: *const c_char,
    trust_root: *const c_char,
    policy: *const Policy,
    device_sm: *const c_char,
    driver_version: i32,
    out: *mut *mut DoctorReport,
) -> Status {
    entry(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: non-null and writable (see # Safety).
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: each argument is as # Safety says.
        let (registry, trust, policy) = unsafe {
            (
                path_arg(registry, "registry")?,
                path_arg(trust_root, "trust_root")?,
                policy_of(policy),
            )
        };
        let device = if device_sm.is_null() {
            probed(&policy, driver_version)?
        } else {
            // SAFETY: non-null and NUL-terminated (see # Safety).
            let sm = unsafe { name_arg(device_sm, "device_sm") }?;
            described(sm, driver_version)?
        };
        let trust = trust_bytes(&trust, &policy)?;
        let report = cuda_aot::DoctorReport::of(&registry, &trust, &policy, device, Time::now())?;
        // SAFETY: as above; the caller frees it with cuda_aot_doctor_report_free.
        unsafe { out.write(Box::into_raw(Box::new(DoctorReport::of(&report)))) };
        Ok(())
    })
}

impl DoctorReport {
    fn of(r: &cuda_aot::DoctorReport) -> DoctorReport {
        DoctorReport {
            modules: r.modules.iter().map(DiagnosisStrings::of).collect(),
            refused: r.refused(),
            text: c_string(&r.to_string()),
        }
    }
}

/// The device named `sm` with the driver `driver_version` (0: unknown).
fn described(sm: &str, driver_version: i32) -> Result<DeviceSpec, Failure> {
    if driver_version < 0 {
        return Err(Failure::invalid_argument(
            format!("driver_version {driver_version} is negative"),
            "pass the driver's CUDA version as cuDriverGetVersion gives it (12040 for 12.4), or 0 when unknown",
        ));
    }
    let target: Target = sm.parse()?;
    let driver = (driver_version > 0).then(|| DriverVersion::from_cuda(driver_version));
    Ok(DeviceSpec::described(target, driver, "device_sm")?)
}

/// The policy's device, probed through the driver.
fn probed(policy: &cuda_aot::Policy, driver_version: i32) -> Result<DeviceSpec, Failure> {
    if driver_version != 0 {
        return Err(Failure::invalid_argument(
            format!("driver_version {driver_version} is given for a probed device"),
            "pass 0 with device_sm NULL (the probed driver is used), or describe the device with device_sm",
        ));
    }
    DeviceSpec::probe(policy.device).map_err(|e| {
        let mut f = Failure::from(e);
        f.fix = "describe the device instead: pass device_sm (\"sm_90\") and driver_version (12040 for 12.4, or 0)".into();
        f
    })
}

/// The number of modules in `report`; 0 for NULL.
///
/// # Safety
///
/// `report` is NULL or a report from `cuda_aot_doctor` not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_doctor_report_module_count(report: *const DoctorReport) -> usize {
    guard(0, || {
        // SAFETY: NULL or a live report (see # Safety).
        unsafe { report.as_ref() }.map_or(0, |r| r.modules.len())
    })
}

/// How many modules of `report` would not load (their status is not
/// `CUDA_AOT_STATUS_OK`); 0 for NULL.
///
/// # Safety
///
/// `report` is NULL or a live report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_doctor_report_refused(report: *const DoctorReport) -> usize {
    guard(0, || {
        // SAFETY: NULL or a live report (see # Safety).
        unsafe { report.as_ref() }.map_or(0, |r| r.refused)
    })
}

/// Describes module `index` (0 ≤ index < `cuda_aot_doctor_report_module_count`) of
/// `report` in `*out`, modules in name order. `CUDA_AOT_STATUS_INVALID_ARGUMENT` for a NULL
/// pointer or an index out of range (`*out` is then left as it was).
///
/// # Safety
///
/// `report` is NULL or a live report; `out` is NULL or points to a writable
/// `cuda_aot_diagnosis`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_doctor_report_module(
    report: *const DoctorReport,
    index: usize,
    out: *mut Diagnosis,
) -> Status {
    entry(|| {
        // SAFETY: NULL or a live report (see # Safety).
        let r = unsafe { report.as_ref() }.ok_or_else(|| null("report"))?;
        if out.is_null() {
            return Err(null("out"));
        }
        let m = crate::report::nth(&r.modules, index, "cuda_aot_doctor_report_module_count")?;
        let info = m.info();
        // SAFETY: `out` is non-null and points to a writable Diagnosis (see # Safety).
        unsafe { out.write(info) };
        Ok(())
    })
}

/// The report as `cargo xtask doctor` prints it: a line naming the device, then per module
/// what would load and its driver floor, or `nothing` with the reason and a `Fix:` line.
/// Owned by the report; `""` for NULL. Never NULL.
///
/// # Safety
///
/// `report` is NULL or a live report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_doctor_report_text(report: *const DoctorReport) -> *const c_char {
    guard(c"".as_ptr(), || {
        // SAFETY: NULL or a live report (see # Safety).
        unsafe { report.as_ref() }.map_or(c"".as_ptr(), |r| r.text.as_ptr())
    })
}

/// Frees a doctor report and every string it handed out. NULL is accepted (nothing
/// happens).
///
/// # Safety
///
/// `report` is NULL or a report from `cuda_aot_doctor`, freed at most once, with no other
/// thread still reading it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_doctor_report_free(report: *mut DoctorReport) {
    if report.is_null() {
        return;
    }
    guard((), || {
        // SAFETY: a pointer from Box::into_raw in cuda_aot_doctor, freed once (see # Safety).
        drop(unsafe { Box::from_raw(report) })
    })
}
