//! `cargo xtask bench-load`: module load cost on a GPU host — the runtime's verified load
//! against a bare `cuModuleLoadData` of the same bytes, PTX through the driver JIT (cache
//! off) and NVRTC compile + load (research builds) — written as CSV and an SVG chart, then
//! gated.

use anyhow::{Context, Result, bail};
use cuda_aot::cuda::{self, Device};
use cuda_aot::source::DirSource;
use cuda_aot::verify::{Options, verify_index};
use cuda_aot::{Channel, Kind, Limits, Policy, Runtime};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{paths, publish};

/// Benchmark module loading on a GPU host (verified vs bare vs PTX JIT vs NVRTC) and gate it.
///
/// For each module selected for the device, and for the whole bundle, the same bytes go
/// through (a) the runtime's verified load (`Runtime::module` / `preload`, from verified
/// in-memory bytes), (b) a bare cuModuleLoadData, (c) PTX through the driver JIT with the
/// JIT cache off (CUDA_CACHE_DISABLE=1; needs PTX in the registry), (d) NVRTC compile +
/// load (only when built with --features research); and the verified bundle load through
/// cuLibraryLoadData (context-independent loading). Each verified/bare pair starts after
/// an identical Runtime::open, in alternating order. Verification at open is measured on
/// its own row. Writes bench-load.csv and bench-load.svg, then re-reads the CSV and fails
/// unless the verified bundle load is within 1.10x of the bare load and at least 100x
/// faster than NVRTC.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    at: publish::RegistryArgs,
    /// The release spec the registry was built from: the NVRTC baseline compiles each
    /// module's source with its flags, defines and include folders.
    #[arg(long, default_value_os_t = paths::repo_root().join("manifests/release.toml"))]
    spec: PathBuf,
    /// Repetitions per measurement (medians are reported).
    #[arg(long, default_value_t = 20)]
    reps: usize,
    /// Where bench-load.csv and bench-load.svg go.
    #[arg(long, default_value_os_t = paths::repo_root().join("docs/evidence"))]
    out: PathBuf,
    /// Only re-read an existing CSV and apply the gate.
    #[arg(long)]
    gate_only: bool,
}

/// One CSV row.
struct Row {
    scope: String,
    method: &'static str,
    bytes: usize,
    samples: Vec<Duration>,
}

