//! `cargo xtask publish`: publish a signed build output into a registry.

use anyhow::{Context, Result, bail};
use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::metadata::RoleName;
use cuda_aot::{Limits, SecretKey};
use cuda_aot_registry::{DirRegistry, PublishOptions, Published, SignedModule};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{devkeys, paths, sign};

/// Publish the signed manifests and blobs of a build output into a directory registry.
///
/// Every manifest's builder signature is checked against the trust root first; then blobs
/// and manifests are written content-addressed, the next index is created (create-new:
/// a concurrent publisher of the same version gets a conflict and can simply retry) and
/// timestamp.json is replaced last, so readers never see a half-published release.
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
    #[command(flatten)]
    oci: crate::oci::OciArgs,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let trust = self.at.trust_file()?;
        let key = match &self.publisher_key {
            Some(p) => devkeys::read_key(p)?,
            None => devkeys::ensure()?.publisher,
        };
        let opts = PublishOptions {
            timestamp_ttl: Duration::from_secs(self.timestamp_days * 86_400),
            ..PublishOptions::default()
        };
        if self.refresh_timestamp {
            let root_bytes = std::fs::read(&trust)
                .with_context(|| format!("reading trust root {}", trust.display()))?;
            checked_root(&root_bytes, &trust, &key)?;
            let ts = DirRegistry::new(&self.at.registry).refresh_timestamp(&[&key], &opts)?;
            eprintln!(
                "refreshed {}: timestamp v{} for index v{}, expires {}",
                self.at.registry.display(),
                ts.version,
                ts.index.version,
                ts.expires
            );
            return Ok(());
        }
        if let Some(reference) = self
            .at
            .registry
            .to_str()
            .filter(|r| r.starts_with("oci://"))
        {
            let oci = self.oci.options()?;
            let (p, pushed) =
                crate::oci::publish_to_oci(reference, &self.out, &trust, &key, &opts, &oci)?;
            eprintln!(
                "published index v{} to {}: {} entries, {} files ({} bytes) as OCI layers",
                p.index_version, pushed.reference, p.entries, pushed.layers, pushed.bytes
            );
            return Ok(());
        }
        let p = publish_output(&self.at.registry, &self.out, &trust, &key, &opts)?;
        eprintln!(
            "published index v{} (timestamp v{}) to {}: {} entries, {} blob(s) written, {} already present",
            p.index_version,
            p.timestamp_version,
            self.at.registry.display(),
            p.entries,
            p.blobs_written,
            p.blobs_reused
        );
        Ok(())
    }
}

/// `--registry DIR` and `--trust FILE`, shared by the tasks that read a registry.
#[derive(clap::Args)]
pub struct RegistryArgs {
    /// The registry folder (publish also takes oci://HOST/REPOSITORY:TAG).
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

/// Verifies the trust root and that `publisher` is one of its publisher keys.
pub fn checked_root(
    root_bytes: &[u8],
    trust: &Path,
    publisher: &SecretKey,
) -> Result<cuda_aot::trust::VerifiedRoot> {
    let limits = Limits::default();
    let root = cuda_aot::trust::verify_anchor(root_bytes, &limits, &trust.display().to_string())?;
    if !root
        .root()
        .roles
        .publisher
        .keys
        .contains(&publisher.public())
    {
        return Err(anyhow::Error::new(paths::Fix(
            "use a publisher key listed in the trust root (--publisher-key)".into(),
        )))
        .context(format!(
            "publisher key {} is not a publisher key of trust root {}",
            publisher.public().key_id().short(),
            trust.display()
        ));
    }
    Ok(root)
}

/// Checks every signed manifest of `out` against the trust root and publishes them.
pub fn publish_output(
    registry: &Path,
    out: &Path,
    trust: &Path,
    publisher: &SecretKey,
    opts: &PublishOptions,
) -> Result<Published> {
    let limits = Limits::default();
    let root_bytes =
        std::fs::read(trust).with_context(|| format!("reading trust root {}", trust.display()))?;
    let root = checked_root(&root_bytes, trust, publisher)?;
    let signed = sign::files_ending(out, ".manifest.dsse.json")?;
    if signed.is_empty() {
        bail!(
            "{}: no signed manifests (*.manifest.dsse.json); run cargo xtask sign first",
            out.display()
        );
    }
    let mut modules = Vec::with_capacity(signed.len());
    for path in &signed {
        let what = path.display().to_string();
        let env_bytes = std::fs::read(path).with_context(|| format!("reading {what}"))?;
        let env = Envelope::parse(&env_bytes, limits.manifest, PayloadType::Manifest, &what)?;
        root.verify_role(&env, RoleName::Builder, &what)?;
        let blob_file = sign::blob_path(path);
        let blob = std::fs::read(&blob_file)
            .with_context(|| format!("reading {}", blob_file.display()))?;
        modules.push(SignedModule::new(env_bytes, blob)?);
    }
    let reg = DirRegistry::new(registry);
    reg.ensure_root(&root_bytes)?;
    Ok(reg.publish(&modules, &[publisher], opts)?)
}
