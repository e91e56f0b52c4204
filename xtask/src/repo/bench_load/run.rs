//! The benchmark itself (with the `gpu` feature): the rows and how arms are interleaved,
//! the steps of a run, and the in-process arms (verification at open, the bundle's load
//! arms, each module, ready to launch, PTX).

use anyhow::{Context, Result};
use cuda_aot::cuda::{self, Device};
use cuda_aot::source::DirSource;
use cuda_aot::verify::{Options, Verified, verify_all};
use cuda_aot::{Channel, Kind, Policy, Runtime};
use cuda_aot_baseline as raw;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::order::Order;
use super::report::{gate, redraw, write_results};
use super::{Args, startup, stats};
use crate::advice::Fix;
use crate::paths;

use stats::Ratio;

/// One CSV row: an arm's samples.
pub(super) struct Row {
    pub(super) scope: String,
    pub(super) method: &'static str,
    pub(super) bytes: usize,
    /// One time per repetition (paired with the other arms' by index).
    pub(super) samples: Vec<Duration>,
}

impl Row {
    /// An empty row for arm `method` of `scope`, loading `bytes`.
    pub(super) fn new(scope: &str, method: &'static str, bytes: usize) -> Row {
        Row {
            scope: scope.into(),
            method,
            bytes,
            samples: Vec::new(),
        }
    }
    /// The paired ratio of this arm over `base`, named `name`; numerator and denominator
    /// are written as `scope/method`.
    pub(super) fn ratio(&self, base: &Row, name: &str, limit: Option<f64>) -> Ratio {
        Ratio::paired(
            name,
            &format!("{}/{}", self.scope, self.method),
            &format!("{}/{}", base.scope, base.method),
            &self.samples,
            &base.samples,
            limit,
        )
    }
    pub(super) fn median_us(&self) -> f64 {
        let v: Vec<f64> = self.samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        crate::repo::stats::median(&v)
    }
    pub(super) fn pct_us(&self, p: f64) -> f64 {
        let mut v: Vec<f64> = self.samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p).round() as usize]
    }
}

/// Runs `n` arms interleaved in `order`: one warm-up repetition whose times are dropped,
/// then `reps` (at least 2) kept, `arm(k, rep)` running arm `k` once in repetition `rep`
/// (0 is the warm-up) and returning its time. Returns each arm's samples, paired by index.
pub(super) fn interleave(
    order: Order,
    n: usize,
    reps: usize,
    mut arm: impl FnMut(usize, usize) -> Result<Duration>,
) -> Result<Vec<Vec<Duration>>> {
    let mut samples = vec![Vec::new(); n];
    for rep in 0..=reps.max(2) {
        for k in order.run(n, rep) {
            let took = arm(k, rep)?;
            if rep > 0 {
                samples[k].push(took);
            }
        }
    }
    Ok(samples)
}

/// Reads every byte of `images` (into the CPU caches), as every arm does with what it loads
/// just before its clock starts.
pub(super) fn warm<B: AsRef<[u8]>>(images: &[B]) {
    for b in images {
        std::hint::black_box(b.as_ref().iter().fold(0u8, |a, x| a ^ x));
    }
}

/// Every module of `registry`, verified against the trust root file bytes `trust` (no
/// rollback state, default limits): what the PTX baseline and the context rows load.
pub(super) fn verify_registry(registry: &Path, trust: &[u8]) -> Result<Verified> {
    let src = DirSource::new(registry);
    verify_all(&src, trust, Default::default(), &Options::default())
        .map_err(cuda_aot::Error::from)
        .with_context(|| format!("verifying {}", registry.display()))
}

