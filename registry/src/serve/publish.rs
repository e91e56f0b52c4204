//! Publishing over HTTP, server side: the [`crate::publish::Store`] protocol as PUT
//! requests, each behind a bearer token AND checked against the server's trust root, so a
//! stolen token alone cannot publish.
//!
//! | PUT | accepted when |
//! |---|---|
//! | `blobs/…`, `manifests/…` | the bytes hash to the name (manifests: valid JSON manifest) |
//! | `statements/…`, `promotions/…` | the name matches, and the builder (reviewer) threshold of the trust root signed it (under delegations: a well-formed envelope, its owner's threshold checked when the timestamp commits) |
//! | `teams/…` | the name matches, and it is delegated metadata (its delegator's threshold checked when the timestamp commits) |
//! | `root/<N>.root.json` | the server's trust root itself, or a valid rotation of root N-1 (create-new) |
//! | `index/<N>.index.json` (`If-None-Match: *`) | publisher threshold, version N, and N not yet committed (else 412); the index is staged, not visible |
//! | `timestamp.json` (`If-Match: "<blake3>"`, or `If-None-Match: *` on an empty registry) | publisher threshold, and the registry as it would be with this timestamp (and its staged index) passes the full client verification; then index and timestamp are committed under the directory lock (412 for the loser of a race) |
//!
//! Every file but the index and timestamp is content-addressed and inert until an index
//! names it; what an index makes visible has passed the same checks as a client runs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::header::{
    AUTHORIZATION, CONNECTION, CONTENT_LENGTH, ETAG, IF_MATCH, IF_NONE_MATCH, RETRY_AFTER,
};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use cuda_aot::metadata::{Index, Promotion, Timestamp};
use cuda_aot::source::{DirSource, RegistrySource, layout};
use cuda_aot::trust::VerifiedRoot;
use cuda_aot::verify::{Options, rollback_floor, verify_all};
use cuda_aot::{Digest, Limits, Manifest};

use super::Shared;
use super::guard::{Activity, AuthThrottle, Throttle};
use super::log::Note;
use crate::dir::DirRegistry;
use crate::error::Error;
use crate::publish::Overlay;
use crate::publish::{Commit, Store};

/// What a publishing server holds: the token's digest, its trust root, the registry as a
/// store, the indexes uploaded but not yet committed, and the failed token attempts.
pub(crate) struct Publishing {
    token: blake3::Hash,
    throttle: Throttle,
    anchor: Vec<u8>,
    store: DirRegistry,
    /// The server's byte caps, for every upload and publish check.
    limits: Limits,
    staged: Mutex<Vec<Staged>>,
    /// Held from a timestamp's If-Match check to its commit: two publishers racing for the
    /// same version are decided here (the second sees the moved timestamp: 412), never
    /// half-way through the first one's commit.
    committing: Mutex<()>,
}

/// An index uploaded but not committed: when, its blake3, its bytes.
type Staged = (Instant, Digest, Arc<Vec<u8>>);

/// Staged indexes kept at most (the newest), and for at most this long.
const STAGED_MAX: usize = 32;
const STAGED_TTL: Duration = Duration::from_secs(15 * 60);

impl Publishing {
    /// Publishing into `root` for holders of `token`, checked against `anchor`, with
    /// failed token attempts slowed down by `throttle`.
    pub(crate) fn new(
        root: &Path,
        token: &str,
        anchor: Vec<u8>,
        throttle: AuthThrottle,
        limits: Limits,
    ) -> Publishing {
        Publishing {
            token: blake3::hash(token.as_bytes()),
            throttle: Throttle::new(throttle),
            anchor,
            store: DirRegistry::new(root).with_limits(limits),
            limits,
            staged: Mutex::new(Vec::new()),
            committing: Mutex::new(()),
        }
    }

    /// The newest trusted root: the anchor, then the registry's rotations.
    fn root(&self) -> Result<VerifiedRoot, Refused> {
        let limits = &self.limits;
        let anchor = cuda_aot::trust::verify_anchor(&self.anchor, limits, "trust root")?;
        Ok(crate::publish::walk(self.store.source(), anchor, limits)?)
    }

