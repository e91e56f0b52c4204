//! The `Fix:` advice of every error ([`Error::fix`]): what to do about it, never "skip
//! verification".

use super::Error;
use super::foreign::all_unknown;
use crate::role::RoleName;

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
            Error::Delegation { team: Some(team), .. } => format!(
                "a module of delegated role {team:?} is signed by that role's own builder (reviewer) keys as its delegator lists them: sign the build with one of them (cargo xtask sign --builder-key FILE), have the delegations role list the key that signed (cargo xtask delegations sign), or publish the team's current metadata (cargo xtask publish --team)"
            ),
            Error::Delegation { .. } => "the registry's delegated metadata is not what its delegators signed: publish the delegations and every team's current metadata again (cargo xtask delegations sign, cargo xtask publish --team); a version older than one seen is a rollback: point at an up-to-date registry".into(),
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
            Error::NotADevice { plain, .. } => format!(
                "describe the device as {plain} (a device runs its `a` and family cubins too; the diagnosis says which it picks)"
            ),
            Error::DriverTooOld { need, .. } => format!("install an NVIDIA driver that supports CUDA {need} or newer (nvidia-smi shows the CUDA version the driver supports)"),
            Error::Argument { .. } => "pass buffers as the kernel contract in kernels/README.md describes".into(),
            Error::Unknown { kind, .. } => format!("use a {kind} name listed above; the release set is defined in manifests/release.toml"),
            Error::ResearchRefused { module, .. } => format!(
                "research modules run only under Policy::research() (feature research); to load {module} in production or development, promote it (cargo xtask promote {module}: AOT build, parity, review; docs/review.md) and load it from a registry"
            ),
            Error::Unsupported { sm, problems, locked_out, .. } => unsupported_fix(sm, problems, *locked_out),
            Error::BadBundle { .. } => "rebuild the program: its build script writes the bundle (cuda_aot_build::Fetch, whose warnings say why it could not) and cuda_aot::include_bundle! embeds it; the bytes given to open_embedded must be that file, whole and unchanged".into(),
            Error::BundleOtherRoot { .. } => "open the bundle with the trust root its cuda-aot.lock was made under, or lock and build again under this trust root (cargo xtask lock --update, then cargo build)".into(),
            Error::Channel { required, .. } => format!(
                "use a registry released and signed for the {required} channel, with a trust root of that channel"
            ),
        }
    }
}

/// The advice of [`Error::Unsupported`]: the target to add (to the lock, when the registry
/// builds it; else to the release) for the modules without a binary for `sm`, and the
/// newest driver floor among those the driver is too old for.
fn unsupported_fix(sm: &str, problems: &[Error], locked_out: bool) -> String {
    let mut missing = Vec::new();
    let mut need: Option<&str> = None;
    let mut too_old = Vec::new();
    for p in problems {
        match p {
            Error::NoExactTarget { module, .. } => missing.push(module.as_str()),
            Error::DriverTooOld { what, need: n, .. } => {
                too_old.push(what.as_str());
                let newer = need.is_none_or(|have| {
                    n.parse::<crate::DriverVersion>().ok()
                        > have.parse::<crate::DriverVersion>().ok()
                });
                if newer {
                    need = Some(n);
                }
            }
            _ => {}
        }
    }
    let mut advice = Vec::new();
    if !missing.is_empty() {
        let modules = missing.join(", ");
        advice.push(if locked_out {
            format!(
                "the registry builds {sm} but the lock leaves it out: add {sm} to the lock's targets (cargo xtask lock --registry URL --trust FILE --targets <the lock's targets>,{sm} --update) and build again, for {modules}"
            )
        } else {
            format!(
                "the registry has no {sm} binary of {modules}: ask its maintainers to add {sm} to their release targets (build.targets in the release spec) and release, then move the lock (cargo xtask lock --update --targets <the lock's targets>,{sm}) and build again"
            )
        });
    }
    if let Some(need) = need {
        advice.push(format!(
            "install an NVIDIA driver that supports CUDA {need} or newer (nvidia-smi shows the CUDA version the driver supports), for {}",
            too_old.join(", ")
        ));
    }
    advice.join("; and ")
}
