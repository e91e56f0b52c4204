//! What `cargo xtask build` prints: the plan of `--dry-run`, the table and summary (cache
//! hits and misses, `--explain`), and the `build-plan` / `build-finished` JSON messages.

use cuda_aot::{Digest, Kind, ModuleName, Target};
use serde::Serialize;
use std::path::{Path, PathBuf};

use super::{BuildReport, JobOutput, Plan, explain};
use crate::message;

/// Prints the `build-plan` JSON message of `--dry-run`.
pub fn emit_plan(plan: &Plan) {
    let jobs: Vec<serde_json::Value> = plan
        .jobs
        .iter()
        .map(|j| {
            let m = &plan.spec.modules[j.module];
            serde_json::json!({
                "module": m.name,
                "target": j.target,
                "kind": j.kind,
                "source": plan.spec.sources.join(&m.sources[0]),
                "sources": m.sources.iter().map(|s| plan.spec.sources.join(s)).collect::<Vec<_>>(),
                "link_flags": j.link,
                "flags": j.flags,
            })
        })
        .collect();
    message::emit(
        "build-plan",
        serde_json::json!({
            "spec": plan.spec.path,
            "toolkit": plan.toolkit.identity,
            "host_toolchain": plan.host.version,
            "jobs": jobs,
        }),
    );
}

/// Prints the jobs of `plan` (module, target, exact nvcc flags) for `--dry-run`.
pub fn print_plan(plan: &Plan) {
    let targets: Vec<String> = plan.spec.targets.iter().map(Target::to_string).collect();
    println!(
        "{}: {} modules, default targets {}",
        plan.spec.path.display(),
        plan.spec.modules.len(),
        targets.join(" ")
    );
    println!(
        "{} job{}; nvcc {} ({}), host compiler: {}",
        plan.jobs.len(),
        if plan.jobs.len() == 1 { "" } else { "s" },
        plan.toolkit.identity.nvcc,
        plan.toolkit.identity.source,
        plan.host.version
    );
    for j in &plan.jobs {
        let m = &plan.spec.modules[j.module];
        println!(
            "{:<12} {:<11} {:<5} {}  {}",
            m.name.as_str(),
            j.target.to_string(),
            j.kind.to_string(),
            m.shown_sources(),
            if j.link.is_empty() {
                j.flags.join(" ")
            } else {
                format!("{}; link: {}", j.flags.join(" "), j.link.join(" "))
            }
        );
    }
}

/// Prints what a build did: one row per (module, target), the cache's hits and misses
/// and, with `explain`, why each compiled job compiled.
pub fn print_report(r: &BuildReport, explain: bool) {
    println!(
        "{:<12} {:<11} {:<5} {:>8}  {:<14} result",
        "module", "target", "kind", "bytes", "digest"
    );
    for b in &r.modules {
        let id = &b.manifest.identity;
        let kind = match id.kind {
            Kind::Cubin => "cubin".to_string(),
            Kind::Ptx => "ptx (compatibility mode)".to_string(),
        };
        println!(
            "{:<12} {:<11} {:<5} {:>8}  {:<14} {}",
            id.module.as_str(),
            id.sm.to_string(),
            kind,
            b.manifest.size,
            b.manifest.module_digest.short(),
            if b.cached { "cached" } else { "built" }
        );
    }
    if explain {
        let compiled: Vec<&JobOutput> = r.modules.iter().filter(|b| !b.cached).collect();
        if compiled.is_empty() {
            println!("explain: every job was a cache hit; nvcc did not run");
        }
        for b in compiled {
            let id = &b.manifest.identity;
            println!(
                "explain: {} {} ({}): {}",
                id.module,
                id.sm,
                id.kind,
                explain::summary(&b.changes)
            );
        }
    }
    let cached = r.modules.iter().filter(|b| b.cached).count();
    let warned = r.modules.iter().filter(|b| !b.warnings.is_empty()).count();
    for b in &r.modules {
        for s in spills(b) {
            println!(
                "spills: {} {}: {} {} spills registers to local memory ({} bytes stores, {} bytes loads per thread)",
                b.manifest.identity.module,
                b.manifest.identity.sm,
                if s.kernel {
                    "kernel"
                } else {
                    "device function"
                },
                super::kernels::demangled(&s.function),
                s.stores,
                s.loads
            );
        }
    }
    println!(
        "{} blobs: {} compiled ({} nvcc runs), {} from cache, {} with nvcc warnings, in {:.2} s; nvcc {} ({}); output {}",
        r.modules.len(),
        r.modules.len() - cached,
        r.nvcc_runs,
        cached,
        warned,
        r.wall.as_secs_f64(),
        r.toolkit.nvcc,
        r.toolkit.source,
        r.out.display()
    );
    println!("{}", cache_line(r, explain));
    if !r.removed.is_empty() {
        println!(
            "removed {} stale file(s) of earlier builds",
            r.removed.len()
        );
    }
}

