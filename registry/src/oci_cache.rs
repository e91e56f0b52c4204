//! A shared build cache in an OCI repository (`oci://HOST/REPOSITORY`): each object the
//! cache holds (`v1/entries/<id>/blob`, `v1/deps/<key>.json`, ...) is one small artifact of
//! one layer, tagged by its path with `/` written as `_` (`v1_entries_<id>_blob`), the path
//! repeated as the layer's title. Reads are capped before they start (the layer's size in
//! the manifest) and while they run; `oci-client` checks each layer's sha256.
//!
//! A tag push replaces the tag as one step (the distribution spec's manifest PUT), which is
//! all the cache needs: entries are written once, blob and manifest before the signed
//! `entry.json`, and the records and timings that are rewritten are unsigned hints whose
//! readers check them (see the build's `remote` module).

use std::collections::BTreeMap;

use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use oci_client::{Client, Reference};

use crate::error::{Error, Failure, Result};
use crate::oci::{self, EMPTY_CONFIG, OciOptions, TITLE};

/// The artifact type of one shared-cache object.
pub const CACHE_ARTIFACT_TYPE: &str = "application/vnd.cuda-aot.cache.v1";
/// The media type of its one layer.
pub const CACHE_LAYER_TYPE: &str = "application/vnd.cuda-aot.cache.object.v1";

/// An OCI repository used as a shared build cache, read and written by relative paths.
/// Blocking: it runs its own small tokio runtime, so callers need none.
pub struct OciCache {
    registry: String,
    repository: String,
    url: String,
    client: Client,
    rt: tokio::runtime::Runtime,
    opts: OciOptions,
}

impl std::fmt::Debug for OciCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OciCache").field("url", &self.url).finish()
    }
}

/// The tag that holds the object at `rel`: its path with `/` as `_`. Only paths of
/// lowercase letters, digits and `.` between the slashes are cache paths, so the mapping is
/// one-to-one and every tag is a valid OCI tag.
pub fn tag_of(rel: &str) -> Result<String> {
    let bad = |reason: &str| Error::BadUrl {
        url: rel.into(),
        reason: reason.into(),
    };
    let parts: Vec<&str> = rel.split('/').collect();
    let well_formed = |p: &&str| {
        !p.is_empty()
            && !p.starts_with('.')
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.')
    };
    if !parts.iter().all(well_formed) {
        return Err(bad(
            "a shared-cache path is lowercase letters, digits and dots between slashes",
        ));
    }
    let tag = parts.join("_");
    if tag.len() > 128 {
        return Err(bad("longer than an OCI tag can be (128 characters)"));
    }
    Ok(tag)
}

/// Parses a shared cache's `oci://HOST[:PORT]/REPOSITORY`, refusing a tag or digest (the
/// cache's objects are the repository's tags). Makes no request and starts nothing.
pub fn parse_url(url: &str) -> Result<Reference> {
    let rest = url.strip_prefix("oci://").unwrap_or_default();
    let last = rest.rsplit('/').next().unwrap_or_default();
    if rest.contains('@') || last.contains(':') {
        return Err(Error::BadUrl {
            url: url.into(),
            reason: "a shared cache is a whole repository, whose tags are its objects: give oci://HOST/REPOSITORY without a :TAG or @DIGEST".into(),
        });
    }
    oci::parse_reference(url)
}

