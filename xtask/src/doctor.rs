//! `cargo xtask doctor`: which blob of every module would load on a device (described, or
//! probed on a GPU host), and why none would: the runtime's own selection and checks
//! (`Runtime::diagnose`), never a second copy of the rules.

use anyhow::{Context, Result};
use cuda_aot::{DeviceSpec, Diagnosis, DriverVersion, Policy, Runtime, Target};
use serde_json::json;

use crate::advice::fail;
use crate::args::{FormatArgs, RegistryArgs};
use crate::{anchor, message};

/// Say, for every module of a registry, which blob would load on a device, or why none.
///
/// Offline: `--device sm_89 [--driver 12.4]` describes the device; without `--device` the
/// real devices and driver of this host are probed. Each module gets the blob
/// `Runtime::open` would load (target, kind, driver floor) or the reason it would refuse
/// the module: no exact target (with the targets that exist), driver below the floor, PTX
/// newer than the driver, family or arch-specific mismatch, PTX not allowed by the policy,
/// no promotion under production, a manifest or blob that fails verification. A registry
/// whose metadata fails (signature, expired or frozen timestamp, rollback, channel) is
/// refused as a whole, as `open` would. Nothing is changed: no rollback state is saved.
#[derive(clap::Args)]
#[command(after_long_help = "\
The reasons are the runtime's own: doctor calls Runtime::diagnose, which runs the selection
and the checks of Runtime::open for one module at a time, without a driver. Exit status 0
when every module would load, 1 when any would not (each with its Fix: line) or the registry
is refused.

Examples:
  cargo xtask doctor --device sm_89 --driver 12.4                 an L40S with a 12.4 driver
  cargo xtask doctor --device sm_90 --policy production --registry R --trust keys/root.json
  cargo xtask doctor --json                                       on a GPU host: its devices")]
pub struct Args {
    #[command(flatten)]
    at: RegistryArgs,
    /// The device, as its exact SM (`sm_89`, `sm_90`, `sm_100`); probed when left out.
    #[arg(long, value_name = "SM")]
    device: Option<Target>,
    /// The driver's CUDA version (`12.4`, `13.0`); with --device: not checked when left out.
    #[arg(long, value_name = "X.Y", requires = "device")]
    driver: Option<DriverVersion>,
    /// The policy the prover opens with.
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = PolicyArg::Development)]
    policy: PolicyArg,
    /// Allow PTX (the labelled compatibility mode), as `Policy::with_ptx_compatibility`.
    #[arg(long)]
    allow_ptx: bool,
    #[command(flatten)]
    pub(crate) format: FormatArgs,
}

/// `Policy::development()` or `Policy::production()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PolicyArg {
    /// Dev-signed registries (`cargo xtask release` on a fresh clone).
    Development,
    /// Production-signed registries, promoted modules only.
    Production,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let registry = self.at.registry();
        let trust_file = self.at.trust_file()?;
        let trust = anchor::read_bytes(&trust_file)?;
        let mut policy = match self.policy {
            PolicyArg::Development => Policy::development(),
            PolicyArg::Production => Policy::production(),
        };
        if self.allow_ptx {
            policy = policy.with_ptx_compatibility();
        }
        let devices = match self.device {
            Some(t) => vec![described(t, self.driver)?],
            None => probe()?,
        };
        let mut refused = 0;
        let mut reports = Vec::new();
        for device in &devices {
            let diagnoses = Runtime::diagnose(&registry, &trust, &policy, device)
                .map_err(anyhow::Error::new)
                .with_context(|| {
                    format!("{}: the registry is refused as a whole", registry.display())
                })?;
            refused += diagnoses.iter().filter(|d| d.outcome.is_err()).count();
            reports.push((device, diagnoses));
        }
        if message::json() {
            let devices: Vec<serde_json::Value> =
                reports.iter().map(|(d, ds)| device_json(d, ds)).collect();
            message::emit(
                "doctor",
                json!({ "registry": registry, "policy": format!("{:?}", self.policy).to_lowercase(), "devices": devices }),
            );
        } else {
            for (d, ds) in &reports {
                print_device(d, ds);
            }
        }
        if refused > 0 {
            return Err(fail(
                format!(
                    "{refused} module(s) of {} would not load (reasons above)",
                    registry.display()
                ),
                "follow each module's Fix: line; `cargo xtask doctor --help` lists the reasons",
            ));
        }
        Ok(())
    }
}

