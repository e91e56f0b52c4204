//! Builds on a Remote Execution API server (issue 45): `--remote-exec grpc://…` against the
//! pinned BuildGrid (`servers reapi`) with two of the project's workers
//! (`servers reapi-worker`, each with its own folder, user and clock). The blobs are the
//! local build's, bit for bit, with no worker's path in them; a second checkout elsewhere
//! with empty caches runs nothing (every action answered by the server's ActionCache). A bad URL, a server
//! that is gone, one that speaks HTTP but not gRPC, or one reached over TLS that has none
//! is refused before any job starts, each naming the server with a Fix;
//! `--remote-exec-fallback local` builds here instead. Over TLS (`grpcs://`, the server's
//! test CA trusted through `SSL_CERT_FILE`) the build is the same; an unknown CA and plain
//! gRPC to the TLS port are refused.

mod common;

use std::net::TcpListener;

use common::Ws;
use common::reapi::{Reapi, Worker};
use common::server::Server;

/// A port nothing listens on.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn issue_45_bad_urls_and_absent_or_foreign_servers_are_refused_before_any_job() {
    let ws = Ws::new();
    let refused = |url: &str, why: &str| {
        let run = ws.build(&["--remote-exec", url]);
        assert!(!run.ok, "{url}: built");
        assert!(run.stderr.contains(why), "{url}: {}", run.stderr);
        assert!(run.stderr.contains("Fix: "), "{url}: {}", run.stderr);
        // Nothing ran: no job reached nvcc, nothing is in the output folder.
        assert!(
            !ws.path("out").join("alpha").exists(),
            "{url}: a job ran: {}",
            run.stderr
        );
    };
    for bad in [
        "127.0.0.1:8980",
        "http://127.0.0.1:8980",
        "grpc://127.0.0.1",
    ] {
        refused(bad, "--remote-exec");
    }
    let gone = format!("grpc://127.0.0.1:{}", free_port());
    refused(&gone, &format!("the remote executor {gone} did not answer"));

    // An HTTP server that is not a gRPC one (the registry's `serve`).
    let reg = tempfile::tempdir().unwrap();
    let serve = Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[reg.path()]);
    let http = format!(
        "grpc://{}",
        serve
            .url()
            .trim_start_matches("http://")
            .trim_end_matches('/')
    );
    refused(&http, "did not answer as a REAPI server");

    // The REAPI server over TLS, which it does not speak.
    let reapi = Reapi::start(5, &[]);
    refused(
        &format!("grpcs://{}", reapi.addr),
        "did not answer as a REAPI server",
    );

    // With the local fallback, a server that is gone leaves the build to this machine.
    let run = ws.build(&["--remote-exec", &gone, "--remote-exec-fallback", "local"]);
    assert!(run.ok, "{}", run.stderr);
    assert!(
        run.stderr.contains("building on this machine instead"),
        "{}",
        run.stderr
    );
    // A malformed URL is refused even then.
    let run = ws.build(&[
        "--remote-exec",
        "grpc:/nowhere",
        "--remote-exec-fallback",
        "local",
    ]);
    assert!(
        !run.ok && run.stderr.contains("Fix: give the server as grpc://"),
        "{}",
        run.stderr
    );
}

