//! The real `cuda-aot-registry serve` process on loopback against hostile clients and a
//! hostile local writer: one test per finding of the serve review (docs/security.md lists
//! them). Hostile clients connect from 127.0.0.2, honest ones from 127.0.0.1, so the
//! per-address cap can be seen sparing the honest client.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use cuda_aot::Digest;
use cuda_aot::source::layout;

/// The longest an honest client's request may take while hostile clients hold
/// connections (docs/security.md states this bound). Generous: the test shares two
/// cores with a compiler.
const HONEST_BOUND: Duration = Duration::from_secs(5);

/// A connection from `from` (a loopback address) to `to`, with a receive buffer of
/// `rcvbuf` bytes (small: the server's writes stall sooner).
fn connect_from(from: &str, to: SocketAddr, rcvbuf: Option<u32>) -> std::io::Result<TcpStream> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let s = rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4()?;
        if let Some(n) = rcvbuf {
            sock.set_recv_buffer_size(n)?;
        }
        sock.bind(format!("{from}:0").parse().unwrap())?;
        sock.connect(to).await
    })?;
    let s = s.into_std()?;
    s.set_nonblocking(false)?;
    Ok(s)
}

/// Whether the server closed `s` (EOF or reset) within `within`, reading and discarding
/// whatever it sent first.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = vec![0u8; 1 << 16];
    while t.elapsed() < within {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

/// An honest GET, timed: status and body must be right, and it must take less than
/// [`HONEST_BOUND`].
fn honest_get(addr: SocketAddr, path: &str, expect: &[u8]) -> Duration {
    let t = Instant::now();
    let r = http_get(addr, path, &[]);
    let took = t.elapsed();
    assert_eq!(r.status, 200, "{path}");
    assert!(r.body == expect, "{path}: wrong bytes");
    assert!(
        took < HONEST_BOUND,
        "{path} took {took:?} beside hostile clients"
    );
    took
}

/// Finding 1: no send timeout. Clients that pipeline GETs without reading the answers,
/// and clients that never read a large blob, held their connections (and the server's
/// places) for as long as they liked. Now: the per-address cap refuses the hostile host's
/// extra connections at once, the stall bound cuts the stalled ones, and an honest client
/// is served within [`HONEST_BOUND`] throughout.
#[test]
fn finding_1_slow_readers_and_pipeliners_do_not_lock_out_an_honest_client() {
    let f = Fixture::new();
    let big = f.module("compute_90", Some(8 << 20));
    f.append_modules(&[big.clone(), f.module("sm_90", None)]);
    let s = ServeProcess::start(
        &f.reg_path(),
        "127.0.0.1:0",
        &[
            "--max-connections",
            "16",
            "--max-connections-per-addr",
            "8",
            "--stall-timeout-secs",
            "2",
            // Past the cap of 1000, a pipeliner's connection is closed by the server (its
            // 1000 answers fit in loopback's socket buffers) before it ever stalls.
            "--max-requests-per-connection",
            "1000000",
        ],
    );
    let ts = std::fs::read(f.reg_path().join("timestamp.json")).unwrap();
    let blob_path = format!("/{}", Fixture::blob_rel(&big));

    // Four pipeliners: thousands of GETs of timestamp.json, never a byte read.
    let stop = Arc::new(AtomicBool::new(false));
    let mut hostile = Vec::new();
    for _ in 0..4 {
        let c = connect_from("127.0.0.2", s.addr, Some(4096)).unwrap();
        let mut w = c.try_clone().unwrap();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let one = "GET /timestamp.json HTTP/1.1\r\nHost: x\r\n\r\n".repeat(500);
            while !stop.load(Ordering::Relaxed) && w.write_all(one.as_bytes()).is_ok() {}
        });
        hostile.push(c);
    }
    // Four that ask for the large blob and never read it.
    for _ in 0..4 {
        let mut c = connect_from("127.0.0.2", s.addr, Some(4096)).unwrap();
        write!(c, "GET {blob_path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        hostile.push(c);
    }
    std::thread::sleep(Duration::from_millis(300));
    // The hostile host's ninth connection is closed at once (its eight are open).
    let mut ninth = connect_from("127.0.0.2", s.addr, None).unwrap();
    let _ = write!(ninth, "GET /timestamp.json HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(closed_within(&mut ninth, Duration::from_secs(2)));
    s.wait_log(|v| {
        v["event"] == "connection_refused" && v["reason"] == "max_connections_per_addr reached"
    });

    // The honest client is served, small file and large, while they stall, for three times
    // the stall bound.
    let blob = big.1.clone();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(6) {
        honest_get(s.addr, "/timestamp.json", &ts);
        honest_get(s.addr, &blob_path, &blob);
    }
    // Every stalled connection was cut by the stall bound, and logged.
    for c in &mut hostile {
        assert!(
            closed_within(c, Duration::from_secs(10)),
            "a hostile connection is still open"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let cuts = || {
        s.log
            .lock()
            .unwrap()
            .iter()
            .filter(|v| {
                v["event"] == "connection_cut"
                    && v["reason"] == "stall timeout"
                    && v["stalled"] == "response"
            })
            .count()
    };
    let t = Instant::now();
    while cuts() < 4 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(cuts() >= 4, "{} connections cut by the stall bound", cuts());
    // Their places are free again: the hostile host may connect (and is served) again.
    let mut again = connect_from("127.0.0.2", s.addr, None).unwrap();
    write!(
        again,
        "GET /timestamp.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    again.read_to_end(&mut answer).unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200"));
}

/// Issue 43, item 3: a client that stalls held its connection slot for the 30 s send
/// timeout (and one that sent nothing, or half a request, for the header timeout), so a few
/// addresses could hold every slot. Now the stall bound frees each slot once its client
/// has moved no byte for that long. Sixteen stalled connections from four addresses —
/// connected and silent, half a request line, a large blob asked for and never read —
/// against twelve slots: the four past the slot count are refused, the twelve are cut by
/// the stall bound (the header timeout is far away), and a normal GET is then served. The
/// test waits for the bound but asserts no duration.
#[test]
fn issue_43_stalled_clients_from_several_addresses_free_their_slots_after_the_stall_bound() {
    let f = Fixture::new();
    let big = f.module("compute_90", Some(8 << 20));
    f.append_modules(&[big.clone(), f.module("sm_90", None)]);
    let s = ServeProcess::start(
        &f.reg_path(),
        "127.0.0.1:0",
        &[
            "--max-connections",
            "12",
            "--max-connections-per-addr",
            "4",
            "--stall-timeout-secs",
            "2",
            "--header-timeout-secs",
            "600",
        ],
    );
    let ts = std::fs::read(f.reg_path().join("timestamp.json")).unwrap();
    let blob_path = format!("/{}", Fixture::blob_rel(&big));

    // Four from each of 127.0.0.2..=5 (each within the per-address cap); the kinds in turn.
    let mut stalled = Vec::new();
    for i in 0..16 {
        let from = format!("127.0.0.{}", 2 + i / 4);
        let mut c = connect_from(&from, s.addr, Some(4096)).unwrap();
        // (A write may fail: the server closes the connections past the slot count.)
        let _ = match i % 3 {
            0 => Ok(()),
            1 => c.write_all(b"GET /timestamp.json HT"),
            _ => write!(c, "GET {blob_path} HTTP/1.1\r\nHost: x\r\n\r\n"),
        };
        stalled.push(c);
    }
    // Every slot is taken: the connections past the slot count were closed at once.
    s.wait_log(|v| v["event"] == "connection_refused" && v["reason"] == "max_connections reached");

    // The twelve that held slots are cut by the stall bound: the eight that sent nothing or
    // part of a request for withholding the request, the four blob readers the response.
    // (Should the bound pass before the last connected, a later one takes a freed slot and
    // is cut in turn: every connection is either refused or cut.)
    let count = |f: &dyn Fn(&serde_json::Value) -> bool| {
        s.log.lock().unwrap().iter().filter(|v| f(v)).count()
    };
    let cuts = |stalled: &str| {
        count(&|v| {
            v["event"] == "connection_cut"
                && v["reason"] == "stall timeout"
                && v["stalled"] == stalled
        })
    };
    let refused = || {
        count(&|v| v["event"] == "connection_refused" && v["reason"] == "max_connections reached")
    };
    let t = Instant::now();
    while cuts("request") + cuts("response") + refused() < 16
        && t.elapsed() < Duration::from_secs(120)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(cuts("request") + cuts("response") + refused(), 16);
    assert!(
        cuts("request") >= 8 && cuts("response") >= 4,
        "connections cut by the stall bound: {} withholding the request, {} the response",
        cuts("request"),
        cuts("response")
    );
    assert!(
        !s.log
            .lock()
            .unwrap()
            .iter()
            .any(|v| v["event"] == "connection_cut" && v["reason"] == "header timeout"),
        "the header timeout cut a connection"
    );

    // Their slots are free: a normal GET is served, from a new address and from a stalled one.
    let r = http_get(s.addr, "/timestamp.json", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == ts, "wrong bytes");
    let mut again = connect_from("127.0.0.2", s.addr, None).unwrap();
    write!(
        again,
        "GET /timestamp.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    again.read_to_end(&mut answer).unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200"));
    assert!(answer.ends_with(&ts));
    drop(stalled);
}

/// Finding 1: no per-connection request limit. Now the answer to request N carries
/// `Connection: close` and the pipelined requests past it are not answered.
#[test]
fn finding_1_requests_per_connection_are_capped() {
    let f = Fixture::new();
    f.append(&["sm_90"]);
    let s = ServeProcess::start(
        &f.reg_path(),
        "127.0.0.1:0",
        &["--max-requests-per-connection", "5"],
    );
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            .repeat(8)
            .as_bytes(),
    )
    .unwrap();
    let mut all = Vec::new();
    let _ = c.read_to_end(&mut all);
    let text = String::from_utf8_lossy(&all);
    assert_eq!(text.matches("HTTP/1.1 200").count(), 5, "{text}");
    assert_eq!(text.matches("connection: close").count(), 1, "{text}");
}

