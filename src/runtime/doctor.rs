//! What a registry would give a device: [`Runtime::diagnose`] runs the selection and checks
//! of [`Runtime::open`] for one module at a time, without a driver; [`DoctorReport`] is its
//! one rendering, the table `cargo xtask doctor` prints and the C ABI's `cuda_aot_doctor`
//! hands out. The device is described ([`DeviceSpec::described`]: an SM and a driver
//! version) or probed ([`DeviceSpec::probe`]).

use std::fmt;
use std::path::Path;

use crate::cuda::{Device, DeviceInfo};
use crate::error::{Error, Result};
use crate::identity::{DriverVersion, Kind};
use crate::manifest::Manifest;
use crate::metadata::Time;
use crate::name::Target;
use crate::source::DirSource;
use crate::verify::Select;

use super::select::{check_driver_floor, modules_of, select, verify_registry_metadata};
use super::{Policy, Runtime};

/// A device described without opening it: what [`Runtime::diagnose`] checks a registry
/// against (`cargo xtask doctor --device sm_89 --driver 12.4`, or a probed device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// How messages name it (`NVIDIA L40S`, or `sm_89 (--device)`: see [`DeviceSpec::described`]).
    pub name: String,
    /// Compute capability (8, 9 for sm_89).
    pub cc: (u32, u32),
    /// The driver's CUDA version; `None`: not known, the driver floor is not checked.
    pub driver: Option<DriverVersion>,
}

impl DeviceSpec {
    /// An opened device as [`Runtime::open`] sees it: its name (as open's messages give
    /// it), compute capability and this host's driver (what `cargo xtask doctor` probes
    /// without `--device`).
    pub fn of_device(info: &DeviceInfo) -> DeviceSpec {
        DeviceSpec {
            name: info.name.clone(),
            cc: (info.cc_major, info.cc_minor),
            driver: Some(DriverVersion::from_cuda(info.driver_version)),
        }
    }

    /// A device described by its SM (`sm_89`) and, when known, its driver's CUDA version;
    /// messages name it `<sm> (<how>)` (`sm_89 (--device)`). A device is named by its plain
    /// SM: a virtual (`compute_89`), arch-specific (`sm_90a`) or family (`sm_100f`) target
    /// is [`Error::NotADevice`] (the device runs those cubins too; the diagnosis says which
    /// it picks).
    pub fn described(
        target: Target,
        driver: Option<DriverVersion>,
        how: &str,
    ) -> Result<DeviceSpec> {
        if target.virtual_arch || target.arch_specific || target.family_specific {
            return Err(Error::NotADevice {
                target: target.to_string(),
                plain: Target::sm(target.major, target.minor).to_string(),
            });
        }
        Ok(DeviceSpec {
            name: format!("{target} ({how})"),
            cc: (target.major, target.minor),
            driver,
        })
    }

    /// The device of this process with ordinal `ordinal` and this host's driver, probed
    /// through the driver (which must be installed: the driver's error otherwise).
    pub fn probe(ordinal: usize) -> Result<DeviceSpec> {
        let device = Device::open(ordinal)?;
        Ok(DeviceSpec::of_device(device.info()))
    }

    /// Every device of this process (after `CUDA_VISIBLE_DEVICES`), probed; empty when the
    /// driver reports none.
    pub fn probe_all() -> Result<Vec<DeviceSpec>> {
        let n = crate::cuda::device_count()?;
        (0..n).map(DeviceSpec::probe).collect()
    }
}

/// What [`Runtime::open`] would do with one module of a registry on a device: the manifest
/// of the blob it would load, or the error it would refuse the module with (the same error,
/// from the same selection and checks).
#[derive(Debug)]
pub struct Diagnosis {
    /// The module.
    pub module: String,
    /// Every (target, kind) the registry has for it.
    pub available: Vec<(Target, Kind)>,
    /// The verified manifest of the blob that would load, or why none would.
    pub outcome: std::result::Result<Manifest, Error>,
}

impl Runtime {
    /// For every module of `registry`, what [`Runtime::open`] under `policy` would load on
    /// `device`, or why it would load nothing: no binary for the device (no exact cubin, a
    /// family or arch-specific mismatch, PTX only and the policy refuses it), a driver below
    /// the module's floor (for PTX, an ISA newer than the driver), or a module whose
    /// manifest, promotion or blob fails verification. Needs no GPU and changes nothing (no
    /// rollback state is saved). A registry whose metadata fails (bad signature, expired or
    /// frozen timestamp, rollback, channel) is the `Err`, as `open` would fail as a whole.
    pub fn diagnose(
        registry: impl AsRef<Path>,
        trust_root: &[u8],
        policy: &Policy,
        device: &DeviceSpec,
    ) -> Result<Vec<Diagnosis>> {
        Runtime::diagnose_at(registry, trust_root, policy, device, Time::now())
    }

