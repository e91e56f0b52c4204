//! `cargo xtask repro`: builds the release set twice, from two copies of the sources in two
//! different temporary folders with two separate build caches (so both really compile), and
//! compares every blob digest; any difference is an error.

use anyhow::{Context, Result};
use cuda_aot::Digest;
use std::collections::BTreeMap;

use crate::advice::fail;
use crate::args::{CacheArgs, FormatArgs, RemoteCacheArgs, SelectArgs, SharedCacheMode};
use crate::files::copy_tree;
use crate::message;
use cuda_aot_builder::build::{self, BuildReport};

/// Build the release set twice in two temporary folders and compare digests.
///
/// Copies the sources into two temporary folders at different paths and depths, builds the
/// release set in each with its own empty cache and output folder, and prints, per module
/// and target, whether the blob digests (and identity digests) match. Exits non-zero on
/// any mismatch. Reproducibility is what lets anyone check that a signed cubin came from
/// the reviewed source.
#[derive(clap::Args)]
#[command(after_long_help = "\
Copies the sources into two temporary folders at different paths and depths, builds the release
set in each with its own empty build cache (both really compile; the nvcc run counts are
printed), and prints per module and target whether the blob digests and the identity digests
match. Exits non-zero on any blob mismatch; --keep leaves both folders for inspection.

With --remote-cache URL (read only), it also audits the shared build cache: every entry the
cache holds for these identities, signature and content checked as a build would take it,
must have the bytes the two rebuilds produced. An entry that passes every check but differs
was signed by a builder key for bytes these sources do not build: repro names it and fails.")]
pub struct Args {
    #[command(flatten)]
    select: SelectArgs,
    /// Keep the two temporary folders (their paths are printed) for inspection.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    remote: RemoteCacheArgs,
    #[command(flatten)]
    exec: crate::args::RemoteExecArgs,
    #[command(flatten)]
    pub(crate) format: FormatArgs,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        self.select.select_project()?;
        let audit = self.remote.options();
        if let Some(r) = &audit {
            if r.mode != SharedCacheMode::Read {
                return Err(fail(
                    "repro audits a shared cache and never writes to it",
                    "drop --remote-cache-mode read-write (repro reads the shared cache only)",
                ));
            }
            build::remote_check_url(&r.url)?;
        }
        let base = self.select.build_options(
            // Two builds from nothing: no local and no shared cache, so nvcc builds each.
            &CacheArgs {
                cache_dir: None,
                cache_max_size: None,
                remote: Default::default(),
                exec: Default::default(),
            },
        );
        // With --remote-exec, both builds run on the cluster, every action executed (the
        // server's ActionCache is never taken from: a rebuild must rebuild).
        let mut base = base;
        let exec = crate::args::RemoteExecArgs {
            remote_exec_cache: cuda_aot_builder::executor::RemoteExecCache::Off,
            ..self.exec.clone()
        };
        if let Some(remote) = exec.executor()? {
            base.executor = remote;
        }
        let sources = build::spec::load(&base.spec, None)?.sources;
        let runs = [("a", "src"), ("b", "deeper/copy/of/the/src")];
        let mut reports = Vec::new();
        let mut dirs = Vec::new();
        for (name, sub) in runs {
            let tmp = tempfile::Builder::new()
                .prefix(&format!("cuda-aot-repro-{name}-"))
                .tempdir()
                .context("creating a temporary folder")?;
            let src = tmp.path().join(sub);
            copy_tree(&sources, &src)?;
            let mut opts = base.clone();
            opts.sources = Some(src);
            opts.cache = tmp.path().join("cache");
            opts.out = tmp.path().join("out");
            eprintln!("repro: build {name} in {}", tmp.path().display());
            let report = build::run_build(&opts).with_context(|| format!("repro build {name}"))?;
            eprintln!(
                "repro: build {name}: {} blobs, {} nvcc runs, {:.1} s",
                report.modules.len(),
                report.nvcc_runs,
                report.wall.as_secs_f64()
            );
            if let Some(summary) = opts.executor.summary() {
                eprintln!("repro: build {name}: {summary}");
            }
            reports.push(report);
            dirs.push(tmp);
        }
        let rows = compare(&reports[0], &reports[1]);
        let mismatches = rows.iter().filter(|r| !r.blob_match).count();
        let shared = audit
            .as_ref()
            .map(|r| audit_shared(r, &reports[0]))
            .transpose()?;
        let mut kept = Vec::new();
        if self.keep {
            for d in dirs {
                kept.push(d.keep());
            }
        }
        if message::json() {
            let mut fields = serde_json::json!({
                "spec": base.spec,
                "reproducible": mismatches == 0,
                "mismatches": mismatches,
                "nvcc_runs": [reports[0].nvcc_runs, reports[1].nvcc_runs],
                "kept": kept,
                "modules": rows,
            });
            // Only with --remote-cache: what the audit of the shared cache found.
            if let Some(a) = &shared {
                fields["shared_cache"] = serde_json::json!(a);
            }
            message::emit("repro-finished", fields);
        } else {
            print_rows(&rows, &reports[0], &reports[1]);
            for k in &kept {
                println!("kept {}", k.display());
            }
            if let Some(a) = &shared {
                for d in &a.differ {
                    println!("shared cache: {d}: its signed entry is NOT what these sources build");
                }
                for r in &a.refused {
                    println!("shared cache: {r}");
                }
                println!(
                    "shared cache {}: {} equal to the rebuilds, {} differ, {} refused, {} absent",
                    a.url,
                    entries(a.matched),
                    a.differ.len(),
                    a.refused.len(),
                    a.absent
                );
            }
        }
        if mismatches > 0 {
            return Err(fail(
                format!("{mismatches} module(s) did not build reproducibly"),
                "find the input that differs between the two builds (absolute paths, timestamps, \
                 -lineinfo, __FILE__/__DATE__ in the sources); rerun with --keep to compare the blobs",
            ));
        }
        if let Some(a) = shared.filter(|a| !a.differ.is_empty()) {
            return Err(fail(
                format!(
                    "the shared cache {} holds {} signed by a builder key whose bytes these sources do not build: {}",
                    a.url,
                    entries(a.differ.len()),
                    a.differ.join("; ")
                ),
                "a builder key the trust root lists signed them: treat that key as compromised (rotate it out of the trust root with cargo xtask trust-root --previous), remove those entries from the shared cache, and rebuild every release that took them",
            ));
        }
        Ok(())
    }
}

