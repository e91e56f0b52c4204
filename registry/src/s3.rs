//! Object storage (`s3://BUCKET/PREFIX`: Amazon S3 and S3-compatible stores) as a registry
//! and as the shared build cache's store: a blocking client over `object_store`'s S3
//! implementation ([`S3Client`]), the publish algorithm's [`Store`] with S3's conditional
//! writes ([`S3Store`]), and the sync [`Remote`] that reads a registry from a bucket.
//!
//! Credentials, region and endpoint come from the standard AWS variables
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL` for an S3-compatible store, …), as every AWS tool reads them. Plain
//! `http://` endpoints are refused unless they are this machine or `AWS_ALLOW_HTTP=true`.
//!
//! Publishing keeps the directory store's guarantees with two conditional writes, which
//! Amazon S3 has had since 2024 (for other stores a probe decides, below): the next index
//! is created with `If-None-Match: *`, and `timestamp.json` is replaced with `If-Match` on
//! the ETag of the timestamp the publish was prepared on. Of two racing publishers exactly
//! one wins; the other gets [`Error::Conflict`]. A store that ignores those headers is
//! found out before anything is written ([`S3Client::check_conditional_writes`]) and
//! refused.

use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as Key;
use object_store::{
    ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
    UpdateVersion,
};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use cuda_aot::Digest;
use cuda_aot::source::{RegistrySource, layout};

use crate::error::{Error, Result};
use crate::publish::{Commit, Step, Store, pause_point};
use crate::remote::{Fetched, Remote};

/// The conditional-write probes live below the prefix under this name and a random suffix
/// (no registry or cache path starts with a dot), one per check, removed after it.
const PROBE: &str = ".cuda-aot-probe";

/// Transport settings of an [`S3Client`]. Its `Debug` shows `<redacted>` for the secret.
#[derive(Clone)]
pub struct S3Options {
    /// Time allowed to open a connection.
    pub connect_timeout: Duration,
    /// Time allowed for one request, body included.
    pub request_timeout: Duration,
    /// Retries of a request that failed transiently (5xx, connection reset, timeout).
    pub retries: usize,
    /// No request is retried after this long from its first attempt.
    pub retry_timeout: Duration,
    /// The store's address, for an S3-compatible store [default: `AWS_ENDPOINT_URL_S3`,
    /// `AWS_ENDPOINT_URL` or `AWS_ENDPOINT`, else Amazon S3].
    pub endpoint: Option<String>,
    /// Send unsigned requests (a public bucket read anonymously) instead of looking for
    /// credentials.
    pub anonymous: bool,
    /// An access key id and its secret [default: the AWS variables, then the other
    /// sources the AWS SDKs read].
    pub access_key: Option<(String, String)>,
}

impl std::fmt::Debug for S3Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Options")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("retries", &self.retries)
            .field("retry_timeout", &self.retry_timeout)
            .field("endpoint", &self.endpoint)
            .field("anonymous", &self.anonymous)
            .field(
                "access_key",
                &self
                    .access_key
                    .as_ref()
                    .map(|(id, _)| (id.as_str(), crate::remote::REDACTED)),
            )
            .finish()
    }
}

impl Default for S3Options {
    fn default() -> Self {
        S3Options {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
            retries: 5,
            retry_timeout: Duration::from_secs(60),
            endpoint: None,
            anonymous: false,
            access_key: None,
        }
    }
}

/// A bucket and key prefix, read and written by relative paths (`index/3.index.json`,
/// `v1/entries/…`). Blocking: it runs its own small tokio runtime, so callers need none.
pub struct S3Client {
    store: AmazonS3,
    prefix: String,
    url: String,
    rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for S3Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Client").field("url", &self.url).finish()
    }
}

