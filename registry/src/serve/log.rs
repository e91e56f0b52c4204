//! The server's structured log: one JSON object per line on stdout, one line per request
//! and one per lifecycle event.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Instant, SystemTime};

use axum::extract::{ConnectInfo, Request};
use axum::http::header::{CONTENT_LENGTH, RANGE};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{Map, Value};

/// A note a handler attaches to its response for the log line (why it refused).
#[derive(Debug, Clone)]
pub(crate) struct Note(pub String);

fn write_line(v: &Value) {
    let mut line = v.to_string();
    line.push('\n');
    // One write per line keeps lines whole when requests finish at the same time.
    let _ = std::io::stdout().lock().write_all(line.as_bytes());
}

fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Logs a lifecycle event (`listening`, `signal`, `stopped`, ...) with its fields.
pub fn event(name: &str, fields: &[(&str, Value)]) {
    let mut m = Map::new();
    m.insert("ts".into(), now().into());
    m.insert("event".into(), name.into());
    for (k, v) in fields {
        m.insert((*k).into(), v.clone());
    }
    write_line(&Value::Object(m));
}

/// Bytes of a request path written to the log at most (the server refuses longer paths
/// anyway, see `files::MAX_PATH`).
const LOGGED_PATH: usize = 256;

/// `text` cut to at most `max` bytes at a character boundary, with `…` when cut. Request
/// paths may hold any UTF-8 (hyper accepts bytes above 0x7f), so a cut at a byte count
/// may fall inside a character.
fn shortened(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The access log middleware: method, path, status, bytes, duration, client, range, note.
pub(crate) async fn access(req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().to_string();
    let path = shortened(req.uri().path(), LOGGED_PATH);
    let remote = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.to_string());
    let range = req
        .headers()
        .get(RANGE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let resp = next.run(req).await;
    let bytes = resp
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // Built by hand (strings escaped by serde_json): this runs once per request.
    let q = |v: &str| serde_json::to_string(v).unwrap_or_else(|_| "null".into());
    let mut line = format!(
        "{{\"ts\":\"{}\",\"remote\":{},\"method\":{},\"path\":{},\"status\":{},\"bytes\":{},\"ms\":{:.3}",
        now(),
        remote.as_deref().map_or("null".into(), q),
        q(&method),
        q(&path),
        resp.status().as_u16(),
        bytes.map_or("null".into(), |b| b.to_string()),
        start.elapsed().as_secs_f64() * 1e3,
    );
    if let Some(r) = range {
        line += &format!(",\"range\":{}", q(&r));
    }
    if let Some(n) = resp.extensions().get::<Note>() {
        line += &format!(",\"note\":{}", q(&n.0));
    }
    line += "}\n";
    let _ = std::io::stdout().lock().write_all(line.as_bytes());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The access log cut a long path with `String::truncate` at byte 256, which panics when
    /// a multibyte character spans that byte: the client got no answer.
    #[test]
    fn a_long_path_is_cut_at_a_character_boundary() {
        let path = format!("/{}é{}", "a".repeat(254), "b".repeat(10));
        assert!(!path.is_char_boundary(256));
        let cut = shortened(&path, 256);
        assert_eq!(cut, format!("/{}…", "a".repeat(254)));
        assert_eq!(shortened("/timestamp.json", 256), "/timestamp.json");
        let exact = "x".repeat(256);
        assert_eq!(shortened(&exact, 256), exact);
    }
}
