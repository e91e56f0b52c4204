//! `cargo xtask bench --shared-cache`: the shared build cache on a heavy generated corpus
//! (issue 20). One run measures a cold build into a shared cache, a second machine (its own
//! empty local cache, the same shared cache), adding one SM, sharded builds at N = 2, 3, 4
//! with a final build after each, and fetching entries through the shared cache's checks
//! against a plain copy of the same bytes; every compared figure is a ratio of two
//! measurements of this run. Writes `docs/shared-cache-bench.md`.

use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::args::SharedCacheMode;
use crate::{devkeys, paths};
use cuda_aot_builder::build::{self, BuildOptions, BuildReport, RemoteOptions, Shard};

/// The kernel source every heavy module compiles (with its own geometry).
const HEAVY_CU: &str = include_str!("heavy.cu");
/// The targets of the cold build, and the SM added after it.
const TARGETS: [&str; 2] = ["sm_80", "sm_90"];
const ADDED: &str = "sm_89";
/// The aims (issue 20).
const AIM_SECOND_PCT: f64 = 5.0;
const AIM_SHARD_RATIO: f64 = 1.15;

/// The heavy spec: `modules` modules of `heavy.cu`, chain lengths 4 to 7 rounds (so jobs
/// differ in cost, as real ones do), for `targets`.
pub(super) fn write_corpus(dir: &Path, modules: usize, targets: &[&str]) -> Result<PathBuf> {
    crate::files::write(&dir.join("src/heavy.cu"), HEAVY_CU.as_bytes())?;
    let quoted: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
    let mut spec = format!(
        "[build]\nsources = \"src\"\ntargets = [{}]\nnvcc_flags = [\"-O3\", \"--std=c++17\"]\n",
        quoted.join(", ")
    );
    for k in 0..modules {
        spec += &format!(
            "\n[[module]]\nname = \"heavy_{k:02}\"\nsource = \"heavy.cu\"\nentry_points = [\"heavy_pow\", \"heavy_mix\"]\nprotocol = \"bench-heavy-v1\"\nschedule_version = 1\ngeometry = {{ variant = {k}, rounds = {} }}\n",
            4 + k % 4
        );
    }
    let path = dir.join("heavy.toml");
    crate::files::write(&path, spec.as_bytes())?;
    Ok(path)
}

/// One measured build.
struct Measured {
    wall: Duration,
    nvcc: usize,
    /// `module target` of the jobs it compiled.
    compiled: BTreeSet<String>,
    /// `module target` → blob digest.
    blobs: BTreeMap<String, String>,
    taken: usize,
    report: BuildReport,
}

fn name(m: &build::JobOutput) -> String {
    format!("{} {}", m.manifest.identity.module, m.manifest.identity.sm)
}

impl Measured {
    fn of(report: BuildReport) -> Measured {
        Measured {
            wall: report.wall,
            nvcc: report.nvcc_runs,
            compiled: report
                .modules
                .iter()
                .filter(|m| !m.cached)
                .map(name)
                .collect(),
            blobs: report
                .modules
                .iter()
                .map(|m| (name(m), m.manifest.module_digest.to_string()))
                .collect(),
            taken: report.shared.as_ref().map_or(0, |s| s.taken),
            report,
        }
    }
}

/// The shard rows of one N.
struct ShardRow {
    n: usize,
    walls: Vec<Duration>,
    nvcc: Vec<usize>,
    final_nvcc: usize,
    every_job_once: bool,
}

impl ShardRow {
    fn ratio(&self) -> f64 {
        let secs: Vec<f64> = self.walls.iter().map(Duration::as_secs_f64).collect();
        let mean = secs.iter().sum::<f64>() / secs.len() as f64;
        secs.iter().copied().fold(0.0, f64::max) / mean
    }
}

