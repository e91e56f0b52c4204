//! OCI registries (Harbor, ECR, GHCR, Artifactory, the CNCF distribution registry) as
//! registry storage, through `oci-client`: a verified release — every file a full
//! verification reads — is pushed as one OCI artifact whose layers are those files, each
//! with its own media type and its layout path as `org.opencontainers.image.title`; and
//! [`OciRemote`] reads such an artifact back as a [`Remote`], so pulling is the same
//! verifier-driven [`crate::sync::sync`] as over HTTP.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

use cuda_aot::source::layout;
use futures_util::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use crate::error::{Error, Failure, Result};
use crate::oci_referrers as referrers;
use crate::remote::{Attempt, Fetched, GaveUp, HttpOptions, Remote};

mod push;
pub use push::{Pushed, push};

/// The artifact type of a cuda-aot registry snapshot.
pub const ARTIFACT_TYPE: &str = "application/vnd.cuda-aot.registry.v1";
/// The empty config every artifact carries (OCI image spec 1.1).
pub const EMPTY_CONFIG: &str = "application/vnd.oci.empty.v1+json";
/// The annotation holding a layer's layout path.
pub const TITLE: &str = "org.opencontainers.image.title";

/// The media type of a registry file: `application/vnd.cuda-aot.<kind>.v1`, where the kind
/// is the file's top folder (`blobs`, `manifests`, `index`, `root`, ...) or `timestamp`,
/// with `+json` for JSON documents. New kinds of files get their own type unchanged.
pub fn media_type(path: &str) -> String {
    let first = path.split('/').next().unwrap_or(path);
    let kind = first.strip_suffix(".json").unwrap_or(first);
    let json = if path.ends_with(".json") { "+json" } else { "" };
    format!("application/vnd.cuda-aot.{kind}.v1{json}")
}

/// Credentials and transport of an OCI registry. Its `Debug` shows the user name and
/// `<redacted>` for the password.
#[derive(Clone, Default)]
pub struct OciOptions {
    /// User name and password (or token) for HTTP basic auth, exchanged for a bearer token
    /// where the registry asks for one. None: anonymous.
    pub basic_auth: Option<(String, String)>,
    /// Talk plain HTTP to this registry (loopback registries always are).
    pub plain_http: bool,
    /// Timeouts and retries (the minimum speed does not apply).
    pub http: HttpOptions,
}

impl std::fmt::Debug for OciOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let OciOptions {
            basic_auth,
            plain_http,
            http,
        } = self;
        f.debug_struct("OciOptions")
            .field(
                "basic_auth",
                &basic_auth
                    .as_ref()
                    .map(|(user, _)| (user.as_str(), crate::remote::REDACTED)),
            )
            .field("plain_http", plain_http)
            .field("http", http)
            .finish()
    }
}

/// Parses `oci://HOST[:PORT]/REPOSITORY[:TAG|@DIGEST]`.
pub fn parse_reference(url: &str) -> Result<Reference> {
    let bad = |reason: String| Error::BadUrl {
        url: url.into(),
        reason,
    };
    let rest = url
        .strip_prefix("oci://")
        .ok_or_else(|| bad("an OCI reference starts with oci://".into()))?;
    if !rest.contains('/') {
        return Err(bad("expected oci://HOST/REPOSITORY:TAG".into()));
    }
    rest.parse::<Reference>().map_err(|e| bad(e.to_string()))
}

fn is_loopback(registry: &str) -> bool {
    let host = registry
        .rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(registry, |(h, _)| h);
    crate::remote::is_loopback_host(host)
}

/// Whether the registry of `reference` is spoken to over plain HTTP: when asked, and for
/// loopback registries always (the oci-client transport and our own manifest read agree).
fn plain_http(reference: &Reference, opts: &OciOptions) -> bool {
    opts.plain_http || is_loopback(reference.resolve_registry())
}