#[test]
fn issue_45_a_remote_build_has_the_local_blobs_and_a_second_checkout_runs_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let reapi = Reapi::start(5, &[]);
    let workers = tempfile::tempdir().unwrap();
    // Worker `one` runs its commands as another user when this test runs as root (as CI
    // does): the folders must let that user through.
    std::fs::set_permissions(workers.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // And their clocks differ: `one` a year and more ahead, `two` as far behind.
    let mut one_args = vec!["--clock-offset-days", "400"];
    if rustix::process::geteuid().is_root() {
        one_args.extend(["--run-as", "65534:65534"]);
    }
    let url = format!("grpc://{}", reapi.addr);
    let local = Ws::new().build(&[]).ok();
    let ran = |w: &Worker| w.events("done").len();
    // No worker's folder or user reaches a blob.
    let hermetic = |ws: &Ws| {
        for (path, bytes) in ws.snapshot("out") {
            let text = String::from_utf8_lossy(&bytes);
            for w in ["one", "two"] {
                let root = workers.path().join(w).display().to_string();
                assert!(!text.contains(&root), "{}: holds {root}", path.display());
            }
            for worker_path in ["cuda-aot-work", "nobody", "nogroup"] {
                assert!(
                    !text.contains(worker_path),
                    "{}: holds {worker_path}",
                    path.display()
                );
            }
        }
    };

    // `--remote-exec-cache read` on an empty server: every action runs (on worker `one`,
    // in its folder, as its user, at its time), the blobs are the local build's, and
    // nothing is written to the server's ActionCache...
    let mut one = Worker::start_with(&reapi, &workers.path().join("one"), "one", &one_args);
    let read = ["--remote-exec", &url, "--remote-exec-cache", "read"];
    let ws = Ws::new();
    let first = ws.build(&read).ok();
    assert_eq!(first.digests(), local.digests(), "the remote blobs differ");
    assert_eq!(first.nvcc_runs(), 6);
    assert!(
        first.stderr.contains(&format!(
            "remote execution on {url}: 6 action(s), 0 from its ActionCache"
        )),
        "{}",
        first.stderr
    );
    hermetic(&ws);
    assert_eq!(
        ran(&one),
        6 + 1,
        "the 6 actions and the host compiler's --version"
    );
    one.stop();

    // ... so another checkout reading it runs them all again: on worker `two`, another
    // folder, this machine's user, 400 days behind.
    let two = Worker::start_with(
        &reapi,
        &workers.path().join("two"),
        "two",
        &["--clock-offset-days", "-400"],
    );
    let ws = Ws::new();
    let again = ws.build(&read).ok();
    assert_eq!(again.digests(), local.digests());
    assert!(
        again.stderr.contains("6 action(s), 0 from its ActionCache"),
        "{}",
        again.stderr
    );
    hermetic(&ws);
    assert_eq!(ran(&two), 6 + 1);

    // Read-write (the default): run and recorded; then another checkout, elsewhere, with
    // empty caches: the same actions, all answered by the server's ActionCache (and checked
    // like fresh ones).
    let stored = Ws::new().build(&["--remote-exec", &url]).ok();
    assert_eq!(stored.digests(), local.digests());
    assert!(
        stored
            .stderr
            .contains("6 action(s), 0 from its ActionCache"),
        "{}",
        stored.stderr
    );
    let cached = Ws::new().build(&read).ok();
    assert_eq!(cached.digests(), local.digests());
    assert!(
        cached
            .stderr
            .contains("6 action(s), 6 from its ActionCache"),
        "{}",
        cached.stderr
    );
    assert_eq!(ran(&two), 2 * (6 + 1), "a cached action ran");
    // Every Action names its toolkit's digest in its platform (worker `two` saw them).
    let toolkits: std::collections::BTreeSet<String> = two
        .events("done")
        .iter()
        .filter_map(|e| e["platform"]["cuda-aot-toolkit"].as_str().map(String::from))
        .collect();
    assert_eq!(toolkits.len(), 1, "{toolkits:?}");
    let t = toolkits.first().unwrap();
    let (hash, size) = t.split_once('/').unwrap();
    assert!(hash.len() == 64 && size.parse::<u64>().unwrap() > 0, "{t}");
}