/// Runs the shared-cache rows (`cargo xtask bench --shared-cache`).
pub(super) fn run(base: &BuildOptions, modules: usize, doc: Option<&Path>) -> Result<()> {
    devkeys::ensure()?;
    let tmp = tempfile::Builder::new()
        .prefix("bench-shared-")
        .tempdir_in(paths::work_dir_created()?)
        .context("creating a temporary folder in the project's .cuda-aot")?;
    let dir = tmp.path();
    let spec = write_corpus(&dir.join("two"), modules, &TARGETS)?;
    let mut three_targets = TARGETS.to_vec();
    three_targets.insert(1, ADDED);
    let spec3 = write_corpus(&dir.join("three"), modules, &three_targets)?;
    let shared = dir.join("shared");
    let builds = Builds { dir, base };
    let jobs = modules * TARGETS.len();
    // The cold build into the shared cache: every job compiled.
    eprintln!(
        "bench: shared cache: cold build of {modules} heavy modules x {} SMs ({jobs} jobs, -j{}) into a shared cache",
        TARGETS.len(),
        base.jobs
    );
    let cold = builds.build(&spec, "cold", &shared, SharedCacheMode::ReadWrite, None)?;
    if cold.nvcc != jobs {
        bail!(
            "the cold build ran nvcc {} times for {jobs} jobs",
            cold.nvcc
        );
    }
    // A second machine: empty local cache, the same shared cache, the same blobs.
    eprintln!(
        "bench: shared cache: cold {:.1} s; a second machine (empty local cache, same shared cache)",
        cold.wall.as_secs_f64()
    );
    let second = builds.build(&spec, "second", &shared, SharedCacheMode::Read, None)?;
    if second.blobs != cold.blobs {
        bail!("the second machine's blobs differ from the cold build's");
    }
    // One SM added: only its jobs compile.
    eprintln!("bench: shared cache: adding {ADDED} to the targets");
    let added = builds.build(&spec3, "second", &shared, SharedCacheMode::ReadWrite, None)?;
    let only_added =
        added.compiled.iter().all(|j| j.ends_with(ADDED)) && added.compiled.len() == modules;

    // The remote fetch against a plain copy of the same bytes.
    eprintln!("bench: shared cache: remote fetch vs plain copy of the same bytes");
    let (fetch, copy, bytes) = fetch_vs_copy(
        &cold.report,
        &remote(&shared, SharedCacheMode::Read),
        &shared,
    )?;

    // The same entries from an S3 server.
    eprintln!("bench: shared cache: the same entries from an S3 server (moto, loopback)");
    let s3 = s3_row(dir, &spec, &shared, base, &cold.report)?;

    // 2, 3 and 4 shards, each with a final build.
    let shards = builds.shards(&spec, &shared, jobs, &cold)?;

    // The table, printed, and the document.
    let t = Rows {
        modules,
        jobs,
        base_jobs: base.jobs,
        cold,
        second,
        added,
        only_added,
        shards,
        fetch,
        copy,
        bytes,
        s3,
    }
    .table();
    println!("{t}");
    if let Some(doc) = doc {
        write_doc(doc, &t, modules)?;
        println!("wrote {}", doc.display());
    }
    Ok(())
}

/// The shared cache at `at` (a folder) in `mode`.
fn remote(at: &Path, mode: SharedCacheMode) -> RemoteOptions {
    RemoteOptions {
        url: format!("file://{}", at.display()),
        mode,
        trust: None,
        key: None,
        timeout: std::time::Duration::from_secs(crate::args::REMOTE_CACHE_TIMEOUT_SECS),
    }
}

/// The builds of one run: their folders in `dir`, their options from `base`.
struct Builds<'a> {
    dir: &'a Path,
    base: &'a BuildOptions,
}

