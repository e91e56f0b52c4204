//! OCI registries from the command line: the credentials and transport arguments shared by
//! `sync --from oci://…` and `publish --registry oci://…`, and publishing a build output as
//! the next release of an OCI tag.

use anyhow::{Context, Result};
use cuda_aot::SecretKey;
use cuda_aot::verify::Options;
use cuda_aot_registry::oci::{OciOptions, OciRemote, Pushed, push};
use cuda_aot_registry::sync::{SyncOptions, sync};
use cuda_aot_registry::{PublishOptions, Published};
use std::path::Path;

use crate::{paths, publish};

/// How to reach an OCI registry.
#[derive(Debug, Clone, clap::Args)]
pub struct OciArgs {
    /// Talk plain HTTP (no TLS) to the OCI registry (loopback registries always are).
    #[arg(long)]
    pub oci_plain_http: bool,
    /// User name for the OCI registry (with CUDA_AOT_OCI_PASSWORD; default: anonymous).
    #[arg(long, env = "CUDA_AOT_OCI_USERNAME")]
    pub oci_username: Option<String>,
}

impl OciArgs {
    /// The options these arguments and the environment select.
    pub fn options(&self) -> Result<OciOptions> {
        let basic_auth = match &self.oci_username {
            Some(u) => {
                let p = std::env::var("CUDA_AOT_OCI_PASSWORD")
                    .context("--oci-username needs the password in CUDA_AOT_OCI_PASSWORD")?;
                Some((u.clone(), p))
            }
            None => None,
        };
        Ok(OciOptions {
            basic_auth,
            plain_http: self.oci_plain_http,
            ..OciOptions::default()
        })
    }
}

/// Publishes the signed build output `out` as the next release of the OCI tag `reference`:
/// the tag's current release is synced (verified) into a local folder, the build output
/// is published there with the directory algorithm, the result is verified and pushed as
/// the tag's new artifact. A build the tag already holds pushes nothing (`None`).
///
/// OCI tags have no compare-and-swap: two publishers racing for one tag both succeed and
/// the last push wins (clients stay safe: every artifact verifies on its own and rollback
/// protection refuses an older one). Serialize publishers per repository.
pub fn publish_to_oci(
    reference: &str,
    out: &Path,
    trust: &Path,
    publisher: &SecretKey,
    opts: &PublishOptions,
    oci: &OciOptions,
) -> Result<(Published, Option<Pushed>)> {
    let anchor =
        std::fs::read(trust).with_context(|| format!("reading trust root {}", trust.display()))?;
    // A fresh folder each time: it holds the tag's current release plus this one only.
    let base = paths::work_dir_created()?.join("oci");
    std::fs::create_dir_all(&base)?;
    let tmp = tempfile::Builder::new()
        .prefix("publish-")
        .tempdir_in(&base)?;
    let work = tmp.path();
    if let Some(remote) = OciRemote::open_existing(reference, oci.clone())? {
        let r = sync(&remote, work, &anchor, &SyncOptions::default())
            .with_context(|| format!("bringing {reference} into {}", work.display()))?;
        eprintln!(
            "{reference}: index v{} synced into {}",
            r.index_version,
            work.display()
        );
    }
    let published = publish::publish_output(work, out, trust, publisher, opts)?;
    if published.unchanged {
        // The tag already holds exactly this release: pushing again would change nothing.
        return Ok((published, None));
    }
    let pushed = push(work, &anchor, reference, &Options::default(), oci)?;
    Ok((published, Some(pushed)))
}
