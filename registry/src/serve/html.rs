//! The page for browsers (`GET /` with `Accept: text/html`, when `serve` has `--trust`):
//! [`crate::page`] rendered from the served folder verified against that trust root, again
//! whenever `timestamp.json` changes (a publish), else from the last rendering (one
//! verification at a time: requests meanwhile wait for it). A folder that does not verify
//! gets a page saying why (503), never its unverified contents.

use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::header::{ACCEPT, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use cuda_aot::source::layout;

use super::Shared;
use crate::page::{esc, render, view};

/// The last page rendered (or the refusal), with the timestamp bytes it was verified
/// under. Its lock is held while a page is made, so requests arriving meanwhile wait for
/// that one verification instead of each running their own.
#[derive(Default)]
pub(crate) struct PageCache(Mutex<Option<(Vec<u8>, Made)>>);

/// A rendered page, or the body of the page saying why there is none.
type Made = Result<Arc<String>, String>;

/// Whether the request asks for HTML (a browser's `Accept`).
pub(crate) fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().starts_with("text/html")))
}

/// Reads and checks the trust root file of `--trust` (self-signed, consistent).
pub(crate) fn read_trust(path: &Path, limits: &cuda_aot::Limits) -> Result<Vec<u8>, String> {
    let bytes =
        cuda_aot::fs::read_capped(path, limits.root, "trust root").map_err(|e| e.to_string())?;
    cuda_aot::trust::verify_anchor(&bytes, limits, "trust root").map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// The page, or why there is none.
pub(crate) async fn page(shared: Arc<Shared>, method: &Method) -> Response {
    let Some(anchor) = shared.opts.page_trust.clone() else {
        return html(
            StatusCode::NOT_FOUND,
            "<p>This server shows no page: start it with <code>--trust FILE</code> to get a view of the registry verified against that trust root.</p>".into(),
            method,
        );
    };
    let s = shared.clone();
    let made = tokio::task::spawn_blocking(move || -> Made {
        let root = &s.opts.root;
        // The cache key: the timestamp a publish replaces (the page is verified anew).
        let ts = cuda_aot::fs::read_beneath_at_most(root, layout::TIMESTAMP, s.opts.limits.timestamp)
            .ok()
            .flatten()
            .unwrap_or_default();
        let mut cache = s.page.0.lock().expect("page");
        if let Some((seen, made)) = cache.as_ref()
            && *seen == ts
        {
            return made.clone();
        }
        let made = view(root, &anchor, &s.opts.limits)
            .map(|v| {
                let name = root
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Arc::new(render(&v, &name))
            })
            .map_err(|e| {
                format!(
                    "<p>The registry does not verify against this server's trust root:</p><pre>{}</pre><p>Fix: {}</p>",
                    esc(&e.to_string()),
                    esc(&e.fix())
                )
            });
        *cache = Some((ts, made.clone()));
        made
    })
    .await;
    match made {
        Ok(Ok(page)) => html(StatusCode::OK, page.to_string(), method),
        Ok(Err(body)) => html(StatusCode::SERVICE_UNAVAILABLE, body, method),
        Err(e) => html(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("<p>internal error: {}</p>", esc(&e.to_string())),
            method,
        ),
    }
}

/// An HTML answer: no script may run (Content-Security-Policy), never cached stale.
fn html(status: StatusCode, body: String, method: &Method) -> Response {
    let body = match body.starts_with("<!DOCTYPE") {
        true => body,
        false => format!(
            "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>cuda-aot registry</title></head><body>{body}</body></html>\n"
        ),
    };
    let mut r = match *method == Method::HEAD {
        true => (status, Body::empty()).into_response(),
        false => (status, body).into_response(),
    };
    let h = r.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'"),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}