impl Row {
    fn new(scope: &str, method: &'static str, bytes: usize) -> Row {
        Row {
            scope: scope.into(),
            method,
            bytes,
            samples: Vec::new(),
        }
    }
    fn median_us(&self) -> f64 {
        let mut v: Vec<f64> = self.samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return f64::NAN;
        }
        let m = v.len() / 2;
        if v.len() % 2 == 1 {
            v[m]
        } else {
            (v[m - 1] + v[m]) / 2.0
        }
    }
    fn pct_us(&self, p: f64) -> f64 {
        let mut v: Vec<f64> = self.samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p).round() as usize]
    }
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let csv = self.out.join("bench-load.csv");
        if self.gate_only {
            return gate(&csv);
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
            return Err(anyhow::Error::new(paths::Fix(
                "run bench-load on the GPU host (docs/gpu.md)".into(),
            )))
            .context("no CUDA driver on this machine");
        }
        let trust_path = self.at.trust_file()?;
        let trust = std::fs::read(&trust_path)
            .with_context(|| format!("reading {}", trust_path.display()))?;
        let rows = self.measure(&trust)?;
        std::fs::create_dir_all(&self.out)?;
        let device = Device::open(0)?;
        let info = device.info();
        let header = format!(
            "# cuda-aot bench-load, {}, device {} ({}), driver CUDA {}, reps {}, CUDA_CACHE_DISABLE=1\n",
            humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
            info.name,
            info.sm(),
            info.driver_version_string(),
            self.reps
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
        std::fs::write(&csv, &text)?;
        std::fs::write(self.out.join("bench-load.svg"), chart(&rows, &header))?;
        println!("{text}");
        println!("wrote {} and bench-load.svg", csv.display());
        gate(&csv)
    }

    fn measure(&self, trust: &[u8]) -> Result<Vec<Row>> {
        let policy = policy_for(trust)?;
        let probe = Runtime::open(&self.at.registry, trust, policy.clone())?;
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
            let rt = Runtime::open(&self.at.registry, trust, policy.clone())?;
            let took = t.elapsed();
            drop(rt);
            if i > 0 {
                open.samples.push(took);
            }
        }
        rows.push(open);

        // A/B in the same state: each arm starts right after a fresh Runtime::open (the
        // same verification work, so the same cache warmth), and the arms alternate order.
        let mut bundle_verified = Row::new("bundle", "verified_load", total_bytes);
        let mut bundle_raw = Row::new("bundle", "raw_cuModuleLoadData", total_bytes);
        for i in 0..=reps {
            let verified = || -> Result<Duration> {
                let rt = Runtime::open(&self.at.registry, trust, policy.clone())?;
                let t = Instant::now();
                rt.preload()?;
                Ok(t.elapsed())
            };
            let raw = || -> Result<Duration> {
                let _rt = Runtime::open(&self.at.registry, trust, policy.clone())?;
                let mut raw = Duration::ZERO;
                for (_, bytes, _) in &selected {
                    raw += cuda::raw::time_module_load(ctx, bytes, false)?;
                }
                Ok(raw)
            };
            let (v, r) = if i % 2 == 0 {
                (verified()?, raw()?)
            } else {
                let r = raw()?;
                (verified()?, r)
            };
            if i > 0 {
                bundle_verified.samples.push(v);
                bundle_raw.samples.push(r);
            }
        }
        for (name, bytes, _) in &selected {
            let mut verified = Row::new(name, "verified_load", bytes.len());
            let mut raw = Row::new(name, "raw_cuModuleLoadData", bytes.len());
            for i in 0..=reps {
                let verified_once = || -> Result<Duration> {
                    let rt = Runtime::open(&self.at.registry, trust, policy.clone())?;
                    let t = Instant::now();
                    rt.module(name)?;
                    Ok(t.elapsed())
                };
                let raw_once = || -> Result<Duration> {
                    let _rt = Runtime::open(&self.at.registry, trust, policy.clone())?;
                    Ok(cuda::raw::time_module_load(ctx, bytes, false)?)
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
        rows.push(bundle_verified);
        rows.push(bundle_raw);

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
                let rt = Runtime::open(&self.at.registry, trust, p.clone())?;
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
                    let took = cuda::raw::time_module_load(ctx, text, true)?;
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
        Ok(rows)
    }

    /// PTX entries of the registry that this device can JIT, verified.
    fn registry_ptx(&self, trust: &[u8], cc: (u32, u32)) -> Result<BTreeMap<String, Vec<u8>>> {
        let src = DirSource::new(&self.at.registry);
        let idx = verify_index(&src, trust, Default::default(), &Options::default())?;
        let mut best: BTreeMap<String, (u32, Vec<u8>)> = BTreeMap::new();
        for m in idx.manifests() {
            let id = &m.manifest().identity;
            let n = id.sm.number();
            if id.kind != Kind::Ptx || !id.sm.can_jit_on(cc.0, cc.1) {
                continue;
            }
            if best.get(id.module.as_str()).is_none_or(|(b, _)| *b < n) {
                let bytes = idx
                    .load_module(&src, m, &Limits::default())?
                    .bytes()
                    .to_vec();
                best.insert(id.module.to_string(), (n, bytes));
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
        let spec = crate::build::spec::load(&self.spec, None)?;
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
                .with_context(|| format!("module {name} is not in {}", self.spec.display()))?;
            let job = spec
                .jobs(std::slice::from_ref(&module), &[device_sm])?
                .into_iter()
                .next()
                .context("no job")?;
            let options = nvrtc_options(&job.flags, &spec.sources, m);
            let file = spec.sources.join(&m.source);
            let source = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let options: Vec<&str> = options.iter().map(String::as_str).collect();
            let mut row = Row::new(name, "nvrtc_compile_load", source.len());
            for i in 0..=reps {
                let t = Instant::now();
                let cubin = compile(&source, &m.source, &arch, Output::Cubin, &options)?;
                let compile_time = t.elapsed();
                let load = cuda::raw::time_module_load(ctx, &cubin, false)?;
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
fn nvrtc_options(flags: &[String], sources: &Path, m: &crate::build::ModuleSpec) -> Vec<String> {
    let mut out = vec![format!("--include-path={}", sources.display())];
    out.extend(
        m.include_dirs
            .iter()
            .map(|d| format!("--include-path={}", d.abs.display())),
    );
    let mut it = flags.iter();
    while let Some(f) = it.next() {
        if f == "-Xcicc" {
            it.next();
            continue;
        }
        // Spellings both nvcc and NVRTC accept.
        let keep = [
            "-D",
            "-U",
            "--std=",
            "-std=",
            "--use_fast_math",
            "-use_fast_math",
            "-ftz=",
            "-prec-div=",
            "-prec-sqrt=",
            "-fmad=",
            "-maxrregcount=",
            "--maxrregcount=",
        ];
        if keep.iter().any(|k| f.starts_with(k)) {
            out.push(f.clone());
        }
    }
    out
}

/// The policy matching the trust root's channel (dev registries are benchmarked as dev).
fn policy_for(trust: &[u8]) -> Result<Policy> {
    let root = cuda_aot::trust::verify_anchor(trust, &Limits::default(), "trust root")?;
    Ok(match root.root().channel {
        Channel::Dev => Policy::development(),
        Channel::Production => Policy::production(),
        Channel::Research => Policy::research(),
    })
}

/// Re-reads the CSV and applies the gate: the verified bundle load within 1.10x of the
/// bare load, and at least 100x faster than NVRTC compile + load.
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
    let get = |m: &str| medians.get(&("bundle".to_string(), m.to_string())).copied();
    let verified = get("verified_load").context("CSV has no bundle verified_load row")?;
    let raw = get("raw_cuModuleLoadData").context("CSV has no bundle raw_cuModuleLoadData row")?;
    let ratio = verified / raw;
    println!(
        "gate: verified bundle load {verified:.1} us / bare cuModuleLoadData {raw:.1} us = {ratio:.3}x (limit 1.10x)"
    );
    if let Some(open) = get("verify_at_open") {
        println!(
            "      (verification at open, once per process: {open:.1} us; startup total {:.3}x bare load)",
            (open + verified) / raw
        );
    }
    let mut failures = Vec::new();
    if ratio > 1.10 {
        failures.push(format!(
            "verified load is {ratio:.3}x the bare load (limit 1.10x)"
        ));
    }
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

/// A horizontal bar chart (log scale) of every median, grouped by scope.
fn chart(rows: &[Row], title: &str) -> String {
    let (w, bar_h, left, top) = (980.0, 18.0, 300.0, 60.0);
    let max = rows.iter().map(Row::median_us).fold(1.0, f64::max);
    let decades = max.log10().ceil().max(1.0);
    let x = |us: f64| left + (us.max(1.0).log10() / decades) * (w - left - 110.0);
    let h = top + rows.len() as f64 * (bar_h + 6.0) + 50.0;
    let color = |m: &str| match m {
        "verified_load" => "#2b8a3e",
        "raw_cuModuleLoadData" => "#1c7ed6",
        "verify_at_open" => "#74b816",
        "verified_load_library" | "ready_library_api" => "#0ca678",
        "ready_module_api" => "#5c940d",
        "ptx_driver_jit" => "#f08c00",
        _ => "#c92a2a",
    };
    let mut s = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n"
    );
    let _ = writeln!(
        s,
        "<text x='10' y='20' font-size='13'>{}</text>",
        title.trim_start_matches("# ").trim().replace('&', "and")
    );
    let _ = writeln!(
        s,
        "<text x='10' y='40'>median load time per module and for the whole bundle (log scale, microseconds)</text>"
    );
    for d in 0..=decades as u32 {
        let us = 10f64.powi(d as i32);
        let xx = x(us);
        let _ = writeln!(
            s,
            "<line x1='{xx}' y1='{}' x2='{xx}' y2='{}' stroke='#ddd'/><text x='{xx}' y='{}' text-anchor='middle'>{us}</text>",
            top - 5.0,
            h - 40.0,
            h - 25.0
        );
    }
    for (i, r) in rows.iter().enumerate() {
        let y = top + i as f64 * (bar_h + 6.0);
        let m = r.median_us();
        let _ = writeln!(
            s,
            "<text x='{}' y='{}' text-anchor='end'>{} {}</text>",
            left - 8.0,
            y + 13.0,
            r.scope,
            r.method
        );
        let _ = writeln!(
            s,
            "<rect x='{left}' y='{y}' width='{}' height='{bar_h}' fill='{}'/>",
            (x(m) - left).max(1.0),
            color(r.method)
        );
        let _ = writeln!(
            s,
            "<text x='{}' y='{}'>{m:.0} us</text>",
            x(m) + 4.0,
            y + 13.0
        );
    }
    s + "</svg>\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_gets_the_specs_defines_standard_and_include_folders() {
        let spec = crate::build::spec::load(
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
