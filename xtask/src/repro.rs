//! `cargo xtask repro`: builds the release set twice, from two copies of the sources in two
//! different temporary folders with two separate build caches (so both really compile), and
//! compares every blob digest; any difference is an error.

use anyhow::{Context, Result};
use cuda_aot::Digest;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::build::{self, BuildOptions, BuildReport, fail};
use crate::toolchain::ToolkitArgs;

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
    /// Parallel nvcc jobs per build (default: the number of available cores).
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    jobs: Option<usize>,
    /// The release spec (default: manifests/release.toml).
    #[arg(long, value_name = "FILE")]
    spec: Option<PathBuf>,
    #[command(flatten)]
    toolkit: ToolkitArgs,
    /// Keep the two temporary folders (their paths are printed) for inspection.
    #[arg(long)]
    keep: bool,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let mut base = BuildOptions::default();
        if let Some(s) = self.spec {
            base.spec = s;
        }
        if let Some(j) = self.jobs {
            base.jobs = j;
        }
        base.toolkit = self.toolkit.options();
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
        let mismatches = compare(&reports[0], &reports[1]);
        if self.keep {
            for d in dirs {
                println!("kept {}", d.keep().display());
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

/// Prints one line per (module, target) and returns the number of mismatches.
fn compare(a: &BuildReport, b: &BuildReport) -> usize {
    type Key = (String, String);
    let index = |r: &BuildReport| -> BTreeMap<Key, (Digest, Digest, usize)> {
        r.modules
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let id = &m.manifest.identity;
                (
                    (id.module.to_string(), format!("{}.{}", id.sm, id.kind)),
                    (m.manifest.module_digest, id.digest(), i),
                )
            })
            .collect()
    };
    let (ia, ib) = (index(a), index(b));
    // Build a's order (spec order), then anything only build b produced.
    let mut keys: Vec<&Key> = ia.keys().collect();
    keys.sort_by_key(|k| ia[*k].2);
    keys.extend(ib.keys().filter(|k| !ia.contains_key(*k)));
    println!(
        "{:<12} {:<18} {:<14} {:<14} {:<9} identity",
        "module", "target", "blob a", "blob b", "blob"
    );
    let mut bad = 0;
    for k in keys {
        let (da, db) = (ia.get(k), ib.get(k));
        let short =
            |d: Option<&(Digest, Digest, usize)>| d.map_or("-".to_string(), |x| x.0.short());
        let blob_ok = matches!((da, db), (Some(x), Some(y)) if x.0 == y.0);
        let id_ok = matches!((da, db), (Some(x), Some(y)) if x.1 == y.1);
        if !blob_ok {
            bad += 1;
        }
        println!(
            "{:<12} {:<18} {:<14} {:<14} {:<9} {}",
            k.0,
            k.1,
            short(da),
            short(db),
            if blob_ok { "match" } else { "MISMATCH" },
            if id_ok { "match" } else { "differs" }
        );
    }
    let total = ia.len().max(ib.len());
    println!(
        "{} of {total} blobs reproducible (build a: {} nvcc runs, build b: {} nvcc runs)",
        total - bad,
        a.nvcc_runs,
        b.nvcc_runs
    );
    bad
}

/// Copies the regular files of `from` into `to`, keeping relative paths.
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    for e in walkdir::WalkDir::new(from) {
        let e = e.with_context(|| format!("listing {}", from.display()))?;
        let rel = e.path().strip_prefix(from).expect("under from");
        let dest = to.join(rel);
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest)
                .with_context(|| format!("creating {}", dest.display()))?;
        } else if e.file_type().is_file() {
            std::fs::copy(e.path(), &dest)
                .with_context(|| format!("copying {}", e.path().display()))?;
        }
    }
    Ok(())
}
