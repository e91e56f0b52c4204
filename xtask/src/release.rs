//! `cargo xtask release`: the main job — toolchain, build, sign, publish, verify.

use anyhow::{Context, Result, bail};
use cuda_aot::Limits;
use cuda_aot::verify::Options;
use cuda_aot_registry::PublishOptions;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use crate::build::{self, BuildOptions};
use crate::{devkeys, paths, publish, sign, toolchain, verify};

/// The main job: toolchain, build, sign, publish and verify the release set in one go.
///
/// 1. toolchain: the pinned CUDA toolkit (fetched and unpacked on first use);
/// 2. build: every module of manifests/release.toml for every target SM (cached);
/// 3. sign: the manifests, with the builder key;
/// 4. publish: into the registry (atomic; next index version), with the publisher key;
/// 5. verify: the registry, the way a prover's startup does.
///
/// With no keys given, development keys are generated on first use into
/// .cuda-aot/dev-keys/ and everything is labelled `dev` (refused by production trust
/// roots). For a production release pass --builder-key, --publisher-key and --trust
/// (or CUDA_AOT_BUILDER_KEY / CUDA_AOT_PUBLISHER_KEY).
#[derive(clap::Args)]
pub struct Args {
    /// The registry to publish into.
    #[arg(long, default_value_os_t = paths::default_registry())]
    registry: PathBuf,
    /// The build output folder.
    #[arg(long, default_value_os_t = paths::default_build_out())]
    out: PathBuf,
    /// Parallel nvcc jobs (default: one per core).
    #[arg(short = 'j', long)]
    jobs: Option<usize>,
    #[command(flatten)]
    toolkit: toolchain::ToolkitArgs,
    /// The builder's private key file (with --publisher-key and --trust: a real release).
    #[arg(long, env = "CUDA_AOT_BUILDER_KEY")]
    builder_key: Option<PathBuf>,
    /// The publisher's private key file.
    #[arg(long, env = "CUDA_AOT_PUBLISHER_KEY")]
    publisher_key: Option<PathBuf>,
    /// The trust root that lists those keys.
    #[arg(long)]
    trust: Option<PathBuf>,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let started = Instant::now();
        let (builder, publisher, trust, label) = match (&self.builder_key, &self.publisher_key) {
            (Some(b), Some(p)) => {
                let trust = self
                    .trust
                    .clone()
                    .context("a release with real keys needs --trust (the root listing them)")?;
                (
                    devkeys::read_key(b)?,
                    devkeys::read_key(p)?,
                    trust,
                    "release",
                )
            }
            (None, None) => {
                let dev = devkeys::ensure()?;
                (dev.builder, dev.publisher, dev.root_file, "dev")
            }
            _ => {
                bail!("pass both --builder-key and --publisher-key (or neither, for a dev release)")
            }
        };
        let root_bytes = publish::read_trust_root(&trust)?;
        let channel = cuda_aot::trust::verify_anchor(
            &root_bytes,
            &Limits::default(),
            &trust.display().to_string(),
        )?
        .root()
        .channel;
        eprintln!(
            "release [{channel}] → {} (trust root {})",
            self.registry.display(),
            trust.display()
        );
        if label == "dev" {
            eprintln!(
                "  signing with DEVELOPMENT keys (.cuda-aot/dev-keys): a production loader refuses this release"
            );
        }

        eprintln!("[1/5] toolchain");
        let tk = toolchain::ensure_with(&self.toolkit.options())?;
        eprintln!(
            "      nvcc {} ({}), toolkit digest {}",
            tk.identity.nvcc,
            tk.identity.source,
            tk.identity.digest.short()
        );

        eprintln!("[2/5] build");
        let mut opts = BuildOptions {
            out: self.out.clone(),
            channel,
            toolkit: self.toolkit.options(),
            ..BuildOptions::default()
        };
        if let Some(j) = self.jobs {
            opts.jobs = j.max(1);
        }
        let report = build::run_build(&opts)?;
        let cached = report.modules.iter().filter(|m| m.cached).count();
        eprintln!(
            "      {} module(s): {} built, {} cached, nvcc ran {} time(s), {:.1?}",
            report.modules.len(),
            report.modules.len() - cached,
            cached,
            report.nvcc_runs,
            report.wall
        );

        eprintln!("[3/5] sign (builder {})", builder.public().key_id().short());
        let n = sign::sign_output(&self.out, &builder)?;
        eprintln!("      {n} manifest(s) signed");

        eprintln!(
            "[4/5] publish (publisher {})",
            publisher.public().key_id().short()
        );
        let p = publish::publish_output(
            &self.registry,
            &self.out,
            &trust,
            &publisher,
            &PublishOptions::default(),
        )?;
        eprintln!("      {}", publish::describe(&p, &self.registry));

        eprintln!("[5/5] verify");
        let state = verify::default_state_path(&self.registry);
        let v = verify::verify_registry(&self.registry, &trust, &state, &Options::default())?;
        eprintln!(
            "      registry verifies: index v{}, {} module(s) checked",
            v.index.index().version,
            v.index.manifests().len()
        );

        // Summary: module × target with size, digest prefix and built/cached.
        let mut rows: BTreeMap<(String, String), String> = BTreeMap::new();
        for m in &report.modules {
            let id = &m.manifest.identity;
            rows.insert(
                (id.module.to_string(), format!("{} {}", id.sm, id.kind)),
                format!(
                    "{:>9}  {:<12}  {}",
                    m.manifest.size,
                    m.manifest.module_digest.short(),
                    if m.cached { "cached" } else { "built" }
                ),
            );
        }
        println!(
            "\n{:<10} {:<20} {:>9}  {:<12}  RESULT",
            "MODULE", "TARGET", "BYTES", "BLAKE3"
        );
        for ((module, target), rest) in &rows {
            println!("{module:<10} {target:<20} {rest}");
        }
        println!(
            "\nrelease [{channel}] {} {} as index v{} in {:.1?}; verify with: cargo xtask verify --registry {}",
            if p.unchanged {
                "unchanged in"
            } else {
                "published to"
            },
            self.registry.display(),
            p.index_version,
            started.elapsed(),
            self.registry.display()
        );
        Ok(())
    }
}
