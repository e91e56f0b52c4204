//! `cargo xtask promote <module>`: a reviewer promotes a research kernel into the AOT release
//! set, in numbered steps that each say what they did:
//!
//! 1. AOT build of the module for the release targets with the pinned toolkit;
//! 2. parity on the GPU host (the `parity-runner` binary, built here, run there: NVRTC
//!    build, the AOT cubins for the device's SM and the CPU reference on the module's parity
//!    spec) — promote stops here until `--parity-report FILE` brings its report back, then
//!    checks that the report passed and binds to exactly this build;
//! 3. resource review: per entry point, registers, static shared memory, local memory and
//!    max threads of the NVRTC build, the AOT build and the currently released version,
//!    each cubin figure cross-checked with the driver's (`cuFuncGetAttribute`); a table in
//!    the terminal and in `review.json`;
//! 4. the promotion record: module, schedule version, every manifest digest, the parity
//!    report's and the review's blake3, signed by reviewer keys meeting the trust root's
//!    reviewer threshold (a builder key never counts);
//! 5. the module joins the release set: with `--publish`, the build is signed and published
//!    with its promotion, the registry's other modules kept.

use anyhow::{Context, Result};
use cuda_aot::metadata::{Promotion, RoleName};
use cuda_aot::source::DirSource;
use cuda_aot::state::TrustState;
use cuda_aot::trust::VerifiedRoot;
use cuda_aot::verify::Options;
use cuda_aot::{Digest, Kind, Manifest, ModuleName, SecretKey, Target};
use cuda_aot_kernels::parity::module::spec_digest;
use cuda_aot_kernels::parity::report::{ParityReport, Resources, Verdict};
use cuda_aot_kernels::parity::spec::ParitySpec;
use cuda_aot_registry::PublishOptions;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::advice::{Fix, fail};
use crate::build::{self, BuildOptions};
use crate::{anchor, devkeys, files, outdir, paths, publish, sign};

/// The largest parity report read (16 MiB).
const REPORT_LIMIT: u64 = 16 << 20;

/// Promote a research kernel into the AOT release set (numbered steps; docs/review.md).
///
/// Step 1 builds the module AOT for the spec's targets; step 2 needs parity on a GPU host
/// (it prints the commands, then continues from --parity-report FILE); step 3 is the
/// resource review (NVRTC vs AOT vs released); step 4 writes a promotion record signed by
/// reviewer keys meeting the trust root's threshold; step 5, with --publish, makes the
/// module join the registry's release set with its promotion.
#[derive(clap::Args)]
pub struct Args {
    /// The module to promote (a [[module]] of the spec with a [module.parity] section).
    #[arg(value_parser = parse_module)]
    module: ModuleName,
    /// The spec holding the module (default: kernels/research/research.toml).
    #[arg(long, value_name = "FILE")]
    spec: Option<PathBuf>,
    /// The promotion's working folder: AOT build, review, promotion record (default:
    /// .cuda-aot/promote/<module>).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Build only these targets (default: the spec's).
    #[arg(long = "target", value_name = "TARGET")]
    targets: Vec<Target>,
    /// Parallel nvcc jobs.
    #[arg(short = 'j', long)]
    jobs: Option<usize>,
    /// Skip step 1 and use the AOT build already in `<out>/build` (e.g. on a GPU host
    /// without the toolkit, where the build was carried); the parity report must still
    /// bind to exactly its manifests.
    #[arg(long)]
    reuse_build: bool,
    /// The build cache (default: .cuda-aot/cache).
    #[arg(long, value_name = "DIR", env = "CUDA_AOT_BUILD_CACHE")]
    cache_dir: Option<PathBuf>,
    #[command(flatten)]
    remote: crate::args::RemoteCacheArgs,
    /// The parity report the parity runner wrote on the GPU host. Without it, promote stops
    /// after step 1 and prints the commands for the GPU host.
    #[arg(long, value_name = "FILE")]
    parity_report: Option<PathBuf>,
    /// A reviewer's private key (repeat: the trust root's reviewer threshold must be met;
    /// default for a dev root: the dev reviewer key).
    #[arg(long = "reviewer-key", value_name = "FILE")]
    reviewer_keys: Vec<PathBuf>,
    /// What the reviewers checked, kept in the promotion record.
    #[arg(long)]
    note: Option<String>,
    /// Reviewers on different machines: sign what this run derived even under the
    /// threshold, writing `<out>/promotion.partial.json` for the next reviewer's --cosign.
    #[arg(long, conflicts_with = "publish")]
    partial: bool,
    /// Add this run's reviewer signatures to a partially signed record (another reviewer's
    /// --partial): it must promise exactly what this run derived (manifests, parity report,
    /// resource review, schedule version); its note is kept.
    #[arg(long, value_name = "FILE")]
    cosign: Option<PathBuf>,
    /// Trust root (default: the dev root, else keys/root.json): its channel goes into the
    /// manifests, its reviewer role and threshold decide who may promote.
    #[arg(long, value_name = "FILE")]
    trust: Option<PathBuf>,
    /// The registry: its released version of the module is the review's third column;
    /// --publish publishes into it [default: .cuda-aot/registry of the project].
    #[arg(long, value_name = "DIR")]
    registry: Option<PathBuf>,
    /// Step 5: sign the build (builder key) and publish it with its promotion into
    /// --registry, keeping the registry's other modules.
    #[arg(long)]
    publish: bool,
    /// The builder's private key for --publish (default for a dev root: the dev key).
    #[arg(long, value_name = "FILE", env = "CUDA_AOT_BUILDER_KEY")]
    builder_key: Option<PathBuf>,
    /// The publisher's private key for --publish (default for a dev root: the dev key).
    #[arg(long, value_name = "FILE", env = "CUDA_AOT_PUBLISHER_KEY")]
    publisher_key: Option<PathBuf>,
}