/// Splits `s3://BUCKET/PREFIX` into the bucket and the prefix (no leading or trailing
/// `/`; empty for the bucket's root).
pub fn parse_url(url: &str) -> Result<(String, String)> {
    let bad = |reason: &str| Error::BadUrl {
        url: url.into(),
        reason: reason.into(),
    };
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| bad("not an s3:// address"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let bucket_ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !bucket.starts_with(['-', '.'])
        && !bucket.ends_with(['-', '.']);
    if !bucket_ok {
        return Err(bad(
            "the bucket name must be 3 to 63 lower-case letters, digits, '-' or '.'",
        ));
    }
    let prefix = prefix.trim_end_matches('/');
    if !prefix.is_empty() {
        cuda_aot::source::check_relative(prefix).map_err(|e| bad(&e.to_string()))?;
    }
    Ok((bucket.to_string(), prefix.to_string()))
}

/// Whether `endpoint` is a plain-HTTP address of this machine.
fn loopback_http(endpoint: &str) -> bool {
    let Some(rest) = endpoint.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split('/').next().unwrap_or("");
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl S3Client {
    /// Opens `s3://BUCKET/PREFIX` with the AWS variables of this process (see the module
    /// documentation). Makes no request.
    pub fn open(url: &str, opts: &S3Options) -> Result<S3Client> {
        let (bucket, prefix) = parse_url(url)?;
        let endpoint = opts.endpoint.clone().or_else(|| {
            ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
                .iter()
                .find_map(|v| std::env::var(v).ok())
        });
        if let Some(e) = &endpoint
            && e.starts_with("http://")
            && !loopback_http(e)
            && !std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        {
            return Err(Error::BadUrl {
                url: e.clone(),
                reason: "a plain-http S3 endpoint on another machine (requests, and what they write, could be read and altered on the way); give an https:// endpoint, or set AWS_ALLOW_HTTP=true on a network you trust".into(),
            });
        }
        crate::remote::install_tls_provider();
        let client = ClientOptions::new()
            .with_allow_http(
                endpoint
                    .as_deref()
                    .is_some_and(|e| e.starts_with("http://")),
            )
            .with_connect_timeout(opts.connect_timeout)
            .with_timeout(opts.request_timeout);
        let retry = RetryConfig {
            max_retries: opts.retries,
            retry_timeout: opts.retry_timeout,
            ..RetryConfig::default()
        };
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&bucket)
            .with_client_options(client)
            .with_retry(retry)
            .with_skip_signature(opts.anonymous);
        if let Some(e) = &endpoint {
            builder = builder.with_endpoint(e);
        }
        if let Some((id, secret)) = &opts.access_key {
            builder = builder
                .with_access_key_id(id)
                .with_secret_access_key(secret);
        }
        if std::env::var_os("AWS_REGION").is_none()
            && std::env::var_os("AWS_DEFAULT_REGION").is_none()
        {
            builder = builder.with_region("us-east-1");
        }
        let store = builder.build().map_err(|e| Error::ObjectStore {
            url: url.into(),
            reason: e.to_string(),
        })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cuda-aot-s3")
            .enable_all()
            .build()
            .map_err(|e| Error::io(Path::new(url), e))?;
        let url = match prefix.is_empty() {
            true => format!("s3://{bucket}"),
            false => format!("s3://{bucket}/{prefix}"),
        };
        Ok(S3Client {
            store,
            prefix,
            url,
            rt,
        })
    }

    /// `s3://BUCKET/PREFIX`, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The object key of `rel`.
    fn key(&self, rel: &str) -> Result<Key> {
        cuda_aot::source::check_relative(rel)?;
        let full = if self.prefix.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.prefix)
        };
        Key::parse(&full).map_err(|e| Error::BadUrl {
            url: format!("{}/{rel}", self.url),
            reason: e.to_string(),
        })
    }

    fn failed(&self, rel: &str, e: object_store::Error) -> Error {
        let said = e.to_string();
        // With no credentials in the environment the client asks the EC2 instance metadata
        // service, and its failure names only that address.
        let reason = match said.contains("169.254.169.254") {
            true => format!(
                "no AWS credentials were found (none in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, and the instance metadata service the client then asked did not give any): {said}"
            ),
            false => said,
        };
        Error::ObjectStore {
            url: format!("{}/{rel}", self.url),
            reason,
        }
    }

    /// The object at `rel`, at most `max + 1` bytes of it (so the caller can tell "too
    /// long" from "exact"), with the version a conditional replace names; `None` when
    /// there is no such object.
    pub fn get_versioned(&self, rel: &str, max: u64) -> Result<Option<(Vec<u8>, UpdateVersion)>> {
        let key = self.key(rel)?;
        self.rt.block_on(async {
            let got = match self.store.get(&key).await {
                Ok(g) => g,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(self.failed(rel, e)),
            };
            let version = UpdateVersion {
                e_tag: got.meta.e_tag.clone(),
                version: got.meta.version.clone(),
            };
            let cap = usize::try_from(max.saturating_add(1)).unwrap_or(usize::MAX);
            // Room for what the store announced, within the cap (and never a huge guess).
            let announced = usize::try_from(got.meta.size).unwrap_or(0);
            let mut out = Vec::with_capacity(cap.min(announced).min(64 << 20));
            let mut body = got.into_stream();
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| self.failed(rel, e))?;
                let room = cap - out.len();
                out.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if out.len() == cap {
                    break;
                }
            }
            Ok(Some((out, version)))
        })
    }

    /// The object at `rel`, at most `max + 1` bytes of it; `None` when there is none.
    pub fn get(&self, rel: &str, max: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.get_versioned(rel, max)?.map(|(b, _)| b))
    }

    fn put_mode(&self, rel: &str, bytes: &[u8], mode: PutMode) -> Result<Option<UpdateVersion>> {
        let key = self.key(rel)?;
        let opts = PutOptions {
            mode,
            ..PutOptions::default()
        };
        self.rt.block_on(async {
            match self
                .store
                .put_opts(&key, PutPayload::from(bytes.to_vec()), opts)
                .await
            {
                Ok(r) => Ok(Some(UpdateVersion {
                    e_tag: r.e_tag,
                    version: r.version,
                })),
                Err(object_store::Error::AlreadyExists { .. })
                | Err(object_store::Error::Precondition { .. }) => Ok(None),
                Err(object_store::Error::NotImplemented { .. })
                | Err(object_store::Error::NotSupported { .. }) => {
                    Err(Error::NoConditionalWrites {
                        url: self.url.clone(),
                        what: "the store does not implement conditional writes".into(),
                    })
                }
                Err(e) => Err(self.failed(rel, e)),
            }
        })
    }

    /// Writes `bytes` at `rel`, replacing what was there (one PUT: readers see the old
    /// object or the new one, never a part).
    pub fn put(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        self.put_mode(rel, bytes, PutMode::Overwrite).map(|_| ())
    }

    /// Creates `rel` only if no object is there (`If-None-Match: *`); false when one is.
    pub fn create(&self, rel: &str, bytes: &[u8]) -> Result<bool> {
        Ok(self.put_mode(rel, bytes, PutMode::Create)?.is_some())
    }

    /// Replaces `rel` only if it is still the object `version` (`If-Match` on its ETag);
    /// false when it changed.
    pub fn replace(&self, rel: &str, bytes: &[u8], version: UpdateVersion) -> Result<bool> {
        Ok(self
            .put_mode(rel, bytes, PutMode::Update(version))?
            .is_some())
    }

    /// Removes the object at `rel` (nothing when there is none).
    pub fn delete(&self, rel: &str) -> Result<()> {
        let key = self.key(rel)?;
        self.rt.block_on(async {
            match self.store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(self.failed(rel, e)),
            }
        })
    }

    /// Checks that the store honours `If-None-Match: *` and `If-Match` (a store that
    /// ignores them would let two publishers both "win"): writes a probe object of its own
    /// (a random name, so concurrent checks never meet), then asks to create it again and
    /// to replace it under an ETag it does not have. Both must be refused.
    /// [`Error::NoConditionalWrites`] otherwise. The probe is removed after.
    pub fn check_conditional_writes(&self) -> Result<()> {
        let mut r = [0u8; 8];
        getrandom::fill(&mut r).map_err(|e| Error::ObjectStore {
            url: self.url.clone(),
            reason: format!("no randomness for the probe's name: {e}"),
        })?;
        let probe = format!("{PROBE}-{}", hex_of(&r));
        let verdict = self.probe(&probe);
        let _ = self.delete(&probe);
        verdict
    }

    fn probe(&self, probe: &str) -> Result<()> {
        self.put(probe, b"cuda-aot conditional-write probe\n")?;
        if self.create(probe, b"second create\n")? {
            return Err(Error::NoConditionalWrites {
                url: self.url.clone(),
                what: "it accepted `If-None-Match: *` on an object that exists".into(),
            });
        }
        let stale = UpdateVersion {
            e_tag: Some("\"cuda-aot-stale-etag\"".into()),
            version: None,
        };
        if self.replace(probe, b"stale replace\n", stale)? {
            return Err(Error::NoConditionalWrites {
                url: self.url.clone(),
                what: "it accepted `If-Match` with an ETag the object does not have".into(),
            });
        }
        Ok(())
    }
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl RegistrySource for S3Client {
    fn read_at_most(&self, path: &str, max: u64) -> cuda_aot::Result<Option<Vec<u8>>> {
        self.get(path, max).map_err(|e| e.into_core(path))
    }

    fn describe(&self) -> String {
        self.url.clone()
    }
}