pub(crate) fn client(reference: &Reference, opts: &OciOptions) -> Client {
    crate::remote::install_tls_provider();
    let registry = reference.resolve_registry().to_string();
    let protocol = if plain_http(reference, opts) {
        ClientProtocol::HttpsExcept(vec![registry])
    } else {
        ClientProtocol::Https
    };
    Client::new(ClientConfig {
        protocol,
        connect_timeout: Some(opts.http.connect_timeout),
        read_timeout: Some(opts.http.read_timeout),
        ..ClientConfig::default()
    })
}

pub(crate) fn auth(opts: &OciOptions) -> RegistryAuth {
    match &opts.basic_auth {
        Some((u, p)) => RegistryAuth::Basic(u.clone(), p.clone()),
        None => RegistryAuth::Anonymous,
    }
}

fn runtime(what: &str) -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Oci {
            reference: what.into(),
            reason: format!("cannot start an async runtime: {e}"),
        })
}

fn oci_error(reference: &Reference, e: impl std::fmt::Display) -> Error {
    Error::Oci {
        reference: reference.whole(),
        reason: e.to_string(),
    }
}

/// The largest image manifest read: the OCI distribution spec's recommended 4 MiB (a
/// cuda-aot manifest lists one small descriptor per registry file).
pub const MAX_MANIFEST: u64 = 4 * 1024 * 1024;

/// Reads the image manifest `reference` names (its tag or digest) ourselves instead of
/// through `oci-client` (which reads any size and follows redirects to any host): through
/// [`get_capped`], its digest checked when `reference` names one. `None` when the registry
/// knows no such manifest.
pub(crate) async fn pull_manifest(
    client: &Client,
    reference: &Reference,
    opts: &OciOptions,
) -> Result<Option<(OciImageManifest, String)>> {
    let fail = |reason: String| oci_error(reference, reason);
    let tag = reference
        .digest()
        .or(reference.tag())
        .unwrap_or("latest")
        .to_string();
    let Some(body) = get_capped(
        client,
        reference,
        opts,
        &format!("manifests/{tag}"),
        oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
    )
    .await?
    else {
        return Ok(None);
    };
    let digest = format!("sha256:{}", hex_sha256(&body));
    if let Some(want) = reference.digest()
        && digest != want
    {
        return Err(fail(format!(
            "the manifest's digest is {digest}, not {want}"
        )));
    }
    serde_json::from_slice(&body)
        .map(|m| Some((m, digest)))
        .map_err(|e| fail(format!("the manifest is not an OCI image manifest: {e}")))
}

