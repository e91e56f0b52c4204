//! The last error of each thread (its status, message and `Fix:` advice, as C strings),
//! and [`entry`], the boundary every fallible C function runs its body through: the last
//! error is cleared, a Rust panic is caught (never unwinding into C) and a failure is
//! recorded for `cuda_aot_last_error_message` / `cuda_aot_last_error_fix`.

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::status::Status;

/// A failure of a C call: its status, message and `Fix:` advice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The status the call returns.
    pub status: Status,
    /// What went wrong, naming the file, module, target or key concerned.
    pub message: String,
    /// What to do about it (printed after `Fix:`).
    pub fix: String,
}

impl Failure {
    /// A failure of the C layer itself (a null pointer, a string that is not UTF-8).
    pub fn new(status: Status, message: impl Into<String>, fix: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
            fix: fix.into(),
        }
    }

    /// A caller's mistake with an argument.
    pub fn invalid_argument(message: impl Into<String>, fix: impl Into<String>) -> Failure {
        Failure::new(Status::InvalidArgument, message, fix)
    }
}

impl From<cuda_aot::Error> for Failure {
    fn from(e: cuda_aot::Error) -> Failure {
        Failure {
            status: e.kind().into(),
            message: e.to_string(),
            fix: e.fix(),
        }
    }
}

/// The recorded failure of a thread, as the C strings handed out.
struct Recorded {
    status: Status,
    message: CString,
    fix: CString,
}

thread_local! {
    static LAST: RefCell<Option<Recorded>> = const { RefCell::new(None) };
}

/// `s` as a C string; a NUL byte (which no message of ours holds) is written `\0`.
pub fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

fn record(f: Option<Failure>) {
    let r = f.map(|f| Recorded {
        status: f.status,
        message: c_string(&f.message),
        fix: c_string(&f.fix),
    });
    LAST.with(|l| *l.borrow_mut() = r);
}

/// Runs the body of a C function: clears this thread's last error, runs `body` catching
/// any panic, records a failure (a panic as [`Status::Internal`]) and returns the status.
pub fn entry(body: impl FnOnce() -> Result<(), Failure>) -> Status {
    record(None);
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return Status::Ok,
        Ok(Err(f)) => f,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Failure::new(
                Status::Internal,
                format!("internal error (a bug in cuda-aot, caught at the C boundary): {what}"),
                "report it with this message; the library stays usable, but nothing the failed call would have returned exists",
            )
        }
    };
    let status = failure.status;
    // Recording allocates; a panic here (out of memory aborts anyway) must not unwind
    // into C either.
    let _ = catch_unwind(|| record(Some(failure)));
    status
}

/// Runs a C function that returns a value rather than a status: `body`'s value, or
/// `fallback` if it panics (never unwinding into C). The last error is left as it was.
pub fn guard<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// A string of this thread's last failure (`""` when the last call succeeded).
fn last(pick: impl Fn(&Recorded) -> *const c_char) -> *const c_char {
    guard(c"".as_ptr(), || {
        LAST.with(|l| l.borrow().as_ref().map_or(c"".as_ptr(), pick))
    })
}

/// The message of the last failed call on this thread: what went wrong, naming the file,
/// module, target or key concerned. `""` when the last call that returns a status
/// succeeded. Never NULL. The string belongs to the library and stays valid until the next
/// call on this thread of a function that returns a `cuda_aot_status`.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_aot_last_error_message() -> *const c_char {
    last(|r| r.message.as_ptr())
}

/// The `Fix:` advice of the last failed call on this thread: one or two sentences saying
/// what to do (never "skip verification"). `""` when the last call succeeded. Never NULL;
/// valid as long as the string of `cuda_aot_last_error_message`.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_aot_last_error_fix() -> *const c_char {
    last(|r| r.fix.as_ptr())
}

/// The status of the last call on this thread that returns a `cuda_aot_status`
/// (`CUDA_AOT_STATUS_OK` when it succeeded, or before any call).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_aot_last_error_status() -> Status {
    guard(Status::Internal, || {
        LAST.with(|l| l.borrow().as_ref().map_or(Status::Ok, |r| r.status))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn text(p: *const c_char) -> String {
        // SAFETY: the library's strings are valid C strings until the next call.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_is_caught_as_internal_and_a_later_success_clears_the_error() {
        let s = entry(|| panic!("boom"));
        assert_eq!(s, Status::Internal);
        assert!(text(cuda_aot_last_error_message()).contains("boom"));
        assert!(!text(cuda_aot_last_error_fix()).is_empty());
        assert_eq!(cuda_aot_last_error_status(), Status::Internal);
        assert_eq!(entry(|| Ok(())), Status::Ok);
        assert_eq!(text(cuda_aot_last_error_message()), "");
        assert_eq!(cuda_aot_last_error_status(), Status::Ok);
    }

    #[test]
    fn the_last_error_is_per_thread() {
        entry(|| Err(Failure::invalid_argument("here", "fix")));
        std::thread::spawn(|| assert_eq!(text(cuda_aot_last_error_message()), ""))
            .join()
            .unwrap();
        assert_eq!(text(cuda_aot_last_error_message()), "here");
    }
}
