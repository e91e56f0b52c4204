//! Verified sync over HTTP from the real `cuda-aot-registry serve` process, and the faults
//! an operator meets: a server killed mid-transfer, a server that trickles or stalls, a
//! response longer than the signed size or endless, a blob altered on the server, a stale
//! server (rollback), a damaged local copy.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use common::*;
use cuda_aot::source::layout;
use cuda_aot_registry::remote::{HttpOptions, HttpRemote, MinSpeed};
use cuda_aot_registry::sync::{STAGING_DIR, SyncOptions, SyncReport, sync};
use cuda_aot_registry::{Error, Failure};

/// Quick retries, so fault tests do not wait for production backoffs.
fn fast() -> HttpOptions {
    HttpOptions {
        attempts: 3,
        backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        ..HttpOptions::default()
    }
}

fn sync_url(url: &str, target: &Path, root: &[u8], http: HttpOptions) -> Result<SyncReport, Error> {
    let remote = HttpRemote::new(url, http)?;
    sync(&remote, target, root, &SyncOptions::default())
}

/// Layout files visible in `dir` (the staging folder excluded).
fn visible_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().to_string_lossy().to_string();
            if rel.starts_with(STAGING_DIR) {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn sync_verifies_and_a_second_sync_transfers_only_what_changed() {
    let f = Fixture::new();
    f.append(&["sm_80", "sm_90"]);
    let s = ServeProcess::start(&f.reg_path(), "127.0.0.1:0", &[]);
    let target = f.path("mirror");

    let r = sync_url(&s.url(), &target, &f.root_file, fast()).unwrap();
    assert_eq!((r.index_version, r.timestamp_version, r.modules), (1, 1, 2));
    // timestamp, index, build statement, 2 manifests, 2 blobs, and root/1.root.json (the
    // audit walks the registry's chain from it, so a mirror holds it for new clients);
    // root/2.root.json was asked for and absent.
    assert_eq!(
        (r.files_fetched, r.files_reused, r.files_committed),
        (8, 0, 8)
    );
    assert_eq!(
        verify_dir(&target, &f.root_file).unwrap().index().version,
        1
    );
    assert_eq!(
        std::fs::read(target.join("timestamp.json")).unwrap(),
        std::fs::read(f.reg_path().join("timestamp.json")).unwrap()
    );
    assert!(
        !target.join(STAGING_DIR).join("files").exists(),
        "staging is emptied after a sync"
    );

    let before = s.requests().len();
    let r = sync_url(&s.url(), &target, &f.root_file, fast()).unwrap();
    assert!(r.up_to_date(), "{r:?}");
    assert_eq!(
        (r.files_fetched, r.files_reused, r.bytes_resumed),
        (1, 7, 0)
    );
    let asked: Vec<String> = s.requests()[before..]
        .iter()
        .map(|v| format!("{} {}", v["path"].as_str().unwrap(), v["status"]))
        .collect();
    assert_eq!(
        asked,
        ["/root/2.root.json 404", "/timestamp.json 200"],
        "an unchanged registry costs two small requests"
    );

    let new = f.module("sm_120", None);
    f.append_modules(std::slice::from_ref(&new));
    let r = sync_url(&s.url(), &target, &f.root_file, fast()).unwrap();
    assert_eq!((r.index_version, r.modules), (2, 3));
    // timestamp, index 2, the new build statement, manifest and blob; the rest (root/1
    // among it) is reused.
    assert_eq!(
        (r.files_fetched, r.files_committed, r.files_reused),
        (5, 5, 6)
    );
    assert!(r.bytes_fetched >= new.0.size);
    assert_eq!(
        verify_dir(&target, &f.root_file).unwrap().index().version,
        2
    );
}

#[test]
fn a_server_killed_mid_transfer_leaves_the_previous_version_and_the_next_sync_resumes() {
    let f = Fixture::new();
    f.append(&["sm_90"]);
    let mut s = ServeProcess::start(&f.reg_path(), "127.0.0.1:0", &[]);
    let target = f.path("mirror");
    sync_url(&s.url(), &target, &f.root_file, fast()).unwrap();
    let v1_files = visible_files(&target);

    let big = f.module("compute_90", Some(4 << 20));
    let size = big.0.size;
    f.append_modules(std::slice::from_ref(&big));
    let proxy = FaultProxy::start(s.addr, Mode::Throttle(1 << 20));
    let (url, t2, root) = (proxy.url(), target.clone(), f.root_file.clone());
    let syncing = std::thread::spawn(move || sync_url(&url, &t2, &root, fast()));
    while proxy.forwarded() < (1 << 20) {
        assert!(!syncing.is_finished(), "the sync ended before the kill");
        std::thread::sleep(Duration::from_millis(5));
    }
    s.kill();
    proxy.cut();
    let err = syncing.join().unwrap().unwrap_err();
    assert!(matches!(&err, Error::Transfer { attempts: 3, .. }), "{err}");
    assert!(err.fix().contains("resume"), "{err}: {}", err.fix());
    // Nothing of v2 is visible; the copy verifies at v1.
    assert_eq!(visible_files(&target), v1_files);
    assert_eq!(
        verify_dir(&target, &f.root_file).unwrap().index().version,
        1
    );
    let partial = target
        .join(STAGING_DIR)
        .join("files")
        .join(Fixture::blob_rel(&big));
    let kept = std::fs::metadata(&partial).unwrap().len();
    assert!(
        kept >= 512 << 10 && kept < size,
        "partial download kept: {kept}"
    );

    // The server comes back on the same address: the download continues where it stopped.
    let s2 = ServeProcess::start(&f.reg_path(), &s.addr.to_string(), &[]);
    let r = sync_url(&s2.url(), &target, &f.root_file, fast()).unwrap();
    assert_eq!(r.index_version, 2);
    assert_eq!(r.bytes_resumed, kept);
    assert!(r.bytes_fetched < size, "{r:?}");
    let ranged = s2.wait_log(|v| v["path"] == format!("/{}", Fixture::blob_rel(&big)));
    assert_eq!(ranged["status"], 206);
    assert_eq!(ranged["range"], format!("bytes={kept}-"));
    assert_eq!(
        verify_dir(&target, &f.root_file).unwrap().index().version,
        2
    );
}

#[test]
fn a_trickling_server_fails_on_the_minimum_speed_with_a_clear_error() {
    let f = Fixture::new();
    f.append(&["sm_90"]);
    let s = ServeProcess::start(&f.reg_path(), "127.0.0.1:0", &[]);
    let proxy = FaultProxy::start(s.addr, Mode::Trickle(Duration::from_millis(20)));
    let http = HttpOptions {
        attempts: 2,
        min_speed: Some(MinSpeed {
            bytes_per_sec: 1024,
            window: Duration::from_secs(1),
        }),
        ..fast()
    };
    let target = f.path("mirror");
    let err = sync_url(&proxy.url(), &target, &f.root_file, http).unwrap_err();
    match &err {
        Error::Transfer {
            attempts: 2,
            failure: Failure::TooSlow { min_rate: 1024, .. },
            ..
        } => {}
        other => panic!("{other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("too slow") && text.contains("bytes/s"),
        "{text}"
    );
    assert!(err.fix().contains("stalling"), "{}", err.fix());
    assert!(visible_files(&target).is_empty());
}

#[test]
fn a_server_that_never_answers_hits_the_read_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming() {
            held.push(c); // accepted, never answered
        }
    });
    let http = HttpOptions {
        attempts: 2,
        read_timeout: Duration::from_secs(1),
        ..fast()
    };
    let f = Fixture::new();
    let err = sync_url(&format!("http://{addr}/"), &f.path("m"), &f.root_file, http).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Transfer {
                failure: Failure::Timeout { secs: 1 },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_response_longer_than_the_signed_size_is_refused_at_the_cap() {
    let f = Fixture::new();
    let m = f.module("sm_90", None);
    f.append_modules(std::slice::from_ref(&m));
    let blob = f.reg_path().join(Fixture::blob_rel(&m));
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes.extend(std::iter::repeat_n(0u8, 8 << 20));
    std::fs::write(&blob, &bytes).unwrap();
    let s = ServeProcess::start(&f.reg_path(), "127.0.0.1:0", &[]);
    let target = f.path("mirror");
    let err = sync_url(&s.url(), &target, &f.root_file, fast()).unwrap_err();
    let size = m.0.size;
    match &err {
        Error::Core(cuda_aot::Error::SizeMismatch {
            expected,
            actual,
            at_least: true,
            ..
        }) => assert_eq!(
            (*expected, *actual),
            (size, size + 1),
            "read stopped at the cap"
        ),
        other => panic!("{other}"),
    }
    assert!(visible_files(&target).is_empty());
    assert!(
        !target
            .join(STAGING_DIR)
            .join("files")
            .join(Fixture::blob_rel(&m))
            .exists(),
        "the refused bytes are not kept"
    );
}

#[test]
fn an_endless_response_is_cut_at_the_file_limit() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let mut c = c.unwrap();
            std::thread::spawn(move || {
                let mut req = [0u8; 4096];
                let _ = c.read(&mut req);
                let head = if String::from_utf8_lossy(&req).starts_with("GET /timestamp.json") {
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                } else {
                    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
                };
                let _ = c.write_all(head.as_bytes());
                let chunk = format!("4000\r\n{}\r\n", "x".repeat(0x4000));
                while c.write_all(chunk.as_bytes()).is_ok() {}
            });
        }
    });
    let f = Fixture::new();
    let err = sync_url(
        &format!("http://{addr}/"),
        &f.path("m"),
        &f.root_file,
        fast(),
    )
    .unwrap_err();
    match &err {
        Error::Core(cuda_aot::Error::TooLarge { limit, actual, .. }) => {
            assert_eq!(*actual, limit + 1, "stopped one byte past the limit")
        }
        other => panic!("{other}"),
    }
}