impl OciCache {
    /// Opens `oci://HOST[:PORT]/REPOSITORY` (no tag: the cache's objects are its tags).
    /// Nothing is sent until the first read or write.
    pub fn open(url: &str, opts: OciOptions) -> Result<OciCache> {
        let parsed = parse_url(url)?;
        let (registry, repository) = (
            parsed.registry().to_string(),
            parsed.repository().to_string(),
        );
        let client = oci::client(&parsed, &opts);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::Oci {
                reference: url.into(),
                reason: format!("cannot start an async runtime: {e}"),
            })?;
        Ok(OciCache {
            registry,
            repository,
            url: url.trim_end_matches('/').to_string(),
            client,
            rt,
            opts,
        })
    }

    /// The URL it was opened from.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn reference(&self, rel: &str) -> Result<Reference> {
        Ok(Reference::with_tag(
            self.registry.clone(),
            self.repository.clone(),
            tag_of(rel)?,
        ))
    }

    /// The error of a request that failed: [`Error::Transfer`] when the store failed (its
    /// attempts spent), [`Error::Oci`] when what it served is wrong (`bad`), which trying
    /// again would not change.
    fn failed(&self, rel: &str, (failure, attempts): (Failure, u32), bad: bool) -> Error {
        match bad {
            true => Error::Oci {
                reference: format!("{} {rel}", self.url),
                reason: failure.to_string(),
            },
            false => Error::Transfer {
                url: format!("{} {rel}", self.url),
                attempts,
                failure,
            },
        }
    }

    /// The object at `rel`, at most `max + 1` bytes of it (a longer one is larger than
    /// `max`: the caller refuses it); `None` when the repository has no such tag. An
    /// artifact under the tag that is not this object (another type, title or layer count,
    /// a layer too large or not matching its digest) is an [`Error::Oci`], never bytes; a
    /// registry that failed every attempt an [`Error::Transfer`].
    pub fn get(&self, rel: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let reference = self.reference(rel)?;
        let bad = std::cell::Cell::new(false);
        let attempt = || -> std::result::Result<Option<Vec<u8>>, (Failure, bool)> {
            self.rt
                .block_on(self.pull(&reference, rel, max))
                .inspect_err(|(_, transient)| bad.set(!transient))
        };
        oci::with_retries(&self.opts.http, attempt)
            .map(|(bytes, _)| bytes)
            .map_err(|e| self.failed(rel, e, bad.get()))
    }

    async fn pull(
        &self,
        reference: &Reference,
        rel: &str,
        max: u64,
    ) -> std::result::Result<Option<Vec<u8>>, (Failure, bool)> {
        let fatal = |reason: String| (Failure::Other(reason), false);
        let manifest = oci::pull_manifest(&self.client, reference, &self.opts)
            .await
            .map_err(|e| {
                let reason = match e {
                    // The reference is the tag of `rel`, which the caller names already.
                    Error::Oci { reason, .. } => reason,
                    e => e.to_string(),
                };
                (Failure::Other(reason), true)
            })?;
        let Some((manifest, _)) = manifest else {
            return Ok(None);
        };
        if manifest.artifact_type.as_deref() != Some(CACHE_ARTIFACT_TYPE) {
            return Err(fatal(format!(
                "artifact type {:?}, expected {CACHE_ARTIFACT_TYPE}: not a cuda-aot cache object",
                manifest.artifact_type.as_deref().unwrap_or("(none)")
            )));
        }
        let [layer] = manifest.layers.as_slice() else {
            return Err(fatal(format!(
                "{} layers, a cache object has one",
                manifest.layers.len()
            )));
        };
        let title = layer.annotations.as_ref().and_then(|a| a.get(TITLE));
        if title.map(String::as_str) != Some(rel) || layer.media_type != CACHE_LAYER_TYPE {
            return Err(fatal(format!(
                "the tag holds another object ({:?} of type {}), not {rel}",
                title.map(|t| cuda_aot::error::escape_untrusted(t)),
                cuda_aot::error::escape_untrusted(&layer.media_type)
            )));
        }
        if layer.urls.as_ref().is_some_and(|u| !u.is_empty()) {
            return Err(fatal(
                "its layer names foreign URLs (a cuda-aot cache object never does)".into(),
            ));
        }
        let cap = max.saturating_add(1);
        if u64::try_from(layer.size).unwrap_or(u64::MAX) > cap {
            return Err(fatal(format!(
                "{} bytes, larger than the {max} bytes such an object may have",
                layer.size
            )));
        }
        let mut bytes = Vec::new();
        oci::pull_layer(&self.client, reference, layer, cap, |chunk| {
            bytes.extend_from_slice(chunk);
            Ok(())
        })
        .await?;
        Ok(Some(bytes))
    }

    /// Writes `bytes` at `rel`: its layer, then the manifest under the tag (which replaces
    /// what the tag held in one step). Retried as a whole: every step is idempotent.
    pub fn put(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        let reference = self.reference(rel)?;
        let layers = [ImageLayer::new(
            bytes.to_vec(),
            CACHE_LAYER_TYPE.into(),
            Some(BTreeMap::from([(TITLE.to_string(), rel.to_string())])),
        )];
        let config = Config::new(b"{}".to_vec(), EMPTY_CONFIG.into(), None);
        let mut manifest = OciImageManifest::build(&layers, &config, None);
        manifest.artifact_type = Some(CACHE_ARTIFACT_TYPE.into());
        let auth = oci::auth(&self.opts);
        let attempt = || -> std::result::Result<(), (Failure, bool)> {
            self.rt
                .block_on(self.client.push(
                    &reference,
                    &layers,
                    config.clone(),
                    &auth,
                    Some(manifest.clone()),
                ))
                .map(drop)
                .map_err(|e| (Failure::Other(e.to_string()), true))
        };
        oci::with_retries(&self.opts.http, attempt)
            .map(drop)
            .map_err(|e| self.failed(rel, e, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_paths_map_to_distinct_valid_tags() {
        let id = "ab".repeat(32);
        assert_eq!(
            tag_of(&format!("v1/entries/{id}/manifest.json")).unwrap(),
            format!("v1_entries_{id}_manifest.json")
        );
        assert_eq!(tag_of("v1/timings.json").unwrap(), "v1_timings.json");
        for bad in [
            "v1/a_b",
            "v1//x",
            "../x",
            "v1/.hidden",
            "V1/x",
            "",
            "v1/x y",
        ] {
            assert!(tag_of(bad).is_err(), "{bad:?}");
        }
        assert!(tag_of(&"a".repeat(129)).is_err());
    }

    #[test]
    fn a_cache_is_a_repository_without_a_tag() {
        for url in [
            "oci://127.0.0.1:5000/team/cache:stable",
            "oci://127.0.0.1:5000/team/cache@sha256:00",
            "oci://127.0.0.1:5000",
        ] {
            assert!(OciCache::open(url, OciOptions::default()).is_err(), "{url}");
        }
        let c = OciCache::open("oci://127.0.0.1:5000/team/cache", OciOptions::default()).unwrap();
        assert_eq!(c.url(), "oci://127.0.0.1:5000/team/cache");
        assert_eq!(c.repository, "team/cache");
    }
}
