//! Publishing over HTTP to the real `cuda-aot-registry serve` process: the library's
//! `HttpStore` publishes and a client syncs what it published; a valid token alone cannot
//! publish (wrongly signed statements, indexes and manifests nobody attested are refused,
//! and nothing becomes visible); uploads are capped, conditional, and authenticated.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use cuda_aot::metadata::{DocRef, Index, IndexEntry, IndexRef, Time, Timestamp};
use cuda_aot::source::layout;
use cuda_aot::{Digest, Limits, SecretKey};
use cuda_aot_registry::http_store::HttpStore;
use cuda_aot_registry::remote::{HttpOptions, HttpRemote};
use cuda_aot_registry::sync::{SyncOptions, sync};
use cuda_aot_registry::{Error, PublishOptions, Published, Release, SignedBuild, Store};

const TOKEN: &str = "s3cret-token-for-tests-0123456789";

/// A publishing server over an empty registry folder, trusting the fixture's root.
fn publishing_server(f: &Fixture) -> ServeProcess {
    publishing_server_with(f, &[])
}

/// [`publishing_server`] with `extra` arguments.
fn publishing_server_with(f: &Fixture, extra: &[&str]) -> ServeProcess {
    let token = f.path("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(f.path("root.json"), &f.root_file).unwrap();
    let served = f.path("served");
    std::fs::create_dir_all(&served).unwrap();
    let trust = f.path("root.json");
    let mut args = vec![
        "--publish-token-file",
        token.to_str().unwrap(),
        "--trust",
        trust.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ServeProcess::start(&served, "127.0.0.1:0", &args)
}

fn store(s: &ServeProcess, token: &str) -> HttpStore {
    HttpStore::new(
        &s.url(),
        token,
        HttpOptions {
            attempts: 2,
            backoff: Duration::from_millis(10),
            ..HttpOptions::default()
        },
    )
    .unwrap()
}

fn publish_via(
    st: &dyn Store,
    f: &Fixture,
    mods: &[Module],
    publisher: &SecretKey,
) -> Result<Published, Error> {
    let root = cuda_aot::trust::verify_anchor(&f.root_file, &Limits::default(), "root").unwrap();
    let Build { statement, files } = Build::legacy(mods, &[&f.keys.builder]);
    let release = Release {
        build: SignedBuild::new(&root, statement, files, &Default::default())?,
        promotions: vec![],
    };
    cuda_aot_registry::publish::ensure_root(st, &f.root_file, &Default::default())?;
    cuda_aot_registry::publish::publish(
        st,
        &f.root_file,
        &release,
        &[publisher],
        &PublishOptions::default(),
    )
}

fn put(s: &ServeProcess, rel: &str, body: &[u8], headers: &[(&str, &str)]) -> (u16, String) {
    cuda_aot_registry::remote::install_tls_provider();
    let client = reqwest::blocking::Client::new();
    let mut r = client.put(format!("{}{rel}", s.url())).body(body.to_vec());
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let resp = r.send().unwrap();
    (resp.status().as_u16(), resp.text().unwrap())
}

fn bearer() -> (&'static str, String) {
    ("Authorization", format!("Bearer {TOKEN}"))
}

fn visible(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for top in ["timestamp.json", "index"] {
        let p = dir.join(top);
        if p.exists() {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_release_published_over_http_syncs_and_verifies() {
    let f = Fixture::new();
    let s = publishing_server(&f);
    let st = store(&s, TOKEN);
    let mods = [f.module("sm_80", None), f.module("sm_90", None)];
    let p = publish_via(&st, &f, &mods, &f.keys.publisher).unwrap();
    assert_eq!(
        (p.index_version, p.unchanged, p.blobs_written),
        (1, false, 2)
    );
    // The same build again commits nothing.
    let p = publish_via(&st, &f, &mods, &f.keys.publisher).unwrap();
    assert!(
        p.unchanged && p.blobs_written == 0 && p.blobs_reused == 2,
        "{p:?}"
    );

    let target = f.path("mirror");
    let remote = HttpRemote::new(&s.url(), HttpOptions::default()).unwrap();
    let r = sync(&remote, &target, &f.root_file, &SyncOptions::default()).unwrap();
    assert_eq!((r.index_version, r.modules), (1, 2));
    assert_eq!(
        verify_dir(&target, &f.root_file).unwrap().index().version,
        1
    );

    // A second build: index v2, visible to the next sync.
    let p = publish_via(&st, &f, &[f.module("sm_120", None)], &f.keys.publisher).unwrap();
    assert_eq!(p.index_version, 2);
    let r = sync(&remote, &target, &f.root_file, &SyncOptions::default()).unwrap();
    assert_eq!((r.index_version, r.modules), (2, 1));

    // Each accepted write was logged with what the server did.
    let notes: Vec<String> = s
        .requests()
        .iter()
        .filter(|v| v["method"] == "PUT")
        .map(|v| format!("{} {}", v["status"], v["note"].as_str().unwrap_or("")))
        .collect();
    assert!(
        notes.iter().any(|n| n.starts_with("201 stored blob")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("200 blob already present")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("201 committed timestamp v1")),
        "{notes:?}"
    );
}

/// Issue 18: with a stolen publish token, PUTting back an older but unexpired timestamp
/// (anyone can download one) after a rotation of the publisher keys is refused, as it is
/// without a rotation; the server keeps serving the newer release. (The floor the server
/// built from the timestamp it serves carried root v0, so the rotation already in the
/// chain discarded it: 200, and the older release was served.)
#[test]
fn issue_18_a_stolen_token_cannot_put_back_an_older_timestamp_after_a_publisher_rotation() {
    let f = Fixture::new();
    let s = publishing_server(&f);
    let st = store(&s, TOKEN);
    let auth = bearer();
    let h = [(auth.0, auth.1.as_str())];
    publish_via(&st, &f, &[f.module("sm_90", None)], &f.keys.publisher).unwrap();
    let publisher2 = key();
    let root2 = f.root_rotating_publisher(2, &publisher2);
    let (status, text) = put(&s, &layout::root(2), &root2, &h);
    assert_eq!(status, 201, "{text}");
    let p = publish_via(&st, &f, &[f.module("sm_80", None)], &publisher2).unwrap();
    assert!(p.recovered, "{p:?}");
    let served = f.path("served");
    let older = std::fs::read(served.join(layout::TIMESTAMP)).unwrap();
    let newer = publish_via(&st, &f, &[f.module("sm_120", None)], &publisher2).unwrap();
    assert!(newer.timestamp_version > p.timestamp_version, "{newer:?}");
    let current = std::fs::read(served.join(layout::TIMESTAMP)).unwrap();

    let tag = format!("\"{}\"", Digest::of(&current).hex());
    let (status, text) = put(
        &s,
        layout::TIMESTAMP,
        &older,
        &[h[0], ("If-Match", tag.as_str())],
    );
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("rollback refused"), "{text}");
    assert_eq!(
        std::fs::read(served.join(layout::TIMESTAMP)).unwrap(),
        current,
        "the newer timestamp is still served"
    );
    assert_eq!(
        verify_dir(&served, &f.root_file).unwrap().index().version,
        newer.index_version
    );
}

#[test]
fn without_the_token_nothing_is_accepted() {
    let f = Fixture::new();
    let s = publishing_server(&f);
    let mods = [f.module("sm_90", None)];
    let err = publish_via(
        &store(&s, "wrong-token-0123456789"),
        &f,
        &mods,
        &f.keys.publisher,
    )
    .unwrap_err();
    assert!(matches!(&err, Error::Status { status: 401, .. }), "{err}");
    assert!(err.fix().contains("token"), "{}", err.fix());
    let blob = mods[0].1.clone();
    let (status, _) = put(&s, &Fixture::blob_rel(&mods[0]), &blob, &[]);
    assert_eq!(status, 401);
    assert!(
        std::fs::read_dir(f.path("served"))
            .unwrap()
            .next()
            .is_none()
    );
}

#[test]
fn a_valid_token_alone_cannot_publish() {
    let f = Fixture::new();
    let s = publishing_server(&f);
    let auth = bearer();
    let h = [(auth.0, auth.1.as_str())];
    let thief = key();
    // Content-addressed files are inert bytes: accepted when they hash to their name.
    let m = f.module("sm_90", None);
    let Build { statement, files } = Build::legacy(std::slice::from_ref(&m), &[&thief]);
    let (manifest_file, blob) = &files[0];
    assert_eq!(put(&s, &Fixture::blob_rel(&m), blob, &h).0, 201);
    let manifest_rel = layout::manifest(&Digest::of(manifest_file));
    assert_eq!(put(&s, &manifest_rel, manifest_file, &h).0, 201);
    // A blob that does not hash to its name is refused.
    let (status, text) = put(&s, &Fixture::blob_rel(&m), b"not the blob", &h);
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("blake3"), "{text}");

    // A build statement signed by a key the trust root does not list as a builder.
    let stmt_rel = layout::statement(&Digest::of(&statement));
    let (status, text) = put(&s, &stmt_rel, &statement, &h);
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("builder"), "{text}");

    // An index signed by a key that is not the publisher's.
    let entry = IndexEntry {
        module: m.0.identity.module.clone(),
        sm: m.0.identity.sm,
        kind: m.0.identity.kind,
        manifest: Digest::of(manifest_file),
        manifest_size: manifest_file.len() as u64,
        identity: m.0.identity.digest(),
        statement: Digest::of(&statement),
        since: 1,
    };
    let index = Index {
        schema: Index::SCHEMA.into(),
        version: 1,
        expires: Time::now().plus(Duration::from_secs(86_400)),
        channel: cuda_aot::Channel::Dev,
        statements: vec![DocRef {
            digest: Digest::of(&statement),
            size: statement.len() as u64,
        }],
        promotions: vec![],
        entries: vec![entry],
        teams: vec![],
    };
    let forged = sign_doc(&index, &[&thief]);
    let (status, text) = put(
        &s,
        &layout::index(1),
        &forged,
        &[h[0], ("If-None-Match", "*")],
    );
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("publisher"), "{text}");

    // Even the publisher's own signature cannot make a manifest visible that no builder
    // attested: the index is staged, and the timestamp that would publish it is refused
    // by the full verification.
    let root_rel = layout::root(1);
    assert_eq!(put(&s, &root_rel, &f.root_file, &h).0, 201);
    let index_file = sign_doc(&index, &[&f.keys.publisher]);
    let (status, text) = put(
        &s,
        &layout::index(1),
        &index_file,
        &[h[0], ("If-None-Match", "*")],
    );
    assert_eq!(status, 201, "{text}");
    let ts = Timestamp {
        schema: Timestamp::SCHEMA.into(),
        version: 1,
        expires: Time::now().plus(Duration::from_secs(3_600)),
        index: IndexRef {
            version: 1,
            digest: Digest::of(&index_file),
            size: index_file.len() as u64,
        },
    };
    let ts_file = sign_doc(&ts, &[&f.keys.publisher]);
    let (status, text) = put(
        &s,
        layout::TIMESTAMP,
        &ts_file,
        &[h[0], ("If-None-Match", "*")],
    );
    assert_eq!(status, 422, "{text}");
    assert!(text.contains(&format!("{stmt_rel}: missing")), "{text}");
    assert!(!text.contains(f.path("served").to_str().unwrap()), "{text}");
    assert!(
        visible(&f.path("served")).is_empty(),
        "no index or timestamp became visible"
    );
}

#[test]
fn writes_are_conditional_and_capped() {
    let f = Fixture::new();
    let s = publishing_server(&f);
    let auth = bearer();
    let h = [(auth.0, auth.1.as_str())];
    // The timestamp is replaced only with a condition.
    let (status, text) = put(&s, layout::TIMESTAMP, b"{}", &h);
    assert_eq!(status, 428, "{text}");
    // An index only with If-None-Match: *.
    let (status, _) = put(&s, &layout::index(1), b"{}", &h);
    assert_eq!(status, 428);
    // A body over the kind's limit is refused before it is read.
    let big = vec![b' '; Limits::default().timestamp as usize + 1];
    let (status, _) = put(&s, layout::TIMESTAMP, &big, &[h[0], ("If-None-Match", "*")]);
    assert_eq!(status, 413);
    // Not a registry path, or a kind the server does not accept.
    assert_eq!(put(&s, "notes/readme.txt", b"x", &h).0, 404);
    assert_eq!(put(&s, ".lock", b"x", &h).0, 404);
    // Reads stay open to anyone.
    assert_eq!(http_get(s.addr, "/healthz", &[]).status, 200);
    let r = raw_request(s.addr, "DELETE", "/timestamp.json", &[]);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD, PUT"));
}

#[test]
fn a_publishing_server_refuses_to_start_with_a_readable_token_file() {
    let f = Fixture::new();
    let token = f.path("token");
    std::fs::write(&token, TOKEN).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(f.path("root.json"), &f.root_file).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cuda-aot-registry"))
        .args(["serve", "--addr", "127.0.0.1:0", "--root"])
        .arg(f.reg_path())
        .arg("--publish-token-file")
        .arg(&token)
        .arg("--trust")
        .arg(f.path("root.json"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chmod 600"), "{err}");
    // And publishing needs both the token and the trust root.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cuda-aot-registry"))
        .args(["serve", "--addr", "127.0.0.1:0", "--root"])
        .arg(f.reg_path())
        .arg("--publish-token-file")
        .arg(&token)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "usage error");
}

/// Finding 1: an authenticated upload trickled at one byte a second was held open for as
/// long as the client liked. Now the body must arrive within `--body-timeout-secs`: 408,
/// the connection closed, nothing stored.
#[test]
fn finding_1_an_upload_trickled_at_one_byte_a_second_is_cut_off() {
    let f = Fixture::new();
    let s = publishing_server_with(&f, &["--body-timeout-secs", "2"]);
    let m = f.module("sm_90", None);
    let rel = Fixture::blob_rel(&m);
    let mut c = TcpStream::connect(s.addr).unwrap();
    write!(
        c,
        "PUT /{rel} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        m.1.len()
    )
    .unwrap();
    let t = Instant::now();
    c.set_read_timeout(Some(Duration::from_millis(1000)))
        .unwrap();
    let mut got = Vec::new();
    for byte in &m.1 {
        if c.write_all(std::slice::from_ref(byte)).is_err() {
            break;
        }
        let mut buf = [0u8; 4096];
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
        if got.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the upload is still open"
        );
    }
    let _ = c.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("connection: close"), "{text}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(!f.path("served").join(&rel).exists());
    let line = s.wait_log(|v| v["method"] == "PUT");
    assert_eq!(line["note"], "body timeout");
}

/// Issue 43, item 3: an upload that stops arriving holds its connection slot only for the
/// stall bound, not for the whole upload time (`--body-timeout-secs`, 120 here): the
/// connection is closed, the cut and the PUT are logged, and nothing is stored.
#[test]
fn issue_43_a_stalled_upload_is_cut_by_the_stall_bound() {
    let f = Fixture::new();
    let s = publishing_server_with(&f, &["--stall-timeout-secs", "1"]);
    let m = f.module("sm_90", None);
    let rel = Fixture::blob_rel(&m);
    let mut c = TcpStream::connect(s.addr).unwrap();
    write!(
        c,
        "PUT /{rel} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        m.1.len()
    )
    .unwrap();
    c.write_all(&m.1[..16]).unwrap();
    // Nothing more is sent; the server closes the connection (a read-timeout error here
    // would mean it never did).
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let cut = s.wait_log(|v| v["event"] == "connection_cut");
    assert_eq!(cut["reason"], "stall timeout");
    assert_eq!(cut["stalled"], "request");
    let line = s.wait_log(|v| v["method"] == "PUT");
    assert_eq!(line["note"], "body stalled");
    assert!(!f.path("served").join(&rel).exists());
}

/// Finding 4: an authenticated PUT wrote through a symbolic link planted as the
/// `blobs/blake3/<aa>` folder, to outside the root. Now it is refused (422, naming the
/// link, with Fix advice) and nothing is written.
#[test]
fn finding_4_a_put_writes_nothing_through_a_linked_folder() {
    let f = Fixture::new();
    let s = publishing_server(&f);
    let auth = bearer();
    let h = [(auth.0, auth.1.as_str())];
    let m = f.module("sm_90", None);
    let rel = Fixture::blob_rel(&m);
    let (aa, _) = rel.rsplit_once('/').unwrap();
    let outside = f.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let served = f.path("served");
    std::fs::create_dir_all(served.join("blobs/blake3")).unwrap();
    std::os::unix::fs::symlink(&outside, served.join(aa)).unwrap();
    let (status, text) = put(&s, &rel, &m.1, &h);
    assert_eq!(status, 422, "{text}");
    assert!(
        text.contains(&format!("{aa}: is a symbolic link")),
        "{text}"
    );
    assert!(text.contains("Fix:"), "{text}");
    assert!(!text.contains(served.to_str().unwrap()), "{text}");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "written outside the root"
    );
}