#[test]
fn a_blob_altered_on_the_server_is_refused_and_nothing_is_stored() {
    let f = Fixture::new();
    f.append(&["sm_90"]);
    let s = ServeProcess::start(&f.reg_path(), "127.0.0.1:0", &[]);
    let target = f.path("mirror");
    sync_url(&s.url(), &target, &f.root_file, fast()).unwrap();
    let v1_files = visible_files(&target);

    let m = f.module("sm_120", None);
    f.append_modules(std::slice::from_ref(&m));
    let blob = f.reg_path().join(Fixture::blob_rel(&m));
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&blob, &bytes).unwrap();
    let err = sync_url(&s.url(), &target, &f.root_file, fast()).unwrap_err();
    assert!(
        matches!(&err, Error::Core(cuda_aot::Error::DigestMismatch { .. })),
        "{err}"
    );
    assert_eq!(visible_files(&target), v1_files, "nothing new is visible");
    assert!(
        !target
            .join(STAGING_DIR)
            .join("files")
            .join(Fixture::blob_rel(&m))
            .exists(),
        "the altered blob is not kept"
    );
    assert_eq!(
        verify_dir(&target, &f.root_file).unwrap().index().version,
        1
    );
}

#[test]
fn a_stale_server_cannot_roll_the_local_copy_back() {
    let f = Fixture::new();
    f.append(&["sm_90"]);
    let old = f.path("old");
    copy_dir(&f.reg_path(), &old);
    f.append(&["sm_120"]);
    let target = f.path("mirror");
    let s = ServeProcess::start(&f.reg_path(), "127.0.0.1:0", &[]);
    sync_url(&s.url(), &target, &f.root_file, fast()).unwrap();

    let stale = ServeProcess::start(&old, "127.0.0.1:0", &[]);
    let err = sync_url(&stale.url(), &target, &f.root_file, fast()).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Core(cuda_aot::Error::Rollback {
                seen: 2,
                got: 1,
                ..
            })
        ),
        "{err}"
    );
    assert_eq!(
        verify_dir(&target, &f.root_file).unwrap().index().version,
        2
    );
}

