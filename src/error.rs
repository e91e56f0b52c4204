//! The one error type of the runtime crate, with the evidence and the `Fix:` advice of every refusal.

use std::path::PathBuf;

use crate::role::RoleName;

mod driver;
mod fix;
mod foreign;
mod kind;

pub use driver::DriverFault;
#[cfg(feature = "driver")]
pub(crate) use driver::Fault;
pub use foreign::{ForeignSignature, ForeignSigner};
use foreign::{describe_foreign, describe_other_root};
pub use kind::ErrorKind;

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
    /// A delegation (issue 46) refuses a document: a module signed by keys outside the
    /// delegation that owns it, delegated metadata that is expired, truncated, over-long,
    /// rolled back or missing from the index, or a delegation list that cannot decide who
    /// owns a name.
    #[error("{what}: {reason}")]
    Delegation {
        /// The document or module concerned.
        what: String,
        /// The delegated role that owns it, when one does.
        team: Option<String>,
        /// Why (the pattern, role and keys named).
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
    /// A device was described by a target that names no device: a virtual (`compute_90`),
    /// arch-specific (`sm_90a`) or family (`sm_100f`) target instead of its plain SM.
    #[error("{target} names no device: a device is named by its plain SM ({plain})")]
    NotADevice {
        /// The target given.
        target: String,
        /// The plain SM of the same compute capability.
        plain: String,
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
    /// Modules cannot run on the device a runtime opens: no binary for its SM in the bundle,
    /// or a driver older than their floor. Every affected module is listed, each with its
    /// own refusal ([`Error::NoExactTarget`] or [`Error::DriverTooOld`]); the advice says
    /// what fixes all of them (the targets to add to the lock, the driver to install).
    #[error(
        "{device} ({sm}, CUDA driver {driver}) cannot run {} of the bundle's modules:{}",
        .problems.len(),
        .problems.iter().map(|p| format!("\n  {p}")).collect::<String>()
    )]
    Unsupported {
        /// The device's name.
        device: String,
        /// Its SM.
        sm: String,
        /// The driver's CUDA version.
        driver: String,
        /// One refusal per affected module, in module order.
        problems: Vec<Error>,
        /// Whether the registry's signed index lists a binary for this SM that the bundle
        /// does not carry (its lock leaves that target out).
        locked_out: bool,
    },
    /// An embedded bundle ([`crate::bundle::Embedded`]) is empty, damaged or not a bundle.
    #[error("embedded kernel bundle: {reason}")]
    BadBundle {
        /// What is wrong with it.
        reason: String,
    },
    /// An embedded bundle was fetched under another trust root than the one it is opened
    /// with: refused before anything in it is read.
    #[error(
        "the embedded kernel bundle of {origin} was fetched under trust root {bundle}; it is opened with trust root {given}"
    )]
    BundleOtherRoot {
        /// Where the bundle came from.
        origin: String,
        /// The trust root digest (short) the bundle was made for.
        bundle: String,
        /// The digest (short) of the trust root given.
        given: String,
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

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}\nFix: {}", self.fix())
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
