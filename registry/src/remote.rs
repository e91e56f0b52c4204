//! Where a sync fetches registry files from: the [`Remote`] trait and its HTTP
//! implementation (reqwest, blocking) with per-file caps enforced while reading, connect and
//! read timeouts, a minimum transfer speed, retries with backoff on transient failures, and
//! Range resume of partial downloads.

mod download;
mod options;
mod retry;

use std::path::Path;
use std::sync::Once;

use reqwest::blocking::Client;

pub(crate) use options::REDACTED;
pub use options::{HttpOptions, MinSpeed};
pub(crate) use retry::{Attempt, GaveUp, body_text, retrying};

use crate::error::{Error, Result};

/// A place that serves registry files by layout path (an HTTP server, a CDN, an OCI
/// artifact). Implementations never hand back more than `max + 1` bytes of a file.
pub trait Remote: Send + Sync {
    /// Fetches `path` (a layout path) into the staging file `dest`, reading at most
    /// `max + 1` bytes, so the caller can tell "too long" from "exact". With `resume`, a
    /// partial `dest` left by an earlier attempt is continued rather than restarted. When
    /// the file does not exist remotely, `dest` is removed and [`Fetched::found`] is false.
    fn fetch(&self, path: &str, max: u64, dest: &Path, resume: bool) -> Result<Fetched>;

    /// Where this remote is, for messages.
    fn describe(&self) -> String;

    /// Documents attached to the release beside its files (an OCI artifact's referrers:
    /// build statements and promotion records), as (layout path, bytes), and how they were
    /// found; `None` where the remote has no such thing. A sync checks each against the
    /// index it verified.
    fn attestations(&self) -> Result<Option<Attestations>> {
        Ok(None)
    }
}

/// Documents attached to a release beside its files: (layout path, bytes) each, and how the
/// remote listed them.
pub type Attestations = (Vec<(String, Vec<u8>)>, String);

/// What one [`Remote::fetch`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fetched {
    /// Whether the file exists remotely (then `dest` holds it, capped at `max + 1` bytes).
    pub found: bool,
    /// Bytes received over the network.
    pub transferred: u64,
    /// Bytes of `dest` kept from an earlier attempt (Range resume).
    pub resumed: u64,
    /// Attempts that failed transiently and were retried.
    pub retries: u32,
}

/// Installs rustls' ring provider once per process (reqwest is built without a default one,
/// to keep the heavier aws-lc build out of the workspace). Every client this crate makes
/// calls it; call it before building another reqwest client in the same process.
pub fn install_tls_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Fails only when another provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A registry served over HTTP(S) by any static file server, CDN or `cuda-aot-registry
/// serve`. Its `Debug` shows the address and the options, the token redacted.
#[derive(Clone)]
pub struct HttpRemote {
    base: reqwest::Url,
    client: Client,
    opts: HttpOptions,
}

impl std::fmt::Debug for HttpRemote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client is left out: reqwest's Debug lists its default headers, and the
        // token is one of them.
        f.debug_struct("HttpRemote")
            .field("base", &self.base.as_str())
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl HttpRemote {
    /// A remote at `url` (the folder that holds `timestamp.json`; http or https).
    ///
    /// Must not be called from inside an async runtime (the blocking client runs its own).
    pub fn new(url: &str, opts: HttpOptions) -> Result<Self> {
        let base = parse_base(url)?;
        if opts.bearer_token.is_some()
            && base.scheme() == "http"
            && !is_this_machine(&base)
            && !opts.allow_plain_http
        {
            return Err(Error::TokenInClear { url: url.into() });
        }
        install_tls_provider();
        let client = Client::builder()
            .connect_timeout(opts.connect_timeout)
            // The blocking client applies this to sending and to each read of the body:
            // an idle timeout, not a limit on the whole transfer.
            .timeout(opts.read_timeout)
            .user_agent(concat!("cuda-aot-registry/", env!("CARGO_PKG_VERSION")))
            // A client carrying a token follows no redirect: the token would go along (on
            // the same host even from https:// to http://). A redirect is an answer.
            .redirect(match opts.bearer_token {
                Some(_) => reqwest::redirect::Policy::none(),
                None => reqwest::redirect::Policy::default(),
            })
            .build()
            .map_err(|e| Error::BadUrl {
                url: url.into(),
                reason: format!("cannot build an HTTP client: {e}"),
            })?;
        Ok(HttpRemote { base, client, opts })
    }

    /// The base URL (ends with `/`).
    pub fn base(&self) -> &reqwest::Url {
        &self.base
    }

    /// The base URL as text.
    pub fn describe_url(&self) -> String {
        self.base.to_string()
    }

    /// The settings.
    pub fn options(&self) -> &HttpOptions {
        &self.opts
    }

    /// The blocking client (shared connection pool).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The URL of a layout path.
    pub fn url_of(&self, path: &str) -> Result<reqwest::Url> {
        cuda_aot::source::check_relative(path)?;
        self.base.join(path).map_err(|e| Error::BadUrl {
            url: format!("{}{path}", self.base),
            reason: e.to_string(),
        })
    }
}

/// Whether `url` names this machine (loopback): a token sent there crosses no network.
fn is_this_machine(url: &reqwest::Url) -> bool {
    url.host_str().is_some_and(is_loopback_host)
}

