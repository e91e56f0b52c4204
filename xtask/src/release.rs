//! `cargo xtask release`: the main job — toolchain, build, sign, publish, verify — with
//! everything that can be checked without compiling checked first: the spec and the
//! selection, the keys against the trust root, and that the registry is writable.

use anyhow::Result;
use cuda_aot::metadata::RoleName;
use cuda_aot::verify::Options;
use cuda_aot::{Channel, SecretKey};
use cuda_aot_registry::{PublishOptions, Published};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::advice::fail;
use crate::args::{CacheArgs, FormatArgs, SelectArgs};
use crate::process::check_interrupt;
use crate::{anchor, devkeys, message, paths, publish, sign, verify};
use cuda_aot_builder::build::{self, BuildOptions, BuildReport, JsonReport};

/// The main job: toolchain, build, sign, publish and verify the release set in one go.
///
/// 0. checks: the spec and the selection, the keys against the trust root, that the
///    registry is writable — before anything is downloaded or compiled;
/// 1. toolchain: the pinned CUDA toolkit (fetched and unpacked on first use);
/// 2. build: every selected module of the spec for every target SM (cached);
/// 3. sign: the manifests, with the builder key;
/// 4. publish: into the registry (atomic; next index version), with the publisher key;
/// 5. verify: the registry, the way a prover's startup does.
///
/// With no keys given, development keys are generated on first use into
/// .cuda-aot/dev-keys/ and everything is labelled `dev` (refused by production trust
/// roots). For a production release pass --builder-key, --publisher-key and --trust
/// (or CUDA_AOT_BUILDER_KEY / CUDA_AOT_PUBLISHER_KEY).
#[derive(clap::Args)]
#[command(
    verbatim_doc_comment,
    after_long_help = "\
Examples:
  cargo xtask release                                   the release set, dev keys, .cuda-aot/registry
  cargo xtask release --module ntt --target sm_90       one module for one SM
  cargo xtask release --spec ../prover/gpu/kernels.toml a spec kept anywhere; .cuda-aot/ beside it
  cargo xtask release --builder-key FILE --publisher-key FILE --trust keys/root.json --registry DIR

With --json the summary is one `release-finished` message on stdout (docs/json.md)."
)]
pub struct Args {
    #[command(flatten)]
    select: SelectArgs,
    #[command(flatten)]
    cache: CacheArgs,
    /// The registry to publish into [default: .cuda-aot/registry of the project].
    #[arg(long, value_name = "DIR")]
    registry: Option<PathBuf>,
    /// The build output folder [default: .cuda-aot/build of the project].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The builder's private key file (with --publisher-key and --trust: a real release).
    #[arg(long, value_name = "FILE", env = "CUDA_AOT_BUILDER_KEY")]
    builder_key: Option<PathBuf>,
    /// The publisher's private key file.
    #[arg(long, value_name = "FILE", env = "CUDA_AOT_PUBLISHER_KEY")]
    publisher_key: Option<PathBuf>,
    /// The trust root that lists those keys.
    #[arg(long, value_name = "FILE")]
    trust: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) format: FormatArgs,
}

/// The keys a release signs with, checked against its trust root.
struct Signers {
    builder: SecretKey,
    publisher: SecretKey,
    trust: PathBuf,
    channel: Channel,
    dev: bool,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let started = Instant::now();
        self.select.select_project()?;
        // The registry: a folder (a remote registry is refused with the way to reach it).
        let registry = self.registry_folder()?;
        let out = self.out.clone().unwrap_or_else(paths::default_build_out);
        let mut opts = self.select.build_options(&self.cache);
        if let Some(remote) = self.cache.exec.executor()? {
            opts.executor = remote;
        }
        opts.out = out.clone();

        // 0. Everything that can fail without compiling fails now.
        let keys = self.checks(&mut opts, &registry)?;
        // 1. The pinned toolchain, fetched and unpacked on first use.
        self.toolchain()?;
        // 2. Every selected module for every target SM (cached).
        let report = build_step(&opts)?;
        if let Some(summary) = opts.executor.summary() {
            eprintln!("{summary}");
        }
        // 3. The manifests, signed with the builder key.
        sign_step(&out, &keys)?;
        // 4. Published into the registry with the publisher key.
        let p = publish_step(&registry, &out, &keys)?;
        // 5. The registry verified, the way a prover's startup does.
        let v = verify_step(&registry, &keys)?;