/// Finding 4, the directory publisher (`cargo xtask publish` to a folder) through the
/// same code: a publish into a registry whose `blobs/blake3/<aa>` is a link fails with
/// `Symlink` naming it, and writes nothing outside; no timestamp becomes visible.
#[test]
fn finding_4_a_folder_publish_writes_nothing_through_a_linked_folder() {
    let f = Fixture::new();
    let m = f.module("sm_90", None);
    let rel = Fixture::blob_rel(&m);
    let (aa, _) = rel.rsplit_once('/').unwrap();
    let outside = f.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let reg = f.reg_path();
    std::fs::create_dir_all(reg.join("blobs/blake3")).unwrap();
    std::os::unix::fs::symlink(&outside, reg.join(aa)).unwrap();
    let err = publish_via(&f.registry(), &f, &[m], &f.keys.publisher).unwrap_err();
    assert!(
        matches!(&err, Error::Core(cuda_aot::Error::Symlink { path }) if *path == reg.join(aa)),
        "{err}"
    );
    assert!(err.fix().contains("symbolic link"), "{}", err.fix());
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "written outside the root"
    );
    assert!(visible(&reg).is_empty(), "nothing became visible");
}

/// Finding 6: wrong tokens were not throttled. Now, after 5 failures from one address,
/// every request of that address (even with the right token) is answered 429 with a
/// Retry-After that doubles with each further failure; after the wait, the right token is
/// accepted again and clears the count. (Tokens are compared as blake3 hashes, whose `==`
/// is constant-time.)
#[test]
fn finding_6_wrong_tokens_are_throttled() {
    let f = Fixture::new();
    let s = publishing_server(&f);
    let m = f.module("sm_90", None);
    let rel = Fixture::blob_rel(&m);
    let wrong = [("Authorization", "Bearer wrong-token-0123456789")];
    let auth = bearer();
    let right = [(auth.0, auth.1.as_str())];
    let attempt = |h: &[(&str, &str)]| -> (u16, Option<String>) {
        let r = raw_request(
            s.addr,
            "PUT",
            &format!("/{rel}"),
            &[h, &[("Content-Length", "0")]].concat(),
        );
        (r.status, r.header("retry-after").map(str::to_string))
    };
    for n in 1..=6 {
        assert_eq!(attempt(&wrong).0, 401, "failure {n} is answered 401");
    }
    // The sixth failure started a wait of 1 s: wrong and right tokens alike get 429.
    assert_eq!(attempt(&wrong), (429, Some("1".into())));
    assert_eq!(attempt(&right), (429, Some("1".into())));
    std::thread::sleep(Duration::from_millis(1100));
    // A seventh failure doubles the wait.
    assert_eq!(attempt(&wrong).0, 401);
    assert_eq!(attempt(&right), (429, Some("2".into())));
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(
        put(&s, &rel, &m.1, &right).0,
        201,
        "the right token after the wait"
    );
    // The success cleared the count.
    assert_eq!(attempt(&wrong).0, 401);
    assert_eq!(
        attempt(&right).0,
        422,
        "an empty body is not the blob: past the token check"
    );
    let line = s.wait_log(|v| v["status"] == 429);
    assert_eq!(line["note"], "throttled: failed token attempts");
}