impl Builds<'_> {
    /// A build of `spec` named `name` (its own cache and output folders) with the shared
    /// cache at `at` in `mode`, as shard `shard` if given.
    fn build(
        &self,
        spec: &Path,
        name: &str,
        at: &Path,
        mode: SharedCacheMode,
        shard: Option<Shard>,
    ) -> Result<Measured> {
        let dir = self.dir;
        let opts = BuildOptions {
            spec: spec.to_path_buf(),
            sources: None,
            cache: dir.join(format!("cache-{name}")),
            out: dir.join(format!("out-{name}")),
            remote: Some(remote(at, mode)),
            shard,
            ..self.base.clone()
        };
        Ok(Measured::of(
            build::run_build(&opts).with_context(|| format!("bench build {name}"))?,
        ))
    }

    /// The shard rows: for 2, 3 and 4 shards, each shard built into a shared cache of its
    /// own (seeded with the cold build's timings from `shared`), then a final build that
    /// must take every one of the `jobs` entries and compile none.
    fn shards(
        &self,
        spec: &Path,
        shared: &Path,
        jobs: usize,
        cold: &Measured,
    ) -> Result<Vec<ShardRow>> {
        let dir = self.dir;
        let timings = shared.join("v1/timings.json");
        let mut shards = Vec::new();
        for n in [2usize, 3, 4] {
            let at = dir.join(format!("shared-{n}"));
            crate::files::write(&at.join("v1/timings.json"), &std::fs::read(&timings)?)?;
            let mut row = ShardRow {
                n,
                walls: Vec::new(),
                nvcc: Vec::new(),
                final_nvcc: 0,
                every_job_once: false,
            };
            let mut seen = BTreeSet::new();
            let mut twice = false;
            for k in 1..=n {
                eprintln!("bench: shared cache: shard {k}/{n}");
                let part = self.build(
                    spec,
                    &format!("shard-{n}-{k}"),
                    &at,
                    SharedCacheMode::ReadWrite,
                    Some(Shard { index: k, count: n }),
                )?;
                for j in &part.compiled {
                    twice |= !seen.insert(j.clone());
                }
                row.walls.push(part.wall);
                row.nvcc.push(part.nvcc);
            }
            eprintln!("bench: shared cache: final build after {n} shards");
            let last = self.build(
                spec,
                &format!("final-{n}"),
                &at,
                SharedCacheMode::Read,
                None,
            )?;
            row.final_nvcc = last.nvcc;
            row.every_job_once = !twice
                && seen.len() == jobs
                && row.nvcc.iter().sum::<usize>() == jobs
                && last.nvcc == 0
                && last.taken == jobs
                && last.blobs == cold.blobs;
            shards.push(row);
        }
        Ok(shards)
    }
}

/// Every figure of the shared-cache rows.
struct Rows {
    modules: usize,
    jobs: usize,
    /// The builds' -j.
    base_jobs: usize,
    cold: Measured,
    second: Measured,
    added: Measured,
    /// Whether adding the SM compiled only its jobs.
    only_added: bool,
    shards: Vec<ShardRow>,
    /// The remote fetch's and the plain copy's times, and the bytes of each.
    fetch: Duration,
    copy: Duration,
    bytes: u64,
    s3: S3Row,
}

impl Rows {
    /// The Markdown table: one row per figure, with its aim and verdict.
    fn table(&self) -> String {
        let Rows {
            modules,
            jobs,
            base_jobs,
            cold,
            second,
            added,
            only_added,
            shards,
            fetch,
            copy,
            bytes,
            s3,
        } = self;
        let (fetch, copy, bytes) = (*fetch, *copy, *bytes);
        let second_pct = 100.0 * second.wall.as_secs_f64() / cold.wall.as_secs_f64();
        let mut t = String::new();
        t += "| row | figure | aim | |\n|---|---|---|---|\n";
        t += &format!(
            "| cold build, {modules} modules × {} SMs ({jobs} jobs, -j{}), into the shared cache | {:.1} s, {} nvcc runs | — | |\n",
            TARGETS.len(),
            base_jobs,
            cold.wall.as_secs_f64(),
            cold.nvcc
        );
        t += &format!(
            "| second machine (empty local cache, same shared cache) | {:.2} s = **{second_pct:.2} %** of the cold build, {} nvcc runs, {} taken, same blobs | ≤ {AIM_SECOND_PCT} %, 0 nvcc | {} |\n",
            second.wall.as_secs_f64(),
            second.nvcc,
            second.taken,
            pass(second_pct <= AIM_SECOND_PCT && second.nvcc == 0)
        );
        t += &format!(
            "| adding {ADDED} to the targets | {} nvcc runs ({} jobs of {ADDED}), {:.1} s | only {ADDED}'s {modules} jobs | {} |\n",
            added.nvcc,
            added.compiled.iter().filter(|j| j.ends_with(ADDED)).count(),
            added.wall.as_secs_f64(),
            pass(*only_added)
        );
        for r in shards {
            let walls: Vec<String> = r
                .walls
                .iter()
                .map(|w| format!("{:.1}", w.as_secs_f64()))
                .collect();
            let nvcc: Vec<String> = r.nvcc.iter().map(usize::to_string).collect();
            t += &format!(
                "| {} shards: each shard's build wall time (s), nvcc runs | {} s; {} nvcc; largest / mean **{:.3}**; final build {} nvcc | ≤ {AIM_SHARD_RATIO}, every job once | {} |\n",
                r.n,
                walls.join(" / "),
                nvcc.join(" + "),
                r.ratio(),
                r.final_nvcc,
                pass(r.ratio() <= AIM_SHARD_RATIO && r.every_job_once)
            );
        }
        let mbps = |d: Duration| bytes as f64 / d.as_secs_f64() / 1e6;
        t += &format!(
            "| remote fetch ({jobs} entries, {:.1} MB, every check `verify` makes) vs a plain copy of the same bytes from the same folder | {:.1} MB/s vs {:.1} MB/s: **{:.2}×** the copy's time | reported | |\n",
            bytes as f64 / 1e6,
            mbps(fetch),
            mbps(copy),
            fetch.as_secs_f64() / copy.as_secs_f64()
        );
        t += &format!(
            "| second machine with the shared cache in an S3 bucket (the same entries, moto on loopback, `xtask build` process) vs a plain GET of the same {:.1} MB from the same server | build {:.2} s ({} nvcc), GETs {:.2} s: **{:.2}×** | 0 nvcc | {} |\n",
            s3.bytes as f64 / 1e6,
            s3.build.as_secs_f64(),
            s3.nvcc,
            s3.get.as_secs_f64(),
            s3.build.as_secs_f64() / s3.get.as_secs_f64(),
            pass(s3.nvcc == 0)
        );
        t
    }
}

