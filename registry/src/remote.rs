//! Where a sync fetches registry files from: the [`Remote`] trait and its HTTP
//! implementation (reqwest, blocking) with per-file caps enforced while reading, connect and
//! read timeouts, a minimum transfer speed, retries with backoff on transient failures, and
//! Range resume of partial downloads.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Once;
use std::time::{Duration, Instant};

use headers::{ContentRange, HeaderMapExt, Range};
use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use reqwest::header::{CONTENT_LENGTH, HeaderMap, RETRY_AFTER};

use crate::error::{Error, Failure, Result};

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
}

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

/// A minimum transfer rate: a download that receives fewer than `bytes_per_sec` on average
/// over a whole `window` is failed (and retried), like curl's `--speed-limit/--speed-time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinSpeed {
    /// The minimum average rate.
    pub bytes_per_sec: u64,
    /// The window over which it is averaged.
    pub window: Duration,
}

/// Transport settings of [`HttpRemote`]. Its `Debug` shows `<redacted>` for the bearer
/// token, so options can be logged.
#[derive(Clone)]
pub struct HttpOptions {
    /// Time allowed to open a connection.
    pub connect_timeout: Duration,
    /// Time allowed without receiving anything (response headers or body bytes).
    pub read_timeout: Duration,
    /// Refuse a trickle: fail a transfer slower than this (None: no minimum).
    pub min_speed: Option<MinSpeed>,
    /// Attempts per file before giving up (1: no retry).
    pub attempts: u32,
    /// Wait before the first retry; doubles on each retry (with jitter).
    pub backoff: Duration,
    /// The longest wait between attempts (also caps a server's `Retry-After`).
    pub max_backoff: Duration,
    /// A bearer token sent with every request (publishing; reads need none).
    pub bearer_token: Option<String>,
    /// Send the bearer token over plain `http://` to a host other than this machine.
    /// Refused by default ([`Error::TokenInClear`]): anyone on the path could read it.
    pub allow_plain_http: bool,
}

/// What `Debug` shows in place of a secret.
pub(crate) const REDACTED: &str = "<redacted>";

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every field, the token as `<redacted>` (never its text, nor its length).
        let HttpOptions {
            connect_timeout,
            read_timeout,
            min_speed,
            attempts,
            backoff,
            max_backoff,
            bearer_token,
            allow_plain_http,
        } = self;
        f.debug_struct("HttpOptions")
            .field("connect_timeout", connect_timeout)
            .field("read_timeout", read_timeout)
            .field("min_speed", min_speed)
            .field("attempts", attempts)
            .field("backoff", backoff)
            .field("max_backoff", max_backoff)
            .field("bearer_token", &bearer_token.as_ref().map(|_| REDACTED))
            .field("allow_plain_http", allow_plain_http)
            .finish()
    }
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            min_speed: Some(MinSpeed {
                bytes_per_sec: 1024,
                window: Duration::from_secs(30),
            }),
            attempts: 5,
            backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(8),
            bearer_token: None,
            allow_plain_http: false,
        }
    }
}

impl HttpOptions {
    /// The wait before retry number `retry` (1-based): exponential, capped, with jitter in
    /// [50 %, 100 %] so many clients do not retry in lockstep; a server's `Retry-After`
    /// (capped too) wins when it is longer.
    pub fn backoff_for(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let exp = self
            .backoff
            .saturating_mul(1u32 << retry.saturating_sub(1).min(16))
            .min(self.max_backoff);
        let mut r = [0u8; 2];
        let jitter = match getrandom::fill(&mut r) {
            Ok(()) => 0.5 + f64::from(u16::from_le_bytes(r)) / f64::from(u16::MAX) / 2.0,
            Err(_) => 0.75,
        };
        let wait = exp.mul_f64(jitter);
        match retry_after {
            Some(ra) => wait.max(ra.min(self.max_backoff)),
            None => wait,
        }
    }
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

/// How one attempt ended.
enum Outcome {
    Done,
    Missing,
    /// The partial file cannot be continued (the server changed or ignored the range):
    /// start again from zero at once.
    Restart,
}

/// Why one attempt failed.
enum AttemptError {
    Transient(Failure, Option<Duration>),
    Permanent(Error),
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

