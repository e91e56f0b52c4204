//! The benchmark itself (with the `gpu` feature): arms, ratios, start-up probes, the CSV,
//! the chart and the gate.

use anyhow::{Context, Result, bail};
use cuda_aot::cuda::{self, Device};
use cuda_aot::source::DirSource;
use cuda_aot::verify::{Options, Verified, verify_all};
use cuda_aot::{Channel, Kind, Policy, Runtime};
use cuda_aot_bench as raw;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use super::order::Order;
use super::{Args, startup, stats};
use crate::advice::Fix;
use crate::repo::svg::Svg;
use crate::{files, paths};

use stats::{CONTROL_LIMIT, Ratio};

/// One CSV row: an arm's samples.
pub(super) struct Row {
    scope: String,
    method: &'static str,
    bytes: usize,
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
    fn median_us(&self) -> f64 {
        let v: Vec<f64> = self.samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        crate::repo::stats::median(&v)
    }
    fn pct_us(&self, p: f64) -> f64 {
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
            let (bars, ratios, header) = read_results(&csv)?;
            let svg = out.join("bench-load.svg");
            files::write(&svg, chart(&bars, &ratios, &header).as_bytes())?;
            println!("wrote {}", svg.display());
            return Ok(());
        }
        if let Some(arm) = self.startup_probe {
            let trust = self.at.trust_file()?;
            let policy = policy_for(&cuda_aot::fs::read_capped(
                &trust,
                crate::limits::limits().root,
                "trust root",
            )?)?;
            return startup::probe(
                arm,
                &self.devices,
                &self.at.registry(),
                &trust,
                policy,
                self.bare_images.as_deref(),
            );
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
        let (rows, ratios) = self.measure(&trust, &trust_path)?;
        std::fs::create_dir_all(&out)?;
        let device = Device::open(0)?;
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
        let mut text = header.clone() + "scope,method,bytes,reps,median_us,p10_us,p90_us\n";
        for r in &rows {
            writeln!(
                text,
                "{},{},{},{},{:.1},{:.1},{:.1}",
                r.scope,
                r.method,
                r.bytes,
                r.samples.len(),
                r.median_us(),
                r.pct_us(0.1),
                r.pct_us(0.9)
            )?;
        }
        files::write(&csv, text.as_bytes())?;
        let mut ratio_text = header.clone() + stats::CSV_HEADER + "\n";
        for r in &ratios {
            writeln!(ratio_text, "{}", r.csv_line())?;
        }
        files::write(&out.join("bench-ratios.csv"), ratio_text.as_bytes())?;
        let bars: Vec<Bar> = rows
            .iter()
            .map(|r| Bar {
                scope: r.scope.clone(),
                method: r.method.to_string(),
                median: r.median_us(),
            })
            .collect();
        files::write(
            &out.join("bench-load.svg"),
            chart(&bars, &ratios, &header).as_bytes(),
        )?;
        println!("{text}\n{ratio_text}");
        println!(
            "wrote {}, bench-ratios.csv and bench-load.svg",
            csv.display()
        );
        gate(&csv)
    }

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
        rows.push(open);

