//! `doctor` under a build with the runtime: the devices, `Runtime::diagnose_at` per device
//! (the clock at now or `--at`), the table and the JSON message.

use anyhow::{Context, Result};
use cuda_aot::metadata::Time;
use cuda_aot::{DeviceSpec, Diagnosis, DriverVersion, Policy, Runtime, Target};
use serde_json::json;

use super::{Args, PolicyArg};
use crate::advice::fail;
use crate::{anchor, message};

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
        let at = self.at_time.unwrap_or_else(Time::now);
        let mut refused = 0;
        let mut reports = Vec::new();
        for device in &devices {
            let diagnoses = Runtime::diagnose_at(&registry, &trust, &policy, device, at)
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
            Ok(DeviceSpec::of_device(d.info()))
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
