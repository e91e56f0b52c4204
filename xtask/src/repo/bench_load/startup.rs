//! Prover start-up, measured in fresh processes: from the start of a process to every
//! kernel ready to launch, through cuda-aot (`Runtime::open_devices` + `preload_all` +
//! kernel lookups) or bare (context creation + `cuModuleLoadData` of the same cubin files +
//! `cuModuleGetFunction`), on one device or several, in the environment a [`ProbeEnv`]
//! sets (hardware queues, module loading mode). The primary context is created once
//! per process, so each sample is its own child process of `bench-load`; and the parent
//! has not initialised the driver while they run (a process holding the GPUs makes the
//! next process's `cuInit` about 190 ms cheaper, which no prover starting alone on its
//! host sees), so even what the probes load is planned by a child ([`plan`]).

use anyhow::{Context, Result, bail};
use cuda_aot::{Policy, Runtime};
use cuda_aot_baseline::BareStartup;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::Args;
pub use super::Arm;
use super::run::{Row, interleave};
use super::stats::Ratio;
use crate::paths;

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

/// The driver's module loading mode a probe is started with (`CUDA_MODULE_LOADING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loading {
    /// `LAZY`: each function is placed on the device at first use (the driver's default
    /// since CUDA 12.2); the runtime's lookups force it at once (`cuFuncLoad`).
    Lazy,
    /// `EAGER`: every function of a module is placed on the device when the module loads.
    Eager,
}

impl Loading {
    /// The value of `CUDA_MODULE_LOADING`.
    pub fn value(self) -> &'static str {
        match self {
            Loading::Lazy => "LAZY",
            Loading::Eager => "EAGER",
        }
    }
}

/// What a probe's environment sets besides `CUDA_CACHE_DISABLE=1`; a field left `None` is
/// inherited from bench-load's own environment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProbeEnv {
    /// `CUDA_DEVICE_MAX_CONNECTIONS`.
    pub connections: Option<u32>,
    /// `CUDA_MODULE_LOADING`.
    pub loading: Option<Loading>,
}

/// What a probe process prints on its last line.
const PREFIX: &str = "startup_us=";
/// What a plan process prints on its last line.
const PLAN_PREFIX: &str = "devices=";

impl Args {
    /// Start-up in fresh processes: cuda-aot vs bare on device 0, cuda-aot on device 0 with
    /// `CUDA_MODULE_LOADING=LAZY` and `=EAGER`, and cuda-aot on devices 0 and 1 when the host
    /// has two GPUs, interleaved. Runs before this process initialises the driver (module
    /// docs).
    pub(super) fn startup(&self, trust_path: &Path) -> Result<(Vec<Row>, Vec<Ratio>)> {
        let registry = self.at.registry();
        let list = self
            .out
            .clone()
            .unwrap_or_else(|| paths::work_dir().join("bench-load"))
            .join("bare-images.json");
        std::fs::create_dir_all(list.parent().expect("a folder"))?;
        let plan = plan(&registry, trust_path, &list)?;
        let two = plan.devices >= 2;
        let mut rows = vec![
            Row::new("startup", "verified_1_device", 0),
            Row::new("startup", "bare_1_device", 0),
            Row::new("startup", "verified_2_devices", 0),
            Row::new("startup", "bare_2_devices", 0),
            Row::new("startup", "verified_1_device_connections", 0),
            Row::new("startup", "verified_2_devices_connections", 0),
            Row::new("startup", "verified_1_device_lazy", 0),
            Row::new("startup", "verified_1_device_eager", 0),
        ];
        let inherited = ProbeEnv::default();
        let conn = ProbeEnv {
            connections: self.startup_connections,
            ..inherited
        };
        let loading = |mode| ProbeEnv {
            loading: Some(mode),
            ..inherited
        };
        let arms: &[(Arm, &[usize], ProbeEnv)] = &[
            (Arm::Verified, &[0], inherited),
            (Arm::Bare, &[0], inherited),
            (Arm::Verified, &[0, 1], inherited),
            (Arm::Bare, &[0, 1], inherited),
            (Arm::Verified, &[0], conn),
            (Arm::Verified, &[0, 1], conn),
            (Arm::Verified, &[0], loading(Loading::Lazy)),
            (Arm::Verified, &[0], loading(Loading::Eager)),
        ];
        // The arms this host runs, by index into `arms`.
        let mut used: Vec<usize> = match (two, conn.connections.is_some()) {
            (false, false) => vec![0, 1],
            (false, true) => vec![0, 1, 4],
            (true, false) => vec![0, 1, 2, 3],
            (true, true) => vec![0, 1, 2, 3, 4, 5],
        };
        used.extend([6, 7]);
        let samples = interleave(self.order, used.len(), self.startup_reps, |j, _| {
            let (kind, devices, env) = arms[used[j]];
            run_child(kind, devices, env, &registry, trust_path, &list)
        })?;
        for (j, s) in samples.into_iter().enumerate() {
            rows[used[j]].samples = s;
        }
        let ratio = |name: &str, a: usize, b: usize, limit: Option<f64>| {
            rows[a].ratio(&rows[b], name, limit)
        };
        let mut ratios = vec![ratio("startup_vs_bare", 0, 1, Some(1.05))];
        // Reported: the same verified start-up with every function placed on the device at
        // module load (EAGER) against at lookup (LAZY, where the runtime's cuFuncLoad does
        // it), both set explicitly in the probes' environment.
        ratios.push(ratio("startup_eager_vs_lazy", 7, 6, None));
        if let Some(n) = conn.connections {
            // Reported: what fewer hardware queues save on one device.
            ratios.push(ratio("startup_connections_vs_default", 4, 0, None));
            if two {
                ratios.push(ratio("startup_2_devices_vs_1_connections", 5, 4, None));
            }
            eprintln!("note: the *_connections rows ran with CUDA_DEVICE_MAX_CONNECTIONS={n}");
        }
        if two {
            // What cuda-aot controls is gated (its two-device start-up against a bare one);
            // two devices against one is reported next to the driver's own figure, which
            // bounds it (the driver creates contexts partly one after another).
            ratios.push(ratio("startup_2_devices_vs_bare", 2, 3, Some(1.05)));
            ratios.push(ratio("startup_2_devices_vs_1", 2, 0, None));
            ratios.push(ratio("bare_2_devices_vs_1", 3, 1, None));
        } else {
            eprintln!("note: one GPU on this host: no two-device start-up rows");
        }
        let rows = rows
            .into_iter()
            .enumerate()
            .filter(|(k, _)| used.contains(k))
            .map(|(_, r)| r)
            .collect();
        Ok((rows, ratios))
    }
}

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
            check_loading_mode()?;
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