    fn stage(&self, d: Digest, bytes: Vec<u8>) {
        let mut s = self.staged.lock().expect("staged indexes");
        s.retain(|(t, x, _)| *x != d && t.elapsed() < STAGED_TTL);
        if s.len() >= STAGED_MAX {
            s.remove(0);
        }
        s.push((Instant::now(), d, Arc::new(bytes)));
    }

    fn staged(&self, d: &Digest) -> Option<Arc<Vec<u8>>> {
        let s = self.staged.lock().expect("staged indexes");
        s.iter()
            .find(|(t, x, _)| x == d && t.elapsed() < STAGED_TTL)
            .map(|(_, _, b)| b.clone())
    }

    fn unstage(&self, d: &Digest) {
        self.staged
            .lock()
            .expect("staged indexes")
            .retain(|(_, x, _)| x != d);
    }
}

/// Reads the bearer token file given at start: non-empty, not readable by others.
pub fn read_token_file(path: &Path) -> std::result::Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "{}: readable by other users (mode {:o}); chmod 600 it",
            path.display(),
            meta.permissions().mode() & 0o777
        ));
    }
    let text = cuda_aot::fs::read_capped(path, 4096, "token file")
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let token = String::from_utf8(text)
        .map_err(|_| format!("{}: not UTF-8 text", path.display()))?
        .trim()
        .to_string();
    if token.len() < 16 || token.chars().any(char::is_whitespace) {
        return Err(format!(
            "{}: the token must be one line of at least 16 characters without spaces",
            path.display()
        ));
    }
    Ok(token)
}

/// Why an upload was refused.
enum Refused {
    /// 412: another publisher committed first (or the base changed).
    Conflict(String),
    /// 409: a different file of the same name exists.
    Exists(String),
    /// 428: a conditional header is required.
    PreconditionRequired(String),
    /// 422: the bytes fail a check (with the error's advice).
    Invalid(String),
    /// 500.
    Internal(String),
}

impl From<cuda_aot::Error> for Refused {
    fn from(e: cuda_aot::Error) -> Self {
        Refused::Invalid(format!("{e}\nFix: {}", e.fix()))
    }
}

impl From<Error> for Refused {
    fn from(e: Error) -> Self {
        match e {
            Error::Conflict { .. } => Refused::Conflict(format!("{e}\nFix: {}", e.fix())),
            Error::RootConflict { .. } => Refused::Exists(format!("{e}\nFix: {}", e.fix())),
            Error::Core(c) => c.into(),
            Error::Io { .. } => Refused::Internal(e.to_string()),
            other => Refused::Invalid(format!("{other}\nFix: {}", other.fix())),
        }
    }
}

/// The conditional header of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Precondition {
    None,
    /// `If-None-Match: *`: only if absent.
    Absent,
    /// `If-Match: "<blake3 hex>"`: only if the current file is this one.
    Is(Digest),
}

fn precondition(req: &Request) -> Result<Precondition, Refused> {
    if let Some(v) = req.headers().get(IF_MATCH) {
        let v = v.to_str().unwrap_or("").trim();
        let hex = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or("");
        return format!("blake3:{hex}")
            .parse()
            .map(Precondition::Is)
            .map_err(|_| {
                Refused::Invalid(format!(
                    "If-Match {v:?}: expected the strong ETag of the current timestamp.json"
                ))
            });
    }
    match req
        .headers()
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
    {
        Some("*") => Ok(Precondition::Absent),
        Some(v) => Err(Refused::Invalid(format!(
            "If-None-Match {v:?}: only * is meaningful for a write"
        ))),
        None => Ok(Precondition::None),
    }
}

fn reply(status: StatusCode, text: &str, note: &str, etag: Option<&str>) -> Response {
    let mut r = Response::new(Body::from(format!("{text}\n")));
    *r.status_mut() = status;
    if let Some(t) = etag.and_then(|t| HeaderValue::from_str(t).ok()) {
        r.headers_mut().insert(ETAG, t);
    }
    r.extensions_mut().insert(Note(note.into()));
    r
}

/// The byte cap of an upload to `rel`, or None for a path the server does not accept.
fn cap_for(rel: &str, limits: &Limits, max_upload: u64) -> Option<u64> {
    let top = rel.split('/').next().unwrap_or("");
    Some(match top {
        "timestamp.json" => limits.timestamp,
        "index" => limits.index,
        "root" => limits.root,
        "blobs" | "sources" => limits.blob.min(max_upload),
        "manifests" => limits.manifest,
        "statements" => limits.statement,
        "promotions" => limits.promotion,
        "teams" => limits.index,
        _ => return None,
    })
}

