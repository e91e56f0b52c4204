//! Attestations where OCI tools look (issue 46): every build statement (an in-toto
//! Statement in a DSSE envelope, with all its signatures) and every promotion record (the
//! reviewers' co-signatures) of a release pushed to an OCI registry is attached to the
//! release artifact as an OCI 1.1 referrer: an image manifest with the release manifest as
//! its `subject`, `artifactType` `application/vnd.in-toto+json` (promotions:
//! `application/vnd.cuda-aot.promotion.v1+json`), an empty config and the document as its
//! one layer. A registry with the referrers API lists them at
//! `GET /v2/<name>/referrers/<digest>`; for one without (the CNCF distribution registry,
//! `docker-registry` 2.8.2), the publisher also keeps the referrers tag schema's index at
//! the tag `sha256-<hex>`. Reading them back
//! ([`crate::oci::OciRemote::attestations`]) goes through whichever the registry has, and
//! a sync checks that each is byte for byte a document of the release it verified.

use std::collections::BTreeMap;

use oci_client::manifest::{
    ImageIndexEntry, OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor,
    OciImageIndex, OciImageManifest,
};
use oci_client::{Client, Reference};

use crate::oci::{EMPTY_CONFIG, OciOptions, TITLE, auth, get_capped};

/// The artifact type of a build statement referrer.
pub const IN_TOTO: &str = "application/vnd.in-toto+json";
/// The media type of its layer: the DSSE envelope.
pub const DSSE: &str = "application/vnd.dsse.envelope.v1+json";
/// The artifact type (and layer media type) of a promotion record referrer.
pub const PROMOTION: &str = "application/vnd.cuda-aot.promotion.v1+json";

/// How the registry lists referrers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// `GET /v2/<name>/referrers/<digest>` answers (the registry indexes `subject`).
    Api,
    /// No referrers API: the index at the tag `sha256-<hex>`, kept by the publisher.
    TagSchema,
}

/// A referrer read back: its artifact type, its layer's title and bytes.
#[derive(Debug, Clone)]
pub struct Referrer {
    /// The referrer manifest's `artifactType`.
    pub artifact_type: String,
    /// The layout path its layer is titled with.
    pub title: String,
    /// The layer (sha256 checked by oci-client).
    pub bytes: Vec<u8>,
}

type Failure = String;

/// The reason of an error of [`get_capped`] (the caller names the reference).
fn reason(e: crate::Error) -> Failure {
    match e {
        crate::Error::Oci { reason, .. } => reason,
        e => e.to_string(),
    }
}

/// An image index read from the registry (at most [`crate::oci::MAX_MANIFEST`] bytes).
async fn index_at(
    client: &Client,
    reference: &Reference,
    opts: &OciOptions,
    what: &str,
) -> Result<Option<OciImageIndex>, Failure> {
    let Some(body) = get_capped(client, reference, opts, what, OCI_IMAGE_INDEX_MEDIA_TYPE)
        .await
        .map_err(reason)?
    else {
        return Ok(None);
    };
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| format!("{what} holds no image index: {e}"))
}

/// The referrers of `subject` and how the registry lists them: its referrers API
/// (`GET /v2/<name>/referrers/<digest>`), else (a 404 there, as the distribution spec
/// tells clients to take it) the referrers tag schema's index, empty when no tag exists.
async fn referrers_of(
    client: &Client,
    reference: &Reference,
    opts: &OciOptions,
    subject: &str,
) -> Result<(OciImageIndex, Listing), Failure> {
    if let Some(index) = index_at(client, reference, opts, &format!("referrers/{subject}")).await? {
        return Ok((index, Listing::Api));
    }
    let index = referrers_of_tag(client, reference, opts, subject).await?;
    Ok((index, Listing::TagSchema))
}

/// The path of the referrers tag schema's tag of `digest` (`manifests/sha256-<hex>`).
fn tag_path(digest: &str) -> String {
    format!("manifests/{}", digest.replace(':', "-"))
}

/// `reference`'s repository at `digest`.
fn at_digest(reference: &Reference, digest: &str) -> Reference {
    Reference::with_digest(
        reference.registry().to_string(),
        reference.repository().to_string(),
        digest.to_string(),
    )
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", crate::oci::hex_sha256(bytes))
}