    fn attempt(
        &self,
        url: &reqwest::Url,
        cap: u64,
        sink: &mut dyn Sink,
        whole: bool,
        stats: &mut Fetched,
    ) -> std::result::Result<Outcome, AttemptError> {
        let mut have = if whole { 0 } else { sink.existing() };
        if have >= cap {
            have = 0;
        }
        let mut req = self.client.get(url.clone());
        if let Some(t) = &self.opts.bearer_token {
            req = req.bearer_auth(t);
        }
        if have > 0 {
            let mut range = HeaderMap::new();
            range.typed_insert(Range::bytes(have..).expect("a start and no end is a valid range"));
            req = req.headers(range);
        }
        let mut resp = req.send().map_err(|e| transient(&e, &self.opts))?;
        let status = resp.status();
        let total = match status {
            StatusCode::NOT_FOUND | StatusCode::GONE => return Ok(Outcome::Missing),
            StatusCode::OK => {
                have = 0;
                content_length(&resp)
            }
            StatusCode::PARTIAL_CONTENT => match resp.headers().typed_get::<ContentRange>() {
                Some(cr) if cr.bytes_range().is_some_and(|(start, _)| start == have) => {
                    cr.bytes_len()
                }
                _ => return Ok(Outcome::Restart),
            },
            StatusCode::RANGE_NOT_SATISFIABLE => {
                // `bytes */N`: the partial file is complete when it is exactly N bytes.
                return match unsatisfied_len(resp.headers()) {
                    Some(n) if n == have && have > 0 => {
                        stats.resumed = have;
                        Ok(Outcome::Done)
                    }
                    _ => Ok(Outcome::Restart),
                };
            }
            s if is_transient_status(s) => {
                return Err(AttemptError::Transient(
                    Failure::Status(s.as_u16()),
                    retry_after(resp.headers()),
                ));
            }
            s => {
                return Err(AttemptError::Permanent(Error::Status {
                    url: url.to_string(),
                    status: s.as_u16(),
                    message: body_text(resp),
                }));
            }
        };
        let path = sink.describe();
        let io = |e: std::io::Error| AttemptError::Permanent(Error::io(&path, e));
        sink.start(have).map_err(io)?;
        stats.resumed = have;

        let mut got = have;
        let mut buf = vec![0u8; 64 * 1024];
        let mut window = (Instant::now(), 0u64);
        while got < cap {
            let want = usize::try_from(cap - got)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let n = match resp.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => return Err(AttemptError::Transient(read_failure(&e, &self.opts), None)),
            };
            sink.write(&buf[..n]).map_err(io)?;
            got += n as u64;
            stats.transferred += n as u64;
            window.1 += n as u64;
            if let Some(ms) = self.opts.min_speed {
                let secs = window.0.elapsed();
                if secs >= ms.window {
                    if (window.1 as f64) < ms.bytes_per_sec as f64 * secs.as_secs_f64() {
                        return Err(AttemptError::Transient(
                            Failure::TooSlow {
                                bytes: window.1,
                                secs: secs.as_secs_f64(),
                                min_rate: ms.bytes_per_sec,
                            },
                            None,
                        ));
                    }
                    window = (Instant::now(), 0);
                }
            }
        }
        if let Some(total) = total
            && got < cap
            && got < total
        {
            return Err(AttemptError::Transient(
                Failure::Truncated {
                    got,
                    expected: total,
                },
                None,
            ));
        }
        sink.finish().map_err(io)?;
        Ok(Outcome::Done)
    }

