//! The REAPI server of the remote-execution tests (`cargo xtask servers reapi`, issue 45):
//! started from its pinned wheels and Debian's PostgreSQL on loopback, it is a real Remote
//! Execution API server (capabilities, CAS through batch calls and ByteStream, an
//! ActionCache that accepts updates, Execute queueing an action) and a real Remote Workers
//! API server (a bot's session receives the queued action as a lease, its result reaches
//! the client, and a silent bot's lease goes to another bot after the keepalive), checked
//! by `reapi_check.py` through gRPC with BuildGrid's own generated protos. Killing it
//! leaves no PostgreSQL behind; a port in use is refused before anything starts.

mod common;

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use common::reapi::{Reapi, files_under, venv_python, wait_gone};
use common::{repo, xtask};

#[test]
fn a_real_reapi_server_queues_actions_and_leases_them_to_bots() {
    let keepalive = 5;
    let mut server = Reapi::start(keepalive, &[]);
    let out = Command::new(venv_python())
        .arg(repo().join("xtask/src/repo/servers/reapi_check.py"))
        .arg(server.addr.to_string())
        .arg(keepalive.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["capabilities"]["exec_enabled"], true, "{v}");
    assert_eq!(v["cas"]["unknown_blob_missing"], true, "{v}");
    assert_eq!(v["execute"]["first_stage"], "QUEUED", "{v}");
    assert_eq!(
        v["bots"]["payload_type_url"], "type.googleapis.com/build.bazel.remote.execution.v2.Action",
        "{v}"
    );
    assert_eq!(v["bots"]["result_in_action_cache"], true, "{v}");
    let handed_on = v["dead_worker"]["handed_on_after_s"].as_f64().unwrap();
    assert!(
        (keepalive as f64 - 1.0..keepalive as f64 + 15.0).contains(&handed_on),
        "a silent bot's lease went on after {handed_on} s (keepalive {keepalive} s): {v}"
    );
    // The CAS is on disk, in the work folder.
    assert!(files_under(&server.work.path().join("cas")) >= 5);

    // Killed outright, it takes its PostgreSQL with it.
    let postgres = server.postgres_pid();
    server.stop_with("-KILL");
    assert!(
        wait_gone(postgres, Duration::from_secs(10)),
        "PostgreSQL (pid {postgres}) outlived the killed server"
    );
}

#[test]
fn a_stopped_server_stops_its_postgres() {
    let mut server = Reapi::start(5, &[]);
    let postgres = server.postgres_pid();
    let status = server.stop_with("-TERM");
    assert!(status.code().is_some(), "SIGTERM: {status}");
    assert!(
        wait_gone(postgres, Duration::from_secs(10)),
        "PostgreSQL (pid {postgres}) outlived the stopped server"
    );
}

#[test]
fn a_port_in_use_is_refused_before_anything_starts() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = xtask()
        .args(["servers", "reapi", "--port", &port])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("port {port} on 127.0.0.1 is not free")),
        "{err}"
    );
    assert!(err.contains("Fix: pass another --port"), "{err}");
    assert!(out.stdout.is_empty(), "announced nothing");

    // A keepalive too short for BuildGrid to hand out leases is refused by the parser.
    let out = xtask()
        .args(["servers", "reapi", "--keepalive-secs", "3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--keepalive-secs"), "{err}");
}
