//! The real `cuda-aot-registry serve` process on loopback: what it serves and refuses,
//! its HTTP semantics (strong ETags, Range, conditional GET, caps), its log, and its
//! graceful shutdown on SIGTERM.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use cuda_aot::Digest;

fn served() -> (Fixture, ServeProcess) {
    let f = Fixture::new();
    f.append(&["sm_80", "sm_90"]);
    let s = ServeProcess::start(&f.reg_path(), "127.0.0.1:0", &[]);
    (f, s)
}

#[test]
fn files_come_with_strong_etags_cache_headers_and_exact_bytes() {
    let (f, s) = served();
    let ts = std::fs::read(f.reg_path().join("timestamp.json")).unwrap();
    let r = http_get(s.addr, "/timestamp.json", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, ts);
    assert_eq!(
        r.header("etag").unwrap(),
        format!("\"{}\"", Digest::of(&ts).hex()),
        "strong ETag = blake3 of the bytes"
    );
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));

    let blob = f.module("sm_90", None);
    let rel = Fixture::blob_rel(&blob);
    let r = http_get(s.addr, &format!("/{rel}"), &[]);
    assert_eq!(r.status, 200);
    assert_eq!(Digest::of(&r.body), blob.0.module_digest);
    assert!(r.header("cache-control").unwrap().contains("immutable"));
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));

    let h = raw_request(s.addr, "HEAD", &format!("/{rel}"), &[]);
    assert_eq!(h.status, 200);
    assert!(h.body.is_empty());
    assert_eq!(h.header("content-length").unwrap(), blob.0.size.to_string());
    assert_eq!(h.header("etag"), r.header("etag"));
}

#[test]
fn conditional_requests_and_ranges() {
    let (f, s) = served();
    let ts = std::fs::read(f.reg_path().join("timestamp.json")).unwrap();
    let etag = format!("\"{}\"", Digest::of(&ts).hex());
    let len = ts.len();

    let r = http_get(s.addr, "/timestamp.json", &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304, "unchanged: not modified");
    assert!(r.body.is_empty());
    let r = http_get(s.addr, "/timestamp.json", &[("If-None-Match", "\"other\"")]);
    assert_eq!(r.status, 200);
    let r = http_get(s.addr, "/timestamp.json", &[("If-Match", "\"other\"")]);
    assert_eq!(r.status, 412, "If-Match with another tag fails");
    let r = http_get(s.addr, "/timestamp.json", &[("If-Match", &etag)]);
    assert_eq!(r.status, 200);

    let r = http_get(s.addr, "/timestamp.json", &[("Range", "bytes=10-19")]);
    assert_eq!(r.status, 206);
    assert_eq!(r.body, ts[10..20]);
    assert_eq!(
        r.header("content-range").unwrap(),
        format!("bytes 10-19/{len}")
    );
    let r = http_get(s.addr, "/timestamp.json", &[("Range", "bytes=-5")]);
    assert_eq!((r.status, &r.body[..]), (206, &ts[len - 5..]));
    let r = http_get(
        s.addr,
        "/timestamp.json",
        &[("Range", &format!("bytes={len}-"))],
    );
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range").unwrap(), format!("bytes */{len}"));
    // If-Range with a stale tag: the whole (new) file, not a piece of it.
    let r = http_get(
        s.addr,
        "/timestamp.json",
        &[("Range", "bytes=10-19"), ("If-Range", "\"stale\"")],
    );
    assert_eq!((r.status, r.body.len()), (200, len));
    let r = http_get(
        s.addr,
        "/timestamp.json",
        &[("Range", "bytes=10-19"), ("If-Range", &etag)],
    );
    assert_eq!(r.status, 206);

    // A republish replaces timestamp.json: its ETag changes with its bytes.
    f.append(&["sm_120"]);
    let r = http_get(s.addr, "/timestamp.json", &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 200);
    assert_ne!(r.header("etag").unwrap(), etag);
}

#[test]
fn only_layout_files_are_served_and_writes_are_refused() {
    let (f, s) = served();
    std::os::unix::fs::symlink("/etc/passwd", f.reg_path().join("passwd")).unwrap();
    std::os::unix::fs::symlink(
        f.reg_path().join("timestamp.json"),
        f.reg_path().join("ts-link.json"),
    )
    .unwrap();
    for path in [
        "/.lock",
        "/passwd",
        "/ts-link.json",
        "/../../etc/passwd",
        "/%2e%2e/etc/passwd",
        "/index",
        "/nope.json",
        "/",
    ] {
        let r = http_get(s.addr, path, &[]);
        assert_eq!(r.status, 404, "{path}");
    }
    let long = format!("/{}", "a".repeat(2000));
    assert_eq!(http_get(s.addr, &long, &[]).status, 414);
    for method in ["PUT", "POST", "DELETE"] {
        let r = raw_request(
            s.addr,
            method,
            "/timestamp.json",
            &[("Content-Length", "0")],
        );
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
    }
    // Oversized request headers are refused before any handler runs.
    let big = "x".repeat(64 * 1024);
    let r = raw_request(s.addr, "GET", "/timestamp.json", &[("X-Big", &big)]);
    assert_eq!(r.status, 431);
    assert_eq!(http_get(s.addr, "/healthz", &[]).status, 200);
}

#[test]
fn every_request_is_one_json_log_line() {
    let (_f, s) = served();
    http_get(s.addr, "/timestamp.json", &[("Range", "bytes=0-3")]);
    http_get(s.addr, "/.lock", &[]);
    let ok = s.wait_log(|v| v["path"] == "/timestamp.json");
    assert_eq!(ok["method"], "GET");
    assert_eq!(ok["status"], 206);
    assert_eq!(ok["bytes"], 4);
    assert_eq!(ok["range"], "bytes=0-3");
    assert!(ok["remote"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(ok["ms"].as_f64().unwrap() >= 0.0);
    assert!(ok["ts"].as_str().unwrap().ends_with('Z'));
    let refused = s.wait_log(|v| v["path"] == "/.lock");
    assert_eq!(refused["status"], 404);
    assert_eq!(refused["note"], "not a registry path");
}

#[test]
fn sigterm_lets_in_flight_downloads_finish_then_exits() {
    let f = Fixture::new();
    let big = f.module("compute_90", Some(16 << 20));
    f.append_modules(std::slice::from_ref(&big));
    let mut s = ServeProcess::start(&f.reg_path(), "127.0.0.1:0", &[]);
    // A slow reader: the server cannot push the whole blob into the socket at once.
    let mut c = TcpStream::connect(s.addr).unwrap();
    let rel = Fixture::blob_rel(&big);
    write!(
        c,
        "GET /{rel} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut first = vec![0u8; 1024];
    c.read_exact(&mut first).unwrap();
    s.term();
    s.wait_log(|v| v["event"] == "shutting_down");
    // New connections are no longer accepted...
    let t = Instant::now();
    loop {
        if TcpStream::connect(s.addr).is_err() {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "still accepting");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "the server waits for the download in flight"
    );
    // ...and that download completes.
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    let all = [first, rest].concat();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    assert_eq!(Digest::of(&all[split + 4..]), big.0.module_digest);
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    s.wait_log(|v| v["event"] == "stopped");
}