/// Attaches `docs` (layout path, bytes: `statements/…` and `promotions/…` files) to the
/// manifest `subject` of `reference`'s repository, then makes sure they are listed: through
/// the registry's referrers API, else by adding them to the tag schema's index.
pub(crate) async fn attach(
    client: &Client,
    reference: &Reference,
    opts: &OciOptions,
    subject: &OciDescriptor,
    docs: &[(String, Vec<u8>)],
) -> Result<Listing, Failure> {
    client
        .store_auth_if_needed(reference.resolve_registry(), &auth(opts))
        .await;
    let empty = b"{}".to_vec();
    let config = OciDescriptor {
        media_type: EMPTY_CONFIG.into(),
        digest: sha256(&empty),
        size: empty.len() as i64,
        ..Default::default()
    };
    client
        .push_blob(reference, empty, &config.digest)
        .await
        .map_err(|e| format!("pushing the empty config: {e}"))?;
    let mut pushed = Vec::new();
    for (path, bytes) in docs {
        let (artifact_type, layer_type) = match path.starts_with("promotions/") {
            true => (PROMOTION, PROMOTION),
            false => (IN_TOTO, DSSE),
        };
        let layer = OciDescriptor {
            media_type: layer_type.into(),
            digest: sha256(bytes),
            size: bytes.len() as i64,
            annotations: Some(BTreeMap::from([(TITLE.to_string(), path.clone())])),
            ..Default::default()
        };
        client
            .push_blob(reference, bytes.clone(), &layer.digest)
            .await
            .map_err(|e| format!("pushing {path}: {e}"))?;
        let manifest = OciImageManifest {
            schema_version: 2,
            media_type: Some(OCI_IMAGE_MEDIA_TYPE.into()),
            config: config.clone(),
            layers: vec![layer],
            subject: Some(subject.clone()),
            artifact_type: Some(artifact_type.into()),
            annotations: Some(BTreeMap::from([(TITLE.to_string(), path.clone())])),
        };
        let body = serde_json::to_vec(&manifest).map_err(|e| e.to_string())?;
        let digest = sha256(&body);
        client
            .push_manifest_raw(
                &at_digest(reference, &digest),
                body.clone(),
                OCI_IMAGE_MEDIA_TYPE.parse().expect("media type"),
            )
            .await
            .map_err(|e| format!("pushing the referrer of {path}: {e}"))?;
        pushed.push(ImageIndexEntry {
            media_type: OCI_IMAGE_MEDIA_TYPE.into(),
            digest,
            size: body.len() as i64,
            platform: None,
            annotations: manifest.annotations.clone(),
            artifact_type: Some(artifact_type.into()),
        });
    }
    // Listed already (the referrers API, or a tag schema index holding them all)?
    let (mut index, listing) = referrers_of(client, reference, opts, &subject.digest).await?;
    let missing: Vec<ImageIndexEntry> = pushed
        .into_iter()
        .filter(|p| !index.manifests.iter().any(|l| l.digest == p.digest))
        .collect();
    if missing.is_empty() {
        return Ok(listing);
    }
    // The referrers tag schema: the index at `sha256-<hex>`, with these added.
    if listing == Listing::Api {
        index = referrers_of_tag(client, reference, opts, &subject.digest).await?;
    }
    let tag = tag_of(reference, &subject.digest);
    index.manifests.extend(missing);
    let body = serde_json::to_vec(&index).map_err(|e| e.to_string())?;
    client
        .push_manifest_raw(
            &tag,
            body,
            OCI_IMAGE_INDEX_MEDIA_TYPE.parse().expect("media type"),
        )
        .await
        .map_err(|e| format!("pushing the referrers tag {}: {e}", tag.whole()))?;
    Ok(Listing::TagSchema)
}

/// The referrers tag schema's tag of `digest` in `reference`'s repository.
fn tag_of(reference: &Reference, digest: &str) -> Reference {
    Reference::with_tag(
        reference.registry().to_string(),
        reference.repository().to_string(),
        digest.replace(':', "-"),
    )
}

/// The referrers tag schema's index of `digest` (empty when there is no such tag).
async fn referrers_of_tag(
    client: &Client,
    reference: &Reference,
    opts: &OciOptions,
    digest: &str,
) -> Result<OciImageIndex, Failure> {
    Ok(index_at(client, reference, opts, &tag_path(digest))
        .await?
        .unwrap_or(OciImageIndex {
            schema_version: 2,
            media_type: Some(OCI_IMAGE_INDEX_MEDIA_TYPE.into()),
            manifests: Vec::new(),
            artifact_type: None,
            annotations: None,
        }))
}

/// Every referrer of the manifest `subject` in `reference`'s repository whose artifact
/// type is one of ours, with its layer. Each referrer manifest and layer is capped at
/// `cap` bytes.
pub(crate) async fn read(
    client: &Client,
    reference: &Reference,
    opts: &OciOptions,
    subject: &str,
    cap: u64,
) -> Result<(Vec<Referrer>, Listing), Failure> {
    client
        .store_auth_if_needed(reference.resolve_registry(), &auth(opts))
        .await;
    let (index, listing) = referrers_of(client, reference, opts, subject)
        .await
        .map_err(|e| format!("listing the referrers: {e}"))?;
    let mut out = Vec::new();
    for entry in index.manifests {
        let kind = entry.artifact_type.clone().unwrap_or_default();
        if kind != IN_TOTO && kind != PROMOTION {
            continue;
        }
        let manifest =
            crate::oci::pull_manifest(client, &at_digest(reference, &entry.digest), opts)
                .await
                .map_err(|e| format!("reading referrer {}: {}", entry.digest, reason(e)))?
                .ok_or_else(|| {
                    format!(
                        "referrer {} is listed but not in the registry",
                        entry.digest
                    )
                })?
                .0;
        if manifest.subject.as_ref().map(|s| s.digest.as_str()) != Some(subject)
            || manifest.artifact_type.as_deref() != Some(kind.as_str())
            || manifest.layers.len() != 1
        {
            return Err(format!(
                "referrer {} does not name this release as its subject with one {kind} layer",
                entry.digest
            ));
        }
        let layer = &manifest.layers[0];
        if layer.size < 0 || layer.size as u64 > cap {
            return Err(format!(
                "referrer {}'s layer is larger than {cap} bytes",
                entry.digest
            ));
        }
        let title = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(TITLE))
            .cloned()
            .unwrap_or_default();
        let mut bytes = Vec::new();
        client
            .pull_blob(&at_digest(reference, &entry.digest), layer, &mut bytes)
            .await
            .map_err(|e| format!("reading referrer {}'s layer: {e}", entry.digest))?;
        out.push(Referrer {
            artifact_type: kind,
            title,
            bytes,
        });
    }
    Ok((out, listing))
}
