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
use cuda_aot::metadata::Promotion;
use cuda_aot::trust::VerifiedRoot;
use cuda_aot::{Digest, ModuleName, SecretKey, Target};
use cuda_aot_kernels::parity::module::spec_digest;
use cuda_aot_kernels::parity::report::ParityReport;
use cuda_aot_kernels::parity::spec::ParitySpec;
use cuda_aot_registry::PublishOptions;
use std::path::PathBuf;

use crate::advice::{Fix, fail};
use crate::{anchor, devkeys, files, outdir, paths, publish, sign};
use cuda_aot_builder::build::{self, BuildOptions};

mod report;
mod resources;
mod signers;

use report::{check_report, gpu_host_commands};
use resources::{released_manifest, review};
use signers::{check_cosign, dev_key_for, reviewer_keys};

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
    #[command(flatten)]
    exec: crate::args::RemoteExecArgs,
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
    /// Promote as delegated role NAME (issue 46): the reviewer keys (and, with --publish,
    /// the builder key) must be the team's, as the delegations in force in --registry list
    /// them; production then accepts the module only with the team's promotion.
    #[arg(long, value_name = "NAME")]
    team: Option<String>,
    /// The team's publisher key for --publish --team (repeat up to its threshold).
    #[arg(long = "team-key", value_name = "FILE", requires = "team")]
    team_keys: Vec<PathBuf>,
}

fn parse_module(s: &str) -> std::result::Result<ModuleName, String> {
    ModuleName::new(s).map_err(|e| e.to_string())
}

impl Args {
    /// Runs the task: the five steps, each its own method below.
    pub fn run(self) -> Result<()> {
        let setup = self.setup()?;
        let manifests = self.build(&setup)?;
        let parity = self.parity(&setup, &manifests)?;
        let review = self.review(&setup, &parity)?;
        if self.record(&setup, &manifests, &parity, review)? {
            self.release(&setup)?;
        }
        Ok(())
    }

    /// Before any build: the paths, the trust root, and the module, which must be in the
    /// spec with a parity spec.
    fn setup(&self) -> Result<Setup> {
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
        // A team's promotion: its keys, as the registry's delegations list them.
        let root = match &self.team {
            None => root,
            Some(name) => {
                cuda_aot_registry::publish::team_root(
                    &cuda_aot_registry::DirRegistry::new(&registry),
                    &anchor,
                    name,
                    None,
                    &crate::limits::limits(),
                )?
                .0
            }
        };

        // Before any build: the module must exist in the spec and have a parity spec.
        let spec = build::spec::load(&spec_path, None)?;
        let ms = spec
            .modules
            .iter()
            .find(|x| x.name == self.module)
            .ok_or_else(|| {
                fail(
                    format!(
                        "{}: no module `{}` (modules: {})",
                        spec_path.display(),
                        self.module,
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
                        "{}: module `{}` has no [module.parity] section: nothing says what parity means for it",
                        spec_path.display(),
                        self.module
                    ),
                    "write its parity spec (entry points in order, geometry, seeded inputs, outputs, CPU reference; kernels/src/parity/spec.rs and docs/review.md)",
                ));
            }
            Some(v) => ParitySpec::from_toml(v).map_err(|e| {
                fail(
                    format!(
                        "{}: module `{}`: [module.parity]: {e}",
                        spec_path.display(),
                        self.module
                    ),
                    "fix the parity spec (kernels/src/parity/spec.rs documents it)",
                )
            })?,
        };