/// One step of a xorshift generator (the fuzz test's randomness, seeded per run and printed).
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn pick<'a>(state: &mut u64, from: &[&'a str]) -> &'a str {
    from[(next(state) % from.len() as u64) as usize]
}

/// A random request path: layout-like parts, multibyte characters, percent escapes, and
/// lengths around the log's 256-byte cut and the 512-byte cap.
fn random_path(state: &mut u64) -> String {
    let parts = [
        "timestamp.json",
        "index",
        "1.index.json",
        "blobs",
        "blake3",
        "ab",
        "manifests",
        "..",
        ".",
        "",
        "%2e%2e",
        "é",
        "日本",
        "🦀",
        "a",
        "x.json",
        "root",
        "1.root.json",
        ".lock",
        "%ff",
        "%00",
        "~",
        "*",
        "?q=1",
        "#f",
    ];
    let mut p = String::from("/");
    match next(state) % 4 {
        // Long: a multibyte character straddling byte 256 (the log's cut).
        0 => {
            let n = 250 + (next(state) % 10) as usize;
            p += &"a".repeat(n);
            while p.len() < 600 && !next(state).is_multiple_of(8) {
                p += pick(state, &["é", "日", "🦀", "b"]);
            }
        }
        _ => {
            for _ in 0..(next(state) % 8) {
                p += pick(state, &parts);
                if !next(state).is_multiple_of(3) {
                    p.push('/');
                }
            }
        }
    }
    p
}