/// After the clock of a probe started with `CUDA_MODULE_LOADING=LAZY` or `EAGER`: fails
/// unless the driver reports that mode, so a row named for a mode measured it. Nothing to
/// check when the variable is unset or holds another value.
fn check_loading_mode() -> Result<()> {
    let Ok(want) = std::env::var("CUDA_MODULE_LOADING") else {
        return Ok(());
    };
    let want = want.to_ascii_uppercase();
    if want != Loading::Lazy.value() && want != Loading::Eager.value() {
        return Ok(());
    }
    let got = cuda_aot_baseline::module_loading_mode()
        .context("asking the driver for its module loading mode")?;
    if got != want {
        bail!(
            "the probe ran with CUDA_MODULE_LOADING={want}, but the driver reports {got} \
             loading (cuModuleGetLoadingMode): the row would not measure what it is named for"
        );
    }
    Ok(())
}

/// Runs one probe in a fresh process of this same binary, with `env` in its environment,
/// and returns its start-up time.
pub fn run_child(
    arm: Arm,
    devices: &[usize],
    env: ProbeEnv,
    registry: &Path,
    trust: &Path,
    images: &Path,
) -> Result<Duration> {
    let text = child(arm, devices, env, registry, trust, images)?;
    let us: u64 = last_value(&text, PREFIX)?;
    Ok(Duration::from_micros(us))
}

/// Runs a [`Arm::Plan`] probe: writes the bare probes' image list to `images` and returns
/// what the start-up phase needs, without initialising the driver in this process.
pub fn plan(registry: &Path, trust: &Path, images: &Path) -> Result<Plan> {
    let text = child(
        Arm::Plan,
        &[0],
        ProbeEnv::default(),
        registry,
        trust,
        images,
    )?;
    Ok(Plan {
        devices: last_value(&text, PLAN_PREFIX)?,
    })
}

/// Runs `bench-load --startup-probe ARM` in a fresh process of this binary (JIT cache off)
/// and returns what it printed, or fails with its output.
fn child(
    arm: Arm,
    devices: &[usize],
    env: ProbeEnv,
    registry: &Path,
    trust: &Path,
    images: &Path,
) -> Result<String> {
    let list: Vec<String> = devices.iter().map(usize::to_string).collect();
    let mut probe = Command::new(std::env::current_exe()?);
    if let Some(n) = env.connections {
        probe.env("CUDA_DEVICE_MAX_CONNECTIONS", n.to_string());
    }
    if let Some(mode) = env.loading {
        probe.env("CUDA_MODULE_LOADING", mode.value());
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
        .with_context(|| format!("starting a start-up probe ({arm:?}, {env:?})"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "start-up probe {arm:?} on devices {list:?} ({env:?}) failed:\n{}{}",
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
