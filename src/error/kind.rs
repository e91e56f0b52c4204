//! What kind of refusal an error is ([`ErrorKind`], [`Error::kind`]): one exhaustive match,
//! for callers that branch on the kind (the C ABI's status, an exit code).

use super::Error;
use super::foreign::all_unknown;

/// What kind of refusal an [`Error`] is, for a caller that branches on it (the C ABI's
/// `cuda_aot_status`, an exit code) rather than on the variant: one exhaustive match
/// ([`Error::kind`]) gives every variant, present and future, exactly one kind.
///
/// Deliberately not `#[non_exhaustive]`: a new kind is a breaking change, so every
/// mapping of kinds (the C status numbers) is updated with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The caller's request is wrong: a name that is not in the allowed form or is
    /// ambiguous, a kernel argument out of its contract.
    InvalidArgument,
    /// Reading or writing a file failed, or the file system holds something else than a
    /// regular file where one belongs (a link, a FIFO); a registry source failed.
    Io,
    /// A required registry file, or a module, kernel or global asked for, does not exist.
    NotFound,
    /// A size or count from outside exceeds its [`crate::Limits`] bound.
    Limit,
    /// A file is not what cuda-aot writes: invalid JSON, a duplicated key, a signature made
    /// for another kind of document.
    Malformed,
    /// A document carries no signature at all of the role that must sign it.
    NotSigned,
    /// Signatures do not meet the role's threshold, a key or signature is malformed, a
    /// manifest is not attested by its build statement.
    BadSignature,
    /// Every signature is by a key the trust root does not know: the registry looks signed
    /// under another trust root.
    UntrustedKey,
    /// The trust root is inconsistent, or its rotation chain is broken.
    BadTrustRoot,
    /// Bytes or documents disagree with what is signed: a blob's digest or size, a manifest
    /// that describes another module, files of different releases mixed.
    Tampered,
    /// A blob's content is not what its signed manifest claims: another SM, not a cubin or
    /// PTX, other kernels, ABI or globals, a `__managed__` variable.
    BadContent,
    /// Older metadata than already seen (replay), or a version that cannot grow.
    Rollback,
    /// A document has expired, or expires later than the trust root allows.
    Expired,
    /// The policy refuses it: another channel, a research module, a missing promotion.
    Policy,
    /// The registry has no cubin for exactly this device's SM.
    NoTarget,
    /// The CUDA driver failed, refused to load a module, or is older than a module needs.
    Driver,
    /// A launch or a copy refused before the driver ran: an argument count or size other
    /// than the kernel's signed launch ABI, a block above its signed bound, a stream of
    /// another context, a copy to or from a global that is not exactly its signed size.
    Launch,
}

impl Error {
    /// The kind of this error (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind as K;
        match self {
            Error::Argument { .. }
            | Error::InvalidName { .. }
            | Error::AmbiguousKernel { .. }
            | Error::AmbiguousGlobal { .. }
            | Error::NotADevice { .. } => K::InvalidArgument,
            Error::Io { .. }
            | Error::StateNotSaved { .. }
            | Error::Source { .. }
            | Error::NotRegular { .. }
            | Error::Symlink { .. } => K::Io,
            Error::Missing { .. } | Error::Unknown { .. } | Error::GlobalsNotSigned { .. } => {
                K::NotFound
            }
            Error::TooLarge { .. } | Error::RootChainTooLong { .. } => K::Limit,
            Error::Json { .. }
            | Error::DuplicateKey { .. }
            | Error::WrongPayloadType { .. }
            | Error::BadBundle { .. } => K::Malformed,
            Error::BundleOtherRoot { .. } => K::UntrustedKey,
            Error::Threshold {
                valid: 0, foreign, ..
            } if foreign.is_empty() => K::NotSigned,
            Error::Threshold {
                valid: 0, foreign, ..
            } if all_unknown(foreign) => K::UntrustedKey,
            Error::Threshold { .. } | Error::BadKey { .. } | Error::NotAttested { .. } => {
                K::BadSignature
            }
            Error::BadRoot { .. } | Error::RootRotation { .. } => K::BadTrustRoot,
            Error::Delegation { team: Some(_), .. } => K::BadSignature,
            Error::Delegation { team: None, .. } => K::Tampered,
            Error::DigestMismatch { .. }
            | Error::SizeMismatch { .. }
            | Error::MixAndMatch { .. }
            | Error::VersionMismatch { .. }
            | Error::DuplicateEntry { .. } => K::Tampered,
            Error::ElfSmMismatch { .. }
            | Error::NotCubin { .. }
            | Error::NotPtx { .. }
            | Error::PtxTargetMismatch { .. }
            | Error::FunctionMismatch { .. }
            | Error::GlobalMismatch { .. }
            | Error::ManagedGlobal { .. } => K::BadContent,
            Error::Rollback { .. } | Error::VersionOverflow { .. } => K::Rollback,
            Error::Expired { .. } | Error::FreezeBound { .. } => K::Expired,
            Error::NotPromoted { .. } | Error::ResearchRefused { .. } | Error::Channel { .. } => {
                K::Policy
            }
            Error::NoExactTarget { .. } => K::NoTarget,
            Error::Unsupported { problems, .. } => match problems
                .iter()
                .any(|p| matches!(p, Error::NoExactTarget { .. }))
            {
                true => K::NoTarget,
                false => K::Driver,
            },
            Error::Cuda(e) | Error::Load { source: e, .. } => e.0.kind(),
            Error::DriverTooOld { .. } => K::Driver,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ForeignSignature, ForeignSigner};
    use crate::role::RoleName;

    fn threshold(valid: usize, foreign: Vec<ForeignSignature>) -> Error {
        Error::Threshold {
            what: "index".into(),
            role: RoleName::Publisher,
            valid,
            threshold: 1,
            foreign,
            trusted: vec!["abcd".into()],
        }
    }

    #[test]
    fn a_threshold_refusal_is_not_signed_untrusted_or_a_bad_signature_by_what_signed() {
        let by = |signer| ForeignSignature {
            key: "1234".into(),
            signer,
        };
        assert_eq!(threshold(0, vec![]).kind(), ErrorKind::NotSigned);
        assert_eq!(
            threshold(0, vec![by(ForeignSigner::UnknownKey)]).kind(),
            ErrorKind::UntrustedKey
        );
        assert_eq!(
            threshold(0, vec![by(ForeignSigner::InvalidSignature)]).kind(),
            ErrorKind::BadSignature
        );
        assert_eq!(
            threshold(0, vec![by(ForeignSigner::OtherRole(RoleName::Builder))]).kind(),
            ErrorKind::BadSignature
        );
    }
}