        let finished = Finished {
            keys: &keys,
            registry: &registry,
            report: &report,
            published: &p,
            verified: &v,
            started,
        };
        // The summary: one JSON message, or the table and the closing line.
        if message::json() {
            finished.emit();
            return Ok(());
        }
        finished.print();
        Ok(())
    }

    /// The registry to publish into (the default or --registry), which must be a folder.
    fn registry_folder(&self) -> Result<PathBuf> {
        let registry = self
            .registry
            .clone()
            .unwrap_or_else(paths::default_registry);
        if !matches!(
            crate::endpoint::Target::of(&registry),
            crate::endpoint::Target::Dir(_)
        ) {
            return Err(fail(
                format!(
                    "release publishes into a registry folder, and {} is a remote registry",
                    registry.display()
                ),
                format!(
                    "release into a folder (the default, or --registry DIR), then publish its build output there: {} publish --registry {}",
                    crate::advice::tool(),
                    registry.display()
                ),
            ));
        }
        Ok(registry)
    }

    /// Step 0: the spec and the selection, the keys against the trust root and a writable
    /// registry; sets the build's channel to the keys' and says what is released where.
    fn checks(&self, opts: &mut BuildOptions, registry: &Path) -> Result<Signers> {
        let spec = build::spec::load(&opts.spec, None)?;
        spec.jobs(&opts.modules, &opts.targets)?;
        let keys = self.signers()?;
        opts.channel = keys.channel;
        check_writable(registry)?;
        eprintln!(
            "release [{}] of {} → {} (trust root {})",
            keys.channel,
            paths::shown(&spec.path),
            paths::shown(registry),
            paths::shown(&keys.trust)
        );
        if keys.dev {
            eprintln!(
                "  signing with DEVELOPMENT keys ({}): a production loader refuses this release",
                paths::shown(&paths::dev_keys_dir())
            );
        }
        Ok(keys)
    }

    /// Step 1: the pinned CUDA toolkit, fetched and unpacked on first use.
    fn toolchain(&self) -> Result<()> {
        eprintln!("[1/5] toolchain");
        let tk = cuda_aot_builder::toolchain::ensure_with(&self.select.toolkit.options())?;
        eprintln!(
            "      nvcc {} ({}), toolkit digest {}",
            tk.identity.nvcc,
            tk.identity.source,
            tk.identity.digest.short()
        );
        check_interrupt()
    }

    /// The builder and publisher keys and the trust root, each key checked to be a key of
    /// its role in that root: both keys and --trust for a real release, none of them for a
    /// dev release.
    fn signers(&self) -> Result<Signers> {
        let (builder, publisher, trust, dev) = match (
            &self.builder_key,
            &self.publisher_key,
            &self.trust,
        ) {
            (Some(b), Some(p), Some(t)) => (
                devkeys::read_key(b)?,
                devkeys::read_key(p)?,
                t.clone(),
                false,
            ),
            (Some(_), Some(_), None) => {
                return Err(fail(
                    "a release with real keys needs the trust root that lists them",
                    "pass --trust FILE (the signed root naming the builder and publisher keys)",
                ));
            }
            (None, None, Some(t)) => {
                return Err(fail(
                    format!(
                        "--trust {} given without keys: a dev release signs with generated \
                             dev keys under the dev root, never under another root",
                        t.display()
                    ),
                    "pass --builder-key FILE and --publisher-key FILE (or CUDA_AOT_BUILDER_KEY \
                         and CUDA_AOT_PUBLISHER_KEY) for a release under that root, or drop \
                         --trust for a dev release",
                ));
            }
            (None, None, None) => {
                let dev = devkeys::ensure()?;
                (dev.builder, dev.publisher, dev.root_file, true)
            }
            _ => {
                return Err(fail(
                    "only one of --builder-key and --publisher-key given",
                    "pass both --builder-key and --publisher-key (or neither, for a dev release)",
                ));
            }
        };
        let (_, root) = anchor::read(&trust)?;
        for (role, key, flag) in [
            (RoleName::Builder, &builder, "--builder-key"),
            (RoleName::Publisher, &publisher, "--publisher-key"),
        ] {
            let listed = match role {
                RoleName::Builder => &root.root().roles.builder.keys,
                _ => &root.root().roles.publisher.keys,
            };
            if !listed.contains(&key.public()) {
                return Err(fail(
                    format!(
                        "{role} key {} is not a {role} key of trust root {} (v{}, {})",
                        key.public().key_id().short(),
                        trust.display(),
                        root.root().version,
                        root.root().channel
                    ),
                    format!(
                        "pass a {role} key listed in {} with {flag}",
                        trust.display()
                    ),
                ));
            }
        }
        Ok(Signers {
            builder,
            publisher,
            trust,
            channel: root.root().channel,
            dev,
        })
    }
}

/// Step 2: builds every selected module of the spec for every target SM (cached).
fn build_step(opts: &BuildOptions) -> Result<BuildReport> {
    eprintln!("[2/5] build");
    let report = build::run_build(opts)?;
    let cached = report.modules.iter().filter(|m| m.cached).count();
    eprintln!(
        "      {} module(s): {} built, {} cached, nvcc ran {} time(s), {:.1?}",
        report.modules.len(),
        report.modules.len() - cached,
        cached,
        report.nvcc_runs,
        report.wall
    );
    check_interrupt()?;
    Ok(report)
}