/// `GET /v2/<repository>/<what>` of `reference`'s registry with `accept`, read as the
/// registry's untrusted answer: authenticated as `oci-client` would (its token exchange,
/// or basic auth), redirects followed only on the registry's own host, the body cut at
/// [`MAX_MANIFEST`]. `None` on 404. Every manifest, referrer and referrers index is read
/// through here.
pub(crate) async fn get_capped(
    client: &Client,
    reference: &Reference,
    opts: &OciOptions,
    what: &str,
    accept: &str,
) -> Result<Option<Vec<u8>>> {
    use oci_client::RegistryOperation;
    let fail = |reason: String| oci_error(reference, reason);
    let bearer = client
        .auth(reference, &auth(opts), RegistryOperation::Pull)
        .await
        .map_err(|e| fail(format!("authentication: {e}")))?;
    let registry = reference.resolve_registry().to_string();
    let scheme = match plain_http(reference, opts) {
        true => "http",
        false => "https",
    };
    let url = format!("{scheme}://{registry}/v2/{}/{what}", reference.repository());
    let home = reqwest::Url::parse(&url).map_err(|e| fail(format!("{url}: {e}")))?;
    let (host, port) = (
        home.host_str().map(str::to_owned),
        home.port_or_known_default(),
    );
    let http = reqwest::Client::builder()
        .connect_timeout(opts.http.connect_timeout)
        .read_timeout(opts.http.read_timeout)
        .redirect(reqwest::redirect::Policy::custom(move |a| {
            let same =
                a.url().host_str() == host.as_deref() && a.url().port_or_known_default() == port;
            match (same, a.previous().len()) {
                (true, n) if n < 5 => a.follow(),
                _ => a.stop(),
            }
        }))
        .build()
        .map_err(|e| fail(format!("cannot build an HTTP client: {e}")))?;
    let mut req = http.get(home).header(reqwest::header::ACCEPT, accept);
    req = match (&bearer, &opts.basic_auth) {
        (Some(token), _) => req.bearer_auth(token),
        (None, Some((user, password))) => req.basic_auth(user, Some(password)),
        (None, None) => req,
    };
    let resp = req.send().await.map_err(|e| fail(format!("{url}: {e}")))?;
    let status = resp.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if status.is_redirection() {
        let to = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("(no Location)");
        return Err(fail(format!(
            "{url} redirects to another host ({}): refused, a registry serves its own manifests",
            cuda_aot::error::escape_untrusted(to)
        )));
    }
    if !status.is_success() {
        return Err(fail(format!("{url}: HTTP {status}")));
    }
    let mut resp = resp;
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| fail(format!("{url}: {e}")))?
    {
        body.extend_from_slice(&chunk);
        if body.len() as u64 > MAX_MANIFEST {
            return Err(fail(format!(
                "{url} is larger than {MAX_MANIFEST} bytes: refused"
            )));
        }
    }
    Ok(Some(body))
}

pub(crate) fn hex_sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("{:x}", sha2::Sha256::digest(bytes))
}

/// Streams the layer `desc` of `reference` into `sink`, at most `cap` bytes of it (the
/// caller tells a longer layer by getting `cap`); `oci-client` checks its sha256 when the
/// whole layer is read. Errors say whether trying again may help (a digest mismatch will
/// not). Returns the bytes given to `sink`.
pub(crate) async fn pull_layer(
    client: &Client,
    reference: &Reference,
    desc: &OciDescriptor,
    cap: u64,
    mut sink: impl FnMut(&[u8]) -> std::result::Result<(), (Failure, bool)>,
) -> std::result::Result<u64, (Failure, bool)> {
    let mut stream = client
        .pull_blob_stream(reference, desc)
        .await
        .map_err(|e| (Failure::Other(e.to_string()), true))?;
    let mut got = 0u64;
    while got < cap {
        let Some(chunk) = stream.next().await else {
            break;
        };
        let chunk = chunk.map_err(|e| {
            let digest = e
                .get_ref()
                .is_some_and(|i| i.is::<oci_client::errors::DigestError>());
            (Failure::Other(e.to_string()), !digest)
        })?;
        let take = usize::try_from(cap - got)
            .unwrap_or(usize::MAX)
            .min(chunk.len());
        sink(&chunk[..take])?;
        got += take as u64;
    }
    Ok(got)
}

/// Runs `attempt` until it succeeds, fails for good (its `false`), or the attempts of
/// `http` are spent, waiting the policy's backoff between: every OCI transfer through the
/// one retry loop ([`crate::remote::retrying`]). `Ok` has the value and the retries made;
/// `Err` the last failure and the attempts made.
pub(crate) fn with_retries<T>(
    http: &HttpOptions,
    mut attempt: impl FnMut() -> std::result::Result<T, (Failure, bool)>,
) -> std::result::Result<(T, u32), (Failure, u32)> {
    let run = crate::remote::retrying(http, |n| match attempt() {
        Ok(v) => Attempt::Done(v),
        Err((failure, true)) => Attempt::Transient(failure, None),
        Err((failure, false)) => Attempt::Permanent((failure, n)),
    });
    match run {
        Ok((v, attempts)) => Ok((v, attempts - 1)),
        Err(GaveUp::Permanent(stopped)) => Err(stopped),
        Err(GaveUp::Exhausted(failure, attempts)) => Err((failure, attempts)),
    }
}

