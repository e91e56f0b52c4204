//! The one error type of the runtime crate, with the evidence and the `Fix:` advice of every refusal.

use std::path::PathBuf;

use crate::role::RoleName;

/// Everything that can refuse a trust root, a registry artifact or a module load.
///
/// Variants carry the evidence (file, module, SM, key, versions, digests). [`Error::fix`]
/// says what to do about it; a CLI prints it as `Fix: ...` under the error.
///
/// `Debug` prints the message and the advice (what `fn main() -> Result<(), Error>` shows).
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The rollback-protection state could not be written (a read-only or missing home,
    /// a full disk): fail closed, since the next start would not know what this one saw.
    #[error("rollback state {path}: cannot be saved: {source}")]
    StateNotSaved {
        /// The state file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A required registry file does not exist.
    #[error("{what}: missing ({path})")]
    Missing {
        /// What the file is (e.g. "timestamp").
        what: String,
        /// Where it was looked for.
        path: String,
    },
    /// A file is larger than its limit (checked before parsing or hashing).
    #[error("{what}: {actual} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// What the file is.
        what: String,
        /// The byte limit.
        limit: u64,
        /// The size seen (at least `limit + 1`).
        actual: u64,
    },
    /// A JSON payload is malformed, has unknown fields or violates its schema.
    #[error("{what}: invalid JSON: {message}")]
    Json {
        /// What the payload is.
        what: String,
        /// The parser's message.
        message: String,
    },
    /// A JSON object repeats a key (a classic parser-differential attack).
    #[error("{what}: duplicated JSON key {key:?}")]
    DuplicateKey {
        /// What the payload is.
        what: String,
        /// The repeated key.
        key: String,
    },
    /// A name (module, target, function, path component) is not in the allowed form.
    #[error("invalid {kind} {value:?}: {reason}")]
    InvalidName {
        /// What kind of name.
        kind: &'static str,
        /// The offending value (escaped when printed).
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A file that must be a regular file is a FIFO, a device, a folder or a socket.
    #[error("{path}: is {kind}, not a regular file")]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// A registry file or folder is a symbolic link.
    #[error("{path}: is a symbolic link; registry files must be regular files")]
    Symlink {
        /// The link.
        path: PathBuf,
    },
    /// An envelope holds a payload of another kind than expected.
    #[error("{what}: payload type {actual:?} where {expected:?} is required")]
    WrongPayloadType {
        /// What the file is.
        what: String,
        /// The required payload type.
        expected: String,
        /// The payload type found.
        actual: String,
    },
    /// A registry source could not deliver a file for a reason of its own (a network
    /// transfer that failed after its retries, say): the source's error, kept whole, so the
    /// caller that made the source gets its own typed error back (`downcast_ref`).
    #[error("{path}: {source}")]
    Source {
        /// The registry path that was being read.
        path: String,
        /// The source's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A public key or signature is malformed, or a key is weak.
    #[error("{what}: bad key or signature: {reason}")]
    BadKey {
        /// Where it was found.
        what: String,
        /// Why it was refused.
        reason: String,
    },
    /// Not enough distinct keys of the required role signed.
    #[error(
        "{what}: signed by {valid} of the {threshold} required {role} key(s){}{}",
        describe_foreign(.foreign, *.role),
        describe_other_root(*.valid, .foreign, .trusted, *.role)
    )]
    Threshold {
        /// What was signed.
        what: String,
        /// The role whose signatures are required.
        role: RoleName,
        /// Distinct valid signatures of that role.
        valid: usize,
        /// Required count.
        threshold: u32,
        /// Signatures that did not count: by keys that are not keys of the role, or invalid.
        foreign: Vec<ForeignSignature>,
        /// The key ids of the role in the trust root used.
        trusted: Vec<String>,
    },
    /// A trust root is inconsistent (threshold above key count, a key shared by builder and reviewer).
    #[error("trust root v{version}: {reason}")]
    BadRoot {
        /// The root version.
        version: u64,
        /// What is wrong.
        reason: String,
    },
    /// The registry's root chain goes on past the number of rotations one verification
    /// walks ([`crate::Limits::max_root_updates`]).
    #[error(
        "trust root chain: more than {limit} rotations past root v{from} (root/{next}.root.json exists too)"
    )]
    RootChainTooLong {
        /// The root the walk started from.
        from: u64,
        /// The cap.
        limit: u64,
        /// The first version past the cap that is present.
        next: u64,
    },
    /// Root N+1 is not correctly chained to root N.
    #[error("root rotation v{from} -> v{to}: {reason}")]
    RootRotation {
        /// The trusted version.
        from: u64,
        /// The version being rotated to.
        to: u64,
        /// Why it was refused.
        reason: String,
    },
    /// A signed artifact has expired.
    #[error("{what}: expired at {expires} (now {now}, clock skew allowance {skew_secs}s)")]
    Expired {
        /// What expired.
        what: String,
        /// Its expiry (RFC 3339).
        expires: String,
        /// The verifier's clock (RFC 3339).
        now: String,
        /// The allowed clock skew in seconds.
        skew_secs: u64,
    },
    /// A document expires further ahead than the trust root allows (freeze bound).
    #[error(
        "{what}: expires {expires}, later than trust root v{root} allows ({bound_days} days from now, {latest})"
    )]
    FreezeBound {
        /// The document.
        what: String,
        /// Its expiry.
        expires: String,
        /// The root version whose bound applies.
        root: u64,
        /// The bound in days.
        bound_days: u32,
        /// The latest expiry allowed now.
        latest: String,
    },
    /// A version number would overflow (a stolen key may have published version u64::MAX).
    #[error("{what}: version {version} cannot be incremented")]
    VersionOverflow {
        /// What is versioned.
        what: String,
        /// The current version.
        version: u64,
    },
    /// A manifest listed in the index is not attested by the build statement it names.
    #[error("{what}: not attested by build statement {statement}")]
    NotAttested {
        /// The manifest (module, target, file).
        what: String,
        /// The statement named.
        statement: String,
    },
    /// A production-channel module without a valid promotion record.
    #[error("{module} {target}: manifest {manifest} is not promoted for production: {reason}")]
    NotPromoted {
        /// The module.
        module: String,
        /// The target.
        target: String,
        /// The manifest digest.
        manifest: String,
        /// What is missing.
        reason: String,
    },
    /// A version lower than one already seen (replay / rollback).
    #[error("{what}: version {got} is older than version {seen} already seen (rollback refused)")]
    Rollback {
        /// What was rolled back.
        what: String,
        /// The version last seen.
        seen: u64,
        /// The version offered.
        got: u64,
    },
    /// Two documents that must agree on a version do not.
    #[error("{what}: version {got} where {expected} is required")]
    VersionMismatch {
        /// What disagrees.
        what: String,
        /// The required version.
        expected: u64,
        /// The version found.
        got: u64,
    },
    /// Bytes do not hash to the digest that a signed document lists.
    #[error("{what}: blake3 {actual} where {expected} is signed")]
    DigestMismatch {
        /// What was hashed (module/SM or file).
        what: String,
        /// The signed digest.
        expected: String,
        /// The digest of the bytes read.
        actual: String,
    },
    /// Bytes are not the size that a signed document lists.
    #[error("{what}: {actual} bytes where {expected} are signed{}", if *.at_least { " (read stopped there)" } else { "" })]
    SizeMismatch {
        /// What was read.
        what: String,
        /// The signed size.
        expected: u64,
        /// The bytes read.
        actual: u64,
        /// True when reading stopped at `expected + 1`: the file is at least that long.
        at_least: bool,
    },
    /// A manifest does not describe the module/target that the index lists for it.
    #[error("{what}: the index lists {listed} but the signed manifest describes {found}")]
    MixAndMatch {
        /// The manifest file.
        what: String,
        /// What the index says.
        listed: String,
        /// What the manifest says.
        found: String,
    },
    /// The same module/target/kind is listed twice.
    #[error("index lists {module} {target} ({kind}) twice")]
    DuplicateEntry {
        /// The module.
        module: String,
        /// The target.
        target: String,
        /// cubin or ptx.
        kind: String,
    },
    /// A cubin's ELF header does not match the SM it claims.
    #[error("{module} {claimed}: the cubin's ELF header says {actual}")]
    ElfSmMismatch {
        /// The module.
        module: String,
        /// The SM the manifest claims.
        claimed: String,
        /// The SM the ELF header records.
        actual: String,
    },
    /// A blob that should be a cubin is not a readable CUDA ELF.
    #[error("{what}: not a CUDA cubin: {reason}")]
    NotCubin {
        /// What was parsed.
        what: String,
        /// Why it was refused.
        reason: String,
    },
    /// A blob signed as PTX is not PTX text.
    #[error("{what}: not PTX text: {reason}")]
    NotPtx {
        /// What was parsed.
        what: String,
        /// Why it was refused.
        reason: String,
    },
    /// PTX whose `.target` is not the compute target its manifest signs.
    #[error("{module} {claimed}: the PTX says .target {actual}")]
    PtxTargetMismatch {
        /// The module.
        module: String,
        /// The target the manifest claims (`compute_90`).
        claimed: String,
        /// The PTX `.target` (`sm_80`).
        actual: String,
    },
    /// The kernels a blob holds (or their launch ABI) are not the ones its manifest signs.
    #[error("{what}: {reason}")]
    FunctionMismatch {
        /// Module and target.
        what: String,
        /// What differs.
        reason: String,
    },
    /// The device globals a blob defines are not the ones its (schema v2) manifest signs:
    /// one missing, one more, or a different size, memory space or initialisation.
    #[error("{what}: {reason}")]
    GlobalMismatch {
        /// Module and target.
        what: String,
        /// What differs, naming the global.
        reason: String,
    },
    /// A blob defines a `__managed__` variable: unified memory is not part of a signed
    /// module (the driver would map it into every context of the process).
    #[error(
        "{what}: defines the __managed__ variable {symbol}: managed memory is not supported in a signed module"
    )]
    ManagedGlobal {
        /// Module and target.
        what: String,
        /// The variable's symbol.
        symbol: String,
    },
    /// A global was asked of a module whose manifest (schema v1) predates signed globals.
    #[error(
        "{module}: global {name:?}: the module's manifest ({schema}) predates signed globals, so none can be looked up"
    )]
    GlobalsNotSigned {
        /// Module and target.
        module: String,
        /// The global asked for.
        name: String,
        /// The manifest's schema.
        schema: String,
    },
    /// A global name matches more than one global of a module.
    #[error("{module}: global name {name:?} is ambiguous: it matches {candidates}")]
    AmbiguousGlobal {
        /// The module.
        module: String,
        /// The name asked for.
        name: String,
        /// The globals it matches, with their symbols.
        candidates: String,
    },
    /// A kernel name matches more than one kernel of a module.
    #[error("{module}: kernel name {name:?} is ambiguous: it matches {candidates}")]
    AmbiguousKernel {
        /// The module.
        module: String,
        /// The name asked for.
        name: String,
        /// The kernels it matches, by demangled signature.
        candidates: String,
    },
    /// A CUDA driver call failed, or there is no driver on this host (only the driver layer,
    /// the `driver` feature, returns it; [`DriverFault::cuda`] has the driver's error).
    #[error(transparent)]
    Cuda(DriverFault),
    /// The driver refused to load a verified module.
    #[error("{what}: the driver could not load it: {source}")]
    Load {
        /// Module and target (PTX is labelled).
        what: String,
        /// The driver's error.
        source: DriverFault,
    },
    /// The registry has no binary for exactly this device's SM (and PTX is not an option).
    #[error("{module}: no cubin for this device's {device_sm} ({device}); the registry has {available}{}", if *.ptx_available { " (PTX exists: only in compatibility mode)" } else { "" })]
    NoExactTarget {
        /// The module.
        module: String,
        /// The device's SM, e.g. sm_90.
        device_sm: String,
        /// The device's name.
        device: String,
        /// The targets the registry holds for the module.
        available: String,
        /// Whether PTX the device could JIT exists.
        ptx_available: bool,
    },
    /// The module needs a newer CUDA driver than the one installed (for PTX: a driver whose
    /// JIT does not know the PTX ISA the module is written in).
    #[error("{what}: needs CUDA driver {need} or newer{}; this driver is {have}", .ptx_isa_of.as_ref().map_or(String::new(), |nvcc| format!(" to JIT its PTX (the PTX ISA of nvcc {nvcc})")))]
    DriverTooOld {
        /// Module and target.
        what: String,
        /// The manifest's driver floor.
        need: String,
        /// The installed driver's CUDA version.
        have: String,
        /// For a PTX module, the nvcc version whose PTX ISA the driver must JIT (the floor
        /// is that toolkit's major.minor); `None` for a cubin.
        ptx_isa_of: Option<String>,
    },
    /// A module or kernel name that the verified bundle does not hold.
    #[error("unknown {kind} {name:?}; available: {available}")]
    Unknown {
        /// "module", "kernel" or "global".
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// What exists.
        available: String,
    },
    /// A kernel launch argument is out of its contract (length, alignment, size).
    #[error("{what}: {reason}")]
    Argument {
        /// Kernel and argument.
        what: String,
        /// What the contract requires.
        reason: String,
    },
    /// A research module (NVRTC, channel `research`) offered to a policy that does not
    /// admit research modules (production and development never do).
    #[error(
        "{module} ({target}) is a research module (channel research: {origin}); the {policy} policy refuses research modules"
    )]
    ResearchRefused {
        /// The module.
        module: String,
        /// Its target.
        target: String,
        /// Where it came from (e.g. `NVRTC 13.0`).
        origin: String,
        /// The policy that refused it.
        policy: String,
    },
    /// A development-signed bundle was offered where production trust is required, or vice versa.
    #[error("{what}: channel {found:?} where {required:?} is required")]
    Channel {
        /// The artifact.
        what: String,
        /// The required channel.
        required: String,
        /// The channel found.
        found: String,
    },
}