/// Step 3: signs the manifests of the build output `out` with the builder key.
fn sign_step(out: &Path, keys: &Signers) -> Result<()> {
    eprintln!(
        "[3/5] sign (builder {})",
        keys.builder.public().key_id().short()
    );
    let n = sign::sign_output(out, &keys.builder)?;
    eprintln!("      {n} manifest(s) signed");
    check_interrupt()
}

/// Step 4: publishes the build output `out` into `registry` with the publisher key.
fn publish_step(registry: &Path, out: &Path, keys: &Signers) -> Result<Published> {
    eprintln!(
        "[4/5] publish (publisher {})",
        keys.publisher.public().key_id().short()
    );
    let p = publish::publish_output(
        registry,
        out,
        &keys.trust,
        &keys.publisher,
        &PublishOptions::default(),
    )?;
    eprintln!("      {}", publish::describe(&p, registry));
    Ok(p)
}

/// Step 5: verifies `registry` against the trust root and saves its state.
fn verify_step(registry: &Path, keys: &Signers) -> Result<verify::Verified> {
    eprintln!("[5/5] verify");
    let state = paths::state_file(registry)?;
    let v = verify::verify_registry(
        registry,
        &keys.trust,
        &state,
        &Options::default(),
        verify::SaveState::Yes,
    )?;
    eprintln!(
        "      registry verifies: index v{}, {} module(s) checked",
        v.index.index().version,
        v.index.manifests().len()
    );
    Ok(v)
}

/// What a finished release reports.
struct Finished<'a> {
    keys: &'a Signers,
    registry: &'a Path,
    report: &'a BuildReport,
    published: &'a Published,
    verified: &'a verify::Verified,
    started: Instant,
}

impl Finished<'_> {
    /// The `release-finished` message (--json).
    fn emit(&self) {
        let (keys, registry, p, v) = (self.keys, self.registry, self.published, self.verified);
        message::emit(
            "release-finished",
            serde_json::json!({
                "channel": keys.channel.to_string(),
                "dev_keys": keys.dev,
                "trust": keys.trust,
                "registry": registry,
                "unchanged": p.unchanged,
                "index_version": p.index_version,
                "publish": publish::json_fields(p, registry),
                "verified_modules": v.index.manifests().len(),
                "loadable_until": v.loadable_until.to_string(),
                "wall_ms": self.started.elapsed().as_millis(),
                "build": JsonReport::of(self.report),
            }),
        );
    }

    /// The summary table (module × target with size, digest prefix and built/cached) and
    /// the closing line.
    fn print(&self) {
        let (keys, registry, p) = (self.keys, self.registry, self.published);
        let mut rows: BTreeMap<(String, String), String> = BTreeMap::new();
        for m in &self.report.modules {
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
            "\nrelease [{}] {} {} as index v{} in {:.1?}; verify with: {} verify --registry {} --trust {}",
            keys.channel,
            if p.unchanged {
                "unchanged in"
            } else {
                "published to"
            },
            paths::shown(registry),
            p.index_version,
            self.started.elapsed(),
            crate::advice::tool(),
            paths::shell(registry),
            paths::shell(&keys.trust)
        );
    }
}

/// The registry folder exists (or can be created) and this user can write into it.
fn check_writable(registry: &Path) -> Result<()> {
    let fix = || {
        format!(
            "pass --registry DIR with a folder this user can write, or fix the permissions of {}",
            registry.display()
        )
    };
    std::fs::create_dir_all(registry).map_err(|e| {
        fail(
            format!("the registry {} cannot be created: {e}", registry.display()),
            fix(),
        )
    })?;
    tempfile::Builder::new()
        .prefix(".write-check-")
        .tempfile_in(registry)
        .map_err(|e| {
            fail(
                format!("the registry {} is not writable: {e}", registry.display()),
                fix(),
            )
        })?;
    Ok(())
}

/// The library entry points as docs/build.md shows them (section 8): compiled here, never
/// run, so the doc's block (which `tests/doc_blocks.rs` finds in this file) cannot drift.
#[cfg(test)]
#[allow(dead_code, unused_variables)]
fn docs_build_md_library_entry_points(
    builder_key: SecretKey,
    publisher_key: SecretKey,
    registry: PathBuf,
    trust: PathBuf,
) -> Result<()> {
    let opts = build::BuildOptions::default(); // the project's spec, .cuda-aot/{build,cache}
    let report: build::BuildReport = build::run_build(&opts)?;
    for m in &report.modules { /* m.manifest, m.blob, m.manifest_path, m.cached */ }
    let n = sign::sign_output(&opts.out, &builder_key)?; // one build statement
    let p = publish::publish_output(
        &registry,
        &opts.out,
        &trust,
        &publisher_key,
        &Default::default(),
    )?;
    Ok(())
}
