//! `doctor` under a build with the runtime: the devices (described or probed, by the
//! runtime's `DeviceSpec`), `DoctorReport::of` per device (the clock at now or `--at`), its
//! table (the runtime's rendering) and the JSON message.

use anyhow::{Context, Result};
use cuda_aot::metadata::Time;
use cuda_aot::{DeviceSpec, DoctorReport, DriverVersion, Policy, Target};
use serde_json::json;

use super::{Args, PolicyArg};
use crate::advice::{fail, refix};
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
        let mut reports = Vec::new();
        for device in devices {
            let report = DoctorReport::of(&registry, &trust, &policy, device, at)
                .map_err(anyhow::Error::new)
                .with_context(|| {
                    format!("{}: the registry is refused as a whole", registry.display())
                })?;
            reports.push(report);
        }
        let refused: usize = reports.iter().map(DoctorReport::refused).sum();
        if message::json() {
            let devices: Vec<serde_json::Value> = reports.iter().map(device_json).collect();
            message::emit(
                "doctor",
                json!({ "registry": registry, "policy": format!("{:?}", self.policy).to_lowercase(), "devices": devices }),
            );
        } else {
            for report in &reports {
                print!("{report}");
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

/// A device given as `--device sm_89`: real targets only (the runtime's rule).
fn described(t: Target, driver: Option<DriverVersion>) -> Result<DeviceSpec> {
    DeviceSpec::described(t, driver, "--device").map_err(|e| {
        let fix = format!(
            "write --device sm_{}{} (a device runs its `a` and family cubins too; doctor says which it picks)",
            t.major, t.minor
        );
        refix(anyhow::Error::new(e).context(format!("--device {t}")), fix)
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
    let devices = DeviceSpec::probe_all().map_err(|e| no_gpu(e.to_string()))?;
    if devices.is_empty() {
        return Err(no_gpu("the driver reports 0 devices".into()));
    }
    Ok(devices)
}

fn device_json(report: &DoctorReport) -> serde_json::Value {
    let d = &report.device;
    let modules: Vec<serde_json::Value> = report
        .modules
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