impl Args {
    /// Runs the task.
    pub fn run(mut self) -> Result<()> {
        let out = self
            .out
            .get_or_insert_with(|| paths::work_dir().join("bench-load"))
            .clone();
        self.spec.get_or_insert_with(paths::default_spec);
        let csv = out.join("bench-load.csv");
        if self.gate_only {
            return gate(&csv);
        }
        if self.chart_only {
            return redraw(&out, &csv);
        }
        if let Some(arm) = self.startup_probe {
            return self.startup_probe(arm);
        }
        // The JIT cache must be off before the driver initialises: re-run ourselves with it.
        if std::env::var("CUDA_CACHE_DISABLE").as_deref() != Ok("1") {
            let status = std::process::Command::new(std::env::current_exe()?)
                .args(std::env::args_os().skip(1))
                .env("CUDA_CACHE_DISABLE", "1")
                .status()
                .context("re-running bench-load with CUDA_CACHE_DISABLE=1")?;
            std::process::exit(status.code().unwrap_or(1));
        }
        if !cuda::driver_present() {
            return Err(anyhow::Error::new(Fix(
                "run bench-load on the GPU host (docs/gpu.md)".into(),
            )))
            .context("no CUDA driver on this machine");
        }
        let trust_path = self.at.trust_file()?;
        let trust = std::fs::read(&trust_path)
            .with_context(|| format!("reading {}", trust_path.display()))?;
        // Every arm: the rows and the ratios.
        let (rows, ratios) = self.measure(&trust, &trust_path)?;
        std::fs::create_dir_all(&out)?;
        let device = Device::open(0)?;
        // The header line of both CSVs: the run, the device and this host's overheads.
        let header = self.header(&device)?;
        // bench-load.csv, bench-ratios.csv and bench-load.svg, printed and written.
        write_results(&out, &csv, &header, &rows, &ratios)?;
        gate(&csv)
    }

    /// `--startup-probe`: one start-up probe in this process, its time printed.
    fn startup_probe(&self, arm: super::Arm) -> Result<()> {
        let trust = self.at.trust_file()?;
        let policy = policy_for(&cuda_aot::fs::read_capped(
            &trust,
            crate::limits::limits().root,
            "trust root",
        )?)?;
        startup::probe(
            arm,
            &self.devices,
            &self.at.registry(),
            &trust,
            policy,
            self.bare_images.as_deref(),
        )
    }

    /// The CSVs' header line: the time, the device and driver, the run's settings, and what
    /// one clock read and one context check cost on `device`.
    fn header(&self, device: &Device) -> Result<String> {
        let info = device.info();
        // What one clock read costs here (a system call on some virtual machines).
        let t = Instant::now();
        for _ in 0..100_000 {
            std::hint::black_box(Instant::now());
        }
        let clock_ns = t.elapsed().as_nanos() / 100_000;
        // What the context check before every driver call costs (cuCtxGetCurrent).
        let t = Instant::now();
        for _ in 0..100_000 {
            device.context().bind_to_thread()?;
        }
        let bind_ns = t.elapsed().as_nanos() / 100_000;
        // The module loading mode every in-process arm ran under (the start-up probes set
        // their own where a row says so).
        let loading = std::env::var("CUDA_MODULE_LOADING")
            .unwrap_or_else(|_| "unset (driver default)".into());
        let header = format!(
            "# cuda-aot bench-load, {}, device {} ({}), driver CUDA {}, reps {}, ratio reps {}, start-up reps {}{}, contexts {}, {} order, clock read {clock_ns} ns, context check {bind_ns} ns, CUDA_CACHE_DISABLE=1, CUDA_MODULE_LOADING {loading}\n",
            humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
            info.name,
            info.sm(),
            info.driver_version_string(),
            self.reps,
            self.ratio_reps,
            self.startup_reps,
            self.startup_connections
                .map(|n| format!(" (*_connections: CUDA_DEVICE_MAX_CONNECTIONS={n})"))
                .unwrap_or_default(),
            self.contexts,
            self.order.name(),
        );
        Ok(header)
    }

