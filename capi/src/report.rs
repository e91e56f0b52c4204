//! `cuda_aot_report`: what a verified registry holds (one entry per module and target),
//! with every string owned by the report until `cuda_aot_report_free`.

use std::ffi::{CString, c_char};

use cuda_aot::verify::Verified;

use crate::last_error::{Failure, c_string, entry, guard};
use crate::status::Status;

/// A registry that passed every verification step: its modules and versions. Opaque to C;
/// made by `cuda_aot_verify`, released by `cuda_aot_report_free`. Immutable, so several
/// threads may read one report at once.
pub struct Report {
    modules: Vec<ModuleStrings>,
    index_version: u64,
    summary: CString,
}

/// One module × target as C strings, kept alive by the report or runtime that holds it.
pub(crate) struct ModuleStrings {
    module: CString,
    target: CString,
    kind: CString,
    digest: CString,
    size: u64,
}

impl ModuleStrings {
    /// The strings of `m`'s module, target, kind and blob digest.
    pub(crate) fn of(m: &cuda_aot::Manifest) -> ModuleStrings {
        ModuleStrings {
            module: c_string(m.identity.module.as_str()),
            target: c_string(&m.identity.sm.to_string()),
            kind: c_string(&m.identity.kind.to_string()),
            digest: c_string(&m.module_digest.to_string()),
            size: m.size,
        }
    }

    /// The C view, pointing into these strings.
    pub(crate) fn info(&self) -> ModuleInfo {
        ModuleInfo {
            module: self.module.as_ptr(),
            target: self.target.as_ptr(),
            kind: self.kind.as_ptr(),
            digest: self.digest.as_ptr(),
            size: self.size,
        }
    }
}

/// One verified module and target, as `cuda_aot_report_module` describes it. The strings
/// belong to the report: valid until it is freed, never to be freed by the caller.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModuleInfo {
    /// The module name (`ntt`).
    pub module: *const c_char,
    /// The exact target (`sm_90`, `sm_90a`, `compute_90` for PTX).
    pub target: *const c_char,
    /// `cubin`, or `ptx` (labelled compatibility mode: driver JIT).
    pub kind: *const c_char,
    /// The blake3 of the blob, as signed (`blake3:<64 hex>`).
    pub digest: *const c_char,
    /// The blob's size in bytes.
    pub size: u64,
}

impl Report {
    /// The report of a fully verified registry.
    pub fn of(v: &Verified) -> Report {
        let idx = v.index();
        let root = v.root().root();
        let modules = v
            .manifests()
            .iter()
            .map(|m| ModuleStrings::of(m.manifest()))
            .collect();
        let summary = format!(
            "registry OK: index v{} (timestamp v{}, expires {}), trust root v{} [{}], {} module(s), {} signature check(s)",
            idx.version,
            v.timestamp().version,
            v.timestamp().expires,
            root.version,
            root.channel,
            idx.entries.len(),
            v.signature_checks()
        );
        Report {
            modules,
            index_version: idx.version,
            summary: c_string(&summary),
        }
    }
}

/// The number of verified modules (module × target entries) in `report`; 0 for NULL.
///
/// # Safety
///
/// `report` is NULL or a report from `cuda_aot_verify` not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_report_module_count(report: *const Report) -> usize {
    guard(0, || {
        // SAFETY: the caller passes NULL or a live report (see # Safety).
        unsafe { report.as_ref() }.map_or(0, |r| r.modules.len())
    })
}

/// Describes module `index` (0 ≤ index < `cuda_aot_report_module_count`) of `report` in
/// `*out`, in the registry index's order. `CUDA_AOT_STATUS_INVALID_ARGUMENT` for a NULL
/// pointer or an index out of range (`*out` is then left as it was).
///
/// # Safety
///
/// `report` is NULL or a live report; `out` is NULL or points to a writable
/// `cuda_aot_module_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_report_module(
    report: *const Report,
    index: usize,
    out: *mut ModuleInfo,
) -> Status {
    entry(|| {
        // SAFETY: NULL or a live report (see # Safety).
        let r = unsafe { report.as_ref() }.ok_or_else(|| null("report"))?;
        if out.is_null() {
            return Err(null("out"));
        }
        let m = nth(&r.modules, index, "cuda_aot_report_module_count")?;
        let info = m.info();
        // SAFETY: `out` is non-null and points to a writable ModuleInfo (see # Safety).
        unsafe { out.write(info) };
        Ok(())
    })
}

/// The version of the verified bundle index; 0 for NULL.
///
/// # Safety
///
/// `report` is NULL or a live report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_report_index_version(report: *const Report) -> u64 {
    guard(0, || {
        // SAFETY: NULL or a live report (see # Safety).
        unsafe { report.as_ref() }.map_or(0, |r| r.index_version)
    })
}

/// One line saying what was verified: index and timestamp versions, timestamp expiry,
/// trust root version and channel, module count, signature checks. Owned by the report;
/// `""` for NULL. Never NULL.
///
/// # Safety
///
/// `report` is NULL or a live report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_report_summary(report: *const Report) -> *const c_char {
    guard(c"".as_ptr(), || {
        // SAFETY: NULL or a live report (see # Safety).
        unsafe { report.as_ref() }.map_or(c"".as_ptr(), |r| r.summary.as_ptr())
    })
}

/// Frees a report and every string it handed out. NULL is accepted (nothing happens).
///
/// # Safety
///
/// `report` is NULL or a report from `cuda_aot_verify`, freed at most once, with no other
/// thread still reading it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_report_free(report: *mut Report) {
    if report.is_null() {
        return;
    }
    guard((), || {
        // SAFETY: a pointer from Box::into_raw in cuda_aot_verify, freed once (see # Safety).
        drop(unsafe { Box::from_raw(report) })
    })
}

/// The failure for a NULL pointer where `what` is required.
pub fn null(what: &str) -> Failure {
    Failure::invalid_argument(
        format!("{what} is NULL"),
        format!("pass a valid pointer as {what}"),
    )
}

/// Item `index` of a report's `items`, or the error for an index out of range, naming the
/// C function (`count_fn`) that says how many there are.
pub(crate) fn nth<'a, T>(items: &'a [T], index: usize, count_fn: &str) -> Result<&'a T, Failure> {
    items.get(index).ok_or_else(|| {
        Failure::invalid_argument(
            format!(
                "module index {index} is out of range: the report holds {} module(s)",
                items.len()
            ),
            format!("pass an index below {count_fn}(report)"),
        )
    })
}
