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

pub use cuda_aot_builder::build::oci_options;

impl RemoteArgs {
    /// The OCI options these arguments and the environment select.
    pub fn oci_options(&self) -> Result<OciOptions> {
        oci_options(self.oci_username.as_deref(), self.oci_plain_http)
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
    /// OCI tags have no compare-and-swap (the distribution spec has no conditional
    /// manifest PUT), so this does the safest thing it allows: just before the manifest
    /// replaces the tag ([`push`], after the blobs are up), the tag is read again, and a push
    /// is refused (a publish conflict, told to retry) when another release was pushed since
    /// this publish read it; after pushing it reads the tag back
    /// and reports a conflict when it no longer holds this release (another publisher
    /// pushed in between: the tag holds theirs, a complete release that verifies on its
    /// own, and rollback protection keeps clients from going back). Two pushes within one read and
    /// one write of each other can still both pass: serialize publishers per repository.
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
        let tag_now = || -> Result<Option<String>> {
            Ok(OciRemote::open_existing(reference, oci.clone())?
                .map(|r| r.timestamp_digest().to_string()))
        };
        let based_on = match OciRemote::open_existing(reference, oci.clone())? {
            Some(remote) => {
                sync(&remote, work, anchor, &SyncOptions::default())
                    .with_context(|| format!("bringing {reference} into {}", work.display()))?;
                Some(remote.timestamp_digest().to_string())
            }
            None => None,
        };
        let published = publish_into(work)?;
        if published.unchanged {
            return Ok((published, None));
        }
        let conflict = || cuda_aot_registry::Error::Conflict {
            version: published.index_version,
            base: published.index_version.saturating_sub(1),
        };
        let pushed = push(
            work,
            anchor,
            reference,
            based_on.as_deref(),
            &Options::default(),
            &oci,
        )?;
        let ours = format!(
            "sha256:{}",
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
                std::fs::read(work.join(cuda_aot::source::layout::TIMESTAMP))
                    .context("reading the pushed timestamp.json")?
            ))
        );
        if tag_now()?.as_deref() != Some(ours.as_str()) {
            return Err(anyhow::Error::from(conflict()).context(format!(
                "{reference}: pushed, but the tag no longer holds this release: another publisher pushed at the same time"
            )));
        }
        Ok((published, Some(pushed)))
    }
}