impl Remote for S3Client {
    fn fetch(&self, path: &str, max: u64, dest: &Path, _resume: bool) -> Result<Fetched> {
        // Objects are fetched whole (a registry's files are small next to a request's
        // cost); a retry starts the file again.
        let Some(bytes) = self.get(path, max)? else {
            let _ = std::fs::remove_file(dest);
            return Ok(Fetched::default());
        };
        if let Some(dir) = dest.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let mut f = std::fs::File::create(dest).map_err(|e| Error::io(dest, e))?;
        f.write_all(&bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::io(dest, e))?;
        Ok(Fetched {
            found: true,
            transferred: bytes.len() as u64,
            resumed: 0,
            retries: 0,
        })
    }

    fn describe(&self) -> String {
        self.url.clone()
    }
}

/// A registry in a bucket, as the publish algorithm writes it.
#[derive(Debug)]
pub struct S3Store {
    client: S3Client,
}

impl S3Store {
    /// The registry at `s3://BUCKET/PREFIX`, after checking that the store honours
    /// conditional writes ([`S3Client::check_conditional_writes`]).
    pub fn open(url: &str, opts: &S3Options) -> Result<S3Store> {
        let client = S3Client::open(url, opts)?;
        client.check_conditional_writes()?;
        Ok(S3Store { client })
    }

