//! A hostile OCI registry (a small HTTP server of its own on loopback: the real registry
//! the network tests run cannot be made to misbehave): the pull refuses a manifest that
//! redirects to another host (which then sees no request), a manifest past the size cap
//! (read no further than the cap), a referrers listing or referrer manifest past it, and
//! layers that name foreign URLs; the shared build
//! cache (`oci_cache`) refuses a layer declared too large before asking for it, and bytes
//! that do not match their layer's digest.

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

/// Issue 46: the referrers a sync reads back are capped like the artifact manifest. A
/// referrers listing past the cap (the referrers API's answer), and a referrer manifest past
/// it (listed through the tag schema), are each refused, read no further than the cap; the
/// same listing at its size is read.
#[test]
fn issue_46_a_referrers_listing_or_a_referrer_past_the_cap_is_refused() {
    let big = MAX_MANIFEST as usize + 1024;
    let padded = move |body: Vec<u8>, to: usize| {
        let mut body = body;
        body.resize(to, b' ');
        body
    };
    let empty = br#"{"schemaVersion":2,"manifests":[]}"#.to_vec();
    let listing = move |size: usize| {
        let empty = empty.clone();
        Fake::start(move |line| {
            if line.starts_with("GET /v2/ ") {
                response("200 OK", &[], b"{}")
            } else if line.contains("/manifests/v1 ") {
                response("200 OK", &[], &manifest_json(false))
            } else if line.contains("/referrers/") {
                response("200 OK", &[], &padded(empty.clone(), size))
            } else {
                response("404 Not Found", &[], b"")
            }
        })
    };
    let reg = listing(big);
    let err = open(reg.port).unwrap().attestations().expect_err("refused");
    assert!(err.to_string().contains("larger than"), "{err}");
    let reg = listing(1024);
    let (found, how) = open(reg.port).unwrap().attestations().unwrap();
    assert!(found.is_empty());
    assert_eq!(how, cuda_aot_registry::oci_referrers::Listing::Api);

    let referrer = format!("sha256:{}", "1".repeat(64));
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": referrer,
            "size": 100,
            "artifactType": cuda_aot_registry::oci_referrers::IN_TOTO,
        }],
    }))
    .unwrap();
    let reg = Fake::start(move |line| {
        if line.starts_with("GET /v2/ ") {
            response("200 OK", &[], b"{}")
        } else if line.contains("/manifests/v1 ") {
            response("200 OK", &[], &manifest_json(false))
        } else if line.contains("/manifests/sha256-") {
            response("200 OK", &[], &index)
        } else if line.contains(&format!("/manifests/{referrer} ")) {
            response("200 OK", &[], &padded(b"{}".to_vec(), big))
        } else {
            response("404 Not Found", &[], b"")
        }
    });
    let err = open(reg.port).unwrap().attestations().expect_err("refused");
    assert!(
        err.to_string().contains("larger than") && err.to_string().contains("reading referrer"),
        "{err}"
    );
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

/// A shared build cache object (`oci_cache`) as a hostile registry serves it: the manifest
/// describes one layer of `declared` bytes with the sha256 of `content`, and the blob
/// answers `served`. Returns the fake and the paths it was asked for.
fn cache_registry(
    rel: &'static str,
    content: &'static [u8],
    declared: usize,
    served: Vec<u8>,
) -> (Fake, Arc<std::sync::Mutex<Vec<String>>>) {
    use cuda_aot_registry::oci_cache::{CACHE_ARTIFACT_TYPE, CACHE_LAYER_TYPE};
    use sha2::Digest as _;
    let hex: String = sha2::Sha256::digest(content)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let digest = format!("sha256:{hex}");
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": CACHE_ARTIFACT_TYPE,
        "config": {
            "mediaType": "application/vnd.oci.empty.v1+json",
            "digest": format!("sha256:{}", "4".repeat(64)),
            "size": 2,
        },
        "layers": [{
            "mediaType": CACHE_LAYER_TYPE,
            "digest": digest,
            "size": declared,
            "annotations": { TITLE: rel },
        }],
    }))
    .unwrap();
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = asked.clone();
    let fake = Fake::start(move |line| {
        log.lock().unwrap().push(line.to_string());
        if line.starts_with("GET /v2/ ") {
            response("200 OK", &[], b"{}")
        } else if line.contains("/manifests/") {
            response(
                "200 OK",
                &[(
                    "Content-Type",
                    "application/vnd.oci.image.manifest.v1+json".into(),
                )],
                &manifest,
            )
        } else if line.contains("/blobs/") {
            response("200 OK", &[], &served)
        } else {
            response("404 Not Found", &[], b"")
        }
    });
    (fake, asked)
}

fn cache(port: u16) -> cuda_aot_registry::oci_cache::OciCache {
    cuda_aot_registry::oci_cache::OciCache::open(
        &format!("oci://127.0.0.1:{port}/team/cache"),
        OciOptions::default(),
    )
    .unwrap()
}

/// An attacker's registry behind a shared build cache: a layer declared larger than such an
/// object may be is refused before any byte of it is asked for, and bytes that do not match
/// their layer's digest are refused (never handed to the build, never retried); the same
/// object served honestly reads back.
#[test]
fn oversized_or_digest_mismatched_cache_layers_are_refused() {
    const REL: &str = "v1/entries/ab/entry.json";
    const CONTENT: &[u8] = b"{\"signed\":\"entry\"}";

    let (honest, _) = cache_registry(REL, CONTENT, CONTENT.len(), CONTENT.to_vec());
    assert_eq!(
        cache(honest.port).get(REL, 1 << 20).unwrap().as_deref(),
        Some(CONTENT)
    );

    let (big, asked) = cache_registry(REL, CONTENT, 64 << 20, vec![b'x'; 4096]);
    let err = cache(big.port).get(REL, 1 << 20).unwrap_err();
    assert!(err.to_string().contains("larger than"), "{err}");
    assert!(
        !asked.lock().unwrap().iter().any(|l| l.contains("/blobs/")),
        "the layer was asked for: {:?}",
        asked.lock().unwrap()
    );

    let mut forged = CONTENT.to_vec();
    forged[3] ^= 1;
    let (lying, asked) = cache_registry(REL, CONTENT, CONTENT.len(), forged);
    let err = cache(lying.port).get(REL, 1 << 20).unwrap_err();
    assert!(
        matches!(err, cuda_aot_registry::Error::Oci { .. }),
        "a wrong digest is the object's fault, not a failing store: {err:?}"
    );
    assert!(err.to_string().to_lowercase().contains("digest"), "{err}");
    let blob_requests = asked
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("/blobs/"))
        .count();
    assert_eq!(blob_requests, 1, "not retried: {:?}", asked.lock().unwrap());
}
