//! The clients behind [`RemoteArgs`] (with the `net` feature): the publishing HTTP store
//! and the OCI publish flow.

use anyhow::{Context, Result};
use cuda_aot::verify::Options;
use cuda_aot_registry::Published;
use cuda_aot_registry::http_store::HttpStore;
use cuda_aot_registry::oci::{OciOptions, OciRemote, Pushed, push};
use cuda_aot_registry::remote::HttpOptions;
use cuda_aot_registry::serve::read_token_file;
use cuda_aot_registry::sync::{SyncOptions, sync};
use std::path::Path;

use super::RemoteArgs;
use crate::advice::fail;
use crate::paths;

impl RemoteArgs {
    /// The OCI options these arguments and the environment select.
    pub fn oci_options(&self) -> Result<OciOptions> {
        let basic_auth = match &self.oci_username {
            Some(u) => {
                let p = std::env::var("CUDA_AOT_OCI_PASSWORD").map_err(|_| {
                    fail(
                        "--oci-username needs a password",
                        "put the OCI registry's password or token in CUDA_AOT_OCI_PASSWORD",
                    )
                })?;
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

    /// The publishing HTTP server at `url`, with the token of `--token-file`.
    pub fn http_store(&self, url: &str) -> Result<HttpStore> {
        let Some(file) = &self.token_file else {
            return Err(fail(
                format!("publishing to {url} needs the server's token"),
                "pass --token-file FILE (or CUDA_AOT_PUBLISH_TOKEN_FILE) with the token the server was started with",
            ));
        };
        let token = read_token_file(file).map_err(|e| {
            fail(
                e,
                "keep the token in a private file (chmod 600): one line of at least 16 characters",
            )
        })?;
        Ok(HttpStore::new(
            url,
            &token,
            HttpOptions {
                allow_plain_http: self.allow_plain_http,
                ..HttpOptions::default()
            },
        )?)
    }

    /// Publishes as the next release of the OCI tag `reference`: the tag's current
    /// release is synced (verified against `anchor`) into a fresh local folder,
    /// `publish_into` publishes the build there with the directory algorithm, and the
    /// result is verified and pushed as the tag's new artifact. A build the tag already
    /// holds pushes nothing (`None`).
    ///
    /// OCI tags have no compare-and-swap: two publishers racing for one tag both succeed
    /// and the last push wins (clients stay safe: every artifact verifies on its own and
    /// rollback protection refuses an older one). Serialize publishers per repository.
    pub fn publish_oci(
        &self,
        reference: &str,
        anchor: &[u8],
        publish_into: impl FnOnce(&Path) -> Result<Published>,
    ) -> Result<(Published, Option<Pushed>)> {
        let oci = self.oci_options()?;
        let base = paths::work_dir_created()?.join("oci");
        std::fs::create_dir_all(&base)?;
        let tmp = tempfile::Builder::new()
            .prefix("publish-")
            .tempdir_in(&base)?;
        let work = tmp.path();
        if let Some(remote) = OciRemote::open_existing(reference, oci.clone())? {
            sync(&remote, work, anchor, &SyncOptions::default())
                .with_context(|| format!("bringing {reference} into {}", work.display()))?;
        }
        let published = publish_into(work)?;
        if published.unchanged {
            return Ok((published, None));
        }
        let pushed = push(work, anchor, reference, &Options::default(), &oci)?;
        Ok((published, Some(pushed)))
    }
}