/// The S3 row's figures.
struct S3Row {
    build: Duration,
    nvcc: usize,
    get: Duration,
    bytes: u64,
}

/// Starts the pinned S3 server, copies the shared folder's entries into a bucket, then
/// times a second-machine `xtask build` process reading the bucket (every check; its
/// planning included) and a plain GET of the same objects from the same server.
fn s3_row(
    dir: &Path,
    spec: &Path,
    shared: &Path,
    base: &BuildOptions,
    cold: &BuildReport,
) -> Result<S3Row> {
    use cuda_aot_registry::s3::{S3Client, S3Options};
    let port = crate::repo::servers::pick_port(0)?;
    let work = dir.join("s3-work");
    std::fs::create_dir_all(&work)?;
    let mut server = crate::repo::servers::s3::command(
        port,
        &["cache".to_string()],
        &work,
        crate::repo::servers::s3::Faults::default(),
    )?
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .context("starting the S3 server")?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if t.elapsed() > Duration::from_secs(60) {
            let _ = server.kill();
            bail!("the S3 server did not listen on {endpoint}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let row = (|| -> Result<S3Row> {
        let (id, secret) = ("cuda-aot-baseline", "cuda-aot-baseline-secret");
        let client = S3Client::open(
            "s3://cache/bench",
            &S3Options {
                endpoint: Some(endpoint.clone()),
                access_key: Some((id.into(), secret.into())),
                ..S3Options::default()
            },
        )?;
        for f in crate::files::files_under(shared)?
            .into_iter()
            .filter(|f| f.regular)
        {
            client.put(&f.rel, &std::fs::read(&f.path)?)?;
        }
        // The objects of the entries this build takes (the cold build's jobs).
        let entries: Vec<String> = cold
            .modules
            .iter()
            .flat_map(|m| {
                let id = m.manifest.identity.digest().hex();
                ["entry.json", "manifest.json", "blob"].map(|f| format!("v1/entries/{id}/{f}"))
            })
            .collect();
        let out = dir.join("out-s3");
        let report = dir.join("s3.report.json");
        let mut cmd = std::process::Command::new(std::env::current_exe()?);
        cmd.arg("build")
            .arg("--spec")
            .arg(spec)
            .arg("--cache-dir")
            .arg(dir.join("cache-s3"))
            .arg("--out")
            .arg(&out)
            .arg("--report-json")
            .arg(&report)
            .arg("-j")
            .arg(base.jobs.to_string())
            .args(["--remote-cache", "s3://cache/bench"])
            .env("AWS_ENDPOINT_URL", &endpoint)
            .env("AWS_ACCESS_KEY_ID", id)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_REGION", "us-east-1")
            .env("CUDA_AOT_TOOLKIT_DIR", &base.toolkit.toolkit_dir)
            .stdout(std::process::Stdio::null());
        let t = Instant::now();
        let status = cmd.status().context("running xtask build")?;
        let build = t.elapsed();
        if !status.success() {
            bail!("the build over S3 failed ({status})");
        }
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report)?)?;
        let nvcc = r["nvcc_runs"].as_u64().unwrap_or(u64::MAX) as usize;
        let mut gets = Vec::new();
        let mut bytes = 0;
        for _ in 0..5 {
            let t = Instant::now();
            bytes = 0;
            for rel in &entries {
                bytes += client.get(rel, 64 << 20)?.map_or(0, |b| b.len() as u64);
            }
            gets.push(t.elapsed());
        }
        gets.sort();
        Ok(S3Row {
            build,
            nvcc,
            get: gets[2],
            bytes,
        })
    })();
    let _ = server.kill();
    let _ = server.wait();
    row
}