/// One (module, target) of the two builds.
#[derive(serde::Serialize)]
struct Row {
    module: String,
    target: String,
    kind: String,
    blob_a: Option<Digest>,
    blob_b: Option<Digest>,
    blob_match: bool,
    identity_match: bool,
}

/// One row per (module, target): build a's order (spec order), then anything only build b
/// produced.
fn compare(a: &BuildReport, b: &BuildReport) -> Vec<Row> {
    type Key = (String, String, String);
    let index = |r: &BuildReport| -> BTreeMap<Key, (Digest, Digest, usize)> {
        r.modules
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let id = &m.manifest.identity;
                (
                    (
                        id.module.to_string(),
                        id.sm.to_string(),
                        id.kind.to_string(),
                    ),
                    (m.manifest.module_digest, id.digest(), i),
                )
            })
            .collect()
    };
    let (ia, ib) = (index(a), index(b));
    let mut keys: Vec<&Key> = ia.keys().collect();
    keys.sort_by_key(|k| ia[*k].2);
    keys.extend(ib.keys().filter(|k| !ia.contains_key(*k)));
    keys.into_iter()
        .map(|k| {
            let (da, db) = (ia.get(k), ib.get(k));
            Row {
                module: k.0.clone(),
                target: k.1.clone(),
                kind: k.2.clone(),
                blob_a: da.map(|x| x.0),
                blob_b: db.map(|x| x.0),
                blob_match: matches!((da, db), (Some(x), Some(y)) if x.0 == y.0),
                identity_match: matches!((da, db), (Some(x), Some(y)) if x.1 == y.1),
            }
        })
        .collect()
}

fn print_rows(rows: &[Row], a: &BuildReport, b: &BuildReport) {
    println!(
        "{:<12} {:<18} {:<14} {:<14} {:<9} identity",
        "module", "target", "blob a", "blob b", "blob"
    );
    let short = |d: Option<Digest>| d.map_or("-".to_string(), |x| x.short());
    for r in rows {
        println!(
            "{:<12} {:<18} {:<14} {:<14} {:<9} {}",
            r.module,
            format!("{}.{}", r.target, r.kind),
            short(r.blob_a),
            short(r.blob_b),
            if r.blob_match { "match" } else { "MISMATCH" },
            if r.identity_match { "match" } else { "differs" }
        );
    }
    let bad = rows.iter().filter(|r| !r.blob_match).count();
    println!(
        "{} of {} blobs reproducible (build a: {} nvcc runs, build b: {} nvcc runs)",
        rows.len() - bad,
        rows.len(),
        a.nvcc_runs,
        b.nvcc_runs
    );
}

/// `1 entry`, `5 entries`.
fn entries(n: usize) -> String {
    match n {
        1 => "1 entry".into(),
        n => format!("{n} entries"),
    }
}

/// What `repro --remote-cache` found in the shared cache.
#[derive(serde::Serialize)]
struct Audit {
    url: String,
    /// Entries that pass every check and equal the rebuilt bytes.
    matched: usize,
    /// `module target (kind)` of entries that pass every check but differ.
    differ: Vec<String>,
    /// Entries the checks refused, with why (a build would compile those).
    refused: Vec<String>,
    /// Identities the shared cache has no entry for.
    absent: usize,
}

/// Takes every job's entry from the shared cache as a build would (every check) and
/// compares its blob with the rebuilt one.
fn audit_shared(opts: &build::RemoteOptions, built: &BuildReport) -> Result<Audit> {
    let remote = build::Remote::open(opts)?;
    let mut a = Audit {
        url: remote.url().to_string(),
        matched: 0,
        differ: Vec::new(),
        refused: Vec::new(),
        absent: 0,
    };
    for m in &built.modules {
        let label = m.manifest.label();
        match remote.fetch(&m.manifest.identity, &label).unwrap_or(None) {
            Some(t) if Digest::of(&t.blob) == m.manifest.module_digest => a.matched += 1,
            Some(t) => a.differ.push(format!(
                "{label}: entry blob {} vs rebuilt {}",
                Digest::of(&t.blob).short(),
                m.manifest.module_digest.short()
            )),
            None => a.absent += 1,
        }
    }
    for r in remote.refused() {
        a.absent -= 1;
        a.refused.push(format!("{}: refused: {}", r.what, r.reason));
    }
    if let Some(why) = remote.read_failed() {
        return Err(fail(
            format!("the shared cache {} could not be read: {why}", a.url),
            "check the store's address and credentials, then run repro again",
        ));
    }
    Ok(a)
}
