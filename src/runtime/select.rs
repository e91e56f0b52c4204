//! Choosing what a device loads, without a device: the registry's metadata verified under a
//! policy, each module's binary picked for the device's exact SM, the driver floor checked
//! ([`Runtime::diagnose`](super::Runtime::diagnose), in `doctor.rs`, reports that choice for
//! every module).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::cuda::DeviceInfo;
use crate::error::{Error, Result};
use crate::identity::{DriverVersion, Kind};
use crate::manifest::Manifest;
use crate::metadata::{IndexEntry, Time};
use crate::name::Target;
use crate::source::RegistrySource;
use crate::state::TrustState;
use crate::verify::{Freshness, Options, verify_metadata};

use super::Policy;

/// The index's entries grouped by module name (positions in `entries`), in name order.
pub(super) fn modules_of(entries: &[IndexEntry]) -> BTreeMap<&str, Vec<usize>> {
    let mut by_module: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        by_module.entry(e.module.as_str()).or_default().push(i);
    }
    by_module
}

/// Steps 1-5 of verification of `src` under `policy` with the clock at `now` (no device
/// needed), against the rollback state in `state_path` (none: protection off): the verified
/// metadata and the time it took.
pub(super) fn verify_registry_metadata(
    src: &dyn RegistrySource,
    state_path: Option<&Path>,
    trust_root: &[u8],
    policy: &Policy,
    now: Time,
) -> Result<(crate::verify::VerifiedIndex, Duration)> {
    let started = Instant::now();
    let seen = match state_path {
        Some(p) => TrustState::load(p, policy.limits.state)?,
        None => {
            log::warn!(
                "cuda-aot: rollback protection is OFF for {} (Policy::without_rollback_protection): an older release would be accepted",
                src.describe()
            );
            TrustState::default()
        }
    }
    .max(policy.minimum_versions.clone());
    let opts = Options {
        now,
        skew: policy.clock_skew,
        offline_grace: policy.offline_grace,
        limits: policy.limits,
        required_channel: Some(policy.channel),
        // A release awaiting its independent rebuild is never loadable.
        awaiting_rebuild: false,
    };
    log::info!(
        "cuda-aot: verifying {} (channel {}, clock skew allowance {}s, offline grace {}s)",
        src.describe(),
        policy.channel,
        policy.clock_skew.as_secs(),
        policy.offline_grace.as_secs()
    );
    let index = verify_metadata(src, trust_root, seen, &opts)?;
    if let Some(old) = index.discarded_state() {
        log::warn!(
            "cuda-aot: the trust root rotated the publisher keys: discarded saved timestamp v{} and index v{}",
            old.timestamp,
            old.index
        );
    }
    if let Freshness::Grace { expired, deadline } = index.freshness() {
        log::warn!(
            "cuda-aot: {}: timestamp expired at {expired}; accepted in OFFLINE GRACE until {deadline} (last fresh verification {}). Sync the registry before then.",
            src.describe(),
            index
                .last_fresh()
                .map_or_else(|| "unknown".to_string(), |t| t.to_string())
        );
    }
    Ok((index, started.elapsed()))
}

/// What a device picks from a bundle: one index entry per module it can run (see
/// [`select`]), and the refusal of every module it cannot.
pub(super) struct Pick {
    /// The picked entries.
    pub entries: Vec<usize>,
    /// The modules with no binary for the device (taken by the first refusal).
    problems: std::sync::Mutex<Vec<Error>>,
    /// Whether the signed index lists a cubin for the device's SM that the bundle does not
    /// carry.
    locked_out: bool,
}

