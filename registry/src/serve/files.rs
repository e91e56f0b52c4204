//! GET and HEAD of registry files: layout paths only (no other file, no links), strong
//! ETags (the blake3 of the bytes, cached per inode, size and mtime), conditional requests
//! (If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since, If-Range), one byte
//! range per request, and cache headers by file kind.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::io::{Read, Seek, SeekFrom};
use std::ops::Bound;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use std::time::SystemTime;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{
    ACCEPT_RANGES, ALLOW, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use cuda_aot::source::layout;
use headers::{
    ContentRange, ETag, HeaderMapExt, IfMatch, IfModifiedSince, IfNoneMatch, IfRange,
    IfUnmodifiedSince, LastModified, Range,
};
use tokio::io::AsyncReadExt;
use tokio_util::io::ReaderStream;

use super::Shared;
use super::log::Note;

/// Longest request path accepted (layout paths are far shorter).
const MAX_PATH: usize = 512;

/// Strong ETags by file: recomputed only when the inode, size or mtime changes.
#[derive(Default)]
pub(crate) struct EtagCache {
    map: Mutex<HashMap<String, (FileKey, String)>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileKey {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl FileKey {
    fn of(m: &Metadata) -> FileKey {
        FileKey {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        }
    }
}

impl EtagCache {
    const MAX_ENTRIES: usize = 100_000;

    /// The ETag of the file at `rel` (blake3 of its bytes, quoted): cached while its inode,
    /// size and mtime stay the same, else `hash()` computes it.
    fn get(
        &self,
        rel: &str,
        meta: &Metadata,
        hash: impl FnOnce() -> std::io::Result<blake3::Hash>,
    ) -> std::io::Result<String> {
        let key = FileKey::of(meta);
        if let Some((k, tag)) = self.map.lock().expect("etag cache").get(rel)
            && *k == key
        {
            return Ok(tag.clone());
        }
        let tag = format!("\"{}\"", hash()?.to_hex());
        let mut map = self.map.lock().expect("etag cache");
        if map.len() >= Self::MAX_ENTRIES {
            map.clear();
        }
        map.insert(rel.to_string(), (key, tag.clone()));
        Ok(tag)
    }
}

/// Files up to this size are read whole in the one blocking call a request makes; larger
/// ones are streamed.
const SMALL: u64 = 256 * 1024;

/// What a response sends.
enum Content {
    /// The whole file, read at once.
    Small(Bytes),
    /// A file to stream from.
    Large(File),
}

/// A file ready to answer from: metadata, strong ETag, content.
struct Opened {
    meta: Metadata,
    tag: String,
    content: Content,
}

/// Opens `rel` (see [`open_checked`]), finds its ETag and, for a small file, reads it.
fn open_for_response(shared: &Shared, rel: &str) -> Result<Opened, Refusal> {
    let (mut f, meta) = open_checked(&shared.opts.root, rel)?;
    let len = meta.len();
    if len <= SMALL {
        let mut buf = Vec::with_capacity(len as usize);
        (&f).take(len).read_to_end(&mut buf).map_err(Refusal::Io)?;
        let tag = shared
            .etags
            .get(rel, &meta, || Ok(blake3::hash(&buf)))
            .map_err(Refusal::Io)?;
        return Ok(Opened {
            meta,
            tag,
            content: Content::Small(Bytes::from(buf)),
        });
    }
    let tag = shared
        .etags
        .get(rel, &meta, || {
            let mut h = blake3::Hasher::new();
            f.seek(SeekFrom::Start(0))?;
            h.update_reader((&f).take(len))?;
            Ok(h.finalize())
        })
        .map_err(Refusal::Io)?;
    Ok(Opened {
        meta,
        tag,
        content: Content::Large(f),
    })
}

/// Why a path is not served.
enum Refusal {
    NotFound(&'static str),
    Io(std::io::Error),
}

/// Opens `rel` if it is a registry layout path ([`layout::is_layout_path`]: nothing else in
/// the folder is served), one folder at a time below the root without following a link
/// ([`cuda_aot::fs::open_beneath`]: no check-then-open window a local writer could race),
/// without blocking on a FIFO, and only if the opened handle is a regular file.
fn open_checked(root: &Path, rel: &str) -> Result<(File, Metadata), Refusal> {
    use cuda_aot::Error as E;
    if !layout::is_layout_path(rel) {
        return Err(Refusal::NotFound("not a registry path"));
    }
    let f = match cuda_aot::fs::open_beneath(root, rel) {
        Ok(Some(f)) => f,
        Ok(None) => return Err(Refusal::NotFound("no such file")),
        Err(E::Symlink { .. }) => return Err(Refusal::NotFound("symbolic link refused")),
        Err(E::NotRegular { .. }) => return Err(Refusal::NotFound("not a file")),
        Err(E::Io { source, .. }) => return Err(Refusal::Io(source)),
        Err(e) => return Err(Refusal::Io(std::io::Error::other(e.to_string()))),
    };
    // The handle's own metadata: the file that was opened, whatever the path names now.
    let m = f.metadata().map_err(Refusal::Io)?;
    Ok((f, m))
}

fn plain(status: StatusCode, text: &str, note: &str) -> Response {
    let mut r = (status, format!("{text}\n")).into_response();
    r.extensions_mut().insert(Note(note.into()));
    r
}

/// The fallback handler: every path that is not a route is a registry file.
pub(crate) async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let method = req.method().clone();
    if method == Method::PUT && shared.publish.is_some() {
        return super::publish::put(shared, req).await;
    }
    if method != Method::GET && method != Method::HEAD {
        let (text, allow) = match shared.publish {
            Some(_) => ("method not allowed", "GET, HEAD, PUT"),
            None => ("method not allowed: this server is read-only", "GET, HEAD"),
        };
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, text, "method not allowed");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static(allow));
        return r;
    }
    let path = req.uri().path();
    if path == "/" && super::html::wants_html(req.headers()) {
        return super::html::page(shared, &method).await;
    }
    if path.len() > MAX_PATH {
        return plain(StatusCode::URI_TOO_LONG, "path too long", "path too long");
    }
    let rel = path.trim_start_matches('/').to_string();
    let rel2 = rel.clone();
    // One trip to the blocking pool per request: checks, open, ETag, small bodies.
    let opened = tokio::task::spawn_blocking(move || open_for_response(&shared, &rel2)).await;
    let opened = match opened {
        Ok(Ok(x)) => x,
        Ok(Err(Refusal::NotFound(why))) => return plain(StatusCode::NOT_FOUND, "not found", why),
        Ok(Err(Refusal::Io(e))) => {
            return plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot read the file",
                &e.to_string(),
            );
        }
        Err(e) => {
            return plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error",
                &e.to_string(),
            );
        }
    };
    respond(req.headers(), &method, &rel, opened).await
}