/// When no key of the role signed and every signature came from a key the trust root does
/// not know, the registry was most likely signed under another trust root: name both sets.
fn describe_other_root(
    valid: usize,
    foreign: &[ForeignSignature],
    trusted: &[String],
    role: RoleName,
) -> String {
    if valid > 0 || !all_unknown(foreign) {
        return String::new();
    }
    let signed: Vec<&str> = foreign.iter().map(|f| f.key.as_str()).collect();
    format!(
        ". It looks signed under another trust root: signed by {}, while this trust root's {role} key(s) are {}",
        signed.join(", "),
        trusted.join(", ")
    )
}

/// Some signatures, and every one by a key no role of the trust root holds.
fn all_unknown(foreign: &[ForeignSignature]) -> bool {
    !foreign.is_empty()
        && foreign
            .iter()
            .all(|f| f.signer == ForeignSigner::UnknownKey)
}

/// A signature that did not count toward a threshold, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignSignature {
    /// The short key id (from the file, escaped: only a hint).
    pub key: String,
    /// What the key is to the trust root.
    pub signer: ForeignSigner,
}

/// What the key of a signature that did not count is, to the trust root used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForeignSigner {
    /// A key of the required role whose signature does not verify.
    InvalidSignature,
    /// A key of another role (its signature verifies).
    OtherRole(RoleName),
    /// A key no role of this trust root lists.
    UnknownKey,
}