fn pass(ok: bool) -> &'static str {
    if ok { "pass" } else { "**fail**" }
}

/// Median time to take every job's entry through [`build::Remote::fetch`] (signature,
/// identity, digests, content) and to read the same files with a plain copy, over 5
/// alternating rounds; and the bytes per round.
fn fetch_vs_copy(
    cold: &BuildReport,
    opts: &RemoteOptions,
    shared: &Path,
) -> Result<(Duration, Duration, u64)> {
    let remote = build::Remote::open(opts)?;
    let files: Vec<PathBuf> = cold
        .modules
        .iter()
        .flat_map(|m| {
            let d = shared
                .join("v1/entries")
                .join(m.manifest.identity.digest().hex());
            ["entry.json", "manifest.json", "blob"].map(|f| d.join(f))
        })
        .collect();
    let (mut fetches, mut copies, mut bytes) = (Vec::new(), Vec::new(), 0);
    for _ in 0..5 {
        let t = Instant::now();
        for m in &cold.modules {
            if !matches!(remote.fetch(&m.manifest.identity, "bench"), Ok(Some(_))) {
                bail!("the shared cache did not give {}", name(m));
            }
        }
        fetches.push(t.elapsed());
        let t = Instant::now();
        bytes = 0;
        for f in &files {
            bytes += std::fs::read(f)
                .with_context(|| format!("reading {}", f.display()))?
                .len() as u64;
        }
        copies.push(t.elapsed());
    }
    fetches.sort();
    copies.sort();
    Ok((fetches[2], copies[2], bytes))
}

fn write_doc(doc: &Path, table: &str, modules: usize) -> Result<()> {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let text = format!(
        "# Shared build cache benchmark\n\n\
Written by `cargo xtask bench --shared-cache` (issue 20); do not edit by hand. The corpus is\n\
generated: {modules} modules of `xtask/src/repo/bench/heavy.cu` (prover-style Montgomery\n\
multiplication over 12- and 8-limb fields, unrolled chains of 4 to 7 rounds), each with its\n\
own geometry, for {} and then {ADDED} as well. The shared cache is a folder\n\
(`file://`), and for one row the same entries in a bucket of the pinned S3 server\n\
(`cargo xtask servers s3`) on loopback; every build runs with its own local cache. Every\n\
compared figure is a ratio of two measurements of this run.\n\n\
Run: {}, {cores} cores, load average at the end of the run (its own nvcc jobs): {}\n\n{table}\n\
How to read it: the second machine takes every entry after the checks `verify` makes and\n\
runs no nvcc; adding an SM compiles only that SM's jobs, because each job's identity is its\n\
own (module, target, kind); each shard builds the part the timings of the cold build give\n\
it (longest first onto the least-loaded part), and the final build after the shards takes\n\
every job from the shared cache, so shards and final build together ran each job exactly\n\
once. Shard times are wall times of each shard's build at the bench's -j, run one after\n\
another on this machine.\n",
        TARGETS.join(" and "),
        cuda_aot::metadata::Time::now(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    );
    crate::files::write(doc, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heavy_corpus_is_a_valid_spec_with_distinct_modules_per_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_corpus(dir.path(), 5, &TARGETS).unwrap();
        let spec = build::spec::load(&path, None).unwrap();
        assert_eq!(spec.modules.len(), 5);
        assert_eq!(spec.targets.len(), 2);
        let geometries: BTreeSet<String> = spec
            .modules
            .iter()
            .map(|m| format!("{:?}", m.geometry))
            .collect();
        assert_eq!(geometries.len(), 5, "each module has its own geometry");
        assert!(dir.path().join("src/heavy.cu").is_file());
    }
}