/// A device given as `--device sm_89`: real targets only.
fn described(t: Target, driver: Option<DriverVersion>) -> Result<DeviceSpec> {
    if t.virtual_arch || t.arch_specific || t.family_specific {
        return Err(fail(
            format!("--device {t}: a device is named by its plain SM"),
            format!(
                "write --device sm_{}{} (a device runs its `a` and family cubins too; doctor says which it picks)",
                t.major, t.minor
            ),
        ));
    }
    Ok(DeviceSpec {
        name: format!("{t} (--device)"),
        cc: (t.major, t.minor),
        driver,
    })
}

/// This host's devices and driver.
fn probe() -> Result<Vec<DeviceSpec>> {
    let no_gpu = |e: String| {
        fail(
            format!("no CUDA device to probe: {e}"),
            "describe the device instead: --device sm_XX [--driver X.Y]",
        )
    };
    let n = cuda_aot::cuda::device_count().map_err(|e| no_gpu(e.to_string()))?;
    if n == 0 {
        return Err(no_gpu("the driver reports 0 devices".into()));
    }
    (0..n)
        .map(|i| {
            let d = cuda_aot::cuda::Device::open(i).map_err(|e| no_gpu(e.to_string()))?;
            let info = d.info();
            Ok(DeviceSpec {
                name: format!("{} (device {i})", info.name),
                cc: (info.cc_major, info.cc_minor),
                driver: Some(DriverVersion::from_cuda(info.driver_version)),
            })
        })
        .collect()
}

fn print_device(d: &DeviceSpec, ds: &[Diagnosis]) {
    println!(
        "device {}: sm_{}{}, driver {}",
        d.name,
        d.cc.0,
        d.cc.1,
        d.driver.map_or_else(
            || "not given (floors not checked)".into(),
            |v| v.to_string()
        )
    );
    println!("{:<18} {:<28} why", "module", "loads");
    for diag in ds {
        match &diag.outcome {
            Ok(m) => {
                let id = &m.identity;
                let kind = match id.kind {
                    cuda_aot::Kind::Cubin => "cubin".to_string(),
                    cuda_aot::Kind::Ptx => "ptx (compatibility mode)".to_string(),
                };
                println!(
                    "{:<18} {:<28} verified; needs driver {} or newer",
                    diag.module,
                    format!("{} {kind}", id.sm),
                    id.driver_floor
                );
            }
            Err(e) => {
                println!("{:<18} {:<28} {e}", diag.module, "nothing");
                println!("{:<18} {:<28} Fix: {}", "", "", e.fix());
            }
        }
    }
}

fn device_json(d: &DeviceSpec, ds: &[Diagnosis]) -> serde_json::Value {
    let modules: Vec<serde_json::Value> = ds
        .iter()
        .map(|diag| {
            let available: Vec<String> = diag
                .available
                .iter()
                .map(|(t, k)| format!("{t} {k}"))
                .collect();
            match &diag.outcome {
                Ok(m) => json!({
                    "module": diag.module,
                    "available": available,
                    "loads": {
                        "target": m.identity.sm,
                        "kind": m.identity.kind,
                        "driver_floor": m.identity.driver_floor,
                        "module_digest": m.module_digest,
                    },
                }),
                Err(e) => json!({
                    "module": diag.module,
                    "available": available,
                    "loads": null,
                    "reason": e.to_string(),
                    "fix": e.fix(),
                }),
            }
        })
        .collect();
    json!({
        "name": d.name,
        "sm": format!("sm_{}{}", d.cc.0, d.cc.1),
        "driver": d.driver,
        "modules": modules,
    })
}