/// A cuda-aot artifact in an OCI registry, read as a [`Remote`]: `fetch(path)` downloads
/// the layer titled `path` (digest checked by oci-client, size capped here).
pub struct OciRemote {
    reference: Reference,
    client: Client,
    rt: tokio::runtime::Runtime,
    layers: BTreeMap<String, OciDescriptor>,
    opts: OciOptions,
    /// The artifact manifest's digest (the subject of its referrers).
    digest: String,
}

impl OciRemote {
    /// Reads the artifact manifest of `reference` (`oci://HOST/REPO:TAG`) and checks that
    /// it is a cuda-aot registry whose layer titles are layout paths, each used once.
    pub fn open(reference: &str, opts: OciOptions) -> Result<OciRemote> {
        Self::open_existing(reference, opts)?.ok_or_else(|| Error::Oci {
            reference: reference.into(),
            reason: "no such tag or repository".into(),
        })
    }

    /// The sha256 digest (`sha256:…`) of the artifact's `timestamp.json` layer: which
    /// release the tag points at, for a publisher that checks the tag did not move.
    pub fn timestamp_digest(&self) -> &str {
        &self.layers[layout::TIMESTAMP].digest
    }

    /// Like [`OciRemote::open`], but `None` when the registry knows no such tag (the first
    /// publish to a repository).
    pub fn open_existing(reference: &str, opts: OciOptions) -> Result<Option<OciRemote>> {
        let reference = parse_reference(reference)?;
        let client = client(&reference, &opts);
        let rt = runtime(&reference.whole())?;
        let Some((manifest, digest)) = rt.block_on(pull_manifest(&client, &reference, &opts))?
        else {
            return Ok(None);
        };
        if manifest.artifact_type.as_deref() != Some(ARTIFACT_TYPE) {
            return Err(oci_error(
                &reference,
                format!(
                    "artifact type {:?}, expected {ARTIFACT_TYPE}: not a cuda-aot registry",
                    manifest.artifact_type.as_deref().unwrap_or("(none)")
                ),
            ));
        }
        let mut layers = BTreeMap::new();
        for d in manifest.layers {
            let title = d
                .annotations
                .as_ref()
                .and_then(|a| a.get(TITLE))
                .cloned()
                .ok_or_else(|| oci_error(&reference, format!("layer {} has no title", d.digest)))?;
            cuda_aot::source::check_relative(&title)?;
            if d.media_type != media_type(&title) {
                return Err(oci_error(
                    &reference,
                    format!("layer {title} has media type {}", d.media_type),
                ));
            }
            // A cuda-aot artifact has no foreign layers: the client would fetch a layer's
            // `urls` from wherever they point.
            if d.urls.as_ref().is_some_and(|u| !u.is_empty()) {
                return Err(oci_error(
                    &reference,
                    format!("layer {title} names foreign URLs (a cuda-aot artifact never does)"),
                ));
            }
            if layers.insert(title.clone(), d).is_some() {
                return Err(oci_error(
                    &reference,
                    format!("layer {title} appears twice"),
                ));
            }
        }
        if !layers.contains_key(layout::TIMESTAMP) {
            return Err(oci_error(
                &reference,
                "the artifact holds no timestamp.json",
            ));
        }
        Ok(Some(OciRemote {
            reference,
            client,
            rt,
            layers,
            opts,
            digest,
        }))
    }

    /// The build statements and promotion records attached to this release as OCI
    /// referrers (through the registry's referrers API, else the referrers tag schema), and
    /// how the registry lists them. Each is only read here: [`crate::sync::sync`] checks it
    /// is byte for byte a document of the release it verified.
    pub fn attestations(&self) -> Result<(Vec<referrers::Referrer>, referrers::Listing)> {
        self.rt
            .block_on(referrers::read(
                &self.client,
                &self.reference,
                &self.opts,
                &self.digest,
                MAX_MANIFEST.max(cuda_aot::Limits::default().statement),
            ))
            .map_err(|e| oci_error(&self.reference, e))
    }