    /// GETs `path` with retries into `sink`, reading at most `max + 1` bytes; resumes what
    /// the sink holds when `resume`.
    fn get_into(&self, path: &str, max: u64, sink: &mut dyn Sink, resume: bool) -> Result<Fetched> {
        let url = self.url_of(path)?;
        let cap = max.saturating_add(1);
        let mut stats = Fetched::default();
        let mut whole = !resume;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            match self.attempt(&url, cap, sink, whole, &mut stats) {
                Ok(Outcome::Done) => {
                    stats.found = true;
                    return Ok(stats);
                }
                Ok(Outcome::Missing) => return Ok(stats),
                Ok(Outcome::Restart) if attempt < self.opts.attempts.max(1) => whole = true,
                Ok(Outcome::Restart) => {
                    return Err(Error::Transfer {
                        url: url.to_string(),
                        attempts: attempt,
                        failure: Failure::Other(
                            "the server answered a range request inconsistently".into(),
                        ),
                    });
                }
                Err(AttemptError::Permanent(e)) => return Err(e),
                Err(AttemptError::Transient(failure, retry_after)) => {
                    if attempt >= self.opts.attempts.max(1) {
                        return Err(Error::Transfer {
                            url: url.to_string(),
                            attempts: attempt,
                            failure,
                        });
                    }
                    stats.retries += 1;
                    std::thread::sleep(self.opts.backoff_for(attempt, retry_after));
                }
            }
        }
    }

    /// Reads `path` into memory: `None` when absent, else at most `max + 1` bytes (the
    /// [`cuda_aot::source::RegistrySource`] contract), with the same timeouts and retries.
    pub fn get(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let mut sink = MemSink(Vec::new());
        let f = self.get_into(path, max, &mut sink, false)?;
        Ok(f.found.then_some(sink.0))
    }

    /// Sends one request built by `make` (a PUT of a publish), retrying transient failures
    /// (connection errors, timeouts, 408/429/5xx) with backoff; returns the final response
    /// whatever its status.
    pub fn send_with_retries(
        &self,
        url: &reqwest::Url,
        make: &dyn Fn(&Client) -> reqwest::blocking::RequestBuilder,
    ) -> Result<(Response, u32)> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut req = make(&self.client);
            if let Some(t) = &self.opts.bearer_token {
                req = req.bearer_auth(t);
            }
            let (failure, retry_after) = match req.send() {
                Ok(r) if is_transient_status(r.status()) => (
                    Failure::Status(r.status().as_u16()),
                    retry_after(r.headers()),
                ),
                Ok(r) => return Ok((r, attempt - 1)),
                Err(e) => match transient(&e, &self.opts) {
                    AttemptError::Transient(f, ra) => (f, ra),
                    AttemptError::Permanent(e) => return Err(e),
                },
            };
            if attempt >= self.opts.attempts.max(1) {
                return Err(Error::Transfer {
                    url: url.to_string(),
                    attempts: attempt,
                    failure,
                });
            }
            std::thread::sleep(self.opts.backoff_for(attempt, retry_after));
        }
    }
}

/// A server's `Retry-After` as a wait from now, in either of its forms (RFC 9110 10.2.3:
/// delay-seconds, or an HTTP-date, read by the `headers` crate's date parser); a date in
/// the past is no wait. `None` when absent or unreadable. [`HttpOptions::backoff_for`]
/// caps it.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    use headers::Header as _;
    let value = headers.get(RETRY_AFTER)?;
    if let Some(secs) = value
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    {
        return Some(Duration::from_secs(secs));
    }
    let date = headers::Date::decode(&mut std::iter::once(value)).ok()?;
    let at = std::time::SystemTime::from(date);
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Where a download goes: a staging file (resumable) or memory.
trait Sink {
    /// Bytes already held from an earlier attempt.
    fn existing(&self) -> u64;
    /// Keeps the first `keep` bytes and positions after them.
    fn start(&mut self, keep: u64) -> std::io::Result<()>;
    /// Appends.
    fn write(&mut self, b: &[u8]) -> std::io::Result<()>;
    /// Makes the bytes durable.
    fn finish(&mut self) -> std::io::Result<()>;
    /// For messages.
    fn describe(&self) -> std::path::PathBuf;
}

struct FileSink<'a> {
    path: &'a Path,
    file: Option<File>,
}

impl Sink for FileSink<'_> {
    fn existing(&self) -> u64 {
        fs::metadata(self.path).map(|m| m.len()).unwrap_or(0)
    }
    fn start(&mut self, keep: u64) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir)?;
        }
        let mut f = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(self.path)?;
        f.set_len(keep)?;
        f.seek(SeekFrom::Start(keep))?;
        self.file = Some(f);
        Ok(())
    }
    fn write(&mut self, b: &[u8]) -> std::io::Result<()> {
        match &mut self.file {
            Some(f) => f.write_all(b),
            None => Err(std::io::Error::other("sink not started")),
        }
    }
    fn finish(&mut self) -> std::io::Result<()> {
        match self.file.take() {
            Some(f) => f.sync_all(),
            None => Ok(()),
        }
    }
    fn describe(&self) -> std::path::PathBuf {
        self.path.to_path_buf()
    }
}

struct MemSink(Vec<u8>);

impl Sink for MemSink {
    fn existing(&self) -> u64 {
        self.0.len() as u64
    }
    fn start(&mut self, keep: u64) -> std::io::Result<()> {
        self.0.truncate(usize::try_from(keep).unwrap_or(usize::MAX));
        Ok(())
    }
    fn write(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.0.extend_from_slice(b);
        Ok(())
    }
    fn finish(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn describe(&self) -> std::path::PathBuf {
        "<memory>".into()
    }
}

impl Remote for HttpRemote {
    fn fetch(&self, path: &str, max: u64, dest: &Path, resume: bool) -> Result<Fetched> {
        let mut sink = FileSink {
            path: dest,
            file: None,
        };
        let f = self.get_into(path, max, &mut sink, resume)?;
        if !f.found {
            let _ = fs::remove_file(dest);
        }
        Ok(f)
    }