/// The PUT handler.
pub(crate) async fn put(shared: Arc<Shared>, req: Request) -> Response {
    let Some(p) = shared.publish.as_ref() else {
        unreachable!("routed here only when publishing is on")
    };
    let ip = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    // An address that failed too often waits, whatever token it sends now: answering its
    // right guess differently would tell it that it guessed right.
    if let Some(wait) = ip.and_then(|ip| p.throttle.wait(ip)) {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let mut r = reply(
            StatusCode::TOO_MANY_REQUESTS,
            &format!("too many failed token attempts from this address: retry in {secs} s"),
            "throttled: failed token attempts",
            None,
        );
        r.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
        return r;
    }
    let authorized = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        // Both sides hashed, then compared as blake3::Hash, whose == runs in constant time.
        .is_some_and(|t| blake3::hash(t.trim().as_bytes()) == p.token);
    if let Some(ip) = ip {
        match authorized {
            true => p.throttle.succeeded(ip),
            false => p.throttle.failed(ip),
        }
    }
    if !authorized {
        let mut r = reply(
            StatusCode::UNAUTHORIZED,
            "a publish needs the server's bearer token (Authorization: Bearer …)",
            "unauthorized",
            None,
        );
        r.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"cuda-aot-registry\""),
        );
        return r;
    }
    let rel = req.uri().path().trim_start_matches('/').to_string();
    if !layout::is_layout_path(&rel) {
        return reply(
            StatusCode::NOT_FOUND,
            "not a registry path",
            "not a registry path",
            None,
        );
    }
    let limits = shared.opts.limits;
    let Some(cap) = cap_for(&rel, &limits, shared.opts.max_upload) else {
        return reply(
            StatusCode::NOT_FOUND,
            "not a registry file this server accepts",
            "unknown kind",
            None,
        );
    };
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > cap) {
        return reply(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("{rel}: more than the limit of {cap} bytes"),
            "too large",
            None,
        );
    }
    let pre = match precondition(&req) {
        Ok(p) => p,
        Err(r) => return refused(&rel, r),
    };
    // Reading the body is a wait on the client: the connection's stall bound runs.
    let activity = req.extensions().get::<Arc<Activity>>().cloned();
    let waiting = activity.as_ref().map(Activity::reading_body);
    let reading = axum::body::to_bytes(req.into_body(), cap as usize);
    let body = match tokio::time::timeout(shared.opts.body_timeout, reading).await {
        Ok(Ok(b)) => b,
        Ok(Err(_)) if activity.as_ref().and_then(|a| a.cut()).is_some() => {
            // The stall bound cut the connection: nobody reads this answer; it is logged.
            let secs = shared.opts.stall_timeout.as_secs_f64();
            return reply(
                StatusCode::REQUEST_TIMEOUT,
                &format!("{rel}: the upload stalled (no byte for {secs} s)"),
                "body stalled",
                None,
            );
        }
        Ok(Err(_)) => {
            return reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("{rel}: more than the limit of {cap} bytes"),
                "too large",
                None,
            );
        }
        Err(_) => {
            let secs = shared.opts.body_timeout.as_secs_f64();
            let mut r = reply(
                StatusCode::REQUEST_TIMEOUT,
                &format!("{rel}: the upload did not arrive within {secs} s"),
                "body timeout",
                None,
            );
            r.headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            return r;
        }
    };
    drop(waiting);
    let rel2 = rel.clone();
    let root = shared.opts.root.clone();
    let done = tokio::task::spawn_blocking(move || {
        let p = shared.publish.as_ref().expect("publishing");
        accept(p, &rel2, &body, pre)
    })
    .await;
    match done {
        Ok(Ok((status, note, etag))) => reply(status, &note, &note, etag.as_deref()),
        Ok(Err(r)) => refused(&rel, r.without(&root)),
        Err(e) => refused(&rel, Refused::Internal(e.to_string())),
    }
}