        Ok(Setup {
            spec_path,
            registry,
            out,
            build_out,
            trust,
            anchor,
            root,
            spec,
            ms,
            parity,
        })
    }

    /// Step 1: the AOT build (or the one in `<out>/build`, --reuse-build), checked to hold
    /// this module only, for the trust root's channel. Returns its manifests' digests,
    /// sorted; an earlier promotion record that does not cover them is removed.
    fn build(&self, setup: &Setup) -> Result<Vec<Digest>> {
        let Setup {
            spec_path,
            build_out,
            trust,
            root,
            ..
        } = setup;
        let m = &self.module;
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
        if !self.reuse_build
            && let Some(remote) = self.exec.executor()?
        {
            opts.executor = remote;
        }
        let report = match self.reuse_build {
            true => None,
            false => Some(
                build::run_build(&opts)
                    .with_context(|| format!("promote {m}: step 1 (AOT build)"))?,
            ),
        };
        let built = outdir::read_output(build_out)?;
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
        let old_record = outdir::promotion_path(build_out, m);
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

        Ok(manifests)
    }

    /// Step 2: the parity report from the GPU host, checked to have passed and to bind to
    /// exactly this build; without one, the commands for the GPU host and a stop.
    fn parity(&self, setup: &Setup, manifests: &[Digest]) -> Result<Parity> {
        let Setup {
            spec_path,
            out,
            build_out,
            spec,
            ms,
            parity,
            ..
        } = setup;
        let m = &self.module;
        // 2. Parity on the GPU host.
        let Some(report_path) = &self.parity_report else {
            println!(
                "{}",
                crate::advice::as_run(&gpu_host_commands(
                    m,
                    spec_path,
                    build_out,
                    out,
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
            ms,
            manifests,
            spec_digest(parity, &ms.geometry),
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

        Ok(Parity {
            report: parity_report,
            digest: report_digest,
        })
    }

    /// Step 3: the resource review (NVRTC vs AOT vs released), written to
    /// `<out>/review.json`. Returns the file's blake3.
    fn review(&self, setup: &Setup, parity: &Parity) -> Result<Digest> {
        let Setup {
            registry,
            out,
            anchor,
            ..
        } = setup;
        let m = &self.module;
        let (parity_report, report_digest) = (&parity.report, parity.digest);
        // 3. Resource review.
        let released = released_manifest(registry, anchor, m, &parity_report.device.sm);
        let review = review(parity_report, report_digest, released.as_ref());
        let mut review_file = serde_json::to_vec_pretty(&review).expect("serialisable");
        review_file.push(b'\n');
        let review_path = out.join("review.json");
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        files::write(&review_path, &review_file)?;
        let review_digest = Digest::of(&review_file);
        println!(
            "3/5 resource review on {} (cubin figure; the driver's in parentheses where it differs):\n{}    written to {} (blake3 {})",
            review.device,
            review.table,
            review_path.display(),
            review_digest.short()
        );

        Ok(review_digest)
    }

    /// Step 4: the promotion record, signed by this run's reviewer keys (or co-signed onto
    /// --cosign's record) and opened as the verifier will. Returns false when the record
    /// stays partial (--partial under the threshold): nothing more to do in this run.
    fn record(
        &self,
        setup: &Setup,
        manifests: &[Digest],
        parity: &Parity,
        review_digest: Digest,
    ) -> Result<bool> {
        let Setup {
            out,
            build_out,
            trust,
            root,
            ms,
            ..
        } = setup;
        let m = &self.module;
        let (parity_report, report_digest) = (&parity.report, parity.digest);
        // 4. The promotion record.
        let keys = reviewer_keys(
            &self.reviewer_keys,
            root,
            trust,
            self.team.as_deref(),
            self.partial || self.cosign.is_some(),
        )?;
        let mut promotion = Promotion {
            schema: Promotion::SCHEMA.into(),
            module: m.clone(),
            schedule_version: ms.schedule_version,
            manifests: manifests.to_vec(),
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
                return Ok(false);
            }
            Err(e) => {
                let fix = e.fix();
                return Err(
                    anyhow::Error::new(Fix(fix)).context(format!("promote {m}: step 4: {e}"))
                );
            }
        };
        let record_path = outdir::promotion_path(build_out, m);
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

        Ok(true)
    }

    /// Step 5: without --publish, the commands that would publish; with it, the build signed
    /// by the builder and published with its promotion, the registry's other modules kept.
    fn release(&self, setup: &Setup) -> Result<()> {
        let Setup {
            registry,
            build_out,
            trust,
            anchor,
            root,
            ..
        } = setup;
        let m = &self.module;
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
            None => dev_key_for(root, trust, "builder", "--builder-key")?.builder,
        };
        let n = sign::sign_output(build_out, &builder)?;
        let publisher = match &self.publisher_key {
            Some(p) => devkeys::read_key(p)?,
            None => publish::dev_publisher_for(anchor, trust)?,
        };
        let team = publish::TeamOpts::read(self.team.clone(), &self.team_keys, None, None)?;
        let p = publish::publish_dir(
            registry,
            build_out,
            trust,
            &publisher,
            &team,
            &PublishOptions {
                keep_unlisted: true,
                ..PublishOptions::default()
            },
            &[],
        )?;
        println!(
            "{}",
            crate::advice::as_run(&format!(
                "5/5 release set: {m} joined the release set of {}: build statement over {n} manifest(s) signed by builder {}; {}\n    check it as a prover would: cargo xtask verify --registry {}{}",
                registry.display(),
                builder.public().key_id().short(),
                publish::describe(&p, registry),
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

/// What every step of a promotion reads: where things are, the trust root, the module.
struct Setup {
    spec_path: PathBuf,
    registry: PathBuf,
    /// The promotion's working folder.
    out: PathBuf,
    /// `<out>/build`.
    build_out: PathBuf,
    trust: PathBuf,
    anchor: Vec<u8>,
    root: VerifiedRoot,
    spec: build::ReleaseSpec,
    ms: build::ModuleSpec,
    parity: ParitySpec,
}

/// A parity report that passed and binds to the build (step 2), and its file's blake3.
struct Parity {
    report: ParityReport,
    digest: Digest,
}