/// `cache: 8 hits, 16 misses (header 16)`, and the bound when it removed entries.
fn cache_line(r: &BuildReport, explained: bool) -> String {
    let hits = r.modules.iter().filter(|b| b.cached).count();
    let misses = r.modules.len() - hits;
    let by_input = explain::count_by_input(
        r.modules
            .iter()
            .filter(|b| !b.cached)
            .map(|b| b.changes.as_slice()),
    );
    let mut line = format!(
        "cache: {hits} hit{}, {misses} miss{}",
        if hits == 1 { "" } else { "s" },
        if misses == 1 { "" } else { "es" }
    );
    if !by_input.is_empty() {
        let kinds: Vec<String> = by_input.iter().map(|(k, n)| format!("{k} {n}")).collect();
        line += &format!(
            " ({}{})",
            kinds.join(", "),
            if misses > 0 && !explained {
                "; --explain says which"
            } else {
                ""
            }
        );
    }
    if let Some(s) = &r.shared {
        line += &format!(
            "; shared cache: {} taken, {} refused, {} added",
            s.taken,
            s.refused.len(),
            s.added
        );
        if s.read_failed.is_some() {
            line += " (reading failed: see the warning)";
        }
        if s.add_failed.is_some() {
            line += " (adding failed: see the warning)";
        }
    }
    if let Some(ev) = r.eviction.filter(|e| e.entries > 0 || e.over()) {
        line += &format!(
            "; bound {}: removed {} least recently used entr{} ({} -> {})",
            mib(ev.max),
            ev.entries,
            if ev.entries == 1 { "y" } else { "ies" },
            mib(ev.before),
            mib(ev.after)
        );
        if ev.over() {
            line += &format!(
                "; still over it: this build alone needs more (raise --cache-max-size above {})",
                mib(ev.after)
            );
        }
    }
    line
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Prints the `build-finished` JSON message.
pub fn emit_json(r: &BuildReport) {
    message::emit(
        "build-finished",
        serde_json::to_value(JsonReport::of(r)).expect("serialisable"),
    );
}

/// The build summary of docs/json.md: the `build-finished` message (and the
/// `--report-json` document; `release --json` carries it as its `build` field).
#[derive(Serialize)]
pub struct JsonReport<'a> {
    spec: &'a Path,
    out: &'a Path,
    toolkit: &'a cuda_aot::Toolkit,
    nvcc_runs: usize,
    compiled: usize,
    cached: usize,
    cache_hits: usize,
    cache_misses: usize,
    /// (module, target) jobs whose nvcc run printed warnings (a cache hit keeps them).
    warned: usize,
    misses_by_input: std::collections::BTreeMap<&'static str, usize>,
    cache_bytes: Option<u64>,
    evicted: usize,
    wall_ms: u128,
    removed: &'a [PathBuf],
    /// What the shared build cache gave and took (`--remote-cache` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    shared_cache: Option<JsonShared<'a>>,
    modules: Vec<JsonModule<'a>>,
}

/// The shared build cache's part in a build.
#[derive(Serialize)]
struct JsonShared<'a> {
    url: &'a str,
    taken: usize,
    added: usize,
    /// Entries refused (each job compiled instead): `what` (module, target), `reason`.
    refused: Vec<serde_json::Value>,
    /// Why adding to it stopped (read-write, the store failed); absent when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    add_failed: Option<&'a str>,
    /// The first failure to read it (its jobs compiled instead); absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    read_failed: Option<&'a str>,
}

#[derive(Serialize)]
struct JsonModule<'a> {
    module: &'a ModuleName,
    target: Target,
    kind: Kind,
    cached: bool,
    changed: Vec<explain::JsonChange>,
    blob: &'a Path,
    manifest_path: &'a Path,
    identity_digest: Digest,
    module_digest: Digest,
    size: u64,
    warnings: &'a [String],
    /// The kernels ptxas said spill registers (`--warn-on-spills`), by symbol.
    spills: Vec<super::nvcc::Spill>,
}

impl<'a> JsonReport<'a> {
    /// The summary of `r`.
    pub fn of(r: &'a BuildReport) -> Self {
        let cached = r.modules.iter().filter(|b| b.cached).count();
        JsonReport {
            spec: &r.spec,
            out: &r.out,
            toolkit: &r.toolkit,
            nvcc_runs: r.nvcc_runs,
            compiled: r.modules.len() - cached,
            cached,
            cache_hits: cached,
            cache_misses: r.modules.len() - cached,
            warned: r.modules.iter().filter(|b| !b.warnings.is_empty()).count(),
            misses_by_input: explain::count_by_input(
                r.modules
                    .iter()
                    .filter(|b| !b.cached)
                    .map(|b| b.changes.as_slice()),
            ),
            cache_bytes: r.eviction.map(|e| e.after),
            evicted: r.eviction.map_or(0, |e| e.entries),
            wall_ms: r.wall.as_millis(),
            removed: &r.removed,
            shared_cache: r.shared.as_ref().map(|s| JsonShared {
                url: &s.url,
                taken: s.taken,
                added: s.added,
                add_failed: s.add_failed.as_deref(),
                read_failed: s.read_failed.as_deref(),
                refused: s
                    .refused
                    .iter()
                    .map(|f| serde_json::json!({"what": f.what, "reason": f.reason}))
                    .collect(),
            }),
            modules: r
                .modules
                .iter()
                .map(|b| JsonModule {
                    module: &b.manifest.identity.module,
                    target: b.manifest.identity.sm,
                    kind: b.manifest.identity.kind,
                    cached: b.cached,
                    changed: b.changes.iter().map(explain::JsonChange::from).collect(),
                    blob: &b.blob,
                    manifest_path: &b.manifest_path,
                    identity_digest: b.manifest.identity.digest(),
                    module_digest: b.manifest.module_digest,
                    size: b.manifest.size,
                    warnings: &b.warnings,
                    spills: spills(b),
                })
                .collect(),
        }
    }
}

/// The register spills ptxas reported for a job's blob, each marked as a kernel of its
/// manifest or a device function they call.
fn spills(b: &JobOutput) -> Vec<super::nvcc::Spill> {
    let mut out = super::nvcc::spills(&b.warnings);
    for s in &mut out {
        s.kernel = b
            .manifest
            .functions
            .iter()
            .any(|f| f.symbol.as_str() == s.function);
    }
    out
}
