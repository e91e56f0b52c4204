//! cuda-aot-capi: the C ABI of cuda-aot (issue 22). It verifies a signed registry offline,
//! as `cargo xtask verify` does, and reports what it holds; says per module what would load
//! on a device, as `cargo xtask doctor` does (`cuda_aot_doctor`); opens a registry for a
//! device, looks kernels and globals up and launches them with the signed ABI checked. The
//! `include/cuda_aot.h` is generated from this crate by cbindgen (`tests/header.rs` keeps
//! the checked-in copy current). `docs/capi.md` describes building, linking, the status
//! codes, errors and thread-safety.
//!
//! ```c
//! #include "cuda_aot.h"
//! cuda_aot_report *report = NULL;
//! if (cuda_aot_verify("registry", "keys/root.json", NULL, 0, &report) != CUDA_AOT_STATUS_OK) {
//!     fprintf(stderr, "error: %s\nFix: %s\n", cuda_aot_last_error_message(),
//!             cuda_aot_last_error_fix());
//!     return 1;
//! }
//! for (size_t i = 0; i < cuda_aot_report_module_count(report); i++) {
//!     cuda_aot_module_info m;
//!     cuda_aot_report_module(report, i, &m);
//!     printf("%s %s %s %s\n", m.module, m.target, m.kind, m.digest);
//! }
//! cuda_aot_report_free(report);
//! ```
//!
//! Every exported function catches panics at the boundary (a panic becomes
//! `CUDA_AOT_STATUS_INTERNAL`): the crate must be built with `panic = "unwind"` (cargo's
//! default), never `abort`. All `unsafe` here is the FFI boundary: raw pointers from C.

pub mod cuda_types;
pub mod doctor;
pub mod global;
pub mod kernel;
pub mod last_error;
pub mod policy;
pub mod report;
pub mod runtime;
pub mod status;
pub mod verify;

pub use doctor::{Diagnosis, DoctorReport};
pub use global::Global;
pub use kernel::{Dim3, Kernel, ParamInfo};
pub use last_error::{Failure, cuda_aot_last_error_fix, cuda_aot_last_error_message};
pub use policy::{LoadApiChoice, Policy, PolicyPreset};
pub use report::{ModuleInfo, Report};
pub use runtime::{Counters, DeviceInfo, Runtime};
pub use status::Status;
pub use verify::{CUDA_AOT_VERIFY_SAVE_STATE, cuda_aot_verify};

use std::ffi::c_char;

/// The version of the library (`"0.1.0"`), a static string. Never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_aot_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