/// Whether `host` (a name, an IPv4 address or a bracketed IPv6 address, no port) is this
/// machine: `localhost`, 127.0.0.0/8 or `::1`.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Parses a registry base URL: http or https, no query or fragment, ending with `/`.
pub fn parse_base(url: &str) -> Result<reqwest::Url> {
    let bad = |reason: &str| Error::BadUrl {
        url: url.into(),
        reason: reason.into(),
    };
    let mut u = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(bad("only http:// and https:// are fetched over HTTP"));
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Err(bad("a registry URL has no query or fragment"));
    }
    if !u.path().ends_with('/') {
        let p = format!("{}/", u.path());
        u.set_path(&p);
    }
    Ok(u)
}
/// Reads at most `max + 1` bytes of a local file (the bytes a [`Remote`] left in `dest`).
pub(crate) fn read_capped(path: &Path, max: u64) -> Result<Vec<u8>> {
    cuda_aot::fs::read_at_most(path, max)?
        .ok_or_else(|| Error::io(path, std::io::ErrorKind::NotFound.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client carrying a token does not follow a redirect (the token would go along):
    /// the redirect is the answer, and the other address sees no request.
    #[test]
    fn a_client_with_a_token_follows_no_redirect() {
        use std::io::{Read, Write};
        use std::net::TcpListener;
        let elsewhere = TcpListener::bind("127.0.0.1:0").unwrap();
        let there = elsewhere.local_addr().unwrap();
        elsewhere.set_nonblocking(true).unwrap();
        let here = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = here.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = here.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let answer = format!(
                "HTTP/1.1 308 Permanent Redirect\r\nLocation: http://{there}/timestamp.json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            c.write_all(answer.as_bytes()).unwrap();
        });
        let opts = HttpOptions {
            bearer_token: Some("0123456789abcdef".into()),
            attempts: 1,
            ..HttpOptions::default()
        };
        let remote = HttpRemote::new(&format!("http://{addr}/"), opts).unwrap();
        let err = remote.get("timestamp.json", 1024).unwrap_err();
        server.join().unwrap();
        assert!(matches!(&err, Error::Status { status: 308, .. }), "{err}");
        assert!(err.fix().contains("redirect"), "{}", err.fix());
        assert!(
            elsewhere.accept().is_err(),
            "the redirect target was contacted"
        );
    }

    /// A publish token goes in clear only to this machine, or when the caller says so.
    #[test]
    fn a_token_is_not_sent_in_clear_to_another_machine() {
        let with_token = |allow_plain_http| HttpOptions {
            bearer_token: Some("0123456789abcdef".into()),
            allow_plain_http,
            ..HttpOptions::default()
        };
        for url in [
            "http://registry.example:8080/",
            "http://10.0.0.7/r/",
            "http://[2001:db8::1]:8080/",
        ] {
            let err = HttpRemote::new(url, with_token(false))
                .map(drop)
                .unwrap_err();
            assert!(matches!(&err, Error::TokenInClear { .. }), "{url}: {err}");
            assert!(err.fix().contains("https://"), "{}", err.fix());
            assert!(HttpRemote::new(url, with_token(true)).is_ok(), "{url}");
            // Reads carry no token: plain HTTP is fine (every file is signed or hashed).
            assert!(
                HttpRemote::new(url, HttpOptions::default()).is_ok(),
                "{url}"
            );
        }
        for url in [
            "http://127.0.0.1:8080/",
            "http://localhost/r/",
            "http://[::1]:9/",
            "https://registry.example/",
        ] {
            assert!(HttpRemote::new(url, with_token(false)).is_ok(), "{url}");
        }
    }

    /// `{:?}` of the options and of the remote printed the bearer token.
    #[test]
    fn the_token_never_appears_in_debug_output() {
        let token = "s3cret-token-never-printed-0123";
        let opts = HttpOptions {
            bearer_token: Some(token.into()),
            ..HttpOptions::default()
        };
        let remote = HttpRemote::new("http://127.0.0.1:9/", opts.clone()).unwrap();
        for text in [
            format!("{opts:?}"),
            format!("{opts:#?}"),
            format!("{remote:?}"),
            format!("{remote:#?}"),
        ] {
            assert!(!text.contains(token), "{text}");
            assert!(text.contains(REDACTED), "{text}");
        }
        assert!(format!("{remote:?}").contains("127.0.0.1:9"));
        let none = format!("{:?}", HttpOptions::default());
        assert!(none.contains("bearer_token: None"), "{none}");
    }

    #[test]
    fn base_urls_end_with_a_slash_and_other_schemes_are_refused() {
        assert_eq!(
            parse_base("http://127.0.0.1:8080/reg").unwrap().as_str(),
            "http://127.0.0.1:8080/reg/"
        );
        assert_eq!(
            parse_base("https://cdn.example/r/").unwrap().as_str(),
            "https://cdn.example/r/"
        );
        for bad in ["ftp://x/", "file:///tmp/r", "http://x/?q=1", "not a url"] {
            assert!(
                matches!(parse_base(bad), Err(Error::BadUrl { .. })),
                "{bad}"
            );
        }
    }
}