#[test]
fn issue_45_grpcs_to_a_server_whose_ca_is_trusted_builds_and_tls_mismatches_are_refused() {
    let reapi = Reapi::start(5, &["--tls-port", "0"]);
    let (tls_addr, ca) = reapi.tls.clone().expect("a TLS listener");
    let workers = tempfile::tempdir().unwrap();
    let _w = Worker::start(&reapi, &workers.path().join("w"), "w");
    let grpcs = format!("grpcs://{tls_addr}");

    // Its certificate is signed by a CA this machine does not know: refused before any job,
    // saying why.
    let ws = Ws::new();
    let run = ws.build(&["--remote-exec", &grpcs]);
    assert!(!run.ok, "built without trusting the CA");
    assert!(
        run.stderr.contains("did not answer as a REAPI server"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.to_lowercase().contains("certificate"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("Fix: "), "{}", run.stderr);
    assert!(!ws.path("out").join("alpha").exists(), "a job ran");
    // Plain gRPC to the TLS port: refused too.
    let run = ws.build(&["--remote-exec", &format!("grpc://{tls_addr}")]);
    assert!(
        !run.ok && run.stderr.contains("did not answer as a REAPI server"),
        "{}",
        run.stderr
    );

    // Trusting its CA (SSL_CERT_FILE, as for any TLS client here): the build goes through,
    // with the local blobs.
    let local = Ws::new().build(&[]).ok();
    let remote = ws
        .build_with(&["--remote-exec", &grpcs], |c| {
            c.env("SSL_CERT_FILE", &ca);
        })
        .ok();
    assert_eq!(remote.digests(), local.digests());
    assert!(
        remote
            .stderr
            .contains(&format!("remote execution on {grpcs}: 6 action(s)")),
        "{}",
        remote.stderr
    );
}

#[test]
fn issue_45_a_poisoned_action_cache_entry_is_refused_and_run_again() {
    let reapi = Reapi::start(5, &[]);
    let workers = tempfile::tempdir().unwrap();
    let url = format!("grpc://{}", reapi.addr);
    let bad = Worker::start_with(
        &reapi,
        &workers.path().join("bad"),
        "bad",
        &["--damage-outputs"],
    );
    let first = Ws::new().build(&["--remote-exec", &url]).failed();
    assert!(
        first.stderr.contains("nothing was written"),
        "{}",
        first.stderr
    );
    drop(bad);
    let _good = Worker::start(&reapi, &workers.path().join("good"), "good");

    let local = Ws::new().build(&[]).ok();
    let again = Ws::new().build(&["--remote-exec", &url]).ok();
    assert_eq!(again.digests(), local.digests());
    assert!(
        again
            .stderr
            .contains("result(s) the executor took from its cache (action sha256:"),
        "{}",
        again.stderr
    );
    assert!(
        again
            .stderr
            .contains("refused: they failed the checks, and ran again"),
        "{}",
        again.stderr
    );
}

/// A worker killed in the middle of an action (its whole process group, the nvcc it ran
/// included): the server hands the action to the other worker once the dead one's session
/// times out, and the build completes with the local blobs.
#[test]
fn issue_45_a_worker_killed_mid_action_still_gives_a_complete_correct_build() {
    let reapi = Reapi::start(5, &[]);
    let workers = tempfile::tempdir().unwrap();
    let url = format!("grpc://{}", reapi.addr);
    let mut doomed = Worker::start(&reapi, &workers.path().join("doomed"), "doomed");
    let _survivor = Worker::start(&reapi, &workers.path().join("survivor"), "survivor");
    let ws = Ws::new();
    let remote = std::thread::scope(|s| {
        let build = s.spawn(|| ws.build(&["--remote-exec", &url]));
        doomed.wait_for("running", std::time::Duration::from_secs(120));
        doomed.kill_group();
        build.join().unwrap()
    })
    .ok();
    let local = Ws::new().build(&[]).ok();
    assert_eq!(remote.digests(), local.digests());
    assert!(remote.stderr.contains("6 action(s)"), "{}", remote.stderr);
}

/// Ctrl-C during a remote build (while a worker runs one of its actions): the build asks
/// the server to cancel its operations, says it was interrupted, writes nothing and exits
/// 130 within seconds.
#[test]
fn issue_45_ctrl_c_cancels_the_remote_operations() {
    let reapi = Reapi::start(5, &[]);
    let workers = tempfile::tempdir().unwrap();
    let url = format!("grpc://{}", reapi.addr);
    let worker = Worker::start(&reapi, &workers.path().join("w"), "w");
    let ws = Ws::new();
    let mut cmd = ws.build_command();
    cmd.args(["-j", "1", "--remote-exec", &url])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    worker.wait_for("running", std::time::Duration::from_secs(120));
    let sent = std::time::Instant::now();
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let stopped = sent.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(
        stopped < std::time::Duration::from_secs(5),
        "the build took {stopped:?} to stop: {stderr}"
    );
    assert!(!ws.path("out").join("alpha").exists(), "{stderr}");
}

/// `repro --remote-exec`: both rebuilds run on the cluster, every action executed (a
/// rebuild never takes the server's cached results), and they agree.
#[test]
fn issue_45_repro_rebuilds_twice_through_the_server() {
    let reapi = Reapi::start(5, &[]);
    let workers = tempfile::tempdir().unwrap();
    let url = format!("grpc://{}", reapi.addr);
    let _w1 = Worker::start(&reapi, &workers.path().join("one"), "one");
    let _w2 = Worker::start(&reapi, &workers.path().join("two"), "two");
    let ws = Ws::new();
    let out = common::Out::of(
        common::xtask()
            .args(["repro", "--spec"])
            .arg(ws.spec_path())
            .args(["--remote-exec", &url]),
    )
    .ok();
    assert!(
        out.stdout
            .contains("6 of 6 blobs reproducible (build a: 6 nvcc runs, build b: 6 nvcc runs)"),
        "{}",
        out.stdout
    );
    assert_eq!(
        out.stderr.matches("0 from its ActionCache").count(),
        2,
        "{}",
        out.stderr
    );
}

/// The identities record the host compiler nvcc's `-ccbin` names: workers that have another
/// one at that path (here a wrapper that says another version where the workers run it,
/// with no HOME) are refused before any action runs, naming both versions.
#[test]
fn issue_45_workers_with_another_host_compiler_are_refused() {
    let reapi = Reapi::start(5, &[]);
    let workers = tempfile::tempdir().unwrap();
    let url = format!("grpc://{}", reapi.addr);
    let _w = Worker::start(&reapi, &workers.path().join("w"), "w");
    let ws = Ws::new();
    let cxx = ws.path("bin/c++");
    std::fs::create_dir_all(cxx.parent().unwrap()).unwrap();
    std::fs::write(
        &cxx,
        "#!/bin/sh\n[ \"$1\" = --version ] && { [ -n \"$HOME\" ] && echo 'c++ (here) 1' || echo 'c++ (worker) 2'; exit 0; }\nexec /usr/bin/c++ \"$@\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cxx, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = ws
        .build_with(&["--remote-exec", &url], |c| {
            c.env("CXX", &cxx).env("HOME", "/root");
        })
        .failed();
    assert!(
        run.stderr.contains("\"c++ (worker) 2\"") && run.stderr.contains("\"c++ (here) 1\""),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("the identities would not say what built the blobs"),
        "{}",
        run.stderr
    );
}
