//! A hostile OCI registry (a small HTTP server of its own on loopback: the real registry
//! the network tests run cannot be made to misbehave): the pull refuses a manifest that
//! redirects to another host (which then sees no request), a manifest past the size cap
//! (read no further than the cap), and layers that name foreign URLs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cuda_aot_registry::oci::{ARTIFACT_TYPE, MAX_MANIFEST, OciOptions, OciRemote, TITLE};

/// A server answering every connection with `answer(request line)`, counting connections.
struct Fake {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Fake {
    fn start(answer: impl Fn(&str) -> Vec<u8> + Send + 'static) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                counter.fetch_add(1, Ordering::SeqCst);
                let line = read_request(&conn);
                let _ = conn.write_all(&answer(&line));
            }
        });
        Fake { port, hits }
    }
}

/// The request line; the headers are read and dropped.
fn read_request(conn: &TcpStream) -> String {
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    let _ = r.read_line(&mut line);
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
    }
    line
}

fn response(status: &str, headers: &[(&str, String)], body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// `/v2/` answers 200 (no authentication), the manifest path `manifest`.
fn registry(manifest: impl Fn() -> Vec<u8> + Send + 'static) -> Fake {
    Fake::start(move |line| {
        if line.starts_with("GET /v2/ ") {
            response("200 OK", &[], b"{}")
        } else if line.contains("/manifests/") {
            manifest()
        } else {
            response("404 Not Found", &[], b"")
        }
    })
}

fn open(port: u16) -> cuda_aot_registry::Result<OciRemote> {
    OciRemote::open(
        &format!("oci://127.0.0.1:{port}/cuda-aot/release:v1"),
        OciOptions::default(),
    )
}

fn manifest_json(urls: bool) -> Vec<u8> {
    let digest = format!("sha256:{}", "0".repeat(64));
    let mut layer = serde_json::json!({
        "mediaType": "application/vnd.cuda-aot.timestamp.v1+json",
        "digest": digest,
        "size": 10,
        "annotations": { TITLE: "timestamp.json" },
    });
    if urls {
        layer["urls"] = serde_json::json!(["http://elsewhere.example/x"]);
    }
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": ARTIFACT_TYPE,
        "config": {
            "mediaType": "application/vnd.oci.empty.v1+json",
            "digest": digest,
            "size": 2,
        },
        "layers": [layer],
    }))
    .unwrap()
}

#[test]
fn issue_18_a_manifest_redirect_to_another_host_is_refused_and_that_host_sees_nothing() {
    let elsewhere = Fake::start(|_| response("200 OK", &[], &manifest_json(false)));
    let to = format!(
        "http://localhost:{}/v2/cuda-aot/release/manifests/v1",
        elsewhere.port
    );
    let reg = registry(move || response("302 Found", &[("Location", to.clone())], b""));
    let err = open(reg.port).err().expect("refused");
    assert!(
        err.to_string().contains("redirects to another host"),
        "{err}"
    );
    assert_eq!(elsewhere.hits.load(Ordering::SeqCst), 0);
}

#[test]
fn issue_18_a_manifest_past_the_cap_is_refused() {
    let big = MAX_MANIFEST as usize + 1024;
    let reg = registry(move || {
        let mut body = manifest_json(false);
        body.resize(big, b' ');
        response("200 OK", &[], &body)
    });
    let err = open(reg.port).err().expect("refused");
    assert!(err.to_string().contains("larger than"), "{err}");
    // A well-formed manifest of the same registry opens: the cap is what refused it.
    let ok = registry(|| response("200 OK", &[], &manifest_json(false)));
    let remote = open(ok.port).unwrap();
    assert_eq!(remote.paths().collect::<Vec<_>>(), ["timestamp.json"]);
}

#[test]
fn issue_18_layers_naming_foreign_urls_are_refused() {
    let reg = registry(|| response("200 OK", &[], &manifest_json(true)));
    let err = open(reg.port).err().expect("refused");
    assert!(err.to_string().contains("foreign URLs"), "{err}");
}

/// The fake server reads requests fully before answering (no half-read connections).
#[test]
fn the_fake_registry_answers_a_plain_request() {
    let reg = registry(|| response("200 OK", &[], b"m"));
    let mut c = TcpStream::connect(("127.0.0.1", reg.port)).unwrap();
    c.write_all(b"GET /v2/ HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
}
