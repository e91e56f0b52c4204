//! `cargo xtask publish`: publish a signed build output into a registry.

use anyhow::{Context, Result, bail};
use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::metadata::RoleName;
use cuda_aot::{Channel, Limits, SecretKey};
use cuda_aot_registry::{DirRegistry, PublishOptions, Published, SignedModule};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::advice::{Fix, fail};
use crate::args::{FormatArgs, RegistryArgs};
use crate::{anchor, devkeys, outdir, paths};

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
    /// The signed build output [default: .cuda-aot/build of the project].
    #[arg(value_name = "DIR")]
    out: Option<PathBuf>,
    /// The publisher's private key file [default: the dev publisher key].
    #[arg(long, value_name = "FILE", env = "CUDA_AOT_PUBLISHER_KEY")]
    publisher_key: Option<PathBuf>,
    /// Lifetime of the timestamp, in days.
    #[arg(long, value_name = "N", default_value_t = 7)]
    timestamp_days: u64,
    /// Only re-sign the timestamp of the current index with a new expiry (run this
    /// periodically: clients refuse a registry whose timestamp has expired).
    #[arg(long)]
    refresh_timestamp: bool,
    #[command(flatten)]
    pub(crate) format: FormatArgs,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let trust = self.at.trust_file()?;
        let key = match &self.publisher_key {
            Some(p) => devkeys::read_key(p)?,
            None => {
                // The dev key only ever signs for a dev root: refuse before anything else.
                let (_, root) = anchor::read(&trust)?;
                if root.root().channel == Channel::Production {
                    return Err(fail(
                        format!(
                            "no publisher key given for the production trust root {}",
                            trust.display()
                        ),
                        "pass --publisher-key FILE (or set CUDA_AOT_PUBLISHER_KEY) with a \
                         publisher key of that root; development keys never sign a production release",
                    ));
                }
                devkeys::ensure()?.publisher
            }
        };
        let opts = PublishOptions {
            timestamp_ttl: Duration::from_secs(self.timestamp_days * 86_400),
            ..PublishOptions::default()
        };
        if self.refresh_timestamp {
            let root_bytes = std::fs::read(&trust)
                .with_context(|| format!("reading trust root {}", trust.display()))?;
            checked_root(&root_bytes, &trust, &key)?;
            let ts = DirRegistry::new(self.at.registry()).refresh_timestamp(&[&key], &opts)?;
            eprintln!(
                "refreshed {}: timestamp v{} for index v{}, expires {}",
                self.at.registry().display(),
                ts.version,
                ts.index.version,
                ts.expires
            );
            return Ok(());
        }
        let out = self.out.clone().unwrap_or_else(paths::default_build_out);
        let p = publish_output(&self.at.registry(), &out, &trust, &key, &opts)?;
        eprintln!(
            "published index v{} (timestamp v{}) to {}: {} entries, {} blob(s) written, {} already present",
            p.index_version,
            p.timestamp_version,
            self.at.registry().display(),
            p.entries,
            p.blobs_written,
            p.blobs_reused
        );
        Ok(())
    }
}

/// Verifies the trust root and that `publisher` is one of its publisher keys.
pub fn checked_root(
    root_bytes: &[u8],
    trust: &Path,
    publisher: &SecretKey,
) -> Result<cuda_aot::trust::VerifiedRoot> {
    let limits = Limits::default();
    let root = cuda_aot::trust::verify_anchor(root_bytes, &limits, &trust.display().to_string())
        .map_err(|e| anchor::bad_root(e, trust))?;
    if !root
        .root()
        .roles
        .publisher
        .keys
        .contains(&publisher.public())
    {
        return Err(anyhow::Error::new(Fix(
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
    let signed = outdir::files_ending(out, ".manifest.dsse.json")?;
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
        let blob_file = outdir::blob_of_manifest(path);
        let blob = std::fs::read(&blob_file)
            .with_context(|| format!("reading {}", blob_file.display()))?;
        modules.push(SignedModule::new(env_bytes, blob)?);
    }
    let reg = DirRegistry::new(registry);
    reg.ensure_root(&root_bytes)?;
    Ok(reg.publish(&modules, &[publisher], opts)?)
}