/// Sends `head` (request line and headers) and returns the status of the answer, or None
/// when the connection ended without one.
fn status_of(addr: SocketAddr, head: &[u8]) -> Option<u16> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(head).ok()?;
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let line = got.split(|b| *b == b'\r').next()?;
    let line = std::str::from_utf8(line).ok()?;
    line.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// Finding 2: a path over 256 bytes with a multibyte character across byte 256 panicked
/// in the access log, and the client got no answer. Now every request of a few hundred
/// random paths, header values and Range values, against the server with its access log
/// on, gets an HTTP answer that is not a server error, and the server stays up.
#[test]
fn finding_2_random_paths_headers_and_ranges_always_get_an_answer() {
    let f = Fixture::new();
    f.append(&["sm_90"]);
    let s = ServeProcess::start(&f.reg_path(), "127.0.0.1:0", &[]);
    let mut seed = [0u8; 8];
    getrandom::fill(&mut seed).unwrap();
    let mut state = u64::from_le_bytes(seed) | 1;
    eprintln!("fuzz seed {state:#x}");
    // The case the review found, always included.
    let mut paths = vec![format!("/{}é{}", "a".repeat(254), "b".repeat(20))];
    for _ in 0..400 {
        paths.push(random_path(&mut state));
    }
    let ranges = [
        "bytes=0-0",
        "bytes=-1",
        "bytes=5-",
        "bytes=9999999999999999999-",
        "bytes=1-0",
        "bytes=0-1,2-3",
        "bytes=",
        "bytes=-",
        "items=0-1",
        "bytes=-99999999999999999999",
        "bytes= 1 - 2",
        "bÿtes=0-1",
    ];
    let values = [
        "\"x\"",
        "*",
        "W/\"x\"",
        "Tue, 01 Jan 2030 00:00:00 GMT",
        "garbage",
        "",
        "\"",
        "é",
        "\u{00ff}",
        "bytes=0-1",
        "-1",
    ];
    let headers = [
        "If-Match",
        "If-None-Match",
        "If-Range",
        "If-Modified-Since",
        "If-Unmodified-Since",
        "X-Anything",
        "Accept-Encoding",
    ];
    for path in &paths {
        let method = pick(&mut state, &["GET", "GET", "HEAD", "PUT", "OPTIONS"]);
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
        if next(&mut state).is_multiple_of(2) {
            head += &format!("Range: {}\r\n", pick(&mut state, &ranges));
        }
        for _ in 0..(next(&mut state) % 3) {
            head += &format!(
                "{}: {}\r\n",
                pick(&mut state, &headers),
                pick(&mut state, &values)
            );
        }
        if method == "PUT" {
            head += "Content-Length: 0\r\n";
        }
        head += "\r\n";
        let status = status_of(s.addr, head.as_bytes());
        let status = status.unwrap_or_else(|| panic!("no answer to {head:?}"));
        assert!(status < 500, "{status} for {head:?}");
    }
    assert_eq!(http_get(s.addr, "/healthz", &[]).status, 200);
    let mut s = s;
    assert!(s.child.try_wait().unwrap().is_none(), "the server is up");
    // Every request was logged, the long ones cut.
    let long = s.wait_log(|v| v["path"].as_str().is_some_and(|p| p.ends_with('…')));
    assert!(long["path"].as_str().unwrap().len() <= 256 + '…'.len_utf8());
}