fn parse_module(s: &str) -> std::result::Result<ModuleName, String> {
    ModuleName::new(s).map_err(|e| e.to_string())
}

/// One row of the resource review: an entry point's figure in each build.
#[derive(Debug, Clone, Serialize)]
pub struct ReviewRow {
    /// Entry point.
    pub entry: String,
    /// `registers`, `shared bytes`, `local bytes`, `max threads`.
    pub resource: String,
    /// Per build (`nvrtc sm_90`, `aot sm_90a`, `released sm_90`): the cubin's figure and,
    /// where it differs, the driver's.
    pub values: BTreeMap<String, String>,
    /// What a reviewer should look at: figures that differ between builds, cubin and
    /// driver disagreeing, spills.
    pub notes: Vec<String>,
}

/// The resource review document (`review.json`), bound into the promotion by its blake3.
#[derive(Debug, Clone, Serialize)]
pub struct Review {
    /// `cuda-aot/resource-review/v1`.
    pub schema: String,
    /// The module.
    pub module: String,
    /// blake3 of the parity report the figures come from.
    pub parity_report: Digest,
    /// The device they were measured on.
    pub device: String,
    /// Builds, in column order.
    pub builds: Vec<String>,
    /// Rows.
    pub rows: Vec<ReviewRow>,
    /// The table as printed.
    pub table: String,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let spec_path = match &self.spec {
            Some(s) => {
                paths::select_spec(s)?;
                s.clone()
            }
            None => paths::repo_root().join("kernels/research/research.toml"),
        };
        let registry = self
            .registry
            .clone()
            .unwrap_or_else(paths::default_registry);
        let out = self
            .out
            .clone()
            .unwrap_or_else(|| paths::work_dir().join("promote").join(self.module.as_str()));
        let build_out = out.join("build");
        // A fresh clone promotes with development keys, as `release` does.
        if self.trust.is_none()
            && !paths::dev_keys_dir().join("root.json").exists()
            && !paths::repo_root().join("keys/root.json").exists()
        {
            devkeys::ensure()?;
        }
        let trust = anchor::trust_file(self.trust.as_deref())?;
        let anchor = anchor::read_bytes(&trust)?;
        let root = cuda_aot::trust::verify_anchor(
            &anchor,
            &crate::limits::limits(),
            &trust.display().to_string(),
        )?;
        let m = &self.module;