/// Issue 18: once the registry's chain holds a rotation that replaced the publisher keys,
/// the target's own copy still sets the floor: a mirror serving an older release signed
/// after that rotation cannot roll the target back (the floor used to carry root v0, so
/// the rotation, already in the chain, discarded the target's versions).
#[test]
fn issue_18_a_mirror_cannot_roll_a_target_back_after_a_publisher_rotation() {
    let f = Fixture::new();
    f.append(&["sm_90"]);
    let publisher2 = key();
    let root2 = f.root_rotating_publisher(2, &publisher2);
    std::fs::write(f.reg_path().join(layout::root(2)), &root2).unwrap();
    let p = f.append_modules_as(&[f.module("sm_80", None)], &publisher2);
    assert!(p.recovered, "{p:?}");
    let old = f.path("old");
    copy_dir(&f.reg_path(), &old);
    let newer = f.append_modules_as(&[f.module("sm_120", None)], &publisher2);
    assert!(
        newer.index_version > p.index_version,
        "{newer:?} after {p:?}"
    );

    let target = f.path("mirror");
    let s = ServeProcess::start(&f.reg_path(), "127.0.0.1:0", &[]);
    let r = sync_url(&s.url(), &target, &f.root_file, fast()).unwrap();
    assert_eq!(r.index_version, newer.index_version);
    let stale = ServeProcess::start(&old, "127.0.0.1:0", &[]);
    let err = sync_url(&stale.url(), &target, &f.root_file, fast()).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Core(cuda_aot::Error::Rollback { what, seen, got })
                if what == "timestamp" && *seen == newer.timestamp_version && *got == p.timestamp_version
        ),
        "{err}"
    );
    assert_eq!(
        verify_dir(&target, &f.root_file).unwrap().index().version,
        newer.index_version,
        "the target still holds the newer release"
    );
}

