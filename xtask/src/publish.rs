//! `cargo xtask publish`: publish a signed build output into a registry.

use anyhow::{Context, Result};
use cuda_aot::{Channel, Limits, SecretKey};
use cuda_aot_registry::{DirRegistry, PublishOptions, Published, Release, SignedBuild};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::build::output;
use crate::{devkeys, paths, sign};

/// Publish a signed build output into a directory registry.
///
/// The build statement's builder signatures are checked against the trust root first, and
/// every manifest and blob against the statement; then blobs, manifests and the statement
/// are written content-addressed, the next index is created (create-new: a concurrent
/// publisher of the same version gets a conflict and can simply retry) and timestamp.json
/// is replaced last, so readers never see a half-published release.
///
/// The next index lists exactly this build: modules or targets dropped from the spec leave
/// the registry (keep them with --keep-unlisted). Publishing what the registry already
/// serves commits nothing ("unchanged: index vN").
///
/// Promotion records (reviewer-signed, written by `cargo xtask promote`) are published with
/// the build: every `<out>/promotions/*.json`, and each --promotion FILE. A production
/// registry refuses any module no promotion covers.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    at: RegistryArgs,
    /// The signed build output (default: .cuda-aot/build).
    #[arg(default_value_os_t = paths::default_build_out())]
    out: PathBuf,
    /// The publisher's private key file (default: the dev publisher key).
    #[arg(long, env = "CUDA_AOT_PUBLISHER_KEY")]
    publisher_key: Option<PathBuf>,
    /// Lifetime of the timestamp, in days.
    #[arg(long, default_value_t = 7)]
    timestamp_days: u64,
    /// Only re-sign the timestamp of the current index with a new expiry (run this
    /// periodically: clients refuse a registry whose timestamp has expired).
    #[arg(long)]
    refresh_timestamp: bool,
    /// Keep the current index's entries for modules and targets this build does not hold
    /// (default: the next index lists exactly this build).
    #[arg(long)]
    keep_unlisted: bool,
    /// A promotion record to publish with the build (repeat for several), besides those in
    /// `<out>/promotions/`.
    #[arg(long = "promotion", value_name = "FILE")]
    promotions: Vec<PathBuf>,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let trust = self.at.trust_file()?;
        let anchor = read_trust_root(&trust)?;
        let key = match &self.publisher_key {
            Some(p) => devkeys::read_key(p)?,
            None => dev_publisher_for(&anchor, &trust)?,
        };
        let opts = PublishOptions {
            timestamp_ttl: Duration::from_secs(self.timestamp_days.saturating_mul(86_400)),
            keep_unlisted: self.keep_unlisted,
            ..PublishOptions::default()
        };
        if self.refresh_timestamp {
            let ts =
                DirRegistry::new(&self.at.registry).refresh_timestamp(&anchor, &[&key], &opts)?;
            eprintln!(
                "refreshed {}: timestamp v{} for index v{}, expires {}",
                self.at.registry.display(),
                ts.version,
                ts.index.version,
                ts.expires
            );
            return Ok(());
        }
        let p = publish_output_with(
            &self.at.registry,
            &self.out,
            &trust,
            &key,
            &opts,
            &self.promotions,
        )?;
        eprintln!("{}", describe(&p, &self.at.registry));
        Ok(())
    }
}

/// `--registry DIR` and `--trust FILE`, shared by the tasks that read a registry.
#[derive(clap::Args)]
pub struct RegistryArgs {
    /// The registry folder.
    #[arg(long, default_value_os_t = paths::default_registry())]
    pub registry: PathBuf,
    /// Trust root file (default: the dev root, else keys/root.json).
    #[arg(long)]
    pub trust: Option<PathBuf>,
}

impl RegistryArgs {
    /// The trust root file these arguments select.
    pub fn trust_file(&self) -> Result<PathBuf> {
        trust_file(self.trust.as_deref())
    }
}

/// The trust root to use: the given file, else the dev root if generated, else keys/root.json.
pub fn trust_file(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let dev = paths::dev_keys_dir().join("root.json");
    if dev.exists() {
        return Ok(dev);
    }
    let prod = paths::repo_root().join("keys/root.json");
    if prod.exists() {
        return Ok(prod);
    }
    Err(anyhow::Error::new(paths::Fix(
        "pass --trust FILE, or run cargo xtask release once to generate development keys".into(),
    )))
    .context("no trust root: neither .cuda-aot/dev-keys/root.json nor keys/root.json exists")
}