        // Before any build: the module must exist in the spec and have a parity spec.
        let spec = build::spec::load(&spec_path, None)?;
        let ms = spec
            .modules
            .iter()
            .find(|x| &x.name == m)
            .ok_or_else(|| {
                fail(
                    format!(
                        "{}: no module `{m}` (modules: {})",
                        spec_path.display(),
                        spec.modules
                            .iter()
                            .map(|x| x.name.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    "pass --spec FILE of the spec that holds the module",
                )
            })?
            .clone();
        let parity = match &ms.parity {
            None => {
                return Err(fail(
                    format!(
                        "{}: module `{m}` has no [module.parity] section: nothing says what parity means for it",
                        spec_path.display()
                    ),
                    "write its parity spec (entry points in order, geometry, seeded inputs, outputs, CPU reference; kernels/src/parity/spec.rs and docs/review.md)",
                ));
            }
            Some(v) => ParitySpec::from_toml(v).map_err(|e| {
                fail(
                    format!(
                        "{}: module `{m}`: [module.parity]: {e}",
                        spec_path.display()
                    ),
                    "fix the parity spec (kernels/src/parity/spec.rs documents it)",
                )
            })?,
        };

        // 1. AOT build.
        let mut opts = BuildOptions {
            spec: spec_path.clone(),
            out: build_out.clone(),
            modules: vec![m.clone()],
            targets: self.targets.clone(),
            channel: root.root().channel,
            progress: false,
            ..BuildOptions::default()
        };
        if let Some(j) = self.jobs {
            opts.jobs = j.max(1);
        }
        if let Some(c) = &self.cache_dir {
            opts.cache = c.clone();
        }
        opts.remote = self.remote.options();
        let report = match self.reuse_build {
            true => None,
            false => Some(
                build::run_build(&opts)
                    .with_context(|| format!("promote {m}: step 1 (AOT build)"))?,
            ),
        };
        let built = outdir::read_output(&build_out)?;
        if let Some(other) = built.iter().find(|(x, _, _)| &x.identity.module != m) {
            return Err(fail(
                format!(
                    "{}: holds {} besides {m}: a promotion's build output holds the promoted module only",
                    build_out.display(),
                    other.0.label()
                ),
                "use a promotion folder of its own (--out DIR)",
            ));
        }
        let mut manifests: Vec<Digest> = built.iter().map(|(_, f, _)| Digest::of(f)).collect();
        manifests.sort();
        let targets: Vec<String> = built
            .iter()
            .map(|(x, _, _)| x.identity.sm.to_string())
            .collect();
        let how = match &report {
            Some(r) => format!(
                "{} compiled, {} from the cache",
                r.modules.iter().filter(|b| !b.cached).count(),
                r.modules.iter().filter(|b| b.cached).count()
            ),
            None => "reused as built (--reuse-build)".into(),
        };
        let toolkit = &built[0].0.identity.toolkit;
        println!(
            "1/5 AOT build: {m} for {} with nvcc {} ({}) -> {}: {} manifest(s), {how} ({} channel)",
            targets.join(" "),
            toolkit.nvcc,
            toolkit.source,
            build_out.display(),
            manifests.len(),
            built[0].0.channel
        );
        if built
            .iter()
            .any(|(x, _, _)| x.channel != root.root().channel)
        {
            return Err(fail(
                format!(
                    "{}: built for the {} channel, the trust root {} is {}",
                    build_out.display(),
                    built[0].0.channel,
                    trust.display(),
                    root.root().channel
                ),
                "build again for the trust root's channel (drop --reuse-build)",
            ));
        }

        // A record of an earlier promotion that no longer covers this build would be
        // published with it and mislead: it goes.
        let old_record = outdir::promotion_path(&build_out, m);
        if let Some(bytes) =
            cuda_aot::fs::read_at_most(&old_record, crate::limits::limits().promotion)?
        {
            let covers = cuda_aot::trust::decode_unverified::<Promotion>(
                &bytes,
                crate::limits::limits().promotion,
                "promotion record",
            )
            .is_ok_and(|p| p.manifests == manifests);
            if !covers {
                std::fs::remove_file(&old_record)
                    .with_context(|| format!("removing {}", old_record.display()))?;
                println!(
                    "    removed {}: an earlier promotion record that does not cover this build",
                    old_record.display()
                );
            }
        }

        // 2. Parity on the GPU host.
        let Some(report_path) = &self.parity_report else {
            println!(
                "{}",
                crate::advice::as_run(&gpu_host_commands(
                    m,
                    &spec_path,
                    &build_out,
                    &out,
                    &self.trust,
                    &self.targets
                ))
            );
            return Err(fail(
                format!(
                    "promotion of {m} stopped at step 2: no parity report (a promotion binds a parity report: NVRTC build, AOT cubins and CPU reference equal on the GPU host)"
                ),
                format!(
                    "run the parity runner on a GPU host as printed above, then continue: cargo xtask promote {m} --parity-report FILE"
                ),
            ));
        };
        let report_file = cuda_aot::fs::read_capped(report_path, REPORT_LIMIT, "parity report")
            .with_context(|| format!("reading the parity report {}", report_path.display()))?;
        let report_digest = Digest::of(&report_file);
        let parity_report: ParityReport = serde_json::from_slice(&report_file).map_err(|e| {
            fail(
                format!("{}: not a parity report: {e}", report_path.display()),
                "pass the JSON file parity-runner --report wrote",
            )
        })?;
        if ms.is_linked() {
            return Err(fail(
                format!(
                    "{m} lists {} sources ({}): promotion compares one file's NVRTC research build with its AOT build, and a device-linked module has no such single file",
                    ms.sources.len(),
                    ms.shown_sources()
                ),
                "promote modules of one source; a module of several files is released as built",
            ));
        }
        let source = std::fs::read(spec.sources.join(&ms.sources[0]))
            .with_context(|| format!("reading the source of {m}"))?;
        check_report(
            &parity_report,
            report_path,
            &ms,
            &manifests,
            spec_digest(&parity, &ms.geometry),
            Digest::of(&source),
        )?;
        println!(
            "2/5 parity: PASS on {} ({}, {}, driver {}): {} case(s), {}, every buffer equal to the CPU steps after every launch and the outputs to the reference; report {} (blake3 {})",
            parity_report.device.name,
            parity_report.device.uuid,
            parity_report.device.sm,
            parity_report.device.driver,
            parity_report.cases.len(),
            std::iter::once(format!(
                "nvrtc {} ({})",
                parity_report.research_build.target, parity_report.research_build.version
            ))
            .chain(
                parity_report
                    .aot
                    .iter()
                    .map(|a| format!("aot {}", a.target))
            )
            .collect::<Vec<_>>()
            .join(", "),
            report_path.display(),
            report_digest.short()
        );

        // 3. Resource review.
        let released = released_manifest(&registry, &anchor, m, &parity_report.device.sm);
        let review = review(&parity_report, report_digest, released.as_ref());
        let mut review_file = serde_json::to_vec_pretty(&review).expect("serialisable");
        review_file.push(b'\n');
        let review_path = out.join("review.json");
        std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
        files::write(&review_path, &review_file)?;
        let review_digest = Digest::of(&review_file);
        println!(
            "3/5 resource review on {} (cubin figure; the driver's in parentheses where it differs):\n{}    written to {} (blake3 {})",
            review.device,
            review.table,
            review_path.display(),
            review_digest.short()
        );

        // 4. The promotion record.
        let keys = reviewer_keys(
            &self.reviewer_keys,
            &root,
            &trust,
            self.partial || self.cosign.is_some(),
        )?;
        let mut promotion = Promotion {
            schema: Promotion::SCHEMA.into(),
            module: m.clone(),
            schedule_version: ms.schedule_version,
            manifests: manifests.clone(),
            parity_report: report_digest,
            resource_review: review_digest,
            note: self.note.clone().unwrap_or_else(|| {
                format!(
                    "parity on {} ({}), resource review read",
                    parity_report.device.name, parity_report.device.sm
                )
            }),
        };
        let limit = crate::limits::limits().promotion;
        let env = match &self.cosign {
            None => {
                let refs: Vec<&SecretKey> = keys.iter().collect();
                cuda_aot::metadata::sign_doc(&promotion, &refs)
            }
            Some(path) => {
                let bytes = cuda_aot::fs::read_capped(path, limit, "partial promotion record")
                    .with_context(|| format!("reading {}", path.display()))?;
                let (mut env, theirs) = cuda_aot::trust::decode_envelope::<Promotion>(
                    &bytes,
                    limit,
                    "promotion record",
                )?;
                check_cosign(&theirs, &promotion, path)?;
                promotion.note = theirs.note;
                for k in &keys {
                    env.add_signature(k)?;
                }
                env
            }
        };
        let file = env.to_bytes();
        // The verifier's own check (threshold counted in one place): what clients will run.
        let opened = match root.open::<Promotion>(&file, limit, "promotion record") {
            Ok(o) => o,
            Err(cuda_aot::Error::Threshold {
                valid, threshold, ..
            }) if self.partial && valid > 0 && valid < threshold as usize => {
                let partial = out.join("promotion.partial.json");
                files::write(&partial, &file)?;
                println!(
                    "{}",
                    crate::advice::as_run(&format!(
                        "4/5 promotion record: PARTIAL, {valid} of {threshold} reviewer signature(s) -> {}\n    the next reviewer derives steps 1-3 again and co-signs: cargo xtask promote {m} --parity-report REPORT --cosign {} --reviewer-key THEIR_KEY",
                        partial.display(),
                        partial.display()
                    ))
                );
                return Ok(());
            }
            Err(e) => {
                let fix = e.fix();
                return Err(
                    anyhow::Error::new(Fix(fix)).context(format!("promote {m}: step 4: {e}"))
                );
            }
        };
        let record_path = outdir::promotion_path(&build_out, m);
        files::write(&record_path, &file)?;
        println!(
            "4/5 promotion record: {m} schedule v{}, {} manifest(s), parity report {}, review {}; signed by reviewer(s) {} (threshold {} of trust root v{}) -> {} (blake3 {})",
            promotion.schedule_version,
            promotion.manifests.len(),
            report_digest.short(),
            review_digest.short(),
            opened
                .signers
                .iter()
                .map(|k| k.short())
                .collect::<Vec<_>>()
                .join(", "),
            root.root().roles.reviewer.threshold,
            root.root().version,
            record_path.display(),
            Digest::of(&file).short()
        );

        // 5. The release set.
        if !self.publish {
            println!(
                "{}",
                crate::advice::as_run(&format!(
                    "5/5 release set: not published (no --publish). To publish {m} with its promotion, keeping the registry's other modules:\n    cargo xtask sign {out}{bk}\n    cargo xtask publish --registry {reg} --keep-unlisted{pk} {out}\n  To keep it in every later release, add its [[module]] section (with [module.parity]) to the release spec.",
                    out = build_out.display(),
                    reg = registry.display(),
                    bk = if self.builder_key.is_some() {
                        " --builder-key BUILDER_KEY"
                    } else {
                        ""
                    },
                    pk = if self.publisher_key.is_some() {
                        " --publisher-key PUBLISHER_KEY"
                    } else {
                        ""
                    },
                ))
            );
            return Ok(());
        }
        let builder = match &self.builder_key {
            Some(p) => devkeys::read_key(p)?,
            None => dev_key_for(&root, &trust, "builder", "--builder-key")?.builder,
        };
        let n = sign::sign_output(&build_out, &builder)?;
        let publisher = match &self.publisher_key {
            Some(p) => devkeys::read_key(p)?,
            None => publish::dev_publisher_for(&anchor, &trust)?,
        };
        let p = publish::publish_output(
            &registry,
            &build_out,
            &trust,
            &publisher,
            &PublishOptions {
                keep_unlisted: true,
                ..PublishOptions::default()
            },
        )?;
        println!(
            "{}",
            crate::advice::as_run(&format!(
                "5/5 release set: {m} joined the release set of {}: build statement over {n} manifest(s) signed by builder {}; {}\n    check it as a prover would: cargo xtask verify --registry {}{}",
                registry.display(),
                builder.public().key_id().short(),
                publish::describe(&p, &registry),
                registry.display(),
                match root.root().channel {
                    cuda_aot::Channel::Production => " --production",
                    _ => "",
                }
            ))
        );
        Ok(())
    }
}

/// What to run on the GPU host for step 2.
fn gpu_host_commands(
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
fn check_report(
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

/// The currently released manifest of `module` for `target`, if the registry holds one
/// that verifies against the trust root.
fn released_manifest(
    registry: &Path,
    anchor: &[u8],
    module: &ModuleName,
    target: &str,
) -> Option<Manifest> {
    let src = DirSource::new(registry);
    let v = cuda_aot::verify::verify_metadata(
        &src,
        anchor,
        TrustState::default(),
        &Options::ignoring_expiry(),
    )
    .ok()?;
    let e = v
        .index()
        .entries
        .iter()
        .find(|e| &e.module == module && e.kind == Kind::Cubin && e.sm.to_string() == target)?;
    v.verify_entry(&src, e).ok().map(|m| m.manifest().clone())
}

/// Step 3: the resource review table.
pub fn review(r: &ParityReport, report: Digest, released: Option<&Manifest>) -> Review {
    let mut builds: Vec<String> = Vec::new();
    for x in &r.resources {
        if !builds.contains(&x.build) {
            builds.push(x.build.clone());
        }
    }
    let released_label = format!("released {}", r.device.sm);
    builds.push(released_label.clone());
    let mut entries: Vec<String> = Vec::new();
    for x in &r.resources {
        if !entries.contains(&x.entry) {
            entries.push(x.entry.clone());
        }
    }
    type Get = fn(&Resources) -> Option<u32>;
    let resources: [(&str, Get); 4] = [
        ("registers", |x| x.registers),
        ("shared bytes", |x| x.shared_bytes),
        ("local bytes", |x| x.local_bytes),
        ("max threads", |x| x.max_threads),
    ];
    let show = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    let mut rows = Vec::new();
    for e in &entries {
        for (name, get) in resources {
            let mut values = BTreeMap::new();
            let mut notes = Vec::new();
            let mut figures = Vec::new();
            for x in r.resources.iter().filter(|x| &x.entry == e) {
                let (mut c, d) = (get(&x.cubin), get(&x.device));
                // A cubin without a `.nv.shared.<kernel>` section uses no static shared memory.
                if name == "shared bytes" {
                    c = c.or(Some(0));
                }
                let mut s = show(c);
                // The launch bound: the driver reports its own limit when the cubin sets none.
                let comparable = name != "max threads" || c.is_some();
                // The cubin's shared section counts the bytes reserved per block from sm_90
                // on; the driver's figure does not.
                let expected = match (name, c) {
                    ("shared bytes", Some(b)) => {
                        Some(cuda_aot::elf::driver_shared_bytes(build_sm(&x.build), b))
                    }
                    _ => c,
                };
                if comparable && expected != d {
                    s += &format!(" ({})", show(d));
                    notes.push(format!(
                        "{}: cubin {} vs driver {}",
                        x.build,
                        show(c),
                        show(d)
                    ));
                }
                if name == "shared bytes" && expected != c && expected == d {
                    notes.push(format!(
                        "{}: {} of the cubin's {} B are reserved per block (sm_90+); the driver reports {}",
                        x.build,
                        cuda_aot::elf::RESERVED_SHARED_SM90,
                        show(c),
                        show(d)
                    ));
                }
                if name == "local bytes" && c.unwrap_or(0) > 0 {
                    notes.push(format!(
                        "{}: {} B local memory per thread (spills or a stack frame)",
                        x.build,
                        show(c)
                    ));
                }
                figures.push(c);
                values.insert(x.build.clone(), s);
            }
            let rel = released.and_then(|m| {
                m.functions
                    .iter()
                    .find(|f| f.symbol.as_str() == e)
                    .map(|f| match (name, get(&Resources::of_abi(&f.abi))) {
                        ("shared bytes", None) => Some(0),
                        (_, v) => v,
                    })
            });
            match rel {
                Some(v) => {
                    values.insert(released_label.clone(), show(v));
                    figures.push(v);
                }
                None => {
                    values.insert(
                        released_label.clone(),
                        if released.is_some() {
                            "(no such kernel)"
                        } else {
                            "(not released)"
                        }
                        .into(),
                    );
                }
            }
            if figures.windows(2).any(|w| w[0] != w[1]) {
                notes.insert(0, "DIFFERS between builds".into());
            }
            rows.push(ReviewRow {
                entry: e.clone(),
                resource: name.into(),
                values,
                notes,
            });
        }
    }
    let mut table = format!("    {:<22} {:<13}", "ENTRY POINT", "RESOURCE");
    for b in &builds {
        table += &format!(" {:>16}", b);
    }
    table += "  NOTES\n";
    for row in &rows {
        table += &format!("    {:<22} {:<13}", row.entry, row.resource);
        for b in &builds {
            table += &format!(" {:>16}", row.values.get(b).map_or("-", String::as_str));
        }
        table += &format!("  {}\n", row.notes.join("; "));
    }
    Review {
        schema: "cuda-aot/resource-review/v1".into(),
        module: r.module.clone(),
        parity_report: report,
        device: format!(
            "{} ({}, {}, driver {})",
            r.device.name, r.device.uuid, r.device.sm, r.device.driver
        ),
        builds,
        rows,
        table,
    }
}

/// Co-signing: the partial record must promise exactly what this run derived.
fn check_cosign(theirs: &Promotion, ours: &Promotion, path: &Path) -> Result<()> {
    let differs = if theirs.module != ours.module {
        Some(("module", theirs.module.to_string(), ours.module.to_string()))
    } else if theirs.schedule_version != ours.schedule_version {
        Some((
            "schedule version",
            theirs.schedule_version.to_string(),
            ours.schedule_version.to_string(),
        ))
    } else if theirs.manifests != ours.manifests {
        Some((
            "manifests",
            format!("{} digest(s)", theirs.manifests.len()),
            format!("{} other digest(s)", ours.manifests.len()),
        ))
    } else if theirs.parity_report != ours.parity_report {
        Some((
            "parity report",
            theirs.parity_report.to_string(),
            ours.parity_report.to_string(),
        ))
    } else if theirs.resource_review != ours.resource_review {
        Some((
            "resource review",
            theirs.resource_review.to_string(),
            ours.resource_review.to_string(),
        ))
    } else {
        None
    };
    match differs {
        None => Ok(()),
        Some((what, t, o)) => Err(fail(
            format!(
                "{}: the partial record promises {what} {t}, this run derived {o}: a reviewer co-signs only what they derived themselves",
                path.display()
            ),
            "run with the same build, parity report and registry as the first reviewer, or start a new record",
        )),
    }
}

/// The reviewer keys of step 4, checked against the trust root before anything is signed:
/// each must be a reviewer key (a builder key is named as such), and together they must
/// meet the reviewer threshold (unless the record is partial or co-signed: then the
/// threshold is checked on the record's signatures).
fn reviewer_keys(
    files: &[PathBuf],
    root: &VerifiedRoot,
    trust: &Path,
    partial: bool,
) -> Result<Vec<SecretKey>> {
    let roles = &root.root().roles;
    let keys: Vec<SecretKey> = if files.is_empty() {
        vec![dev_key_for(root, trust, "reviewer", "--reviewer-key")?.reviewer]
    } else {
        files
            .iter()
            .map(|p| devkeys::read_key(p))
            .collect::<Result<_>>()?
    };
    let mut distinct = Vec::new();
    for (k, file) in keys
        .iter()
        .zip(files.iter().map(Some).chain(std::iter::repeat(None)))
    {
        let pk = k.public();
        let name = file.map_or("the dev reviewer key".to_string(), |f| {
            f.display().to_string()
        });
        if roles.builder.keys.contains(&pk) {
            return Err(fail(
                format!(
                    "{name} (key {}) is a builder key, not a reviewer key: a builder never promotes a build (builder and reviewer keys are disjoint in trust root v{})",
                    pk.key_id().short(),
                    root.root().version
                ),
                "sign with a reviewer's own key (cargo xtask keygen --role reviewer), listed in the trust root's reviewer role",
            ));
        }
        if !roles.reviewer.keys.contains(&pk) {
            return Err(fail(
                format!(
                    "{name} (key {}) is not a reviewer key of trust root v{} (reviewers: {})",
                    pk.key_id().short(),
                    root.root().version,
                    roles
                        .reviewer
                        .keys
                        .iter()
                        .map(|k| k.key_id().short())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "pass the private key of a reviewer the trust root lists, or add the key to the root (cargo xtask trust-root --previous ...)",
            ));
        }
        if !distinct.contains(&pk) {
            distinct.push(pk);
        }
    }
    let threshold = roles.reviewer.threshold as usize;
    if distinct.len() < threshold && !partial {
        return Err(fail(
            format!(
                "{} distinct reviewer key(s) given, under the reviewer threshold {threshold} of trust root v{}: a promotion needs {threshold} reviewers",
                distinct.len(),
                root.root().version
            ),
            format!(
                "pass --reviewer-key once per reviewer, {threshold} different reviewer keys; reviewers on different machines sign one after the other (--partial, then --cosign FILE)"
            ),
        ));
    }
    Ok(keys)
}

/// The dev keys, refused for a production root (`flag` names the key to pass instead).
fn dev_key_for(root: &VerifiedRoot, trust: &Path, role: &str, flag: &str) -> Result<DevKeysAll> {
    if root.root().channel == cuda_aot::Channel::Production {
        return Err(fail(
            format!(
                "{} is a production trust root and no {role} key was given; development keys never sign for production",
                trust.display()
            ),
            format!("pass {flag} FILE with a {role} key listed in that root"),
        ));
    }
    let dev = devkeys::ensure()?;
    let reviewer =
        devkeys::read_key(&paths::dev_keys_dir().join(format!("{}.key", RoleName::Reviewer)))?;
    Ok(DevKeysAll {
        builder: dev.builder,
        reviewer,
    })
}

/// The dev keys promote may use.
struct DevKeysAll {
    builder: SecretKey,
    reviewer: SecretKey,
}

/// The SM number of a parity build label (`nvrtc sm_90`, `aot sm_90a`): 90.
fn build_sm(build: &str) -> u32 {
    build
        .rsplit("sm_")
        .next()
        .map(|t| t.trim_end_matches(|c: char| !c.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_builds_sm_comes_from_its_label() {
        assert_eq!(super::build_sm("nvrtc sm_90"), 90);
        assert_eq!(super::build_sm("aot sm_90a"), 90);
        assert_eq!(super::build_sm("aot sm_120"), 120);
        assert_eq!(cuda_aot::elf::driver_shared_bytes(90, 9216), 8192);
        assert_eq!(cuda_aot::elf::driver_shared_bytes(80, 9216), 9216);
        assert_eq!(cuda_aot::elf::driver_shared_bytes(90, 0), 0);
    }
}