    /// The layout paths the artifact holds.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.layers.keys().map(String::as_str)
    }

    /// One download attempt: at most `cap` bytes into `dest`.
    async fn download(
        &self,
        desc: &OciDescriptor,
        cap: u64,
        dest: &Path,
    ) -> std::result::Result<u64, (Failure, bool)> {
        let io = |e: std::io::Error| (Failure::Other(format!("{}: {e}", dest.display())), false);
        if let Some(dir) = dest.parent() {
            fs::create_dir_all(dir).map_err(io)?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(dest)
            .map_err(io)?;
        let got = pull_layer(&self.client, &self.reference, desc, cap, |chunk| {
            file.write_all(chunk).map_err(io)
        })
        .await?;
        file.sync_all().map_err(io)?;
        Ok(got)
    }
}

impl Remote for OciRemote {
    fn attestations(&self) -> Result<Option<crate::remote::Attestations>> {
        let (found, listing) = OciRemote::attestations(self)?;
        let how = match listing {
            referrers::Listing::Api => "the referrers API",
            referrers::Listing::TagSchema => "the referrers tag schema",
        };
        Ok(Some((
            found.into_iter().map(|r| (r.title, r.bytes)).collect(),
            how.to_string(),
        )))
    }

    fn fetch(&self, path: &str, max: u64, dest: &Path, _resume: bool) -> Result<Fetched> {
        let Some(desc) = self.layers.get(path) else {
            let _ = fs::remove_file(dest);
            return Ok(Fetched::default());
        };
        let cap = max.saturating_add(1);
        let attempt = || self.rt.block_on(self.download(desc, cap, dest));
        match with_retries(&self.opts.http, attempt) {
            Ok((n, retries)) => Ok(Fetched {
                found: true,
                transferred: n,
                resumed: 0,
                retries,
            }),
            Err((failure, attempts)) => Err(Error::Transfer {
                url: format!("{} {path}", self.describe()),
                attempts,
                failure,
            }),
        }
    }

    fn describe(&self) -> String {
        format!("oci://{}", self.reference.whole())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{:?}` of the options printed the password.
    #[test]
    fn the_password_never_appears_in_debug_output() {
        let password = "hunter2-oci-password-0123";
        let opts = OciOptions {
            basic_auth: Some(("ci-bot".into(), password.into())),
            http: HttpOptions {
                bearer_token: Some(password.into()),
                ..HttpOptions::default()
            },
            ..OciOptions::default()
        };
        for text in [format!("{opts:?}"), format!("{opts:#?}")] {
            assert!(!text.contains(password), "{text}");
            assert!(
                text.contains("ci-bot") && text.contains("<redacted>"),
                "{text}"
            );
        }
    }

    #[test]
    fn media_types_follow_the_top_folder() {
        assert_eq!(
            media_type("timestamp.json"),
            "application/vnd.cuda-aot.timestamp.v1+json"
        );
        assert_eq!(
            media_type("blobs/blake3/ab/abcd"),
            "application/vnd.cuda-aot.blobs.v1"
        );
        assert_eq!(
            media_type("statements/blake3/ab.json"),
            "application/vnd.cuda-aot.statements.v1+json"
        );
        assert_eq!(
            media_type("index/3.index.json"),
            "application/vnd.cuda-aot.index.v1+json"
        );
    }

    #[test]
    fn references_need_the_scheme_and_a_repository() {
        let r = parse_reference("oci://127.0.0.1:5000/cuda-aot/release:v2").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "cuda-aot/release");
        assert_eq!(r.tag(), Some("v2"));
        assert!(is_loopback(r.registry()));
        assert!(!is_loopback("ghcr.io"));
        for bad in ["127.0.0.1:5000/x:v1", "oci://host", "http://h/x"] {
            assert!(parse_reference(bad).is_err(), "{bad}");
        }
    }
}
