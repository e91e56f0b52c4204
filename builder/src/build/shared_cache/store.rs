//! Where a shared build cache keeps its objects ([`CacheStore`]): a folder (`file://`,
//! read and written beneath its root without following links), a bucket (`s3://`) or an
//! OCI repository (`oci://`); which URLs name one; and which errors mean the store itself
//! failed.

use anyhow::Result;
use cuda_aot::trust::VerifiedRoot;
use std::path::PathBuf;
use std::time::Duration;

#[cfg(not(feature = "net"))]
use super::NeedsNet;

/// The OCI options of user `username` (anonymous when `None`), whose password is in
/// `CUDA_AOT_OCI_PASSWORD`: for publishing (`--oci-username`) and for a shared build cache
/// in an OCI repository (`CUDA_AOT_OCI_USERNAME`).
#[cfg(feature = "net")]
pub fn oci_options(
    username: Option<&str>,
    plain_http: bool,
) -> Result<cuda_aot_registry::oci::OciOptions> {
    let basic_auth = match username {
        Some(u) => {
            let p = std::env::var("CUDA_AOT_OCI_PASSWORD").map_err(|_| {
                crate::advice::fail(
                    format!("the OCI user {u:?} needs a password"),
                    "put the OCI registry's password or token in CUDA_AOT_OCI_PASSWORD",
                )
            })?;
            Some((u.to_string(), p))
        }
        None => None,
    };
    Ok(cuda_aot_registry::oci::OciOptions {
        basic_auth,
        plain_http,
        ..Default::default()
    })
}

/// What a shared cache holds, by path below its root.
pub(super) trait CacheStore: Send + Sync {
    /// The bytes at `rel`, at most `limit + 1` of them (more than `limit`: the object is
    /// too large, which [`Remote::get`] refuses); `None` when there is nothing there.
    fn get(&self, rel: &str, limit: u64) -> Result<Option<Vec<u8>>>;
    /// Writes `bytes` at `rel`, replacing what was there in one step.
    fn put(&self, rel: &str, bytes: &[u8]) -> Result<()>;
}

/// A shared cache in a folder (`file:///path`).
struct DirStore {
    root: PathBuf,
}

impl CacheStore for DirStore {
    // Beneath the root, one folder at a time, never through a link planted in the store
    // (a folder or the file itself), as the folder registry reads and writes.
    fn get(&self, rel: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        Ok(cuda_aot::fs::read_beneath_at_most(&self.root, rel, limit)?)
    }

    fn put(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        Ok(cuda_aot::fs::write_atomic_beneath(&self.root, rel, bytes)?)
    }
}

/// A shared cache in a bucket (`s3://BUCKET/PREFIX`), credentials in the AWS variables.
#[cfg(feature = "net")]
struct S3Cache(cuda_aot_registry::s3::S3Client);

#[cfg(feature = "net")]
impl CacheStore for S3Cache {
    fn get(&self, rel: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.0.get(rel, limit)?)
    }

    fn put(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        Ok(self.0.put(rel, bytes)?)
    }
}

/// A shared cache in an OCI repository (`oci://HOST/REPOSITORY`), each object a tag;
/// credentials in `CUDA_AOT_OCI_USERNAME` and `CUDA_AOT_OCI_PASSWORD`.
#[cfg(feature = "net")]
struct OciStore(cuda_aot_registry::oci_cache::OciCache);

#[cfg(feature = "net")]
impl CacheStore for OciStore {
    fn get(&self, rel: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.0.get(rel, limit)?)
    }

    fn put(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        Ok(self.0.put(rel, bytes)?)
    }
}

/// Whether `e` says the store itself failed (unreachable, erroring or too slow after the
/// client's retries), not that one object it served is bad: only that stops a build asking
/// it. A folder's errors concern one file, and never stop it.
pub(super) fn store_failed(e: &anyhow::Error) -> bool {
    #[cfg(feature = "net")]
    {
        use cuda_aot_registry::Error as E;
        matches!(
            e.downcast_ref::<E>(),
            Some(E::Transfer { .. } | E::ObjectStore { .. })
        )
    }
    #[cfg(not(feature = "net"))]
    {
        let _ = e;
        false
    }
}