    /// Every arm, in order: the start-up probes (first, before any CUDA call here), the
    /// verification at open, the bundle's load arms and fresh-copy diagnostics (both
    /// registries), each module, the ready-to-launch pair, PTX, NVRTC and the context rows;
    /// the start-up rows are listed last.
    fn measure(&self, trust: &[u8], trust_path: &Path) -> Result<(Vec<Row>, Vec<Ratio>)> {
        let policy = policy_for(trust)?;
        // First, while no CUDA call has been made in this process.
        let (startup_rows, startup_ratios) = self.startup(trust_path)?;
        let probe = Runtime::open(self.at.registry(), trust, policy.clone())?;
        let selected: Vec<(String, Vec<u8>, u32)> = probe
            .selected()
            .map(|m| {
                let name = m.identity.module.to_string();
                let bytes = probe.verified_bytes(&name).expect("selected").to_vec();
                (
                    name,
                    bytes,
                    m.identity.geometry.get("block").copied().unwrap_or(256) as u32,
                )
            })
            .collect();
        let info = probe.device().clone();
        drop(probe);
        let ptx = self.registry_ptx(trust, (info.cc_major, info.cc_minor))?;
        let device = Device::open(0)?;
        let ctx = device.context();
        let reps = self.reps.max(1);
        let total_bytes: usize = selected.iter().map(|s| s.1.len()).sum();
        let mut rows = Vec::new();

        // Verification at open, on its own row (done once per process).
        rows.push(self.verify_at_open(trust, &policy, reps, total_bytes)?);

        // The bundle, three arms interleaved (each after an identical Runtime::open):
        // verified preload, bare load+unload per module, bare loads kept until the clock
        // stops. Paired ratios with bootstrap intervals.
        let mut ratios = Vec::new();
        let load_rows = self.bundle_arms(trust, &policy, ctx, &mut rows, &mut ratios)?;
        // An embedded bundle against the same release on files, each registry.
        let mut registries = vec![("bundle", self.at.registry())];
        registries.extend(self.also_registry.clone().map(|r| ("foreign", r)));
        for (scope, registry) in &registries {
            let (embedded_rows, embedded_ratios) =
                self.embedded_arms(scope, registry, trust, &policy)?;
            rows.extend(embedded_rows);
            ratios.extend(embedded_ratios);
        }
        // Each selected module: the verified load against bare cuModuleLoadData.
        rows.extend(self.module_arms(&selected, trust, &policy, ctx, reps)?);
        rows.extend(load_rows);

        // The same verified load through cuLibraryLoadData, and ready to launch through
        // each load API.
        rows.extend(self.ready_arms(trust, &policy, reps, total_bytes)?);

        // PTX through the driver JIT, then NVRTC compile + load.
        rows.extend(ptx_rows(&ptx, ctx, reps)?);
        rows.extend(self.nvrtc_rows(&selected, ctx, &info, reps)?);
        // Last, so that no other arm runs beside the extra contexts (contexts.rs).
        for (scope, registry) in &registries {
            let (context_rows, context_ratios) =
                self.context_arms(scope, registry, trust, &policy)?;
            rows.extend(context_rows);
            ratios.extend(context_ratios);
        }
        rows.extend(startup_rows);
        ratios.extend(startup_ratios);
        Ok((rows, ratios))
    }

    /// `reps` timed `Runtime::open`s (verification at open) after one untimed.
    fn verify_at_open(
        &self,
        trust: &[u8],
        policy: &Policy,
        reps: usize,
        total_bytes: usize,
    ) -> Result<Row> {
        let mut open = Row::new("bundle", "verify_at_open", total_bytes);
        for i in 0..=reps {
            let t = Instant::now();
            let rt = Runtime::open(self.at.registry(), trust, policy.clone())?;
            let took = t.elapsed();
            drop(rt);
            if i > 0 {
                open.samples.push(took);
            }
        }
        Ok(open)
    }

    /// The bundle's load arms and fresh-copy diagnostics, returned to be listed after the
    /// module rows; with --also-registry the foreign registry's, added to `rows` at once.
    /// Their ratios go to `ratios`.
    fn bundle_arms(
        &self,
        trust: &[u8],
        policy: &Policy,
        ctx: &Arc<cuda::CudaContext>,
        rows: &mut Vec<Row>,
        ratios: &mut Vec<Ratio>,
    ) -> Result<Vec<Row>> {
        let (mut load_rows, load_ratios) =
            self.load_arms("bundle", &self.at.registry(), trust, policy, ctx)?;
        ratios.extend(load_ratios);
        // Reported: why a fresh copy loads faster than the bytes in place (copies.rs).
        let (copy_rows, copy_ratios) =
            self.copy_arms("bundle", &self.at.registry(), trust, policy, ctx)?;
        load_rows.extend(copy_rows);
        ratios.extend(copy_ratios);
        if let Some(other) = &self.also_registry {
            let (more_rows, more_ratios) = self.load_arms("foreign", other, trust, policy, ctx)?;
            rows.extend(more_rows);
            ratios.extend(more_ratios);
            let (copy_rows, copy_ratios) = self.copy_arms("foreign", other, trust, policy, ctx)?;
            rows.extend(copy_rows);
            ratios.extend(copy_ratios);
        }
        Ok(load_rows)
    }