impl ForeignSignature {
    /// "`<key>` (what it is)", for a signature that did not count toward `role`'s threshold.
    pub fn describe(&self, role: RoleName) -> String {
        let is = match self.signer {
            ForeignSigner::InvalidSignature => format!("{role} key, invalid signature"),
            ForeignSigner::OtherRole(r) => format!("a {r} key, not a {role} key"),
            ForeignSigner::UnknownKey => "unknown key".to_string(),
        };
        format!("{} ({is})", self.key)
    }
}

/// Escapes control characters (ANSI escape sequences included) in text that comes from an
/// untrusted file, before it can reach a terminal or a log.
pub fn escape_untrusted(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn describe_foreign(foreign: &[ForeignSignature], role: RoleName) -> String {
    if foreign.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = foreign.iter().map(|f| f.describe(role)).collect();
    format!("; also signed by {}", parts.join(", "))
}

/// A failure of the CUDA driver layer, as [`Error::Cuda`] and [`Error::Load`] carry it.
///
/// It holds the driver layer's own error (`cuda::CudaError`, with the `driver` feature) behind
/// a trait object, and only the driver layer makes one. So a program that verifies but never
/// calls the driver (the registry's binary, `cargo xtask verify`) links none of the driver
/// layer, even where a workspace build turns the feature on for every member
/// (`registry/tests/no_cuda.rs` checks the built binary).
pub struct DriverFault(Box<dyn Fault>);

/// What [`DriverFault`] asks of the error it holds: the driver layer's error implements it.
pub(crate) trait Fault: std::error::Error + Send + Sync + 'static {
    /// What to do about it ([`Error::fix`]).
    fn fix(&self) -> String;
    /// Its kind ([`Error::kind`]).
    fn kind(&self) -> ErrorKind;
}