/// Issue 18: a FIFO where the target's `timestamp.json` (or any file a sync would replace)
/// belongs is refused at once, naming it; the sync used to wait on it forever, holding
/// the target's lock.
#[test]
fn issue_18_a_fifo_in_the_target_is_refused_without_blocking() {
    let f = Fixture::new();
    f.append(&["sm_90"]);
    let s = ServeProcess::start(&f.reg_path(), "127.0.0.1:0", &[]);
    for victim in [layout::TIMESTAMP.to_string(), layout::index(1)] {
        let target = f.path(&format!("mirror-{}", victim.len()));
        sync_url(&s.url(), &target, &f.root_file, fast()).unwrap();
        let fifo = target.join(&victim);
        std::fs::remove_file(&fifo).unwrap();
        mkfifo(&fifo);
        let (tx, rx) = std::sync::mpsc::channel();
        let (url, root, t) = (s.url(), f.root_file.clone(), target.clone());
        std::thread::spawn(move || {
            let _ = tx.send(sync_url(&url, &t, &root, fast()));
        });
        let res = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("sync blocked on the FIFO at {victim}"));
        let err = res.unwrap_err();
        assert!(
            matches!(&err, Error::Core(cuda_aot::Error::NotRegular { path, .. }) if *path == fifo),
            "{victim}: {err}"
        );
        assert!(err.fix().contains("remove"), "{}", err.fix());
        // Nothing was replaced: the FIFO is still there.
        use std::os::unix::fs::FileTypeExt;
        assert!(
            std::fs::symlink_metadata(&fifo)
                .unwrap()
                .file_type()
                .is_fifo()
        );
    }
}

#[test]
fn a_damaged_local_copy_is_repaired_from_the_server() {
    let f = Fixture::new();
    f.append(&["sm_80", "sm_90"]);
    let s = ServeProcess::start(&f.reg_path(), "127.0.0.1:0", &[]);
    let target = f.path("mirror");
    sync_url(&s.url(), &target, &f.root_file, fast()).unwrap();
    // A damaged immutable file (not named by its digest) and a damaged blob.
    std::fs::write(target.join(layout::index(1)), b"{}").unwrap();
    let m = f.module("sm_90", None);
    let blob = target.join(Fixture::blob_rel(&m));
    std::fs::write(&blob, b"garbage").unwrap();
    assert!(verify_dir(&target, &f.root_file).is_err());
    let r = sync_url(&s.url(), &target, &f.root_file, fast()).unwrap();
    assert_eq!(r.files_committed, 2, "{r:?}");
    assert_eq!(
        verify_dir(&target, &f.root_file).unwrap().index().version,
        1
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}