impl Refused {
    /// The same refusal with the server's folder left out of the text (clients see
    /// layout paths, not where the server keeps them).
    fn without(self, root: &Path) -> Refused {
        let hide = |t: String| t.replace(&format!("{}/", root.display()), "");
        match self {
            Refused::Conflict(t) => Refused::Conflict(hide(t)),
            Refused::Exists(t) => Refused::Exists(hide(t)),
            Refused::PreconditionRequired(t) => Refused::PreconditionRequired(hide(t)),
            Refused::Invalid(t) => Refused::Invalid(hide(t)),
            Refused::Internal(t) => Refused::Internal(hide(t)),
        }
    }
}

fn refused(rel: &str, r: Refused) -> Response {
    let (status, text) = match r {
        Refused::Conflict(t) => (StatusCode::PRECONDITION_FAILED, t),
        Refused::Exists(t) => (StatusCode::CONFLICT, t),
        Refused::PreconditionRequired(t) => (StatusCode::PRECONDITION_REQUIRED, t),
        Refused::Invalid(t) => (StatusCode::UNPROCESSABLE_ENTITY, t),
        Refused::Internal(t) => (StatusCode::INTERNAL_SERVER_ERROR, t),
    };
    let first = text.lines().next().unwrap_or("").to_string();
    reply(
        status,
        &format!("{rel}: {text}"),
        &format!("refused: {first}"),
        None,
    )
}

type Accepted = (StatusCode, String, Option<String>);

/// Checks and stores one upload.
fn accept(p: &Publishing, rel: &str, body: &[u8], pre: Precondition) -> Result<Accepted, Refused> {
    let limits = p.limits;
    if rel == layout::TIMESTAMP {
        return commit_timestamp(p, body, pre);
    }
    if let Some(v) = numbered(rel, "index/", ".index.json") {
        return stage_index(p, v, rel, body, pre);
    }
    if let Some(v) = numbered(rel, "root/", ".root.json") {
        return put_root(p, v, rel, body);
    }
    let Some(d) = crate::sync::content_digest(rel) else {
        return Err(Refused::Invalid(format!(
            "{rel} is not a content-addressed registry path"
        )));
    };
    let actual = Digest::of(body);
    if actual != d {
        return Err(cuda_aot::Error::DigestMismatch {
            what: rel.into(),
            expected: d.to_string(),
            actual: actual.to_string(),
        }
        .into());
    }
    let (canonical, what) = match rel.split('/').next() {
        Some("blobs") => (layout::blob(&d), "blob"),
        Some("sources") => (layout::source(&d), "source"),
        Some("manifests") => {
            let m: Manifest = cuda_aot::json::parse(body, limits.manifest, rel)?;
            if let Err(why) = m.check_schema() {
                return Err(Refused::Invalid(format!("{rel}: {why}")));
            }
            (layout::manifest(&d), "manifest")
        }
        // Envelopes: their signers' threshold, against the server's trust root. Under
        // delegations a module's owner (whose keys sign) is known only from the index that
        // lists it: the envelope is parsed here, its signatures counted when the timestamp
        // commits (the full client verification).
        Some("statements") if p.root()?.root().delegations.is_some() => {
            cuda_aot::envelope::Envelope::parse(
                body,
                limits.statement,
                cuda_aot::envelope::PayloadType::InToto,
                rel,
            )?;
            (layout::statement(&d), "build statement")
        }
        Some("statements") => {
            cuda_aot::provenance::open_build(&p.root()?, body, limits.statement, rel)?;
            (layout::statement(&d), "build statement")
        }
        Some("promotions") if p.root()?.root().delegations.is_some() => {
            cuda_aot::trust::decode_unverified::<Promotion>(body, limits.promotion, rel)?;
            (layout::promotion(&d), "promotion record")
        }
        Some("promotions") => {
            p.root()?.open::<Promotion>(body, limits.promotion, rel)?;
            (layout::promotion(&d), "promotion record")
        }
        Some("teams") => {
            cuda_aot::trust::decode_unverified::<cuda_aot::delegation::TeamMetadata>(
                body,
                limits.index,
                rel,
            )?;
            (layout::team(&d), "delegated metadata")
        }
        _ => (String::new(), ""),
    };
    if canonical != rel {
        return Err(Refused::Invalid(format!(
            "{rel} is not where the layout puts this file"
        )));
    }
    let wrote = p.store.put_content(rel, body)?;
    Ok(if wrote {
        (StatusCode::CREATED, format!("stored {what}"), None)
    } else {
        (StatusCode::OK, format!("{what} already present"), None)
    })
}