    /// The client underneath.
    pub fn client(&self) -> &S3Client {
        &self.client
    }

    fn put_timestamp(
        &self,
        bytes: &[u8],
        base: Option<Digest>,
        c: Option<&Commit<'_>>,
    ) -> Result<()> {
        let conflict = || Error::Conflict {
            version: c.map_or(0, |c| c.version),
            base: c.map_or(0, |c| c.base),
        };
        // The ETag is the store's, not our blake3: read the timestamp, check it is the one
        // this publish was prepared on, and replace exactly that object.
        let current = self
            .client
            .get_versioned(layout::TIMESTAMP, bytes.len().max(1 << 20) as u64)?;
        let written = match (base, current) {
            (None, None) => self.client.create(layout::TIMESTAMP, bytes)?,
            (Some(d), Some((now, version))) if Digest::of(&now) == d => {
                self.client.replace(layout::TIMESTAMP, bytes, version)?
            }
            _ => false,
        };
        if written {
            return Ok(());
        }
        // Not written: another publisher's timestamp is there, or ours already is (an
        // earlier attempt of this commit went through, or the client retried a PUT whose
        // answer was lost and got 412 for its own write).
        match self.client.get(layout::TIMESTAMP, bytes.len() as u64)? {
            Some(now) if now == bytes => Ok(()),
            _ => Err(conflict()),
        }
    }
}