    /// Each selected module: the verified load (`module()`) against bare
    /// cuModuleLoadData of the same bytes, each after a `Runtime::open`, alternating which
    /// goes first.
    fn module_arms(
        &self,
        selected: &[(String, Vec<u8>, u32)],
        trust: &[u8],
        policy: &Policy,
        ctx: &Arc<cuda::CudaContext>,
        reps: usize,
    ) -> Result<Vec<Row>> {
        let mut rows = Vec::new();
        for (name, bytes, _) in selected {
            let mut verified = Row::new(name, "verified_load", bytes.len());
            let mut raw = Row::new(name, "raw_cuModuleLoadData", bytes.len());
            for i in 0..=reps {
                let verified_once = || -> Result<Duration> {
                    let rt = Runtime::open(self.at.registry(), trust, policy.clone())?;
                    let t = Instant::now();
                    rt.module(name)?;
                    Ok(t.elapsed())
                };
                let raw_once = || -> Result<Duration> {
                    let _rt = Runtime::open(self.at.registry(), trust, policy.clone())?;
                    Ok(raw::time_module_load(ctx, bytes, false)?)
                };
                let (v, r) = if i % 2 == 0 {
                    (verified_once()?, raw_once()?)
                } else {
                    let r = raw_once()?;
                    (verified_once()?, r)
                };
                if i > 0 {
                    verified.samples.push(v);
                    raw.samples.push(r);
                }
            }
            rows.push(verified);
            rows.push(raw);
        }
        Ok(rows)
    }

    /// The same verified load through cuLibraryLoadData (context-independent loading).
    /// Ready to launch: preload plus a lookup of every kernel, through each load API.
    /// cuLibraryLoadData defers placing kernels in the context to the lookup, so only
    /// this pair compares the two APIs fairly.
    fn ready_arms(
        &self,
        trust: &[u8],
        policy: &Policy,
        reps: usize,
        total_bytes: usize,
    ) -> Result<Vec<Row>> {
        let library = Policy {
            load_api: cuda::LoadApi::Library,
            ..policy.clone()
        };
        let mut bundle_lib = Row::new("bundle", "verified_load_library", total_bytes);
        let mut ready_module = Row::new("bundle", "ready_module_api", total_bytes);
        let mut ready_library = Row::new("bundle", "ready_library_api", total_bytes);
        for i in 0..=reps {
            let mut arms = [(policy, &mut ready_module), (&library, &mut ready_library)];
            if i % 2 == 1 {
                arms.reverse();
            }
            for (p, row) in arms {
                let rt = Runtime::open(self.at.registry(), trust, p.clone())?;
                let t = Instant::now();
                rt.preload()?;
                let loaded = t.elapsed();
                for m in rt.selected() {
                    for f in &m.functions {
                        rt.kernel(m.identity.module.as_str(), f.name.as_str())?;
                    }
                }
                if i > 0 {
                    row.samples.push(t.elapsed());
                    if p.load_api == cuda::LoadApi::Library {
                        bundle_lib.samples.push(loaded);
                    }
                }
            }
        }
        Ok(vec![bundle_lib, ready_module, ready_library])
    }