impl Pick {
    /// The pick of the device `info` from `entries`, among those `src` carries.
    pub fn for_device(
        entries: &[IndexEntry],
        src: &dyn RegistrySource,
        info: &DeviceInfo,
        policy: &Policy,
    ) -> Pick {
        let (major, minor) = (info.cc_major, info.cc_minor);
        let mut picked = Vec::new();
        let mut problems = Vec::new();
        let mut locked_out = false;
        for (name, idx) in modules_of(entries) {
            // A bundle made for some targets carries only those: the others are not candidates.
            let carried: Vec<usize> = idx
                .iter()
                .copied()
                .filter(|&i| src.carries(&entries[i].manifest))
                .collect();
            let cands: Vec<(Target, Kind)> = carried
                .iter()
                .map(|&i| (entries[i].sm, entries[i].kind))
                .collect();
            match select(name, &cands, (major, minor), &info.name, policy) {
                Ok(j) => picked.push(carried[j]),
                Err(e) => {
                    locked_out |= idx.iter().any(|&i| {
                        !carried.contains(&i)
                            && entries[i].kind == Kind::Cubin
                            && entries[i].sm.is_exact_for(major, minor)
                    });
                    problems.push(e);
                }
            }
        }
        Pick {
            entries: picked,
            problems: std::sync::Mutex::new(problems),
            locked_out,
        }
    }

    /// Refuses the device `info` when it cannot run every module: those without a binary
    /// for it, and those of the verified manifests `ms` it picked whose driver floor is
    /// above its driver, in one [`Error::Unsupported`].
    pub fn refuse_unrunnable(
        &self,
        ms: &[(usize, &crate::verify::VerifiedManifest)],
        info: &DeviceInfo,
    ) -> Result<()> {
        let driver = DriverVersion::from_cuda(info.driver_version);
        let mut problems = std::mem::take(&mut *self.problems.lock().expect("pick problems"));
        problems.extend(
            ms.iter()
                .filter(|(i, _)| self.entries.contains(i))
                .filter_map(|(_, m)| check_driver_floor(m.manifest(), driver).err()),
        );
        if problems.is_empty() {
            return Ok(());
        }
        problems.sort_by_key(|p| p.to_string());
        Err(unsupported(info, problems, self.locked_out))
    }
}

/// [`Error::Unsupported`] on the device `info`.
pub(super) fn unsupported(info: &DeviceInfo, problems: Vec<Error>, locked_out: bool) -> Error {
    Error::Unsupported {
        device: info.name.clone(),
        sm: info.sm().to_string(),
        driver: DriverVersion::from_cuda(info.driver_version).to_string(),
        problems,
        locked_out,
    }
}

/// Picks the binary of `module` for a device of compute capability `cc`: a cubin for
/// exactly its SM (the `a` variant first when preferred); else a family cubin of the
/// device's family (`sm_100f` on a 10.3 device; the closest, i.e. highest, minor first);
/// else, only if the policy allows, the newest PTX the device can JIT. Never another SM's
/// plain cubin. Returns an index into `candidates`.
pub(super) fn select(
    module: &str,
    candidates: &[(Target, Kind)],
    cc: (u32, u32),
    device: &str,
    policy: &Policy,
) -> Result<usize> {
    let (major, minor) = cc;
    let device_sm = Target::sm(major, minor);
    let ids = || candidates.iter().enumerate().map(|(i, (t, k))| (i, *t, *k));
    let exact: Vec<(usize, Target)> = ids()
        .filter(|(_, t, k)| *k == Kind::Cubin && t.is_exact_for(major, minor))
        .map(|(i, t, _)| (i, t))
        .collect();
    if let Some((i, _)) = exact
        .iter()
        .find(|(_, t)| t.arch_specific == policy.prefer_arch_specific)
        .or(exact.first())
    {
        return Ok(*i);
    }
    if let Some((i, _, _)) = ids()
        .filter(|(_, t, k)| *k == Kind::Cubin && t.is_family_for(major, minor))
        .max_by_key(|(_, t, _)| t.minor)
    {
        return Ok(i);
    }
    let ptx: Vec<(usize, Target)> = ids()
        .filter(|(_, t, k)| *k == Kind::Ptx && t.can_jit_on(major, minor))
        .map(|(i, t, _)| (i, t))
        .collect();
    if policy.allow_ptx
        && let Some((i, _)) = ptx.iter().max_by_key(|(_, t)| t.number())
    {
        return Ok(*i);
    }
    let mut available: Vec<String> = candidates.iter().map(|(t, _)| t.to_string()).collect();
    available.sort();
    Err(Error::NoExactTarget {
        module: module.to_string(),
        device_sm: device_sm.to_string(),
        device: device.to_string(),
        available: available.join(" "),
        ptx_available: !ptx.is_empty(),
    })
}

