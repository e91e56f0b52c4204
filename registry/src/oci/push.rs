//! Pushing a verified registry folder to an OCI tag as one artifact: the layers are the
//! files its verification read, the tag is checked just before its manifest is replaced,
//! and the release's attestations are attached to the manifest this push put.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use cuda_aot::source::{DirSource, RegistrySource, layout};
use cuda_aot::verify::{Options, Select, verify_metadata};
use futures_util::StreamExt;
use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::{Client, Reference};

use super::{
    ARTIFACT_TYPE, EMPTY_CONFIG, OciOptions, TITLE, auth, client, hex_sha256, media_type,
    oci_error, parse_reference, pull_manifest, runtime,
};
use crate::error::{Error, Result};
use crate::oci_referrers as referrers;

/// A [`RegistrySource`] that keeps the bytes of every file the verifier read, so a push uploads
/// exactly what was verified (never a second read of the path, which a local writer could
/// have changed in between).
struct Recording<'a> {
    inner: &'a (dyn RegistrySource + Sync),
    read: Mutex<Read>,
}

#[derive(Default)]
struct Read {
    files: BTreeMap<String, Vec<u8>>,
    /// A path that gave different bytes on two reads (changed while it was verified).
    changed: Option<String>,
}

impl RegistrySource for Recording<'_> {
    fn read_at_most(&self, path: &str, max: u64) -> cuda_aot::Result<Option<Vec<u8>>> {
        let r = self.inner.read_at_most(path, max)?;
        if let Some(b) = &r {
            let mut read = self.read.lock().expect("recording");
            match read.files.get(path) {
                // A shorter read of the same file (a size probe) is a prefix.
                Some(old) if !(old.starts_with(b) || b.starts_with(old)) => {
                    read.changed.get_or_insert_with(|| path.to_string());
                }
                Some(old) if old.len() >= b.len() => {}
                _ => {
                    read.files.insert(path.into(), b.clone());
                }
            }
        }
        Ok(r)
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// What a push stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The reference pushed to.
    pub reference: String,
    /// The index version of the release.
    pub index_version: u64,
    /// Layers (registry files) in the artifact.
    pub layers: usize,
    /// Their total size.
    pub bytes: u64,
    /// The URL of the pushed manifest.
    pub manifest_url: String,
    /// Build statements and promotion records attached to it as OCI referrers.
    pub attestations: usize,
    /// How the registry lists them.
    pub listing: referrers::Listing,
}

/// Pushes the registry in `dir` to `reference` as one artifact, after verifying it fully
/// against `anchor`: the layers are exactly the files that verification read.
///
/// `based_on` is the sha256 (`sha256:…`) of the `timestamp.json` the tag held when the
/// release in `dir` was made (`None`: no tag yet). OCI has no compare-and-swap; the tag is
/// read again just before its manifest is replaced, and a tag that moved fails with
/// [`Error::Conflict`], nothing replaced. That leaves a lost update possible only between
/// one read and one write: the caller checks the tag once more after the push.
pub fn push(
    dir: &Path,
    anchor: &[u8],
    reference: &str,
    based_on: Option<&str>,
    verify: &Options,
    opts: &OciOptions,
) -> Result<Pushed> {
    let reference = parse_reference(reference)?;
    let src = DirSource::new(dir);
    let rec = Recording {
        inner: &src,
        read: Mutex::new(Read::default()),
    };
    let index =
        verify_metadata(&rec, anchor, Default::default(), verify)?.complete(&rec, Select::all())?;
    // The sources the statements name are layers too (a rebuilder pulls them), and every
    // subject's sha256 is what tools that read only sha256 will check.
    index.metadata().audit(&rec)?;
    let read = rec.read.into_inner().expect("recording");
    if let Some(path) = read.changed {
        return Err(Error::io(
            &dir.join(&path),
            std::io::Error::other(
                "the file changed while it was being verified; nothing was pushed",
            ),
        ));
    }
    // The build statements and promotion records, attached as referrers after the push.
    let attestations: Vec<(String, Vec<u8>)> = read
        .files
        .iter()
        .filter(|(p, _)| p.starts_with("statements/") || p.starts_with("promotions/"))
        .map(|(p, d)| (p.clone(), d.clone()))
        .collect();
    let mut layers = Vec::with_capacity(read.files.len());
    let mut bytes = 0u64;
    for (path, data) in read.files {
        bytes += data.len() as u64;
        layers.push(ImageLayer::new(
            data,
            media_type(&path),
            Some(BTreeMap::from([(TITLE.to_string(), path)])),
        ));
    }
    let config = Config::new(b"{}".to_vec(), EMPTY_CONFIG.into(), None);
    let mut manifest = OciImageManifest::build(
        &layers,
        &config,
        Some(BTreeMap::from([
            (
                "dev.cuda-aot.index.version".to_string(),
                index.index().version.to_string(),
            ),
            (
                "dev.cuda-aot.timestamp.version".to_string(),
                index.timestamp().version.to_string(),
            ),
        ])),
    );
    manifest.artifact_type = Some(ARTIFACT_TYPE.into());
    let client = client(&reference, opts);
    let rt = runtime(&reference.whole())?;
    let version = index.index().version;
    let (manifest_url, subject) = rt.block_on(async {
        push_blobs(&client, &reference, &layers, config, &manifest, opts)
            .await
            .map_err(|e| oci_error(&reference, e))?;
        if timestamp_on_tag(&client, &reference, opts)
            .await?
            .as_deref()
            != based_on
        {
            return Err(Error::Conflict {
                version,
                base: version.saturating_sub(1),
            });
        }
        put_manifest(&client, &reference, &manifest)
            .await
            .map_err(|e| oci_error(&reference, e))
    })?;
    crate::publish::pause_point(crate::publish::Step::Pushed);
    let listing = rt
        .block_on(referrers::attach(
            &client,
            &reference,
            opts,
            &subject,
            &attestations,
        ))
        .map_err(|e| {
            oci_error(
                &reference,
                format!("the release is pushed, but not its attestations: {e}"),
            )
        })?;
    Ok(Pushed {
        reference: reference.whole(),
        index_version: version,
        layers: layers.len(),
        bytes,
        manifest_url,
        attestations: attestations.len(),
        listing,
    })
}

