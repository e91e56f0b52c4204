//! Step 2 of a promotion: what to run on the GPU host, and the checks a parity report
//! must pass to bind to this build (passed, this module, these manifests, this spec and source).

use anyhow::Result;
use cuda_aot::{Digest, ModuleName, Target};
use cuda_aot_kernels::parity::report::{ParityReport, Verdict};
use std::path::{Path, PathBuf};

use crate::advice::fail;
use crate::paths;
use cuda_aot_builder::build;

/// What to run on the GPU host for step 2.
pub(super) fn gpu_host_commands(
    m: &ModuleName,
    spec: &Path,
    build_out: &Path,
    out: &Path,
    trust: &Option<PathBuf>,
    targets: &[Target],
) -> String {
    let root = paths::repo_root();
    let rel = |p: &Path| {
        p.strip_prefix(&root)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    };
    format!(
        "2/5 parity: runs on a GPU host (no Rust needed there). Here:\n    \
         cargo build --release -p cuda-aot-kernels --features research --bin parity-runner\n    \
         mkdir -p .gpu/promote && cp target/release/parity-runner .gpu/ && cp -r {build} .gpu/promote/{m}\n  \
         copy the checkout's {spec} (and its sources) with .gpu/ to the GPU host; there:\n    \
         LD_LIBRARY_PATH=/usr/local/cuda/lib64 .gpu/parity-runner --spec {spec} --module {m} --build .gpu/promote/{m} --report .gpu/parity-{m}.json\n  \
         bring .gpu/parity-{m}.json back and continue here:\n    \
         cargo xtask promote {m} --spec {spec} --out {out}{targets}{trust} --parity-report .gpu/parity-{m}.json --reviewer-key FILE",
        targets = targets
            .iter()
            .map(|t| format!(" --target {t}"))
            .collect::<String>(),
        build = rel(build_out),
        spec = rel(spec),
        out = rel(out),
        trust = trust
            .as_ref()
            .map(|t| format!(" --trust {}", t.display()))
            .unwrap_or_default(),
    )
}

/// Step 2's checks: the report passed, and binds to exactly this build, spec and source.
pub(super) fn check_report(
    r: &ParityReport,
    path: &Path,
    ms: &build::ModuleSpec,
    manifests: &[Digest],
    spec_digest: Digest,
    source_digest: Digest,
) -> Result<()> {
    let m = &ms.name;
    let refuse = |why: String, fix: &str| {
        Err(fail(
            format!(
                "promote {m}: step 2: parity report {}: {why}",
                path.display()
            ),
            fix,
        ))
    };
    let rerun = "build again (step 1) and run the parity runner on this build; a report only vouches for the exact manifests it ran";
    if r.schema != ParityReport::SCHEMA {
        return refuse(
            format!("schema {:?}, expected {:?}", r.schema, ParityReport::SCHEMA),
            "pass a report written by this version's parity-runner",
        );
    }
    if r.module != m.as_str() {
        return refuse(
            format!("a report for module `{}`", r.module),
            "pass the report of this module",
        );
    }
    if r.verdict != Verdict::Pass || r.first_difference.is_some() || r.error.is_some() {
        let why = match (&r.first_difference, &r.error) {
            (Some(d), _) => format!("parity FAILED: {d}"),
            (_, Some(e)) => format!("parity FAILED: {e}"),
            _ => "parity FAILED".to_string(),
        };
        return refuse(
            why,
            "fix the kernel (or its CPU reference) until the parity runner passes; a failing report is never promoted",
        );
    }
    if r.cases.is_empty() || r.cases.iter().any(|c| !c.pass) || r.aot.is_empty() {
        return refuse(
            "no case, a failed case or no AOT cubin in the report".into(),
            "run every case of the parity spec on a device the module is built for",
        );
    }
    if r.manifests != manifests {
        let first = r
            .manifests
            .iter()
            .zip(manifests)
            .find(|(a, b)| a != b)
            .map(|(a, b)| format!("; first difference: report {a}, build {b}"))
            .unwrap_or_default();
        return refuse(
            format!(
                "does not bind to this build's manifests: the report ran {} manifest(s), the build at step 1 has {}{first}",
                r.manifests.len(),
                manifests.len()
            ),
            rerun,
        );
    }
    if let Some(a) = r.aot.iter().find(|a| !manifests.contains(&a.manifest)) {
        return refuse(
            format!(
                "its aot {} run names manifest {}, which this build does not have",
                a.target, a.manifest
            ),
            rerun,
        );
    }
    if r.spec_digest != spec_digest {
        return refuse(
            format!(
                "ran parity spec {}, the spec now has {} ([module.parity] or geometry changed)",
                r.spec_digest.short(),
                spec_digest.short()
            ),
            rerun,
        );
    }
    if r.source_digest != source_digest {
        return refuse(
            format!(
                "NVRTC compiled source {}, the source is now {}",
                r.source_digest.short(),
                source_digest.short()
            ),
            rerun,
        );
    }
    if r.schedule_version != ms.schedule_version {
        return refuse(
            format!(
                "schedule version {}, the spec has {}",
                r.schedule_version, ms.schedule_version
            ),
            rerun,
        );
    }
    Ok(())
}