impl Store for S3Store {
    fn source(&self) -> &dyn RegistrySource {
        &self.client
    }

    fn put_content(&self, rel: &str, bytes: &[u8]) -> Result<bool> {
        if self.client.create(rel, bytes)? {
            return Ok(true);
        }
        // Content-addressed: the same name should be the same bytes; anything else there
        // (a partial upload by another tool, a forged object) is replaced.
        if self.client.get(rel, bytes.len() as u64)?.as_deref() == Some(bytes) {
            return Ok(false);
        }
        self.client.put(rel, bytes)?;
        Ok(true)
    }

    fn put_root(&self, version: u64, bytes: &[u8]) -> Result<()> {
        let rel = layout::root(version);
        if self.client.create(&rel, bytes)?
            || self.client.get(&rel, bytes.len() as u64)?.as_deref() == Some(bytes)
        {
            return Ok(());
        }
        Err(Error::RootConflict {
            path: format!("{}/{rel}", self.client.url).into(),
            version,
        })
    }

    fn commit(&self, c: &Commit<'_>) -> Result<()> {
        if !self.client.create(&c.index_rel, c.index)?
            && self
                .client
                .get(&c.index_rel, c.index.len() as u64)?
                .as_deref()
                != Some(c.index)
        {
            return Err(Error::Conflict {
                version: c.version,
                base: c.base,
            });
        }
        pause_point(Step::Index);
        self.put_timestamp(c.timestamp, c.base_timestamp, Some(c))?;
        pause_point(Step::Timestamp);
        Ok(())
    }

    fn replace_timestamp(&self, bytes: &[u8], base_timestamp: Option<Digest>) -> Result<()> {
        self.put_timestamp(bytes, base_timestamp, None)
    }

    fn describe(&self) -> String {
        self.client.url.clone()
    }

    fn keeps_uncommitted_indexes(&self) -> bool {
        // No lock to clear a dead publisher's index under: the next publish goes above it.
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_urls_split_into_bucket_and_prefix_and_bad_ones_are_refused() {
        assert_eq!(
            parse_url("s3://team-builds/cuda-aot/ci/").unwrap(),
            ("team-builds".into(), "cuda-aot/ci".into())
        );
        assert_eq!(
            parse_url("s3://abc").unwrap(),
            ("abc".into(), String::new())
        );
        for bad in [
            "https://abc/x",
            "s3://",
            "s3://ab/x",
            "s3://Upper/x",
            "s3://-abc/x",
            "s3://abc/../x",
            "s3://abc/a//b",
            "s3://abc/a b",
        ] {
            assert!(
                matches!(parse_url(bad), Err(Error::BadUrl { .. })),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn only_this_machine_counts_as_a_loopback_endpoint() {
        for ok in [
            "http://127.0.0.1:9000",
            "http://localhost:9000/",
            "http://[::1]:9000",
            "http://127.0.0.1",
        ] {
            assert!(loopback_http(ok), "{ok}");
        }
        for not in [
            "https://127.0.0.1:9000",
            "http://10.0.0.1:9000",
            "http://minio.internal:9000",
            "http://127.0.0.1.evil.example",
        ] {
            assert!(!loopback_http(not), "{not}");
        }
    }

    #[test]
    fn a_plain_http_endpoint_elsewhere_is_refused_and_secrets_stay_out_of_debug() {
        let opts = S3Options {
            endpoint: Some("http://minio.internal:9000".into()),
            access_key: Some(("AKIDEXAMPLE".into(), "wJalrXUtnFEMI-secret".into())),
            ..S3Options::default()
        };
        let e = S3Client::open("s3://bucket/p", &opts).unwrap_err();
        assert!(e.to_string().contains("plain-http S3 endpoint"), "{e}");
        let shown = format!("{opts:?}");
        assert!(
            shown.contains("AKIDEXAMPLE") && !shown.contains("wJalr"),
            "{shown}"
        );
    }
}