/// `index/7.index.json` → 7 (for `prefix` `index/`, `suffix` `.index.json`).
fn numbered(rel: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let n = rel.strip_prefix(prefix)?.strip_suffix(suffix)?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0'))
        .then(|| n.parse().ok())
        .flatten()
}

fn put_root(p: &Publishing, version: u64, rel: &str, body: &[u8]) -> Result<Accepted, Refused> {
    let limits = p.limits;
    let anchor = cuda_aot::trust::verify_anchor(&p.anchor, &limits, "trust root")?;
    let anchor_version = anchor.root().version;
    if version == anchor_version {
        if body != p.anchor.as_slice() {
            return Err(Refused::Exists(format!(
                "{rel}: this server's trust root v{version} is a different file"
            )));
        }
    } else {
        let current = p.root()?;
        if version != current.root().version + 1 {
            return Err(Refused::Invalid(format!(
                "{rel}: the registry's newest root is v{}; only v{} can be added",
                current.root().version,
                current.root().version + 1
            )));
        }
        cuda_aot::trust::rotate(&current, body, &limits, rel)?;
    }
    let existed = p.store.source().read_at_most(rel, 0)?.is_some();
    p.store.put_root(version, body)?;
    Ok(match existed {
        true => (StatusCode::OK, "root already present".into(), None),
        false => (StatusCode::CREATED, "stored root".into(), None),
    })
}

fn stage_index(
    p: &Publishing,
    version: u64,
    rel: &str,
    body: &[u8],
    pre: Precondition,
) -> Result<Accepted, Refused> {
    if pre != Precondition::Absent {
        return Err(Refused::PreconditionRequired(format!(
            "{rel}: an index is created only if absent: send If-None-Match: *"
        )));
    }
    let index = p.root()?.open::<Index>(body, p.limits.index, rel)?.doc;
    if index.version != version {
        return Err(Refused::Invalid(format!(
            "{rel} holds index version {}",
            index.version
        )));
    }
    if p.store.source().read_at_most(rel, 0)?.is_some() {
        return Err(Refused::Conflict(format!(
            "index version {version} was committed by another publisher\nFix: run the publish again (it will build on the new index)"
        )));
    }
    p.stage(Digest::of(body), body.to_vec());
    Ok((
        StatusCode::CREATED,
        "index staged: it becomes visible with the timestamp that names it".into(),
        None,
    ))
}

fn commit_timestamp(p: &Publishing, body: &[u8], pre: Precondition) -> Result<Accepted, Refused> {
    let limits = p.limits;
    let base = match pre {
        Precondition::Is(d) => Some(d),
        Precondition::Absent => None,
        Precondition::None => {
            return Err(Refused::PreconditionRequired(
                "timestamp.json is replaced only with If-Match: \"<blake3 of the current file>\" (or If-None-Match: * on an empty registry)".into(),
            ));
        }
    };
    let ts = p
        .root()?
        .open::<Timestamp>(body, limits.timestamp, layout::TIMESTAMP)?
        .doc;
    let _one_at_a_time = p.committing.lock().expect("commit lock");
    let dir_source = DirSource::new(p.store.root());
    let dir = &dir_source;
    let current = dir.read_at_most(layout::TIMESTAMP, limits.timestamp)?;
    if current.as_deref().map(Digest::of) != base {
        return Err(Refused::Conflict(
            "timestamp.json changed since this publish read it: another publisher committed first\nFix: run the publish again (it will build on the new index)".into(),
        ));
    }
    // The versions now served, with the root they were signed under: the new timestamp
    // must be newer and its index not older, unless a rotation the served timestamp has
    // not seen replaced the publisher keys (the recovery from a stolen key).
    let mut seen = rollback_floor(dir, &p.anchor, &limits)?;
    if current.is_some() {
        seen.timestamp = seen.timestamp.saturating_add(1);
    }
    let index_rel = layout::index(ts.index.version);
    let committed = dir.read_at_most(&index_rel, 0)?.is_some();
    let staged = match committed {
        true => None,
        false => Some(p.staged(&ts.index.digest).ok_or_else(|| {
            Refused::Invalid(format!(
                "the timestamp names {index_rel}, which is neither committed nor staged\nFix: PUT the index (If-None-Match: *) before the timestamp"
            ))
        })?),
    };
    // The registry as it would be: the same verification a client runs, blobs included.
    let mut files = BTreeMap::from([(layout::TIMESTAMP.to_string(), body)]);
    if let Some(s) = &staged {
        files.insert(index_rel.clone(), s.as_slice());
    }
    let overlay = Overlay { dir, files };
    let opts = Options {
        limits,
        ..Options::default()
    };
    verify_all(&overlay, &p.anchor, seen.clone(), &opts).map_err(cuda_aot::Error::from)?;
    match &staged {
        Some(index) => {
            p.store.commit(&Commit {
                index_rel: index_rel.clone(),
                index,
                timestamp: body,
                base_timestamp: base,
                version: ts.index.version,
                base: seen.index,
            })?;
            p.unstage(&ts.index.digest);
        }
        None => p.store.replace_timestamp(body, base)?,
    }
    let etag = format!("\"{}\"", Digest::of(body).hex());
    let status = match base {
        None => StatusCode::CREATED,
        Some(_) => StatusCode::OK,
    };
    Ok((
        status,
        format!(
            "committed timestamp v{} naming index v{}",
            ts.version, ts.index.version
        ),
        Some(etag),
    ))
}