impl DriverFault {
    /// Holds a driver layer's error.
    #[cfg_attr(not(feature = "driver"), allow(dead_code))]
    pub(crate) fn new(fault: impl Fault) -> Self {
        DriverFault(Box::new(fault))
    }

    /// The error it holds, as a plain error (the driver layer downcasts it: `cuda()`, in
    /// `cuda/error.rs`, with the `driver` feature).
    #[cfg_attr(not(feature = "driver"), allow(dead_code))]
    pub(crate) fn fault(&self) -> &(dyn std::error::Error + 'static) {
        &*self.0
    }
}

impl std::fmt::Display for DriverFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

impl std::fmt::Debug for DriverFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::error::Error for DriverFault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}\nFix: {}", self.fix())
    }
}

impl Error {
    /// What to do about this error, one or two sentences, printed after `Fix:`.
    ///
    /// The advice never suggests skipping verification.
    pub fn fix(&self) -> String {
        match self {
            Error::Io { .. } => "check that the path exists and is readable by this user".into(),
            Error::StateNotSaved { .. } => "give the rollback state a writable folder that outlives the process: set CUDA_AOT_STATE_DIR (or XDG_STATE_HOME), or Policy::with_state_file; a deployment that cannot keep state (read-only image) can pin the lowest acceptable versions with Policy::minimum_versions and open with Policy::without_rollback_protection".into(),
            Error::Missing { what, .. } => format!(
                "publish a complete release into this registry (cargo xtask release), or point at the registry that holds the {what}"
            ),
            Error::TooLarge { .. } => "the file is not what was published: re-fetch it from the publisher, or raise the limit only if this size is expected (Limits)".into(),
            Error::Json { .. } | Error::DuplicateKey { .. } => {
                "the file was not written by cuda-aot or was altered: republish it with cargo xtask publish".into()
            }
            Error::InvalidName { .. } => {
                "module names are 1-64 characters of a-z, 0-9 and _, starting with a letter; targets look like sm_90, sm_90a or compute_90".into()
            }
            Error::Source { .. } => "the registry could not be read: see the cause above; fix the source (network, server, permissions) and run again".into(),
            Error::NotRegular { .. } => "registry files and trust roots must be regular files (not pipes, devices or folders): remove or replace what stands at that path, or point at the registry folder or file itself".into(),
            Error::Symlink { .. } => "replace the link with the file or folder itself: nothing below a registry root is read or written through a symbolic link, and registries are served as plain files".into(),
            Error::WrongPayloadType { .. } => "a signature made for one kind of document cannot vouch for another: re-sign the document with the right tool (cargo xtask sign / publish)".into(),
            Error::BadKey { .. } => "regenerate the key with cargo xtask keygen and list its printed public key in the trust root".into(),
            Error::Threshold { role, valid: 0, foreign, .. } if all_unknown(foreign) =>
            {
                format!(
                    "verify with the trust root this registry was published under (--trust), or republish the registry signed with {role} keys of this trust root"
                )
            }
            Error::Threshold { role: RoleName::Builder, valid, threshold, .. } if *valid > 0 && *valid < *threshold as usize => {
                "the trust root wants the build statement signed by more builders: an independent builder rebuilds the release bit for bit and co-signs it (cargo xtask rebuild --registry DIR --builder-key KEY), then the co-signed output is published".into()
            }
            Error::Threshold { role, .. } => format!(
                "sign with enough distinct {role} keys listed in the trust root (cargo xtask sign/publish with the {role} key), or rotate the trust root to list the key that signed"
            ),
            Error::BadRoot { .. } => "fix the trust root: threshold at most the number of keys, distinct keys, builder and reviewer keys disjoint".into(),
            Error::RootChainTooLong { .. } => "no real registry rotates its root this often: check that this is the registry you meant; if the chain is genuine, start from a newer trust root (cargo xtask trust-root) or raise Limits::max_root_updates".into(),
            Error::RootRotation { .. } => "a new root must be signed by a threshold of the previous root's root keys and of its own root keys, with version exactly one higher".into(),
            Error::Expired { .. } => "publish again to refresh the timestamp (cargo xtask publish), or correct this machine's clock; a skew allowance can be set explicitly".into(),
            Error::FreezeBound { .. } => "publish again with an expiry within the trust root's bound (cargo xtask publish --timestamp-days); if the document was not published by you, treat the publisher key as compromised and rotate it".into(),
            Error::VersionOverflow { .. } => "the version was exhausted, most likely by a stolen publisher key: rotate the publisher key in a new trust root (cargo xtask trust-root --previous); clients then discard the inflated versions".into(),
            Error::NotAttested { .. } => "publish the manifest together with the build statement that attests it (cargo xtask sign, then publish)".into(),
            Error::NotPromoted { module, .. } => format!(
                "promote the module (cargo xtask promote {module}: parity on a GPU host, resource review, reviewer signatures; docs/review.md) and publish it with its promotion record"
            ),
            Error::Rollback { .. } => "the registry is serving old metadata (replay or stale mirror): point at an up-to-date registry; delete the trust state file only if you deliberately reset this machine".into(),
            Error::VersionMismatch { .. } | Error::MixAndMatch { .. } | Error::DuplicateEntry { .. } => {
                "the registry mixes files of different releases: republish, or fetch the registry again as one snapshot".into()
            }
            Error::DigestMismatch { .. } | Error::SizeMismatch { .. } => {
                "the file was altered or truncated after signing: fetch it again from the registry, or rebuild and republish (cargo xtask release)".into()
            }
            Error::ElfSmMismatch { module, actual, .. } => format!(
                "rebuild {module} for the SM it claims; the blob was built for {actual} (cargo xtask build)"
            ),
            Error::NotCubin { .. } => "rebuild the module with cargo xtask build; the bytes are not a CUDA ELF".into(),
            Error::NotPtx { .. } => "rebuild the module with cargo xtask build; a blob signed as PTX must be the PTX text nvcc wrote (a cubin is published under kind cubin)".into(),
            Error::PtxTargetMismatch { module, actual, .. } => format!(
                "rebuild {module}'s PTX for the compute target it claims; the text was generated for {actual} (cargo xtask build)"
            ),
            Error::FunctionMismatch { .. } => "the manifest was not written for these bytes: rebuild and re-sign the module (cargo xtask release)".into(),
            Error::AmbiguousKernel { .. } => "name the kernel by its full demangled signature or by its symbol, as listed above".into(),
            Error::GlobalMismatch { .. } => "the manifest was not written for these bytes: rebuild and re-sign the module (cargo xtask release)".into(),
            Error::ManagedGlobal { symbol, .. } => format!(
                "declare {symbol} __device__ (or __constant__) instead of __managed__, and fill it from the host through Module::global(..).write after preload"
            ),
            Error::GlobalsNotSigned { .. } => "rebuild and republish the module with this version of cuda-aot (cargo xtask release): its manifests (schema cuda-aot/manifest/v2) sign every global's size and memory space".into(),
            Error::AmbiguousGlobal { .. } => "name the global by its symbol, as listed above".into(),
            Error::Cuda(e) | Error::Load { source: e, .. } => e.0.fix(),
            Error::NoExactTarget { device_sm, ptx_available, .. } => {
                let mut s = format!("add {device_sm} to the module's targets in its release spec (build.targets or the module's own; manifests/release.toml by default) and release again (cargo xtask release)");
                if *ptx_available {
                    s += ", or opt in to the labelled PTX compatibility mode (Policy::with_ptx_compatibility; cargo xtask doctor --allow-ptx shows what it would load)";
                }
                s
            }
            Error::DriverTooOld { need, .. } => format!("install an NVIDIA driver that supports CUDA {need} or newer (nvidia-smi shows the CUDA version the driver supports)"),
            Error::Argument { .. } => "pass buffers as the kernel contract in kernels/README.md describes".into(),
            Error::Unknown { kind, .. } => format!("use a {kind} name listed above; the release set is defined in manifests/release.toml"),
            Error::ResearchRefused { module, .. } => format!(
                "research modules run only under Policy::research() (feature research); to load {module} in production or development, promote it (cargo xtask promote {module}: AOT build, parity, review; docs/review.md) and load it from a registry"
            ),
            Error::Channel { required, .. } => format!(
                "use a registry released and signed for the {required} channel, with a trust root of that channel"
            ),
        }
    }
}

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
            | Error::AmbiguousGlobal { .. } => K::InvalidArgument,
            Error::Io { .. }
            | Error::StateNotSaved { .. }
            | Error::Source { .. }
            | Error::NotRegular { .. }
            | Error::Symlink { .. } => K::Io,
            Error::Missing { .. } | Error::Unknown { .. } | Error::GlobalsNotSigned { .. } => {
                K::NotFound
            }
            Error::TooLarge { .. } | Error::RootChainTooLong { .. } => K::Limit,
            Error::Json { .. } | Error::DuplicateKey { .. } | Error::WrongPayloadType { .. } => {
                K::Malformed
            }
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
            Error::Cuda(e) | Error::Load { source: e, .. } => e.0.kind(),
            Error::DriverTooOld { .. } => K::Driver,
        }
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

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
