//! Registries elsewhere than a local folder, from the command line: an OCI tag
//! (`oci://HOST/REPO:TAG`) or a publishing `cuda-aot-registry serve` (`http(s)://…`) — the
//! credential and transport arguments of `sync` and `publish`, and publishing a build output
//! as the next release of an OCI tag.

use anyhow::{Context, Result};
use cuda_aot::SecretKey;
use cuda_aot::verify::Options;
use cuda_aot_registry::http_store::HttpStore;
use cuda_aot_registry::oci::{OciOptions, OciRemote, Pushed, push};
use cuda_aot_registry::remote::HttpOptions;
use cuda_aot_registry::serve::read_token_file;
use cuda_aot_registry::sync::{SyncOptions, sync};
use cuda_aot_registry::{PublishOptions, Published};
use std::path::{Path, PathBuf};

use crate::{paths, publish};

/// Where `--registry` points.
pub enum Target<'a> {
    /// A local folder.
    Dir(&'a Path),
    /// An OCI tag.
    Oci(&'a str),
    /// An HTTP(S) server.
    Http(&'a str),
}

impl<'a> Target<'a> {
    /// Classifies a `--registry` value.
    pub fn of(registry: &'a Path) -> Target<'a> {
        match registry.to_str() {
            Some(s) if s.starts_with("oci://") => Target::Oci(s),
            Some(s) if s.starts_with("http://") || s.starts_with("https://") => Target::Http(s),
            _ => Target::Dir(registry),
        }
    }
}

/// The publish token of an HTTP registry, read from a file.
#[derive(Debug, Clone, clap::Args)]
pub struct TokenArgs {
    /// The bearer token file of a publishing `cuda-aot-registry serve` (for
    /// --registry http(s)://…).
    #[arg(long, value_name = "FILE", env = "CUDA_AOT_PUBLISH_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
}

impl TokenArgs {
    /// The HTTP store at `url`, publishing with the token file's token.
    pub fn store(&self, url: &str) -> Result<HttpStore> {
        let Some(file) = &self.token_file else {
            return Err(anyhow::Error::new(paths::Fix(
                "pass --token-file FILE (or CUDA_AOT_PUBLISH_TOKEN_FILE) with the token the server was started with".into(),
            )))
            .context(format!("publishing to {url} needs the server's token"));
        };
        let token = read_token_file(file).map_err(|e| {
            anyhow::Error::new(paths::Fix(
                "keep the token in a private file (chmod 600), one line of at least 16 characters"
                    .into(),
            ))
            .context(e)
        })?;
        Ok(HttpStore::new(url, &token, HttpOptions::default())?)
    }
}

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