/// Evaluates the preconditions and the range, and streams the answer.
async fn respond(req: &HeaderMap, method: &Method, rel: &str, opened: Opened) -> Response {
    let Opened { meta, tag, content } = opened;
    let len = match &content {
        Content::Small(b) => b.len() as u64,
        Content::Large(_) => meta.len(),
    };
    let etag: ETag = tag.parse().expect("a quoted hex digest is a valid ETag");
    let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    let mut headers = HeaderMap::new();
    headers.typed_insert(etag.clone());
    headers.typed_insert(LastModified::from(modified));
    headers.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(cache_control(rel)));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));

    // RFC 9110 §13.2.2: If-Match, then If-Unmodified-Since, then If-None-Match, then
    // If-Modified-Since, then Range with If-Range.
    if let Some(m) = req.typed_get::<IfMatch>() {
        if !m.precondition_passes(&etag) {
            return status_with(StatusCode::PRECONDITION_FAILED, headers, "If-Match failed");
        }
    } else if let Some(u) = req.typed_get::<IfUnmodifiedSince>()
        && !u.precondition_passes(modified)
    {
        return status_with(
            StatusCode::PRECONDITION_FAILED,
            headers,
            "If-Unmodified-Since failed",
        );
    }
    if let Some(n) = req.typed_get::<IfNoneMatch>() {
        if !n.precondition_passes(&etag) {
            return status_with(StatusCode::NOT_MODIFIED, headers, "");
        }
    } else if let Some(s) = req.typed_get::<IfModifiedSince>()
        && !s.is_modified(modified)
    {
        return status_with(StatusCode::NOT_MODIFIED, headers, "");
    }

    let mut range = None;
    // A Range that is not `bytes=` (or not ASCII) is no Range to `headers`: the whole file.
    if method == Method::GET
        && let Some(asked) = req.typed_get::<Range>()
    {
        let fresh = match req.typed_get::<IfRange>() {
            Some(ir) => !ir.is_modified(Some(&etag), Some(&LastModified::from(modified))),
            None => true,
        };
        if fresh {
            match one_range(&asked, len) {
                RangeSpec::One(a, b) => range = Some((a, b)),
                RangeSpec::Unsatisfiable => {
                    headers.typed_insert(ContentRange::unsatisfied_bytes(len));
                    return status_with(
                        StatusCode::RANGE_NOT_SATISFIABLE,
                        headers,
                        "range not satisfiable",
                    );
                }
                RangeSpec::Ignore => {}
            }
        }
    }

    let content_type = if rel.ends_with(".json") {
        "application/json"
    } else {
        "application/octet-stream"
    };
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    let (status, start, count) = match range {
        Some((a, b)) => {
            headers.typed_insert(
                ContentRange::bytes(a..=b, len).expect("a range with both ends is valid"),
            );
            (StatusCode::PARTIAL_CONTENT, a, b - a + 1)
        }
        None => (StatusCode::OK, 0, len),
    };
    headers.insert(CONTENT_LENGTH, HeaderValue::from(count));
    let body = match content {
        _ if method == Method::HEAD => Body::empty(),
        Content::Small(b) => Body::from(b.slice(start as usize..(start + count) as usize)),
        Content::Large(file) => {
            let mut f = tokio::fs::File::from_std(file);
            // Always seek: hashing for the ETag may have moved the position.
            if let Err(e) = tokio::io::AsyncSeekExt::seek(&mut f, SeekFrom::Start(start)).await {
                return plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "cannot read the file",
                    &e.to_string(),
                );
            }
            Body::from_stream(ReaderStream::with_capacity(f.take(count), 64 * 1024))
        }
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    r
}