    /// The bundle load of `registry`: its arms interleaved over `ratio_reps` repetitions in
    /// a balanced order ([`super::order::williams`]), each after an identical `Runtime::open`,
    /// compared like with like: the verified preload (modules kept loaded until the clock
    /// stops) against bare loads kept loaded, and verified loads each followed by an unload
    /// against bare load + unload; plus the bare kept arm a second time (the A/A control),
    /// the bare load from a fresh copy and a diagnostic arm, reported.
    fn load_arms(
        &self,
        scope: &str,
        registry: &Path,
        trust: &[u8],
        policy: &Policy,
        ctx: &std::sync::Arc<cuda::CudaContext>,
    ) -> Result<(Vec<Row>, Vec<Ratio>)> {
        let (names, total): (Vec<String>, usize) = {
            let rt = Runtime::open(registry, trust, policy.clone())?;
            let names: Vec<String> = rt
                .selected()
                .map(|m| m.identity.module.to_string())
                .collect();
            let total = rt.selected().map(|m| m.size as usize).sum();
            (names, total)
        };
        // The bare arms load the bytes the runtime just verified (freshly read, like the
        // verified arm's), not a long-lived copy that stays hot in the caches.
        fn selected<'a>(rt: &'a Runtime, names: &[String]) -> Vec<&'a [u8]> {
            names
                .iter()
                .map(|n| rt.verified_bytes(n).expect("selected"))
                .collect()
        }
        // Every arm starts the same way: a fresh Runtime::open, then every byte it will load
        // just read (in the CPU caches, `warm`); the bare arms also check the ELF headers, as
        // the verifier did during open.
        let mut rows = [
            Row::new(scope, "verified_load", total),
            Row::new(scope, "raw_kept_loaded", total),
            Row::new(scope, "verified_load_unload", total),
            Row::new(scope, "raw_cuModuleLoadData", total),
            Row::new(scope, "raw_load_unload_fresh_copy", total),
            Row::new(scope, "verified_module_each", total),
            Row::new(scope, "verified_module_each_driver", total),
            Row::new(scope, "raw_kept_loaded_again", total),
        ];
        // Arm 6 is timed inside arm 5; the others run in a balanced order (every arm right
        // after every other equally often), arm 7 being arm 1 again: the A/A control.
        let arms = [0, 1, 2, 3, 4, 5, 7];
        let mut driver_times = Vec::new();
        let samples = interleave(self.order, arms.len(), self.ratio_reps, |k, rep| {
            Ok(match arms[k] {
                0 => {
                    let rt = Runtime::open(registry, trust, policy.clone())?;
                    warm(&selected(&rt, &names));
                    let t = Instant::now();
                    rt.preload()?;
                    t.elapsed()
                }
                1 | 7 => {
                    let rt = Runtime::open(registry, trust, policy.clone())?;
                    let bytes = selected(&rt, &names);
                    warm(&bytes);
                    raw::time_modules_kept(ctx, &bytes)?
                }
                2 => {
                    let mut sum = Duration::ZERO;
                    for name in &names {
                        // Dropping the runtime unloads the module again.
                        let rt = Runtime::open(registry, trust, policy.clone())?;
                        warm(&[rt.verified_bytes(name).expect("selected")]);
                        let t = Instant::now();
                        rt.module(name)?;
                        sum += t.elapsed();
                    }
                    sum
                }
                3 => {
                    let mut sum = Duration::ZERO;
                    for name in &names {
                        let rt = Runtime::open(registry, trust, policy.clone())?;
                        let image = rt.verified_bytes(name).expect("selected");
                        warm(&[image]);
                        sum += raw::time_module_load(ctx, image, false)?;
                    }
                    sum
                }
                4 => {
                    // The copy is made before the clock, from the bytes the runtime just
                    // verified, into a new allocation (freed after the unload).
                    let mut sum = Duration::ZERO;
                    for name in &names {
                        let rt = Runtime::open(registry, trust, policy.clone())?;
                        let image = rt.verified_bytes(name).expect("selected");
                        sum += raw::time_cubin_load_from_copy(ctx, image)?;
                    }
                    sum
                }
                5 => {
                    // Diagnostic: the kept-loaded verified load one module() call at a
                    // time, with the runtime's own clock around each driver load
                    // (driver_time), to place the preload's extra cost.
                    let rt = Runtime::open(registry, trust, policy.clone())?;
                    warm(&selected(&rt, &names));
                    let t = Instant::now();
                    for name in &names {
                        rt.module(name)?;
                    }
                    let took = t.elapsed();
                    if rep > 0 {
                        driver_times.push(rt.counters().driver_time);
                    }
                    took
                }
                arm => unreachable!("arm {arm}"),
            })
        })?;
        for (k, s) in samples.into_iter().enumerate() {
            rows[arms[k]].samples = s;
        }
        rows[6].samples = driver_times;
        // `a` against `b`, paired repetition by repetition; named `<scope>_<name>`.
        let ratio = |name: &str, a: usize, b: usize, limit: Option<f64>| {
            rows[a].ratio(&rows[b], &format!("{scope}_{name}"), limit)
        };
        let ratios = vec![
            ratio("load_vs_bare_kept", 0, 1, Some(1.05)),
            ratio("load_unload_vs_bare", 2, 3, Some(1.05)),
            // Reported, not gated: the verified load+unload against the bare load from an
            // image copied into a new allocation just before the clock (what this bench's
            // bare arm did until 2026-11-30). Unlike treatments of the bytes: not a cost of
            // verification (that is `load_unload_vs_bare`); see docs/gpu.md and the
            // `copy_*` rows.
            ratio("load_unload_vs_bare_fresh_copy", 2, 4, None),
            ratio("module_each_vs_bare_kept", 5, 1, None),
            ratio("module_each_driver_vs_bare_kept", 6, 1, None),
            ratio("bare_fresh_copy_vs_in_place", 4, 3, None),
            // The A/A control: the same bare arm twice. Its interval shows what order and
            // noise alone do to a comparison of this size.
            ratio("bare_kept_vs_itself", 7, 1, None),
        ];
        Ok((rows.into(), ratios))
    }

    /// PTX entries of the registry that this device can JIT, verified.
    fn registry_ptx(&self, trust: &[u8], cc: (u32, u32)) -> Result<BTreeMap<String, Vec<u8>>> {
        let verified = verify_registry(&self.at.registry(), trust)?;
        let mut best: BTreeMap<String, (u32, Vec<u8>)> = BTreeMap::new();
        for (_, m) in verified.modules() {
            let id = &m.manifest().identity;
            let n = id.sm.number();
            if id.kind != Kind::Ptx || !id.sm.can_jit_on(cc.0, cc.1) {
                continue;
            }
            if best.get(id.module.as_str()).is_none_or(|(b, _)| *b < n) {
                best.insert(id.module.to_string(), (n, m.bytes().to_vec()));
            }
        }
        Ok(best.into_iter().map(|(k, (_, v))| (k, v)).collect())
    }
}

