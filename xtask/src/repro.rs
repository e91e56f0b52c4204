//! `cargo xtask repro`: builds the release set twice, from two copies of the sources in two
//! different temporary folders with two separate build caches (so both really compile), and
//! compares every blob digest; any difference is an error.

use anyhow::{Context, Result};
use cuda_aot::Digest;
use std::collections::BTreeMap;

use crate::advice::fail;
use crate::args::{CacheArgs, FormatArgs, SelectArgs};
use crate::build::{self, BuildOptions, BuildReport};
use crate::files::copy_tree;
use crate::message;

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
match. Exits non-zero on any blob mismatch; --keep leaves both folders for inspection.")]
pub struct Args {
    #[command(flatten)]
    select: SelectArgs,
    /// Keep the two temporary folders (their paths are printed) for inspection.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    pub(crate) format: FormatArgs,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        self.select.select_project()?;
        let base = BuildOptions::from_select(
            &self.select,
            // Two builds from nothing: no local and no shared cache, so nvcc builds each.
            &CacheArgs {
                cache_dir: None,
                cache_max_size: None,
                remote_cache: None,
                remote_cache_mode: crate::args::RemoteCacheMode::Read,
                remote_cache_trust: None,
                remote_cache_key: None,
            },
        );
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
            reports.push(report);
            dirs.push(tmp);
        }
        let rows = compare(&reports[0], &reports[1]);
        let mismatches = rows.iter().filter(|r| !r.blob_match).count();
        let mut kept = Vec::new();
        if self.keep {
            for d in dirs {
                kept.push(d.keep());
            }
        }
        if message::json() {
            message::emit(
                "repro-finished",
                serde_json::json!({
                    "spec": base.spec,
                    "reproducible": mismatches == 0,
                    "mismatches": mismatches,
                    "nvcc_runs": [reports[0].nvcc_runs, reports[1].nvcc_runs],
                    "kept": kept,
                    "modules": rows,
                }),
            );
        } else {
            print_rows(&rows, &reports[0], &reports[1]);
            for k in &kept {
                println!("kept {}", k.display());
            }
        }
        if mismatches > 0 {
            return Err(fail(
                format!("{mismatches} module(s) did not build reproducibly"),
                "find the input that differs between the two builds (absolute paths, timestamps, \
                 -lineinfo, __FILE__/__DATE__ in the sources); rerun with --keep to compare the blobs",
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