fn status_with(status: StatusCode, headers: HeaderMap, note: &str) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    if !note.is_empty() {
        r.extensions_mut().insert(Note(note.into()));
    }
    r
}

/// Content-addressed files, indexes and roots never change: clients and caches may keep
/// them forever. The timestamp (and anything else) must be revalidated.
fn cache_control(rel: &str) -> &'static str {
    if crate::sync::content_digest(rel).is_some()
        || rel.starts_with("index/")
        || rel.starts_with("root/")
    {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    }
}

/// What a GET's `Range` header asks of a file.
#[derive(Debug, PartialEq, Eq)]
enum RangeSpec {
    /// Bytes `a..=b`, all within the file.
    One(u64, u64),
    /// No range can be served: 416.
    Unsatisfiable,
    /// Not understood, several ranges, or a suffix of an empty file: serve the whole file
    /// (RFC 9110 §14.2 allows it).
    Ignore,
}

/// The one byte range of `asked` (as the `headers` crate reads it) that a file of `len`
/// bytes serves, by RFC 9110 §14.1.2: an end at or past the file's end is its last byte, a
/// suffix longer than the file is the whole file, a first byte at or past the end (or a
/// suffix of 0) is unsatisfiable. An end before the start (invalid), a header headers
/// cannot read, or a list of several ranges is served whole.
fn one_range(asked: &Range, len: u64) -> RangeSpec {
    // The members headers can read. Its only test against the length drops a suffix longer
    // than the file, which no suffix is with the largest length; a member it cannot read it
    // skips (RFC 9110 §14.2 lets a server ignore such a header, or serve what it reads).
    let mut read = asked.satisfiable_ranges(u64::MAX);
    let (Some(_), None) = (read.next(), read.next()) else {
        return RangeSpec::Ignore;
    };
    let Some(bounds) = asked.satisfiable_ranges(len).next() else {
        // The one member, dropped against this length: a suffix longer than the file, which
        // is the whole file. On an empty file that is no range a 206 can state (§14.1.2
        // calls it satisfiable; §14.2 lets a server ignore Range for an empty file).
        return match len {
            0 => RangeSpec::Ignore,
            _ => RangeSpec::One(0, len - 1),
        };
    };
    match bounds {
        // `first-last` with last before first is invalid (RFC 9110 §14.1.1).
        (Bound::Included(a), Bound::Included(b)) if b < a => RangeSpec::Ignore,
        // headers turns `-0` into `len-`, also unsatisfiable here.
        (Bound::Included(a), _) if a >= len => RangeSpec::Unsatisfiable,
        (Bound::Included(a), Bound::Included(b)) => RangeSpec::One(a, b.min(len - 1)),
        (Bound::Included(a), Bound::Unbounded) => RangeSpec::One(a, len - 1),
        // `bytes=-`: no position at all (headers makes no excluded bound).
        _ => RangeSpec::Ignore,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `value` as a request's `Range`, answered as [`respond`] does: a header `headers`
    /// cannot decode is no Range, the whole file.
    fn asked(value: &str, len: u64) -> RangeSpec {
        let mut req = HeaderMap::new();
        req.insert(
            axum::http::header::RANGE,
            HeaderValue::from_str(value).unwrap(),
        );
        match req.typed_get::<Range>() {
            Some(r) => one_range(&r, len),
            None => RangeSpec::Ignore,
        }
    }

    #[test]
    fn ranges_follow_rfc_9110() {
        use RangeSpec::*;
        assert_eq!(asked("bytes=0-9", 100), One(0, 9));
        assert_eq!(asked("bytes=90-", 100), One(90, 99));
        assert_eq!(asked("bytes=90-500", 100), One(90, 99));
        assert_eq!(asked("bytes=99-99", 100), One(99, 99));
        assert_eq!(asked("bytes=-10", 100), One(90, 99));
        assert_eq!(asked("bytes=-100", 100), One(0, 99));
        // headers drops a suffix longer than the file; RFC 9110 §14.1.2 makes it the whole
        // file, and a 206 of all of it is what we answered before headers.
        assert_eq!(asked("bytes=-500", 100), One(0, 99));
        assert_eq!(asked("bytes=100-", 100), Unsatisfiable);
        assert_eq!(asked("bytes=100-200", 100), Unsatisfiable);
        assert_eq!(asked("bytes=-0", 100), Unsatisfiable);
        assert_eq!(asked("bytes=0-", 0), Unsatisfiable);
        assert_eq!(asked("bytes=-0", 0), Unsatisfiable);
        // Changed with headers: we answered 416. RFC 9110 §14.1.2 calls a non-zero suffix
        // satisfiable even on an empty file, and §14.2 lets a server ignore Range there.
        assert_eq!(asked("bytes=-5", 0), Ignore);
        assert_eq!(asked("bytes=5-1", 100), Ignore);
        assert_eq!(asked("bytes=0-1,5-6", 100), Ignore);
        assert_eq!(
            asked("bytes=-500,0-1", 100),
            Ignore,
            "two ranges, one a long suffix"
        );
        assert_eq!(asked("items=0-1", 100), Ignore);
        assert_eq!(asked("bytes=", 100), Ignore);
        assert_eq!(asked("bytes=-", 100), Ignore);
        assert_eq!(asked("bytes=x-1", 100), Ignore);
        assert_eq!(asked("bytes=99999999999999999999-", 100), Ignore);
        // Changed with headers: an empty list member is skipped, as RFC 9110 §5.6.1 asks of
        // a recipient (we ignored the header before).
        assert_eq!(asked("bytes=0-1,", 100), One(0, 1));
        // Changed with headers, both invalid by RFC 9110 §14.1.1 (`+1` is not 1*DIGIT, `x`
        // no range-spec): headers reads a position with u64's FromStr, which takes a sign,
        // and skips a member it cannot read. We ignored both; §14.2 lets a server ignore or
        // reject an invalid Range and requires neither, and we serve what headers reads.
        assert_eq!(asked("bytes=+1-2", 100), One(1, 2));
        assert_eq!(asked("bytes=0-1,x", 100), One(0, 1));
    }

    #[test]
    fn immutable_files_are_cached_forever_and_the_timestamp_never() {
        let d = cuda_aot::Digest::of(b"x");
        assert!(cache_control(&cuda_aot::source::layout::blob(&d)).contains("immutable"));
        assert!(cache_control("index/3.index.json").contains("immutable"));
        assert_eq!(cache_control("timestamp.json"), "no-cache");
    }

    #[test]
    fn dot_files_links_escapes_and_other_files_are_not_served() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(".lock"), b"").unwrap();
        std::fs::write(d.path().join("timestamp.json"), b"{}").unwrap();
        std::fs::write(d.path().join("notes.txt"), b"private").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("passwd")).unwrap();
        std::fs::create_dir(d.path().join("index")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("index/1.index.json")).unwrap();
        for bad in [
            ".lock",
            "passwd",
            "notes.txt",
            "../etc/passwd",
            "a/../../x",
            "index",
            "index/1.index.json",
        ] {
            assert!(
                matches!(open_checked(d.path(), bad), Err(Refusal::NotFound(_))),
                "{bad}"
            );
        }
        assert!(open_checked(d.path(), "timestamp.json").is_ok());
    }
}