/// What a server needs to accept publishes: the bearer token and the trust root file
/// every upload is checked against.
#[derive(Clone)]
pub struct PublishSettings {
    token: String,
    anchor: Vec<u8>,
}

impl std::fmt::Debug for PublishSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishSettings")
            .field("token", &"<redacted>")
            .field("anchor_bytes", &self.anchor.len())
            .finish()
    }
}

impl PublishSettings {
    /// Reads the token file (private, one line of at least 16 characters) and the trust
    /// root file (which must verify on its own, within the server's `limits`).
    pub fn load(
        token_file: &Path,
        trust: &Path,
        limits: &Limits,
    ) -> std::result::Result<Self, String> {
        let token = read_token_file(token_file)?;
        let anchor = cuda_aot::fs::read_capped(trust, limits.root, "trust root")
            .map_err(|e| format!("{}: {e}", trust.display()))?;
        cuda_aot::trust::verify_anchor(&anchor, limits, &trust.display().to_string())
            .map_err(|e| format!("{e}"))?;
        Ok(PublishSettings { token, anchor })
    }

    pub(crate) fn start(&self, root: &Path, throttle: AuthThrottle, limits: Limits) -> Publishing {
        Publishing::new(root, &self.token, self.anchor.clone(), throttle, limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_paths_are_canonical() {
        assert_eq!(
            numbered("index/7.index.json", "index/", ".index.json"),
            Some(7)
        );
        for bad in [
            "index/07.index.json",
            "index/.index.json",
            "index/7x.index.json",
        ] {
            assert_eq!(numbered(bad, "index/", ".index.json"), None, "{bad}");
        }
    }

    /// Finding 7 of the serve review also asked for this one: the settings (and the
    /// server options that hold them) never print the token.
    #[test]
    fn the_token_never_appears_in_debug_output() {
        let token = "s3cret-token-never-printed-0123";
        let settings = PublishSettings {
            token: token.into(),
            anchor: vec![1, 2, 3],
        };
        let mut opts = super::super::ServeOptions::new("/srv/registry");
        opts.publish = Some(settings.clone());
        for text in [
            format!("{settings:?}"),
            format!("{opts:?}"),
            format!("{opts:#?}"),
        ] {
            assert!(!text.contains(token), "{text}");
            assert!(text.contains("<redacted>"), "{text}");
        }
    }

    #[test]
    fn token_files_must_be_private_and_long() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("token");
        std::fs::write(&f, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_token_file(&f).unwrap_err().contains("chmod 600"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_token_file(&f).unwrap(), "0123456789abcdef0123");
        std::fs::write(&f, "short").unwrap();
        assert!(read_token_file(&f).unwrap_err().contains("16 characters"));
        assert!(read_token_file(&d.path().join("none")).is_err());
    }
}