/// Finding 3: a FIFO in the served folder pinned a blocking thread per GET (the open waited
/// for a writer); after about 600 GETs (the blocking pool's 512 threads busy), file GETs
/// stopped answering. Now the FIFO is opened without blocking and refused (404) at once:
/// 600 GETs of it, then the other files are still served.
#[test]
fn finding_3_a_fifo_in_the_served_folder_pins_no_thread() {
    let f = Fixture::new();
    f.append(&["sm_90"]);
    let fifo = layout::manifest(&Digest::of(b"a fifo"));
    mkfifo(&f.reg_path().join(&fifo));
    let s = ServeProcess::start(&f.reg_path(), "127.0.0.1:0", &[]);
    for _batch in 0..6 {
        let mut conns: Vec<TcpStream> = (0..100)
            .map(|_| {
                let mut c = TcpStream::connect(s.addr).unwrap();
                write!(
                    c,
                    "GET /{fifo} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                )
                .unwrap();
                c
            })
            .collect();
        for c in &mut conns {
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut got = Vec::new();
            let _ = c.read_to_end(&mut got);
            assert!(
                got.starts_with(b"HTTP/1.1 404"),
                "the FIFO GET was not answered"
            );
        }
    }
    let refused = s.wait_log(|v| v["path"] == format!("/{fifo}"));
    assert_eq!(refused["note"], "not a file");
    let ts = std::fs::read(f.reg_path().join("timestamp.json")).unwrap();
    honest_get(s.addr, "/timestamp.json", &ts);
}

/// Finding 5: the server checked each path component for a link, then opened the path: a
/// local writer flipping a file and a link served the link's outside target in about 1 of
/// 100 responses. Now the open walks folder handles with O_NOFOLLOW: while a thread flips a
/// file and a link to an outside file (and a folder and a link to an outside folder) for
/// three seconds, no response holds an outside byte.
#[test]
fn finding_5_a_racing_link_never_serves_an_outside_byte() {
    let f = Fixture::new();
    f.append(&["sm_90"]);
    let reg = f.reg_path();
    let outside = f.path("outside");
    let secret = b"OUTSIDE-THE-ROOT-SECRET".repeat(10);
    // The flipped file: a manifest path. The flipped folder: a blob's `<aa>` folder.
    let file_rel = layout::manifest(&Digest::of(b"flipped"));
    let blob_bytes = b"a blob in a flipped folder".to_vec();
    let blob_rel = layout::blob(&Digest::of(&blob_bytes));
    let (aa_rel, blob_name) = blob_rel.rsplit_once('/').unwrap();
    std::fs::create_dir_all(outside.join("dir")).unwrap();
    std::fs::write(outside.join("secret"), &secret).unwrap();
    std::fs::write(outside.join("dir").join(blob_name), &secret).unwrap();
    std::fs::create_dir_all(reg.join(&file_rel).parent().unwrap()).unwrap();
    std::fs::create_dir_all(reg.join("blobs/blake3")).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let flips = Arc::new(AtomicUsize::new(0));
    let flipper = {
        let (reg, outside, stop, flips) =
            (reg.clone(), outside.clone(), stop.clone(), flips.clone());
        let (file_rel, aa_rel, blob_name, blob_bytes) = (
            file_rel.clone(),
            aa_rel.to_string(),
            blob_name.to_string(),
            blob_bytes.clone(),
        );
        std::thread::spawn(move || {
            let file = reg.join(&file_rel);
            let aa = reg.join(&aa_rel);
            let tmp = reg.join("flip.tmp");
            let tmp_dir = reg.join("flip.dir");
            while !stop.load(Ordering::Relaxed) {
                // The file: a regular file, then a link to the outside file.
                std::fs::write(&tmp, b"inside").unwrap();
                std::fs::rename(&tmp, &file).unwrap();
                std::os::unix::fs::symlink(outside.join("secret"), &tmp).unwrap();
                std::fs::rename(&tmp, &file).unwrap();
                // The folder: a real folder holding the blob, then a link to an outside
                // folder holding a file of the same name.
                let _ = std::fs::remove_dir_all(&tmp_dir);
                std::fs::create_dir(&tmp_dir).unwrap();
                std::fs::write(tmp_dir.join(&blob_name), &blob_bytes).unwrap();
                if aa.is_symlink() {
                    std::fs::remove_file(&aa).unwrap();
                }
                std::fs::rename(&tmp_dir, &aa).unwrap();
                std::os::unix::fs::symlink(outside.join("dir"), &tmp_dir).unwrap();
                std::fs::remove_dir_all(&aa).unwrap();
                std::fs::rename(&tmp_dir, &aa).unwrap();
                flips.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let s = ServeProcess::start(&reg, "127.0.0.1:0", &["--no-access-log"]);
    let t = Instant::now();
    let (mut responses, mut served_inside) = (0, 0);
    while t.elapsed() < Duration::from_secs(3) {
        for path in [&file_rel, &blob_rel] {
            let r = http_get(s.addr, &format!("/{path}"), &[]);
            responses += 1;
            assert!(
                !r.body.windows(16).any(|w| w == &secret[..16]),
                "an outside file was served for {path} (status {})",
                r.status
            );
            if r.status == 200 {
                served_inside += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    let flips = flips.load(Ordering::Relaxed);
    assert!(
        flips > 100,
        "only {flips} flips: the race was not exercised"
    );
    assert!(responses > 200, "only {responses} responses");
    // The regular file was served when the open found it: the test sees both states.
    assert!(
        served_inside > 0,
        "never served the inside file: {responses} responses"
    );
}

/// Finding 8: any file with a safe name in the root was served, not only the registry
/// layout's files. Now `notes.txt`, `keys/x`, a backup of the timestamp and a blob at the
/// wrong folder are 404; layout files are served.
#[test]
fn finding_8_files_outside_the_layout_are_not_served() {
    let f = Fixture::new();
    let m = f.module("sm_90", None);
    f.append_modules(std::slice::from_ref(&m));
    let reg = f.reg_path();
    std::fs::write(reg.join("notes.txt"), b"private notes").unwrap();
    std::fs::create_dir_all(reg.join("keys")).unwrap();
    std::fs::write(reg.join("keys/x"), b"a private key").unwrap();
    std::fs::copy(reg.join("timestamp.json"), reg.join("timestamp.json.bak")).unwrap();
    let hex = m.0.module_digest.hex();
    std::fs::create_dir_all(reg.join("blobs/blake3/zz")).unwrap();
    std::fs::write(reg.join(format!("blobs/blake3/zz/{hex}")), &m.1).unwrap();
    let s = ServeProcess::start(&reg, "127.0.0.1:0", &[]);
    for path in [
        "/notes.txt".to_string(),
        "/keys/x".into(),
        "/timestamp.json.bak".into(),
        format!("/blobs/blake3/zz/{hex}"),
        "/root/01.root.json".into(),
    ] {
        let r = http_get(s.addr, &path, &[]);
        assert_eq!(r.status, 404, "{path}");
        assert!(!r.body.starts_with(b"private") && !r.body.starts_with(b"a private"));
    }
    for path in [
        "/timestamp.json".to_string(),
        "/root/1.root.json".into(),
        "/index/1.index.json".into(),
        format!("/{}", Fixture::blob_rel(&m)),
    ] {
        assert_eq!(http_get(s.addr, &path, &[]).status, 200, "{path}");
    }
}
