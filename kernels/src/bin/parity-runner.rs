//! `parity-runner`: the GPU half of `cargo xtask promote` (feature `research`). Built on the
//! build host, run on the GPU host: compiles the module with NVRTC straight to a cubin for
//! the device, loads the AOT cubins built for exactly this device from a build output, runs
//! every case of the module's parity spec on each and on the CPU, compares every buffer
//! after every launch and the outputs with the whole-program CPU reference, and writes the
//! parity report (JSON). Exit status 0 when parity holds, 1 when it does not (the first
//! difference is printed and kept in the report), 2 for bad usage.
//!
//! ```sh
//! parity-runner --spec kernels/research/research.toml --module ntt_fused \
//!     --build .gpu/promote/ntt_fused/build --report parity-ntt_fused.json
//! ```

#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use cuda_aot::cuda::{Device, LoadApi, LoadedModule};
use cuda_aot::metadata::Time;
use cuda_aot::research::{ResearchModule, ResearchSource};
use cuda_aot::{Digest, Kind, Limits, Manifest, ModuleName, Policy, Target};
use cuda_aot_kernels::parity::compare::{Difference, compare};
use cuda_aot_kernels::parity::cpu::{self, Buffers};
use cuda_aot_kernels::parity::gpu::{self, DeviceBuffers};
use cuda_aot_kernels::parity::module::ParityModule;
use cuda_aot_kernels::parity::report::{
    AotRecord, BufferRecord, CaseRecord, DeviceRecord, ParityReport, ResearchBuildRecord,
    ResourceRecord, Resources, Verdict,
};
use cuda_aot_kernels::parity::spec::Program;

/// Run a module's parity spec: NVRTC build, AOT cubins for this device, CPU reference.
#[derive(Parser)]
#[command(name = "parity-runner")]
struct Args {
    /// The spec file holding the module's section and its [module.parity].
    #[arg(long)]
    spec: PathBuf,
    /// The module.
    #[arg(long)]
    module: String,
    /// The AOT build output holding the module (`<build>/<module>/<target>.cubin` and
    /// manifests), as `cargo xtask promote` step 1 wrote it.
    #[arg(long)]
    build: PathBuf,
    /// Where to write the parity report.
    #[arg(long)]
    report: PathBuf,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Run only these cases (by name; default all).
    #[arg(long = "case")]
    cases: Vec<String>,
}

/// One build under test: NVRTC or an AOT cubin.
struct Build {
    label: String,
    manifest: Manifest,
    module: LoadedModule,
}