/// Checks that `url` names a shared cache this tool can use, before a build does any
/// work: an `s3://` or `oci://` cache under a build without the network stack runs the
/// command again with it (`cargo run --features net`).
pub fn check_url(url: &str) -> Result<()> {
    match url.split_once("://").map(|(scheme, _)| scheme) {
        Some("file") if url["file://".len()..].starts_with('/') => Ok(()),
        #[cfg(feature = "net")]
        Some("s3") => Ok(()),
        #[cfg(feature = "net")]
        Some("oci") => cuda_aot_registry::oci_cache::parse_url(url)
            .map(drop)
            .map_err(|e| crate::advice::fail(format!("--remote-cache {url}: {e}"), e.fix())),
        #[cfg(not(feature = "net"))]
        Some(scheme @ ("s3" | "oci")) => Err(NeedsNet {
            what: format!("--remote-cache {scheme}://…"),
        }
        .into()),
        _ => Err(crate::advice::fail(
            format!("--remote-cache {url:?}: not a shared cache this tool can use"),
            "give file:///absolute/path of a folder every builder can reach (a shared file system), or s3://BUCKET/PREFIX of an S3 or S3-compatible store (credentials and endpoint in the AWS variables), or oci://HOST/REPOSITORY of an OCI registry (credentials in CUDA_AOT_OCI_USERNAME and CUDA_AOT_OCI_PASSWORD): docs/build.md, \"Shared build cache\"",
        )),
    }
}

/// Opens the store `url` names (see [`check_url`]), its requests allowed `timeout`.
#[cfg_attr(not(feature = "net"), allow(unused_variables))]
pub(super) fn open_store(url: &str, timeout: Duration) -> Result<Box<dyn CacheStore>> {
    check_url(url)?;
    if let Some(path) = url.strip_prefix("file://") {
        return Ok(Box::new(DirStore {
            root: PathBuf::from(path),
        }));
    }
    #[cfg(feature = "net")]
    if url.starts_with("s3://") {
        let opts = cuda_aot_registry::s3::S3Options {
            connect_timeout: timeout.min(Duration::from_secs(5)),
            request_timeout: timeout,
            retry_timeout: timeout,
            ..Default::default()
        };
        let client = cuda_aot_registry::s3::S3Client::open(url, &opts)
            .map_err(|e| crate::advice::fail(format!("--remote-cache {url}: {e}"), e.fix()))?;
        return Ok(Box::new(S3Cache(client)));
    }
    #[cfg(feature = "net")]
    if url.starts_with("oci://") {
        let user = std::env::var("CUDA_AOT_OCI_USERNAME").ok();
        let mut opts = oci_options(user.as_deref(), false)?;
        opts.http.connect_timeout = timeout.min(opts.http.connect_timeout);
        opts.http.read_timeout = timeout;
        let cache = cuda_aot_registry::oci_cache::OciCache::open(url, opts)
            .map_err(|e| crate::advice::fail(format!("--remote-cache {url}: {e}"), e.fix()))?;
        return Ok(Box::new(OciStore(cache)));
    }
    unreachable!("check_url accepts file://, s3:// and oci:// only")
}

/// The store as a registry source for the root chain: `root/<N>.root.json` is read at
/// `v1/root/<N>.root.json`.
struct Roots<'a> {
    store: &'a dyn CacheStore,
    url: &'a str,
}

impl cuda_aot::source::RegistrySource for Roots<'_> {
    fn read_at_most(&self, path: &str, max: u64) -> cuda_aot::Result<Option<Vec<u8>>> {
        self.store
            .get(&format!("v1/{path}"), max)
            .map_err(|e| cuda_aot::Error::Io {
                path: format!("{}/v1/{path}", self.url).into(),
                source: std::io::Error::other(format!("{e:#}")),
            })
    }

    fn describe(&self) -> String {
        format!("{}/v1", self.url)
    }
}

/// The newest root the store's chain reaches from `trusted` (each rotation signed by the
/// previous root's keys, [`cuda_aot::trust::walk_chain`]); `trusted` itself when the
/// store has none after it.
pub(super) fn newest_root(
    store: &dyn CacheStore,
    url: &str,
    trusted: VerifiedRoot,
) -> cuda_aot::Result<VerifiedRoot> {
    cuda_aot::trust::walk_chain(
        &Roots { store, url },
        trusted,
        &crate::limits::limits(),
        |_, _| {},
    )
}

/// Keeps the root file `bytes` (version `version`) in the store unless it has one there.
pub(super) fn put_root(store: &dyn CacheStore, version: u64, bytes: &[u8]) -> Result<()> {
    let rel = format!("v1/{}", cuda_aot::source::layout::root(version));
    if store.get(&rel, 1 << 20)?.is_none() {
        store.put(&rel, bytes)?;
    }
    Ok(())
}