    fn describe(&self) -> String {
        self.base.to_string()
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

/// 408, 425, 429 and the 5xx that a retry can outlast.
pub(crate) fn is_transient_status(s: StatusCode) -> bool {
    matches!(s.as_u16(), 408 | 425 | 429 | 500 | 502 | 503 | 504)
}

fn transient(e: &reqwest::Error, opts: &HttpOptions) -> AttemptError {
    let failure = if e.is_timeout() {
        Failure::Timeout {
            secs: opts.read_timeout.as_secs(),
        }
    } else if e.is_connect() {
        Failure::Connect(root_cause(e))
    } else {
        Failure::Other(root_cause(e))
    };
    AttemptError::Transient(failure, None)
}

fn read_failure(e: &std::io::Error, opts: &HttpOptions) -> Failure {
    let timed_out = e.kind() == std::io::ErrorKind::TimedOut
        || e.get_ref()
            .and_then(|i| i.downcast_ref::<reqwest::Error>())
            .is_some_and(|r| r.is_timeout());
    if timed_out {
        Failure::Timeout {
            secs: opts.read_timeout.as_secs(),
        }
    } else {
        Failure::Other(root_cause(e))
    }
}

/// The innermost error message (reqwest wraps hyper wraps io).
pub(crate) fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur: &dyn std::error::Error = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

fn content_length(resp: &Response) -> Option<u64> {
    resp.headers()
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// The length a 416 states in `Content-Range: bytes */LEN` (read by the `headers` crate);
/// `None` when absent, unreadable, or stating a range.
fn unsatisfied_len(headers: &HeaderMap) -> Option<u64> {
    let cr = headers.typed_get::<ContentRange>()?;
    cr.bytes_range().map_or(cr.bytes_len(), |_| None)
}

/// The text of a (short) response body: at most 2 KiB of it, trimmed.
pub(crate) fn body_text(resp: Response) -> String {
    let mut buf = Vec::new();
    let _ = resp.take(2048).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).trim().to_string()
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

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        use reqwest::header::{HeaderMap, HeaderValue};
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
            retry_after(&h)
        };
        assert_eq!(with("120"), Some(Duration::from_secs(120)));
        assert_eq!(with(" 7 "), Some(Duration::from_secs(7)));
        let later = std::time::SystemTime::now() + Duration::from_secs(90);
        let date = httpdate_of(later);
        let wait = with(&date).expect("an HTTP-date is read");
        assert!(
            wait > Duration::from_secs(80) && wait <= Duration::from_secs(90),
            "{date}: {wait:?}"
        );
        assert_eq!(with("Sun, 06 Nov 1994 08:49:37 GMT"), Some(Duration::ZERO));
        assert_eq!(with("soon"), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn a_416_states_the_length_and_no_range() {
        use reqwest::header::{CONTENT_RANGE, HeaderValue};
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(CONTENT_RANGE, HeaderValue::from_str(v).unwrap());
            unsatisfied_len(&h)
        };
        assert_eq!(with("bytes */100"), Some(100));
        assert_eq!(with("bytes */0"), Some(0));
        assert_eq!(with("bytes 0-9/100"), None, "a range is no 416 answer");
        assert_eq!(with("bytes */*"), None);
        assert_eq!(with("items */100"), None);
        assert_eq!(with("bytes */ten"), None);
        assert_eq!(unsatisfied_len(&HeaderMap::new()), None);
    }

    /// `t` as an HTTP-date (IMF-fixdate), written through the `headers` crate.
    fn httpdate_of(t: std::time::SystemTime) -> String {
        use headers::Header as _;
        let mut values = Vec::new();
        headers::Date::from(t).encode(&mut values);
        values[0].to_str().unwrap().to_string()
    }

    #[test]
    fn backoff_doubles_is_capped_and_honours_retry_after() {
        let o = HttpOptions {
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            ..HttpOptions::default()
        };
        for retry in 1..=3u32 {
            let w = o.backoff_for(retry, None);
            let full = Duration::from_millis(100 * (1 << (retry - 1)));
            assert!(w >= full / 2 && w <= full, "retry {retry}: {w:?}");
        }
        assert!(o.backoff_for(30, None) <= Duration::from_secs(1));
        assert_eq!(
            o.backoff_for(1, Some(Duration::from_secs(60))),
            Duration::from_secs(1),
            "Retry-After is capped"
        );
    }
}