/// PTX through the driver JIT (cache off): one row per module of `ptx` and one for the
/// bundle; none, and a note, when the registry holds no PTX this device can JIT.
fn ptx_rows(
    ptx: &BTreeMap<String, Vec<u8>>,
    ctx: &Arc<cuda::CudaContext>,
    reps: usize,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    if ptx.is_empty() {
        eprintln!("note: the registry holds no PTX this device can JIT; skipping the PTX baseline");
    } else {
        let mut bundle = Row {
            scope: "bundle".into(),
            method: "ptx_driver_jit",
            bytes: ptx.values().map(Vec::len).sum(),
            samples: vec![Duration::ZERO; reps],
        };
        for (name, text) in ptx {
            let mut row = Row::new(name, "ptx_driver_jit", text.len());
            for i in 0..=reps {
                let took = raw::time_module_load(ctx, text, true)?;
                if i > 0 {
                    row.samples.push(took);
                    bundle.samples[i - 1] += took;
                }
            }
            rows.push(row);
        }
        rows.push(bundle);
    }
    Ok(rows)
}

/// The policy matching the trust root's channel (dev registries are benchmarked as dev).
fn policy_for(trust: &[u8]) -> Result<Policy> {
    let root = cuda_aot::trust::verify_anchor(trust, &crate::limits::limits(), "trust root")?;
    Ok(match root.root().channel {
        Channel::Dev => Policy::development(),
        Channel::Production => Policy::production(),
        Channel::Research => Policy::research(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every arm runs once per repetition, the warm-up repetition included, and keeps one
    /// sample per kept repetition, in repetition order (so samples pair by index).
    #[test]
    fn interleave_drops_the_warm_up_and_pairs_the_arms_by_repetition() {
        for order in [Order::Balanced, Order::Rotation] {
            let mut calls = Vec::new();
            let samples = interleave(order, 3, 5, |k, rep| {
                calls.push((k, rep));
                Ok(Duration::from_micros((rep * 10 + k) as u64))
            })
            .unwrap();
            assert_eq!(calls.len(), 3 * 6, "{calls:?}");
            for (k, s) in samples.iter().enumerate() {
                let want: Vec<Duration> = (1..=5)
                    .map(|rep| Duration::from_micros((rep * 10 + k) as u64))
                    .collect();
                assert_eq!(s, &want, "arm {k}");
            }
        }
        // At least two kept repetitions, as the ratios need.
        let few = interleave(Order::Balanced, 2, 0, |_, _| Ok(Duration::ZERO)).unwrap();
        assert!(few.iter().all(|s| s.len() == 2), "{few:?}");
    }
}