fn main() {
    let args = Args::parse();
    let command: Vec<String> = std::env::args().collect();
    match run(&args, command) {
        Ok(report) => {
            let pass = report.verdict == Verdict::Pass;
            std::process::exit(if pass { 0 } else { 1 });
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

fn run(args: &Args, command: Vec<String>) -> Result<ParityReport, String> {
    let started = Time::now();
    let m = ParityModule::load(&args.spec, &args.module)?;
    let name = ModuleName::new(&m.name).map_err(|e| e.to_string())?;
    let source = std::fs::read_to_string(&m.source)
        .map_err(|e| format!("reading {}: {e}", m.source.display()))?;
    // 1. The device.
    eprintln!("parity {}: step 1/5 device", m.name);
    let device = Device::open(args.device).map_err(|e| format!("device {}: {e}", args.device))?;
    let info = device.info().clone();
    let sm: Target = info
        .sm()
        .parse()
        .map_err(|e: cuda_aot::Error| e.to_string())?;
    let device_rec = DeviceRecord {
        name: info.name.clone(),
        uuid: info.uuid_string(),
        sm: info.sm(),
        driver: info.driver_version_string(),
    };
    eprintln!(
        "  {} ({}), {}, driver {}",
        device_rec.name, device_rec.uuid, device_rec.sm, device_rec.driver
    );

    // 2. The AOT cubins of the build output: every manifest of the module (what a promotion
    //    binds), and the cubins built for exactly this device (sm_XX and sm_XXa).
    eprintln!(
        "parity {}: step 2/5 AOT cubins from {}",
        m.name,
        args.build.display()
    );
    let (manifests, aot) = aot_cubins(&args.build, &name, sm)?;
    if aot.is_empty() {
        return Err(format!(
            "{}: no cubin of {} for {sm} or {sm}a: build the module for this device's SM (cargo xtask promote {} step 1)",
            args.build.display(),
            m.name,
            m.name
        ));
    }
    let schedule_version = aot[0].0.identity.schedule_version;
    if schedule_version != m.schedule_version {
        return Err(format!(
            "the AOT build has schedule version {schedule_version}, the spec {}: rebuild (cargo xtask promote {} step 1)",
            m.schedule_version, m.name
        ));
    }
    // 3. NVRTC straight to a cubin for this device, then every build loaded.
    let (builds, nvrtc, aot_records) = load_builds(&m, &name, &source, &device, sm, aot)?;
    // 4. Resources per entry point and build.
    let (kernels, resources) = resources(&m, &builds)?;
    // 5. Every case.
    let (cases, first, error) = run_cases(args, &m, &device, &builds, &kernels)?;
    let verdict = if first.is_none() && error.is_none() && !cases.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    let report = ParityReport {
        schema: ParityReport::SCHEMA.into(),
        module: m.name.clone(),
        schedule_version,
        verdict,
        first_difference: first,
        error,
        spec_digest: m.spec_digest(),
        source_digest: Digest::of(source.as_bytes()),
        device: device_rec,
        research_build: nvrtc,
        aot: aot_records,
        manifests,
        cases,
        resources,
        started: started.to_string(),
        finished: Time::now().to_string(),
        command,
    };
    write_report(args, &m, &report)?;
    Ok(report)
}

/// Step 3: the module compiled by NVRTC straight to a cubin for this device (a
/// research-channel module, admitted only by the research policy), loaded first; then every
/// AOT cubin, loaded. Returns the builds under test and what the report records of them.
fn load_builds(
    m: &ParityModule,
    name: &ModuleName,
    source: &str,
    device: &Device,
    sm: Target,
    aot: Vec<(Manifest, Digest, Vec<u8>)>,
) -> Result<(Vec<Build>, ResearchBuildRecord, Vec<AotRecord>), String> {
    eprintln!("parity {}: step 3/5 NVRTC build for {sm}", m.name);
    let options = m.research_options();
    let t = Instant::now();
    let research = ResearchModule::compile(&ResearchSource {
        module: name,
        source,
        file: &m.source_name,
        target: sm,
        options: &options,
        protocol: &m.protocol,
        geometry: &m.geometry,
        schedule_version: m.schedule_version,
    })
    .map_err(|e| format!("NVRTC: {e}\nFix: {}", e.fix()))?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    Policy::research()
        .admit(research.manifest())
        .map_err(|e| e.to_string())?;
    eprintln!(
        "  RESEARCH module {} ({}, channel research) compiled in {compile_ms:.0} ms, {} bytes",
        research.manifest().label(),
        research.manifest().identity.toolkit.nvcc,
        research.bytes().len()
    );
    let nvrtc = ResearchBuildRecord {
        version: research.manifest().identity.toolkit.nvcc.clone(),
        target: sm.to_string(),
        options: options.clone(),
        module_digest: research.manifest().module_digest,
        size: research.manifest().size,
        compile_ms,
    };
    let ctx = device.context();
    let mut builds = vec![Build {
        label: format!("nvrtc {sm}"),
        module: LoadedModule::load_cubin(ctx, research.bytes(), LoadApi::Module)
            .map_err(|e| format!("loading the NVRTC cubin: {e}"))?,
        manifest: research.manifest().clone(),
    }];
    let mut aot_records = Vec::new();
    for (man, digest, blob) in aot {
        aot_records.push(AotRecord {
            target: man.identity.sm.to_string(),
            manifest: digest,
            module_digest: man.module_digest,
            toolkit: format!(
                "nvcc {} ({}, {})",
                man.identity.toolkit.nvcc,
                man.identity.toolkit.source,
                man.identity.toolkit.digest.short()
            ),
        });
        builds.push(Build {
            label: format!("aot {}", man.identity.sm),
            module: LoadedModule::load_cubin(ctx, &blob, LoadApi::Module)
                .map_err(|e| format!("loading {}: {e}", man.label()))?,
            manifest: man,
        });
    }
    Ok((builds, nvrtc, aot_records))
}

/// Step 4: resources per entry point and build: the cubin's attributes, and the driver's;
/// and each build's kernels, by entry point.
#[allow(clippy::type_complexity)]
fn resources(
    m: &ParityModule,
    builds: &[Build],
) -> Result<
    (
        Vec<BTreeMap<String, cuda_aot::cuda::Kernel>>,
        Vec<ResourceRecord>,
    ),
    String,
> {
    eprintln!("parity {}: step 4/5 resources", m.name);
    let entries: Vec<String> = {
        let mut v: Vec<String> = m.parity.launches.iter().map(|l| l.entry.clone()).collect();
        v.dedup();
        v
    };
    let entry_refs: Vec<&str> = entries.iter().map(String::as_str).collect();
    let mut kernels = Vec::new();
    let mut resources = Vec::new();
    for b in builds {
        let ks = gpu::kernels(&b.module, &b.manifest, &entry_refs)?;
        for f in &b.manifest.functions {
            let k = b
                .module
                .function(f.symbol.as_str())
                .map_err(|e| format!("{}: {e}", b.label))?;
            let a = k.attributes().map_err(|e| format!("{}: {e}", b.label))?;
            resources.push(ResourceRecord {
                entry: f.symbol.to_string(),
                build: b.label.clone(),
                cubin: Resources::of_abi(&f.abi),
                device: Resources {
                    registers: Some(a.num_regs),
                    shared_bytes: Some(a.shared_size_bytes),
                    // The driver's local memory per thread is the whole stack (frame and
                    // calls); it reports no figure for the frame alone.
                    local_bytes: None,
                    stack_bytes: Some(a.local_size_bytes),
                    max_threads: Some(a.max_threads_per_block),
                },
            });
        }
        kernels.push(ks);
    }
    Ok((kernels, resources))
}

/// Step 5: every case (those of `--case`, else all): the CPU step, then each build, compared
/// after every launch, then the reference; stops at the first difference or error.
#[allow(clippy::type_complexity)]
fn run_cases(
    args: &Args,
    m: &ParityModule,
    device: &Device,
    builds: &[Build],
    kernels: &[BTreeMap<String, cuda_aot::cuda::Kernel>],
) -> Result<(Vec<CaseRecord>, Option<Difference>, Option<String>), String> {
    eprintln!("parity {}: step 5/5 cases", m.name);
    let stream = device.new_stream().map_err(|e| e.to_string())?;
    let mut cases = Vec::new();
    let mut first: Option<Difference> = None;
    let mut error = None;
    for p in m.parity.programs(&m.geometry)? {
        if !args.cases.is_empty() && !args.cases.contains(&p.case) {
            continue;
        }
        match run_case(&p, builds, kernels, &stream) {
            Ok((rec, diff)) => {
                let pass = diff.is_none();
                eprintln!(
                    "  case `{}`: {} launches per build, {} ({})",
                    p.case,
                    p.launches.len(),
                    if pass { "equal" } else { "DIFFERENT" },
                    rec.time_ms
                        .iter()
                        .map(|(k, v)| format!("{k} {v:.3} ms"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                cases.push(rec);
                if let Some(d) = diff {
                    eprintln!("parity FAILED: {d}");
                    first = Some(d);
                    break;
                }
            }
            Err(e) => {
                eprintln!("parity FAILED: case `{}`: {e}", p.case);
                error = Some(format!("case `{}`: {e}", p.case));
                break;
            }
        }
    }
    Ok((cases, first, error))
}

/// Writes the report (pretty JSON) to `--report` and says where, with its verdict and
/// digest.
fn write_report(args: &Args, m: &ParityModule, report: &ParityReport) -> Result<(), String> {
    let mut text = serde_json::to_vec_pretty(report).expect("serialisable");
    text.push(b'\n');
    std::fs::write(&args.report, &text)
        .map_err(|e| format!("writing {}: {e}", args.report.display()))?;
    eprintln!(
        "parity {}: {} — report {} (blake3 {})",
        m.name,
        match report.verdict {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
        },
        args.report.display(),
        Digest::of(&text)
    );
    Ok(())
}

type Aot = (Vec<Digest>, Vec<(Manifest, Digest, Vec<u8>)>);

/// Every manifest digest of `module` in `build`, and the cubins (checked against their
/// manifests: size, blake3, content) for exactly `sm` and its arch-specific variant. The
/// build output is read by the build tool's own reader (`cuda_aot::output`).
fn aot_cubins(build: &std::path::Path, module: &ModuleName, sm: Target) -> Result<Aot, String> {
    let limits = Limits::default();
    let files = cuda_aot::output::manifest_files(&build.join(module.as_str()))
        .map_err(|e| e.to_string())?;
    let arch = Target {
        arch_specific: true,
        ..sm
    };
    let (mut digests, mut cubins) = (Vec::new(), Vec::new());
    for f in files {
        let built = cuda_aot::output::read_built(&f, &limits).map_err(|e| e.to_string())?;
        let man = built.manifest;
        if man.identity.module != *module {
            return Err(format!(
                "{}: a manifest of {}",
                f.display(),
                man.identity.module
            ));
        }
        let digest = Digest::of(&built.manifest_file);
        digests.push(digest);
        let t = man.identity.sm;
        if man.identity.kind != Kind::Cubin || (t != sm && t != arch) {
            continue;
        }
        cuda_aot::content::check(&man, &built.blob).map_err(|e| e.to_string())?;
        cubins.push((man, digest, built.blob));
    }
    digests.sort();
    Ok((digests, cubins))
}

type CaseResult = (CaseRecord, Option<Difference>);

fn run_case(
    p: &Program,
    builds: &[Build],
    kernels: &[BTreeMap<String, cuda_aot::cuda::Kernel>],
    stream: &std::sync::Arc<cuda_aot::cuda::CudaStream>,
) -> Result<CaseResult, String> {
    let inputs = cpu::inputs(p)?;
    let names: Vec<&str> = p.buffers.iter().map(|b| b.name.as_str()).collect();
    let dev: Vec<DeviceBuffers> = builds
        .iter()
        .map(|_| DeviceBuffers::upload(stream, &inputs))
        .collect::<Result<_, _>>()?;
    let mut times: BTreeMap<String, f64> = BTreeMap::new();
    let mut cpu_bufs = inputs.clone();
    let mut diff = None;
    'launches: for (i, l) in p.launches.iter().enumerate() {
        // The CPU step first: it also refuses a launch whose buffers are too small.
        let t = Instant::now();
        cpu::step(&l.cpu)?(&mut cpu_bufs, &l.args)
            .map_err(|e| format!("launch {i} ({}): {e}", l.entry))?;
        *times.entry("cpu".into()).or_default() += t.elapsed().as_secs_f64() * 1e3;
        for ((b, ks), d) in builds.iter().zip(kernels).zip(dev.iter()) {
            let k = &ks[&l.entry];
            // SAFETY (of the call below): `k` is `l.entry` of this build, and the CPU step
            // above checked that every buffer holds what this launch uses.
            let took = launch(d, stream, k, l)?;
            *times.entry(b.label.clone()).or_default() += took.as_secs_f64() * 1e3;
            let got = d.download(stream, &inputs)?;
            if let Some(x) = compare(p, Some(i), &names, ("cpu", &cpu_bufs), (&b.label, &got)) {
                diff = Some(x);
                break 'launches;
            }
        }
    }
    if diff.is_none() {
        let want = cpu::reference(p, inputs.clone())?;
        let outs: Vec<&str> = p.outputs.iter().map(String::as_str).collect();
        diff = compare(
            p,
            None,
            &outs,
            (&format!("cpu reference {}", p.reference), &want),
            ("the launches (cpu steps)", &cpu_bufs),
        );
    }
    let record = |names: &[String], bufs: &Buffers| -> Vec<BufferRecord> {
        p.buffers
            .iter()
            .filter(|b| names.contains(&b.name))
            .map(|b| BufferRecord {
                name: b.name.clone(),
                element: b.element,
                elements: b.elements,
                blake3: Digest::of(bufs.get(&b.name).map_or(&[][..], Vec::as_slice)),
            })
            .collect()
    };
    let all: Vec<String> = p.buffers.iter().map(|b| b.name.clone()).collect();
    Ok((
        CaseRecord {
            name: p.case.clone(),
            seed: p.seed,
            vars: p.vars.clone(),
            launches: p.launches.len(),
            inputs: record(&all, &inputs),
            outputs: record(&p.outputs, &cpu_bufs),
            time_ms: times,
            pass: diff.is_none(),
        },
        diff,
    ))
}

/// One launch on one build (the single place this binary launches kernels).
#[allow(unsafe_code)]
fn launch(
    d: &DeviceBuffers,
    stream: &std::sync::Arc<cuda_aot::cuda::CudaStream>,
    k: &cuda_aot::cuda::Kernel,
    l: &cuda_aot_kernels::parity::spec::Launch,
) -> Result<std::time::Duration, String> {
    // SAFETY: callers pass the kernel of `l.entry` after `l`'s CPU step accepted the
    // buffers (each at least as large as the launch uses); argument sizes are checked
    // against the kernel's launch ABI inside.
    unsafe { d.launch(stream, k, l) }
}