/// Refuses a module whose driver floor is above the installed driver's CUDA version. For
/// PTX the floor is its toolkit's major.minor, so this is also where PTX of an ISA newer
/// than the driver's JIT is refused; the error names the toolkit whose PTX ISA it is.
pub(super) fn check_driver_floor(man: &Manifest, driver: DriverVersion) -> Result<()> {
    let id = &man.identity;
    if id.driver_floor > driver {
        return Err(Error::DriverTooOld {
            what: man.label(),
            need: id.driver_floor.to_string(),
            have: driver.to_string(),
            ptx_isa_of: (id.kind == Kind::Ptx).then(|| id.toolkit.nvcc.clone()),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::tests::m;

    #[test]
    fn a_module_needing_a_newer_driver_is_refused_before_loading() {
        let mut man = m("sm_90", Kind::Cubin);
        man.identity.driver_floor = "13.1".parse().unwrap();
        let err = check_driver_floor(&man, DriverVersion::from_cuda(13000)).unwrap_err();
        assert!(
            matches!(&err, Error::DriverTooOld { need, have, .. } if need == "13.1" && have == "13.0"),
            "{err}"
        );
        assert!(err.fix().contains("13.1"), "{}", err.fix());
        assert!(check_driver_floor(&man, DriverVersion::from_cuda(13010)).is_ok());
        assert!(check_driver_floor(&man, DriverVersion::from_cuda(12080)).is_err());
        assert_eq!(
            err.to_string(),
            "ntt sm_90: needs CUDA driver 13.1 or newer; this driver is 13.0"
        );
    }

    /// Issue 22: PTX whose ISA is newer than the driver's JIT is refused at the driver floor
    /// (the toolkit's major.minor), the one check `open` and `diagnose` share, naming the
    /// toolkit whose PTX ISA it is and the driver.
    #[test]
    fn issue_22_ptx_of_an_isa_newer_than_the_driver_is_refused_naming_the_isa() {
        let mut man = m("compute_80", Kind::Ptx);
        man.identity.driver_floor = "13.0".parse().unwrap();
        let err = check_driver_floor(&man, DriverVersion::from_cuda(12040)).unwrap_err();
        assert!(
            matches!(&err, Error::DriverTooOld { need, have, ptx_isa_of: Some(nvcc), .. }
                if need == "13.0" && have == "12.4" && nvcc == "13.0.88"),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "ntt compute_80 (ptx, compatibility mode): needs CUDA driver 13.0 or newer to JIT its PTX (the PTX ISA of nvcc 13.0.88); this driver is 12.4"
        );
        assert!(err.fix().contains("CUDA 13.0 or newer"), "{}", err.fix());
        assert!(check_driver_floor(&man, DriverVersion::from_cuda(13000)).is_ok());
    }

    fn pick(cands: &[Manifest], cc: (u32, u32), policy: &Policy) -> Result<String> {
        let refs: Vec<(Target, Kind)> = cands
            .iter()
            .map(|m| (m.identity.sm, m.identity.kind))
            .collect();
        select("ntt", &refs, cc, "test GPU", policy).map(|i| cands[i].label())
    }

    #[test]
    fn selection_takes_only_the_exact_sm() {
        let set = [
            m("sm_80", Kind::Cubin),
            m("sm_90", Kind::Cubin),
            m("sm_90a", Kind::Cubin),
            m("sm_120", Kind::Cubin),
        ];
        let p = Policy::development();
        assert_eq!(pick(&set, (9, 0), &p).unwrap(), "ntt sm_90a");
        assert_eq!(
            pick(
                &set,
                (9, 0),
                &Policy {
                    prefer_arch_specific: false,
                    ..p.clone()
                }
            )
            .unwrap(),
            "ntt sm_90"
        );
        assert_eq!(pick(&set, (8, 0), &p).unwrap(), "ntt sm_80");
        // An sm_86 device gets no sm_80 cubin, though it would run: exact SM only.
        let err = pick(&set, (8, 6), &p).unwrap_err();
        assert!(
            matches!(&err, Error::NoExactTarget { device_sm, available, ptx_available: false, .. } if device_sm == "sm_86" && available == "sm_120 sm_80 sm_90 sm_90a"),
            "{err}"
        );
    }

    #[test]
    fn an_arch_specific_cubin_is_exact_only_on_its_own_device() {
        let set = [m("sm_90a", Kind::Cubin)];
        assert_eq!(
            pick(&set, (9, 0), &Policy::development()).unwrap(),
            "ntt sm_90a"
        );
        assert!(pick(&set, (10, 0), &Policy::development()).is_err());
    }

    #[test]
    fn family_cubins_come_after_an_exact_cubin_and_only_in_their_family() {
        let p = Policy::development();
        let set = [
            m("sm_100", Kind::Cubin),
            m("sm_100f", Kind::Cubin),
            m("sm_103f", Kind::Cubin),
            m("sm_120f", Kind::Cubin),
        ];
        // Exact first: a 10.0 device takes sm_100, not sm_100f.
        assert_eq!(pick(&set, (10, 0), &p).unwrap(), "ntt sm_100");
        // A 10.3 device has no exact cubin: the closest family build, sm_103f.
        assert_eq!(pick(&set, (10, 3), &p).unwrap(), "ntt sm_103f");
        assert_eq!(pick(&set[..2], (10, 3), &p).unwrap(), "ntt sm_100f");
        // sm_120f on 12.0 and 12.1; never on another family.
        assert_eq!(pick(&set, (12, 1), &p).unwrap(), "ntt sm_120f");
        assert!(pick(&set, (9, 0), &p).is_err());
        assert!(pick(&set[1..3], (12, 0), &p).is_err());
        // sm_103f does not run on 10.0.
        let err = pick(&set[2..3], (10, 0), &p).unwrap_err();
        assert!(
            matches!(&err, Error::NoExactTarget { available, .. } if available == "sm_103f"),
            "{err}"
        );
    }

    #[test]
    fn ptx_only_with_the_compatibility_policy() {
        let set = [
            m("sm_80", Kind::Cubin),
            m("compute_80", Kind::Ptx),
            m("compute_90", Kind::Ptx),
        ];
        let err = pick(&set, (9, 0), &Policy::development()).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::NoExactTarget {
                    ptx_available: true,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("only in compatibility mode")
                && err.fix().contains("compatibility"),
            "{err}"
        );
        let p = Policy::development().with_ptx_compatibility();
        assert_eq!(
            pick(&set, (9, 0), &p).unwrap(),
            "ntt compute_90 (ptx, compatibility mode)"
        );
        // A device older than every PTX target cannot JIT it.
        assert!(pick(&[m("compute_90", Kind::Ptx)], (8, 0), &p).is_err());
        // An exact cubin always wins over PTX.
        assert_eq!(pick(&set, (8, 0), &p).unwrap(), "ntt sm_80");
    }

    /// Issue 36, item 4: a device that cannot run some modules is refused naming the
    /// device, its SM and driver and every module; the advice names the target to add to
    /// the lock when the registry builds it but the bundle leaves it out, to the release
    /// when it does not, and the newest driver floor among those the driver is below.
    #[test]
    fn issue_36_every_module_a_device_cannot_run_is_named_with_its_fix() {
        use crate::metadata::IndexEntry;
        use crate::source::RegistrySource;

        /// A bundle carrying only the entries of these manifests.
        struct Carries(Vec<crate::Digest>);
        impl RegistrySource for Carries {
            fn read_at_most(&self, _: &str, _: u64) -> Result<Option<Vec<u8>>> {
                Ok(None)
            }
            fn carries(&self, manifest: &crate::Digest) -> bool {
                self.0.contains(manifest)
            }
            fn describe(&self) -> String {
                "a bundle".into()
            }
        }
        let entry = |module: &str, sm: &str| IndexEntry {
            module: crate::ModuleName::new(module).unwrap(),
            sm: sm.parse().unwrap(),
            kind: Kind::Cubin,
            manifest: crate::Digest::of(format!("{module} {sm}").as_bytes()),
            manifest_size: 1,
            identity: crate::Digest::of(b"id"),
            statement: crate::Digest::of(b"st"),
            since: 1,
        };
        let entries = vec![
            entry("msm", "sm_80"),
            entry("msm", "sm_89"),
            entry("ntt", "sm_80"),
            entry("ntt", "sm_89"),
            entry("poseidon", "sm_89"),
        ];
        let l40s = DeviceInfo {
            ordinal: 0,
            name: "NVIDIA L40S".into(),
            uuid: [0; 16],
            cc_major: 8,
            cc_minor: 9,
            sm_count: 142,
            driver_version: 13000,
        };
        // The lock left sm_89 out: the bundle carries sm_80 only (and all of poseidon).
        let bundle = Carries(
            entries
                .iter()
                .filter(|e| e.sm.to_string() == "sm_80" || e.module.as_str() == "poseidon")
                .map(|e| e.manifest)
                .collect(),
        );
        let pick = Pick::for_device(&entries, &bundle, &l40s, &Policy::development());
        assert_eq!(
            pick.entries,
            vec![4],
            "poseidon's sm_89 is carried and picked"
        );
        let err = pick.refuse_unrunnable(&[], &l40s).unwrap_err();
        assert_eq!(
            err.to_string(),
            "NVIDIA L40S (sm_89, CUDA driver 13.0) cannot run 2 of the bundle's modules:\n  \
             msm: no cubin for this device's sm_89 (NVIDIA L40S); the registry has sm_80\n  \
             ntt: no cubin for this device's sm_89 (NVIDIA L40S); the registry has sm_80"
        );
        assert_eq!(err.kind(), crate::ErrorKind::NoTarget);
        assert!(
            err.fix().starts_with(
                "the registry builds sm_89 but the lock leaves it out: add sm_89 to the lock's targets"
            ) && err.fix().ends_with("for msm, ntt"),
            "{}",
            err.fix()
        );
        // A registry that builds no sm_89 at all: the release must add it.
        let all = Carries(entries.iter().map(|e| e.manifest).collect());
        let sm80: Vec<IndexEntry> = entries
            .iter()
            .filter(|e| e.sm.to_string() == "sm_80")
            .cloned()
            .collect();
        let err = Pick::for_device(&sm80, &all, &l40s, &Policy::development())
            .refuse_unrunnable(&[], &l40s)
            .unwrap_err();
        assert!(
            err.fix()
                .starts_with("the registry has no sm_89 binary of msm, ntt: ask its maintainers"),
            "{}",
            err.fix()
        );
        // Drivers: the newest floor is the one to install; with a missing target, both.
        let old = |what: &str, need: &str| Error::DriverTooOld {
            what: what.into(),
            need: need.into(),
            have: "12.4".into(),
            ptx_isa_of: None,
        };
        let err = unsupported(
            &DeviceInfo {
                driver_version: 12040,
                ..l40s.clone()
            },
            vec![
                old("msm sm_89", "12.8"),
                old("ntt sm_89", "13.0"),
                Error::NoExactTarget {
                    module: "poseidon".into(),
                    device_sm: "sm_89".into(),
                    device: "NVIDIA L40S".into(),
                    available: "sm_90".into(),
                    ptx_available: false,
                },
            ],
            false,
        );
        assert!(
            err.to_string().contains("CUDA driver 12.4) cannot run 3"),
            "{err}"
        );
        assert_eq!(err.kind(), crate::ErrorKind::NoTarget);
        let fix = err.fix();
        assert!(fix.contains("add sm_89 to their release targets"), "{fix}");
        assert!(
            fix.contains("supports CUDA 13.0 or newer (nvidia-smi shows the CUDA version the driver supports), for msm sm_89, ntt sm_89"),
            "{fix}"
        );
    }
}
