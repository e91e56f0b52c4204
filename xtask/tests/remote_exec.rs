//! Builds on a Remote Execution API server (issue 45): `--remote-exec grpc://…` against the
//! pinned BuildGrid (`servers reapi`) with the project's workers (`servers reapi-worker`).
//! A bad URL, a server that is gone, one that speaks HTTP but not gRPC, or one reached over
//! TLS that has none is refused before any job starts, each naming the server with a Fix;
//! `--remote-exec-fallback local` builds here instead.

mod common;

use std::net::TcpListener;

use common::Ws;
use common::reapi::Reapi;
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