        // The bundle, three arms interleaved (each after an identical Runtime::open):
        // verified preload, bare load+unload per module, bare loads kept until the clock
        // stops. Paired ratios with bootstrap intervals.
        let mut ratios = Vec::new();
        let (mut load_rows, load_ratios) =
            self.load_arms("bundle", &self.at.registry(), trust, &policy, ctx)?;
        ratios.extend(load_ratios);
        // Reported: why a fresh copy loads faster than the bytes in place (copies.rs).
        let (copy_rows, copy_ratios) =
            self.copy_arms("bundle", &self.at.registry(), trust, &policy, ctx)?;
        load_rows.extend(copy_rows);
        ratios.extend(copy_ratios);
        if let Some(other) = &self.also_registry {
            let (more_rows, more_ratios) = self.load_arms("foreign", other, trust, &policy, ctx)?;
            rows.extend(more_rows);
            ratios.extend(more_ratios);
            let (copy_rows, copy_ratios) = self.copy_arms("foreign", other, trust, &policy, ctx)?;
            rows.extend(copy_rows);
            ratios.extend(copy_ratios);
        }
        for (name, bytes, _) in &selected {
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
        rows.extend(load_rows);

        // The same verified load through cuLibraryLoadData (context-independent loading).
        // Ready to launch: preload plus a lookup of every kernel, through each load API.
        // cuLibraryLoadData defers placing kernels in the context to the lookup, so only
        // this pair compares the two APIs fairly.
        let library = Policy {
            load_api: cuda::LoadApi::Library,
            ..policy.clone()
        };
        let mut bundle_lib = Row::new("bundle", "verified_load_library", total_bytes);
        let mut ready_module = Row::new("bundle", "ready_module_api", total_bytes);
        let mut ready_library = Row::new("bundle", "ready_library_api", total_bytes);
        for i in 0..=reps {
            let mut arms = [(&policy, &mut ready_module), (&library, &mut ready_library)];
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
        rows.push(bundle_lib);
        rows.push(ready_module);
        rows.push(ready_library);

        if ptx.is_empty() {
            eprintln!(
                "note: the registry holds no PTX this device can JIT; skipping the PTX baseline"
            );
        } else {
            let mut bundle = Row {
                scope: "bundle".into(),
                method: "ptx_driver_jit",
                bytes: ptx.values().map(Vec::len).sum(),
                samples: vec![Duration::ZERO; reps],
            };
            for (name, text) in &ptx {
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
        rows.extend(self.nvrtc_rows(&selected, ctx, &info, reps)?);
        // Last, so that no other arm runs beside the extra contexts (contexts.rs).
        let mut registries = vec![("bundle", self.at.registry())];
        registries.extend(self.also_registry.clone().map(|r| ("foreign", r)));
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
        let fresh = |rt: &Runtime| -> Vec<std::sync::Arc<[u8]>> {
            names
                .iter()
                .map(|n| rt.verified_bytes(n).expect("selected").clone())
                .collect()
        };
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
                    warm(&fresh(&rt));
                    let t = Instant::now();
                    rt.preload()?;
                    t.elapsed()
                }
                1 | 7 => {
                    let rt = Runtime::open(registry, trust, policy.clone())?;
                    let bytes = fresh(&rt);
                    warm(&bytes);
                    let refs: Vec<&[u8]> = bytes.iter().map(|b| &b[..]).collect();
                    raw::time_modules_kept(ctx, &refs)?
                }
                2 => {
                    let mut sum = Duration::ZERO;
                    for name in &names {
                        // Dropping the runtime unloads the module again.
                        let rt = Runtime::open(registry, trust, policy.clone())?;
                        warm(std::slice::from_ref(
                            rt.verified_bytes(name).expect("selected"),
                        ));
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
                        warm(std::slice::from_ref(image));
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
                    warm(&fresh(&rt));
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

    #[cfg(feature = "research")]
    fn nvrtc_rows(
        &self,
        selected: &[(String, Vec<u8>, u32)],
        ctx: &std::sync::Arc<cuda::CudaContext>,
        info: &cuda::DeviceInfo,
        reps: usize,
    ) -> Result<Vec<Row>> {
        use cuda::research::{Output, compile};
        let arch = info.sm();
        let spec_path = self.spec.clone().expect("resolved in run");
        let spec = cuda_aot_builder::build::spec::load(&spec_path, None)?;
        let device_sm: cuda_aot::Target = arch.parse().map_err(anyhow::Error::new)?;
        let mut rows = Vec::new();
        let mut bundle = Row {
            scope: "bundle".into(),
            method: "nvrtc_compile_load",
            bytes: 0,
            samples: vec![Duration::ZERO; reps],
        };
        for (name, _, _) in selected {
            let module = cuda_aot::ModuleName::new(name).map_err(anyhow::Error::new)?;
            let m = spec
                .modules
                .iter()
                .find(|m| m.name == module)
                .with_context(|| format!("module {name} is not in {}", spec_path.display()))?;
            let job = spec
                .jobs(std::slice::from_ref(&module), &[device_sm])?
                .into_iter()
                .next()
                .context("no job")?;
            if m.is_linked() {
                anyhow::bail!(
                    "module {name} lists several sources: the NVRTC baseline compiles one file; leave it out of the NVRTC rows"
                );
            }
            let options = nvrtc_options(&job.flags, &spec.sources, m);
            let file = spec.sources.join(&m.sources[0]);
            let source = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let options: Vec<&str> = options.iter().map(String::as_str).collect();
            let mut row = Row::new(name, "nvrtc_compile_load", source.len());
            for i in 0..=reps {
                let t = Instant::now();
                let cubin = compile(&source, &m.sources[0], &arch, Output::Cubin, &options)?;
                let compile_time = t.elapsed();
                let load = raw::time_module_load(ctx, &cubin, false)?;
                if i > 0 {
                    row.samples.push(compile_time + load);
                    bundle.samples[i - 1] += compile_time + load;
                }
            }
            bundle.bytes += row.bytes;
            rows.push(row);
        }
        rows.push(bundle);
        Ok(rows)
    }

    #[cfg(not(feature = "research"))]
    fn nvrtc_rows(
        &self,
        _: &[(String, Vec<u8>, u32)],
        _: &std::sync::Arc<cuda::CudaContext>,
        _: &cuda::DeviceInfo,
        _: usize,
    ) -> Result<Vec<Row>> {
        eprintln!("note: built without --features research: no NVRTC baseline");
        Ok(vec![])
    }
}

/// NVRTC options equivalent to a job's nvcc flags: defines (geometry included), language
/// standard and device code-generation flags are kept; what only nvcc understands (kind,
/// `-arch`, host optimisation, `-Xcicc` pairs) is dropped. The sources folder and the
/// module's include folders become `--include-path`s.
#[cfg_attr(not(feature = "research"), allow(dead_code))]
fn nvrtc_options(
    flags: &[String],
    sources: &Path,
    m: &cuda_aot_builder::build::ModuleSpec,
) -> Vec<String> {
    let mut out = vec![format!("--include-path={}", sources.display())];
    out.extend(
        m.include_dirs
            .iter()
            .map(|d| format!("--include-path={}", d.abs.display())),
    );
    out.extend(cuda_aot_kernels::parity::module::research_flags(flags));
    out
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

/// Re-reads `bench-load.csv` and `bench-ratios.csv` beside it and applies the gate: the
/// upper end of the 95 % interval of every gated ratio within its limit (verified bundle
/// load and start-up at most 1.05x bare; two devices against one and the fresh-copy rows are
/// reported), every A/A control (`*_vs_itself`) within [1/1.05, 1.05] (else the run could
/// not resolve the gate's 5 %), both bare load methods present, and the verified bundle load
/// at least 100x faster than NVRTC compile + load.
pub fn gate(csv: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(csv).with_context(|| format!("reading {}", csv.display()))?;
    let mut medians = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("scope,"))
    {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() == 7 {
            medians.insert(
                (f[0].to_string(), f[1].to_string()),
                f[4].parse::<f64>()
                    .with_context(|| format!("bad median in {line:?}"))?,
            );
        }
    }
    let ratios_file = csv.with_file_name("bench-ratios.csv");
    let ratio_text = std::fs::read_to_string(&ratios_file)
        .with_context(|| format!("reading {} (run bench-load again)", ratios_file.display()))?;
    let ratios: Vec<Ratio> = ratio_text.lines().filter_map(Ratio::parse).collect();
    let mut failures = Vec::new();
    for required in [
        "bundle_load_vs_bare_kept",
        "bundle_load_unload_vs_bare",
        "startup_vs_bare",
    ] {
        if !ratios.iter().any(|r| r.name == required) {
            failures.push(format!("no {required} ratio in {}", ratios_file.display()));
        }
    }
    for r in &ratios {
        println!(
            "gate: {:<30} median {:.3}x, 95% interval [{:.3}, {:.3}] over {} pairs ({}): {}",
            r.name,
            r.median,
            r.low,
            r.high,
            r.pairs,
            if r.is_control() {
                format!(
                    "A/A control, within [{:.3}, {CONTROL_LIMIT:.2}]",
                    1.0 / CONTROL_LIMIT
                )
            } else {
                r.limit.map_or("reported, not gated".into(), |l| {
                    format!("limit {l:.2}x on the upper end")
                })
            },
            match (r.gated(), r.passes()) {
                (false, _) => "-",
                (true, true) => "ok",
                (true, false) => "FAIL",
            }
        );
        if r.is_control() && !r.passes() {
            failures.push(format!(
                "{} (the same bare arm twice) spans [{:.3}, {:.3}]: this run cannot resolve a \
                 {:.0} % difference (the host was busy, or the arms disturb each other). \
                 Fix: run bench-load again on a quiet host",
                r.name,
                r.low,
                r.high,
                (CONTROL_LIMIT - 1.0) * 100.0
            ));
        }
        if let (Some(limit), false) = (r.limit, r.passes()) {
            failures.push(format!(
                "{} is up to {:.3}x (95% interval upper end; limit {limit:.2}x)",
                r.name, r.high
            ));
        }
    }
    let get = |m: &str| medians.get(&("bundle".to_string(), m.to_string())).copied();
    let verified = get("verified_load").context("CSV has no bundle verified_load row")?;
    match get("nvrtc_compile_load") {
        Some(nvrtc) => {
            let speedup = nvrtc / verified;
            println!(
                "gate: NVRTC compile + load {nvrtc:.1} us / verified {verified:.1} us = {speedup:.0}x faster (need >= 100x)"
            );
            if speedup < 100.0 {
                failures.push(format!(
                    "verified load only {speedup:.0}x faster than NVRTC (need 100x)"
                ));
            }
        }
        None => {
            failures.push("no NVRTC row: run bench-load from a --features research build".into())
        }
    }
    if failures.is_empty() {
        println!("gate: PASS");
        Ok(())
    } else {
        bail!("gate FAILED: {}", failures.join("; "))
    }
}

/// One bar of the chart: a median of `bench-load.csv`.
struct Bar {
    scope: String,
    method: String,
    median: f64,
}

/// The bars and header line of a `bench-load.csv`, and the ratios of the
/// `bench-ratios.csv` beside it.
fn read_results(csv: &Path) -> Result<(Vec<Bar>, Vec<Ratio>, String)> {
    let text =
        std::fs::read_to_string(csv).with_context(|| format!("reading {}", csv.display()))?;
    let header = text.lines().next().unwrap_or_default().to_string();
    let bars = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("scope,"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some(Bar {
                scope: f.first()?.to_string(),
                method: f.get(1)?.to_string(),
                median: f.get(4)?.parse().ok()?,
            })
        })
        .collect();
    let ratios_file = csv.with_file_name("bench-ratios.csv");
    let ratios = std::fs::read_to_string(&ratios_file)
        .map(|t| t.lines().filter_map(Ratio::parse).collect())
        .unwrap_or_default();
    Ok((bars, ratios, header))
}

/// A horizontal bar chart (log scale) of every median, grouped by scope.
fn chart(rows: &[Bar], ratios: &[Ratio], title: &str) -> String {
    let (w, bar_h, left, top) = (1100.0, 18.0, 300.0, 76.0);
    let max = rows.iter().map(|r| r.median).fold(1.0, f64::max);
    let decades = max.log10().ceil().max(1.0);
    let x = |us: f64| left + (us.max(1.0).log10() / decades) * (w - left - 110.0);
    let ratio_top = top + rows.len() as f64 * (bar_h + 6.0) + 60.0;
    let h = ratio_top + 40.0 + ratios.len() as f64 * (bar_h + 6.0) + 30.0;
    let color = |m: &str| match m {
        "verified_load" => "#2b8a3e",
        "raw_cuModuleLoadData"
        | "raw_kept_loaded"
        | "raw_kept_loaded_again"
        | "raw_load_unload_fresh_copy" => "#1c7ed6",
        "verified_load_unload" | "verified_module_each" | "verified_module_each_driver" => {
            "#2f9e44"
        }
        "verified_1_device" | "verified_2_devices" => "#2b8a3e",
        "verified_1_device_lazy" | "verified_1_device_eager" => "#37b24d",
        m if m.starts_with("copy_") => "#4dabf7",
        "per_context_module" => "#1c7ed6",
        "library_once" => "#0ca678",
        "per_context_runtime" => "#2f9e44",
        "verified_1_device_connections" | "verified_2_devices_connections" => "#66a80f",
        "bare_1_device" | "bare_2_devices" => "#1c7ed6",
        "verify_at_open" => "#74b816",
        "verified_load_library" | "ready_library_api" => "#0ca678",
        "ready_module_api" => "#5c940d",
        "ptx_driver_jit" => "#f08c00",
        _ => "#c92a2a",
    };
    let mut s = Svg::new(w, h);
    // The title (the CSV's header line) on two lines: device, then the run's settings.
    let title = title.trim_start_matches("# ").trim();
    let (first, second) = title.split_once(", reps").unwrap_or((title, ""));
    s.text(10.0, 20.0, "font-size='13'", first);
    let settings = if second.is_empty() {
        String::new()
    } else {
        format!("reps{second}")
    };
    s.text(10.0, 38.0, "font-size='11'", &settings);
    s.text(
        10.0,
        58.0,
        "",
        "median load and start-up time per module, bundle and process (log scale, microseconds)",
    );
    for d in 0..=decades as u32 {
        let us = 10f64.powi(d as i32);
        let xx = x(us);
        s.line((xx, top - 5.0), (xx, ratio_top - 40.0), "#ddd", "");
        s.text(
            xx,
            ratio_top - 25.0,
            "text-anchor='middle'",
            &us.to_string(),
        );
    }
    for (i, r) in rows.iter().enumerate() {
        let y = top + i as f64 * (bar_h + 6.0);
        let m = r.median;
        s.text(
            left - 8.0,
            y + 13.0,
            "text-anchor='end'",
            &format!("{} {}", r.scope, r.method),
        );
        s.rect(left, y, (x(m) - left).max(1.0), bar_h, color(&r.method), "");
        s.text(x(m) + 4.0, y + 13.0, "", &format!("{m:.0} us"));
    }
    // Ratios: median with its 95 % interval, and the limit, on a linear scale around 1.
    s.text(
        10.0,
        ratio_top - 5.0,
        "",
        "paired ratios, median and bootstrap 95% interval (dashed: 1.0; red: the gate's limits, where the ratio is gated or an A/A control)",
    );
    let (lo, hi) = (0.6_f64, 2.0_f64);
    let rx = |r: f64| left + (r.clamp(lo, hi) - lo) / (hi - lo) * (w - left - 110.0);
    let base = ratio_top + 10.0;
    let end = base + ratios.len() as f64 * (bar_h + 6.0);
    s.line(
        (rx(1.0), base),
        (rx(1.0), end),
        "#888",
        "stroke-dasharray='4 3'",
    );
    for (i, r) in ratios.iter().enumerate() {
        let y = base + i as f64 * (bar_h + 6.0);
        let mid = y + bar_h / 2.0;
        s.text(left - 8.0, y + 13.0, "text-anchor='end'", &r.name);
        for &limit in &r.limits() {
            s.line(
                (rx(limit), y),
                (rx(limit), y + bar_h),
                "#c92a2a",
                "stroke-width='2'",
            );
        }
        s.line(
            (rx(r.low), mid),
            (rx(r.high), mid),
            "#1c7ed6",
            "stroke-width='3'",
        );
        s.circle(rx(r.median), mid, 4.0, "#2b8a3e");
        s.text(
            r.limits().into_iter().map(rx).fold(rx(r.high), f64::max) + 8.0,
            y + 13.0,
            "",
            &format!("{:.3} [{:.3}, {:.3}]", r.median, r.low, r.high),
        );
    }
    s.finish()
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

    /// The parity runner reads a module's section of a spec with its own small reader (it
    /// runs on the GPU host, without the build system). Both readers must see the same
    /// module: source, include folders, geometry, protocol, and the same NVRTC options.
    #[test]
    fn the_parity_runners_reader_sees_the_module_the_build_sees() {
        use cuda_aot_kernels::parity::module::ParityModule;
        use std::collections::BTreeSet;
        let path = paths::repo_root().join("kernels/research/research.toml");
        let spec = cuda_aot_builder::build::spec::load(&path, None).unwrap();
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap();
        // Include paths made canonical: the runner joins them to the spec's folder as
        // written, the build resolves them.
        let normal = |opts: Vec<String>| -> BTreeSet<String> {
            opts.into_iter()
                .map(|o| match o.strip_prefix("--include-path=") {
                    Some(d) => format!("--include-path={}", canon(Path::new(d)).display()),
                    None => o,
                })
                .collect()
        };
        let mut checked = 0;
        for m in spec.modules.iter().filter(|m| m.parity.is_some()) {
            let runner = ParityModule::load(&path, m.name.as_str()).unwrap();
            assert_eq!(canon(&runner.source), spec.sources.join(&m.sources[0]));
            assert_eq!(runner.geometry, m.geometry, "{}", m.name);
            assert_eq!(runner.protocol, m.protocol, "{}", m.name);
            assert_eq!(runner.schedule_version, m.schedule_version, "{}", m.name);
            for target in &m.targets {
                let job = spec
                    .jobs(std::slice::from_ref(&m.name), std::slice::from_ref(target))
                    .unwrap()
                    .remove(0);
                assert_eq!(
                    normal(runner.research_options()),
                    normal(nvrtc_options(&job.flags, &spec.sources, m)),
                    "{} {target}",
                    m.name
                );
            }
            checked += 1;
        }
        assert!(
            checked >= 1,
            "no module with a parity spec in {}",
            path.display()
        );
    }

    #[test]
    fn nvrtc_gets_the_specs_defines_standard_and_include_folders() {
        let spec = cuda_aot_builder::build::spec::load(
            &paths::repo_root().join("kernels/foreign/foreign.toml"),
            None,
        )
        .unwrap();
        let m = &spec.modules[1];
        let job = spec
            .jobs(std::slice::from_ref(&m.name), &["sm_90".parse().unwrap()])
            .unwrap()
            .remove(0);
        let opts = nvrtc_options(&job.flags, &spec.sources, m);
        let shown: Vec<String> = opts
            .iter()
            .map(|o| o.replace(&*paths::repo_root().to_string_lossy(), "<repo>"))
            .collect();
        assert_eq!(
            shown,
            [
                "--include-path=<repo>/kernels/foreign/src",
                "--include-path=<repo>/kernels/foreign/include",
                "--include-path=<repo>/kernels/foreign/third_party/fields/include",
                "--std=c++17",
                "-DFOREIGN_BLOCK=256",
                "-DFIELD_GOLDILOCKS",
                "-DFEATURE_DERIVATIVE",
            ]
        );
    }
}
