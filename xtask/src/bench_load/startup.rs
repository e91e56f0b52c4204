//! Prover start-up, measured in fresh processes: from the start of a process to every
//! kernel ready to launch, through cuda-aot (`Runtime::open_devices` + `preload_all` +
//! kernel lookups) or bare (context creation + `cuModuleLoadData` of the same cubin files +
//! `cuModuleGetFunction`), on one device or several. The primary context is created once
//! per process, so each sample is its own child process of `bench-load`; and the parent
//! has not initialised the driver while they run (a process holding the GPUs makes the
//! next process's `cuInit` about 190 ms cheaper, which no prover starting alone on its
//! host sees), so even what the probes load is planned by a child ([`plan`]).

use anyhow::{Context, Result, bail};
use cuda_aot::{Policy, Runtime};
use cuda_aot_bench::BareStartup;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub use super::Arm;

/// What the start-up phase needs to know before its probes run: learnt in a child process,
/// so that the parent never initialises the driver.
pub struct Plan {
    /// CUDA devices on this host.
    pub devices: usize,
}

/// One module a bare start-up loads: the cubin file and its kernel symbols.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BareImage {
    /// The blob file in the registry.
    pub path: PathBuf,
    /// Every kernel symbol.
    pub kernels: Vec<String>,
}

/// What a probe process prints on its last line.
const PREFIX: &str = "startup_us=";
/// What a plan process prints on its last line.
const PLAN_PREFIX: &str = "devices=";

/// The probe itself (runs in the child): measures and prints `startup_us=<n>`.
pub fn probe(
    arm: Arm,
    devices: &[usize],
    registry: &Path,
    trust: &Path,
    policy: Policy,
    images: Option<&Path>,
) -> Result<()> {
    let t = Instant::now();
    let (took, kernels) = match arm {
        Arm::Plan => {
            let file = images.context("a plan probe needs --bare-images")?;
            let anchor =
                cuda_aot::fs::read_capped(trust, crate::limits::limits().root, "trust root")?;
            let rt = Runtime::open(registry, &anchor, policy)?;
            let list: Vec<BareImage> = rt
                .selected()
                .map(|m| BareImage {
                    path: registry.join(cuda_aot::source::layout::blob(&m.module_digest)),
                    kernels: m
                        .functions
                        .iter()
                        .map(|f| f.symbol.as_str().to_string())
                        .collect(),
                })
                .collect();
            crate::files::write(file, &serde_json::to_vec_pretty(&list)?)?;
            println!("{PLAN_PREFIX}{}", cuda_aot::cuda::device_count()?);
            return Ok(());
        }
        Arm::Verified => {
            let anchor =
                cuda_aot::fs::read_capped(trust, crate::limits::limits().root, "trust root")?;
            let rts = Runtime::open_devices(registry, &anchor, policy, devices)?;
            Runtime::preload_all(&rts)?;
            let mut n = 0;
            for rt in &rts {
                for m in rt.selected() {
                    for f in &m.functions {
                        rt.kernel(m.identity.module.as_str(), f.name.as_str())?;
                        n += 1;
                    }
                }
            }
            // Ready to launch on every device; the modules stay loaded until after this.
            let took = t.elapsed();
            drop(rts);
            (took, n)
        }
        Arm::Bare => {
            let file = images.context("a bare probe needs --bare-images")?;
            let list: Vec<BareImage> = serde_json::from_slice(
                &std::fs::read(file).with_context(|| format!("reading {}", file.display()))?,
            )?;
            // One thread per device, as the verified arm creates its contexts; each reads the
            // shared clock when its device is ready (modules stay loaded until then), and
            // the start-up is the last of them.
            let done = std::thread::scope(|s| {
                let handles: Vec<_> = devices
                    .iter()
                    .map(|&d| {
                        let list = &list;
                        s.spawn(move || -> Result<(Duration, usize)> {
                            let images = list
                                .iter()
                                .map(|i| Ok((std::fs::read(&i.path)?, i.kernels.clone())))
                                .collect::<Result<Vec<_>>>()?;
                            let ready = BareStartup::run(d, &images)?;
                            let at = t.elapsed();
                            eprintln!("bare probe: device {d} ready at {} us", at.as_micros());
                            Ok((at, ready.kernels()))
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("probe thread"))
                    .collect::<Result<Vec<_>>>()
            })?;
            let took = done.iter().map(|d| d.0).max().unwrap_or_default();
            (took, done.iter().map(|d| d.1).sum::<usize>())
        }
    };
    println!("{PREFIX}{} kernels={kernels}", took.as_micros());
    Ok(())
}

/// Runs one probe in a fresh process of this same binary and returns its start-up time;
/// with `connections`, the probe runs with CUDA_DEVICE_MAX_CONNECTIONS set to it.
pub fn run_child(
    arm: Arm,
    devices: &[usize],
    connections: Option<u32>,
    registry: &Path,
    trust: &Path,
    images: &Path,
) -> Result<Duration> {
    let text = child(arm, devices, connections, registry, trust, images)?;
    let us: u64 = last_value(&text, PREFIX)?;
    Ok(Duration::from_micros(us))
}

/// Runs a [`Arm::Plan`] probe: writes the bare probes' image list to `images` and returns
/// what the start-up phase needs, without initialising the driver in this process.
pub fn plan(registry: &Path, trust: &Path, images: &Path) -> Result<Plan> {
    let text = child(Arm::Plan, &[0], None, registry, trust, images)?;
    Ok(Plan {
        devices: last_value(&text, PLAN_PREFIX)?,
    })
}

/// Runs `bench-load --startup-probe ARM` in a fresh process of this binary (JIT cache off)
/// and returns what it printed, or fails with its output.
fn child(
    arm: Arm,
    devices: &[usize],
    connections: Option<u32>,
    registry: &Path,
    trust: &Path,
    images: &Path,
) -> Result<String> {
    let list: Vec<String> = devices.iter().map(usize::to_string).collect();
    let mut probe = Command::new(std::env::current_exe()?);
    if let Some(n) = connections {
        probe.env("CUDA_DEVICE_MAX_CONNECTIONS", n.to_string());
    }
    let out = probe
        .arg("bench-load")
        .arg("--registry")
        .arg(registry)
        .arg("--trust")
        .arg(trust)
        .arg("--startup-probe")
        .arg(match arm {
            Arm::Verified => "verified",
            Arm::Bare => "bare",
            Arm::Plan => "plan",
        })
        .arg("--devices")
        .arg(list.join(","))
        .arg("--bare-images")
        .arg(images)
        .env("CUDA_CACHE_DISABLE", "1")
        .output()
        .with_context(|| format!("starting a start-up probe ({arm:?})"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "start-up probe {arm:?} on devices {list:?} failed:\n{}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(text)
}

/// The number after `prefix` on the last line of `text` that starts with it.
fn last_value<T: std::str::FromStr>(text: &str, prefix: &str) -> Result<T> {
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no {prefix} line in the probe's output: {text}"))
}