/// Pushes the blobs of an artifact (its layers and config) to `reference`'s repository.
async fn push_blobs(
    client: &Client,
    reference: &Reference,
    layers: &[ImageLayer],
    config: Config,
    manifest: &OciImageManifest,
    opts: &OciOptions,
) -> std::result::Result<(), oci_client::errors::OciDistributionError> {
    client
        .store_auth_if_needed(reference.resolve_registry(), &auth(opts))
        .await;
    let blobs = layers
        .iter()
        .zip(&manifest.layers)
        .map(|(l, d)| (l.data.clone(), d.digest.clone()))
        .chain([(config.data, manifest.config.digest.clone())]);
    futures_util::stream::iter(blobs)
        .map(|(data, digest)| async move { client.push_blob(reference, data, &digest).await })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .try_for_each(|r| r.map(drop))
}

/// The sha256 of the `timestamp.json` layer of the artifact on `reference`'s tag (`None`:
/// no such tag, or an artifact without one).
async fn timestamp_on_tag(
    client: &Client,
    reference: &Reference,
    opts: &OciOptions,
) -> Result<Option<String>> {
    Ok(pull_manifest(client, reference, opts)
        .await?
        .and_then(|(manifest, _)| {
            manifest
                .layers
                .into_iter()
                .find(|l| {
                    l.annotations
                        .as_ref()
                        .and_then(|a| a.get(TITLE))
                        .is_some_and(|t| t == layout::TIMESTAMP)
                })
                .map(|l| l.digest)
        }))
}

/// Puts `manifest` on `reference`'s tag as these exact bytes. Returns its URL and its
/// descriptor: the subject its referrers name. The digest is of the bytes put here, never
/// read back from the tag, which another publisher may have moved by then (a referrer
/// attached to their release would make every later sync of it refuse the attestation as
/// foreign).
async fn put_manifest(
    client: &Client,
    reference: &Reference,
    manifest: &OciImageManifest,
) -> std::result::Result<(String, OciDescriptor), oci_client::errors::OciDistributionError> {
    let body = serde_json::to_vec(manifest).expect("an image manifest serializes");
    let media_type = oci_client::manifest::OCI_IMAGE_MEDIA_TYPE;
    let subject = OciDescriptor {
        media_type: media_type.into(),
        digest: format!("sha256:{}", hex_sha256(&body)),
        size: body.len() as i64,
        ..Default::default()
    };
    let url = client
        .push_manifest_raw(reference, body, media_type.parse().expect("media type"))
        .await?;
    Ok((url, subject))
}