/// Reads a trust root file (a regular file, within the size limit).
pub fn read_trust_root(trust: &Path) -> Result<Vec<u8>> {
    cuda_aot::fs::read_capped(trust, Limits::default().root, "trust root")
        .with_context(|| format!("reading trust root {}", trust.display()))
}

/// The dev publisher key, refused for a production trust root: a production publish needs
/// its publisher key given explicitly.
pub fn dev_publisher_for(anchor: &[u8], trust: &Path) -> Result<SecretKey> {
    let root =
        cuda_aot::trust::verify_anchor(anchor, &Limits::default(), &trust.display().to_string())?;
    if root.root().channel == Channel::Production {
        return Err(anyhow::Error::new(paths::Fix(
            "pass --publisher-key FILE (or CUDA_AOT_PUBLISHER_KEY) with a publisher key listed in that root".into(),
        )))
        .context(format!(
            "{} is a production trust root and no publisher key was given; the development key is never used for production",
            trust.display()
        ));
    }
    Ok(devkeys::ensure()?.publisher)
}

/// One line saying what a publish did.
pub fn describe(p: &Published, registry: &Path) -> String {
    if p.unchanged {
        return format!(
            "unchanged: index v{} of {} already holds this release ({} entries); nothing published",
            p.index_version,
            registry.display(),
            p.entries
        );
    }
    format!(
        "published index v{} (timestamp v{}) to {}: {} entries ({} removed), {} blob(s) written, {} already present{}",
        p.index_version,
        p.timestamp_version,
        registry.display(),
        p.entries,
        p.removed,
        p.blobs_written,
        p.blobs_reused,
        if p.recovered {
            "; the old timestamp was signed by a key the trust root no longer lists: a new version line started"
        } else {
            ""
        }
    )
}

/// Checks the build statement of `out` against the trust root and publishes the build with
/// the promotion records in `<out>/promotions/`.
pub fn publish_output(
    registry: &Path,
    out: &Path,
    trust: &Path,
    publisher: &SecretKey,
    opts: &PublishOptions,
) -> Result<Published> {
    publish_output_with(registry, out, trust, publisher, opts, &[])
}

/// The promotion record files of a build output: `<out>/promotions/*.json`, sorted.
pub fn output_promotions(out: &Path) -> Result<Vec<PathBuf>> {
    let dir = out.join("promotions");
    let mut v = Vec::new();
    match std::fs::read_dir(&dir) {
        Ok(rd) => {
            for e in rd {
                let p = e
                    .with_context(|| format!("reading {}", dir.display()))?
                    .path();
                if p.extension().is_some_and(|x| x == "json") {
                    v.push(p);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    }
    v.sort();
    Ok(v)
}

/// [`publish_output`] with `extra` promotion record files besides `<out>/promotions/`.
pub fn publish_output_with(
    registry: &Path,
    out: &Path,
    trust: &Path,
    publisher: &SecretKey,
    opts: &PublishOptions,
    extra: &[PathBuf],
) -> Result<Published> {
    let limits = Limits::default();
    let anchor = read_trust_root(trust)?;
    let root = cuda_aot::trust::verify_anchor(&anchor, &limits, &trust.display().to_string())?;
    let statement_path = output::statement_path(out);
    let statement = match cuda_aot::fs::read_at_most(&statement_path, limits.statement)? {
        Some(b) => b,
        None => {
            return Err(anyhow::Error::new(paths::Fix(
                "run cargo xtask sign (it signs one build statement over the build output)".into(),
            )))
            .context(format!("{}: not signed", statement_path.display()));
        }
    };
    let files = sign::read_output(out)?
        .into_iter()
        .map(|(_, manifest, blob)| (manifest, blob))
        .collect();
    let build = SignedBuild::new(&root, statement, files).map_err(|e| {
        let fix = e.fix();
        anyhow::Error::new(paths::Fix(format!(
            "{fix}; if the build output changed since it was signed, run cargo xtask sign again"
        )))
        .context(format!("{}: {e}", statement_path.display()))
    })?;
    let reg = DirRegistry::new(registry);
    reg.ensure_root(&anchor)?;
    let mut promotions = Vec::new();
    for p in output_promotions(out)?.iter().chain(extra) {
        let file = cuda_aot::fs::read_capped(p, limits.promotion, "promotion record")
            .with_context(|| format!("reading promotion record {}", p.display()))?;
        if !promotions.contains(&file) {
            promotions.push(file);
        }
    }
    let release = Release { build, promotions };
    Ok(reg.publish(&anchor, &release, &[publisher], opts)?)
}
