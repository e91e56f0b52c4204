//! The stable status codes every fallible C function returns, and the one mapping from the
//! runtime's [`ErrorKind`] to them.

use std::ffi::c_char;

use cuda_aot::ErrorKind;

/// What a call of the C API came to. The numbers are stable: new codes are only ever added
/// with new numbers, existing ones never change meaning.
///
/// Every error of the runtime crate maps to exactly one code (one exhaustive match over its
/// error kinds, `cuda_aot::ErrorKind`); `docs/capi.md` lists which errors give which code.
/// `CUDA_AOT_STATUS_INVALID_ARGUMENT` and `CUDA_AOT_STATUS_INTERNAL` are also the C
/// layer's own.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// A null pointer where one is required, a string that is not UTF-8, an unknown flag,
    /// an index out of range; from the runtime: a name not in the allowed form or
    /// ambiguous.
    InvalidArgument = 1,
    /// Reading or writing a file failed (a missing trust root file, an unreadable folder,
    /// a rollback state that cannot be saved), or a link, FIFO or folder stands where a
    /// regular file belongs.
    Io = 2,
    /// A required registry file (timestamp, index, manifest, blob) does not exist, or a
    /// module, kernel or global asked for is not in the registry.
    NotFound = 3,
    /// A file or count is larger than its limit (checked before it is parsed or hashed).
    Limit = 4,
    /// A file is not what cuda-aot writes: invalid JSON, a duplicated key, a signature
    /// made for another kind of document.
    Malformed = 5,
    /// A document carries no signature of the role that must sign it.
    NotSigned = 6,
    /// Too few valid signatures of the required role, a malformed key or signature, a
    /// manifest not attested by its build statement.
    BadSignature = 7,
    /// Every signature is by a key the trust root does not know: the registry was most
    /// likely published under another trust root.
    UntrustedKey = 8,
    /// The trust root is inconsistent, or its rotation chain is broken.
    BadTrustRoot = 9,
    /// Bytes or documents disagree with what is signed: a blob's blake3 or size, a manifest
    /// describing another module, files of different releases mixed.
    Tampered = 10,
    /// A blob's content is not what its signed manifest claims (another SM, not a cubin or
    /// PTX, other kernels, launch ABI or globals).
    BadContent = 11,
    /// Older metadata than already seen (a replay), or a version that cannot grow.
    Rollback = 12,
    /// A document has expired, or expires later than the trust root allows.
    Expired = 13,
    /// Refused by policy: another channel, a research module, a missing promotion.
    Policy = 14,
    /// The registry has no cubin for exactly this device's SM.
    NoTarget = 15,
    /// The CUDA driver failed, refused a module, or is older than a module needs.
    Driver = 16,
    /// A launch or copy refused before the driver ran: an argument count or size other
    /// than the kernel's signed launch ABI, a block above its signed bound, a stream of
    /// another context, a copy to or from a global that is not exactly its signed size.
    Launch = 17,
    /// A bug: a panic inside the library was caught at the boundary (the message says
    /// where). Please report it.
    Internal = 99,
}

impl From<ErrorKind> for Status {
    fn from(kind: ErrorKind) -> Status {
        match kind {
            ErrorKind::InvalidArgument => Status::InvalidArgument,
            ErrorKind::Io => Status::Io,
            ErrorKind::NotFound => Status::NotFound,
            ErrorKind::Limit => Status::Limit,
            ErrorKind::Malformed => Status::Malformed,
            ErrorKind::NotSigned => Status::NotSigned,
            ErrorKind::BadSignature => Status::BadSignature,
            ErrorKind::UntrustedKey => Status::UntrustedKey,
            ErrorKind::BadTrustRoot => Status::BadTrustRoot,
            ErrorKind::Tampered => Status::Tampered,
            ErrorKind::BadContent => Status::BadContent,
            ErrorKind::Rollback => Status::Rollback,
            ErrorKind::Expired => Status::Expired,
            ErrorKind::Policy => Status::Policy,
            ErrorKind::NoTarget => Status::NoTarget,
            ErrorKind::Driver => Status::Driver,
            ErrorKind::Launch => Status::Launch,
        }
    }
}

impl Status {
    /// Every status, in number order.
    pub fn all() -> [Status; 19] {
        [
            Status::Ok,
            Status::InvalidArgument,
            Status::Io,
            Status::NotFound,
            Status::Limit,
            Status::Malformed,
            Status::NotSigned,
            Status::BadSignature,
            Status::UntrustedKey,
            Status::BadTrustRoot,
            Status::Tampered,
            Status::BadContent,
            Status::Rollback,
            Status::Expired,
            Status::Policy,
            Status::NoTarget,
            Status::Driver,
            Status::Launch,
            Status::Internal,
        ]
    }

    /// The C name of the status, NUL-terminated (`"CUDA_AOT_STATUS_TAMPERED\0"`).
    pub fn c_name(self) -> &'static str {
        match self {
            Status::Ok => "CUDA_AOT_STATUS_OK\0",
            Status::InvalidArgument => "CUDA_AOT_STATUS_INVALID_ARGUMENT\0",
            Status::Io => "CUDA_AOT_STATUS_IO\0",
            Status::NotFound => "CUDA_AOT_STATUS_NOT_FOUND\0",
            Status::Limit => "CUDA_AOT_STATUS_LIMIT\0",
            Status::Malformed => "CUDA_AOT_STATUS_MALFORMED\0",
            Status::NotSigned => "CUDA_AOT_STATUS_NOT_SIGNED\0",
            Status::BadSignature => "CUDA_AOT_STATUS_BAD_SIGNATURE\0",
            Status::UntrustedKey => "CUDA_AOT_STATUS_UNTRUSTED_KEY\0",
            Status::BadTrustRoot => "CUDA_AOT_STATUS_BAD_TRUST_ROOT\0",
            Status::Tampered => "CUDA_AOT_STATUS_TAMPERED\0",
            Status::BadContent => "CUDA_AOT_STATUS_BAD_CONTENT\0",
            Status::Rollback => "CUDA_AOT_STATUS_ROLLBACK\0",
            Status::Expired => "CUDA_AOT_STATUS_EXPIRED\0",
            Status::Policy => "CUDA_AOT_STATUS_POLICY\0",
            Status::NoTarget => "CUDA_AOT_STATUS_NO_TARGET\0",
            Status::Driver => "CUDA_AOT_STATUS_DRIVER\0",
            Status::Launch => "CUDA_AOT_STATUS_LAUNCH\0",
            Status::Internal => "CUDA_AOT_STATUS_INTERNAL\0",
        }
    }
}

/// The name of a status code, e.g. `"CUDA_AOT_STATUS_TAMPERED"`, or
/// `"CUDA_AOT_STATUS_UNKNOWN"` for a number that is no status. Never NULL; the string is
/// static. Takes an `int` so that any number is safe to pass.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_aot_status_name(status: i32) -> *const c_char {
    let name = Status::all()
        .into_iter()
        .find(|s| *s as i32 == status)
        .map_or("CUDA_AOT_STATUS_UNKNOWN\0", |s| s.c_name());
    name.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_in_number_order_with_distinct_nul_terminated_names() {
        let numbers: Vec<i32> = Status::all().iter().map(|s| *s as i32).collect();
        assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
        for s in Status::all() {
            let name = s.c_name();
            assert!(name.ends_with('\0') && name.starts_with("CUDA_AOT_STATUS_"));
            assert_eq!(name.matches('\0').count(), 1);
        }
    }
}