    /// [`Runtime::diagnose`] with the verifier's clock at `at` (expiry and the freeze bound
    /// are checked as of then): will the registry still load on the day of a deployment?
    /// A time before now would accept what has already expired: callers pass now or later
    /// (`cargo xtask doctor --at` refuses an earlier one, as `verify --at` does).
    pub fn diagnose_at(
        registry: impl AsRef<Path>,
        trust_root: &[u8],
        policy: &Policy,
        device: &DeviceSpec,
        at: Time,
    ) -> Result<Vec<Diagnosis>> {
        let registry = registry.as_ref();
        let src = DirSource::new(registry);
        let state = policy.state_path(registry)?;
        let (index, _) = verify_registry_metadata(&src, state.as_deref(), trust_root, policy, at)?;
        let entries = &index.index().entries;
        let mut out = Vec::new();
        for (name, idx) in modules_of(entries) {
            let available: Vec<(Target, Kind)> = idx
                .iter()
                .map(|i| (entries[*i].sm, entries[*i].kind))
                .collect();
            let outcome = select(name, &available, device.cc, &device.name, policy).and_then(|j| {
                let i = idx[j];
                let floor = |ms: &[(usize, &crate::verify::VerifiedManifest)]| match device.driver {
                    Some(driver) => ms
                        .iter()
                        .try_for_each(|(_, m)| check_driver_floor(m.manifest(), driver)),
                    None => Ok(()),
                };
                let verified = index
                    .clone()
                    .complete(
                        &src,
                        Select::entries(vec![i]).before_blobs(&floor).keep_bytes(),
                    )
                    .map_err(|f| *f.error)?;
                Ok(verified
                    .module(i)
                    .expect("complete keeps the selected module")
                    .manifest()
                    .clone())
            });
            out.push(Diagnosis {
                module: name.to_string(),
                available,
                outcome,
            });
        }
        Ok(out)
    }
}

/// What a registry gives one device: every module's [`Diagnosis`]. Its `Display` is the
/// table `cargo xtask doctor` prints (and `cuda_aot_doctor_report_text` returns): a line
/// naming the device, then per module what would load (target and kind) with its driver
/// floor, or `nothing` with the reason and a `Fix:` line.
#[derive(Debug)]
pub struct DoctorReport {
    /// The device diagnosed.
    pub device: DeviceSpec,
    /// One diagnosis per module, in module name order.
    pub modules: Vec<Diagnosis>,
}

impl DoctorReport {
    /// [`Runtime::diagnose_at`] for `device`, as a report.
    pub fn of(
        registry: impl AsRef<Path>,
        trust_root: &[u8],
        policy: &Policy,
        device: DeviceSpec,
        at: Time,
    ) -> Result<DoctorReport> {
        let modules = Runtime::diagnose_at(registry, trust_root, policy, &device, at)?;
        Ok(DoctorReport { device, modules })
    }

    /// How many modules would not load.
    pub fn refused(&self) -> usize {
        self.modules.iter().filter(|d| d.outcome.is_err()).count()
    }
}

impl Diagnosis {
    /// What would load, as the table says it: `sm_90 cubin`, `compute_80 ptx
    /// (compatibility mode)`, or `nothing`.
    pub fn loads(&self) -> String {
        match &self.outcome {
            Ok(m) => match m.identity.kind {
                Kind::Cubin => format!("{} cubin", m.identity.sm),
                Kind::Ptx => format!("{} ptx (compatibility mode)", m.identity.sm),
            },
            Err(_) => "nothing".into(),
        }
    }
}

impl fmt::Display for DoctorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.device;
        let driver = d.driver.map_or_else(
            || "not given (floors not checked)".into(),
            |v| v.to_string(),
        );
        writeln!(
            f,
            "device {}: sm_{}{}, driver {driver}",
            d.name, d.cc.0, d.cc.1
        )?;
        writeln!(f, "{:<18} {:<28} why", "module", "loads")?;
        for diag in &self.modules {
            match &diag.outcome {
                Ok(m) => writeln!(
                    f,
                    "{:<18} {:<28} verified; needs driver {} or newer",
                    diag.module,
                    diag.loads(),
                    m.identity.driver_floor
                )?,
                Err(e) => {
                    writeln!(f, "{:<18} {:<28} {e}", diag.module, diag.loads())?;
                    writeln!(f, "{:<18} {:<28} Fix: {}", "", "", e.fix())?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::tests::m;

    #[test]
    fn a_device_is_described_by_its_plain_sm_only() {
        for (given, plain) in [
            ("sm_90a", "sm_90"),
            ("sm_100f", "sm_100"),
            ("compute_90", "sm_90"),
        ] {
            let err = DeviceSpec::described(given.parse().unwrap(), None, "test").unwrap_err();
            assert!(
                matches!(&err, Error::NotADevice { target, plain: p } if target == given && p == plain),
                "{err}"
            );
            assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
            assert!(err.fix().contains(plain), "{}", err.fix());
        }
        let d = DeviceSpec::described(
            "sm_89".parse().unwrap(),
            Some(DriverVersion::from_cuda(12040)),
            "--device",
        )
        .unwrap();
        assert_eq!(d.name, "sm_89 (--device)");
        assert_eq!(
            (d.cc, d.driver.unwrap().to_string()),
            ((8, 9), "12.4".into())
        );
    }

    #[test]
    fn the_report_is_a_table_of_what_loads_and_why_nothing_does() {
        let device = DeviceSpec::described("sm_90".parse().unwrap(), None, "test").unwrap();
        let refusal = select("ntt", &[], (9, 0), &device.name, &Policy::development());
        let report = DoctorReport {
            device,
            modules: vec![
                Diagnosis {
                    module: "field_ops".into(),
                    available: vec![],
                    outcome: Ok(m("sm_90", Kind::Cubin)),
                },
                Diagnosis {
                    module: "ntt".into(),
                    available: vec![],
                    outcome: Err(refusal.unwrap_err()),
                },
            ],
        };
        assert_eq!(report.refused(), 1);
        let text = report.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "device sm_90 (test): sm_90, driver not given (floors not checked)"
        );
        assert!(lines[1].starts_with("module             loads"), "{text}");
        assert!(
            lines[2].starts_with(
                "field_ops          sm_90 cubin                  verified; needs driver"
            ),
            "{text}"
        );
        assert!(
            lines[3].starts_with("ntt                nothing                      ntt: no cubin"),
            "{text}"
        );
        assert!(
            lines[4].trim_start().starts_with("Fix: add sm_90"),
            "{text}"
        );
    }
}
