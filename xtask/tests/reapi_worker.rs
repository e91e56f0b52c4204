//! The project's REAPI worker (`cargo xtask servers reapi-worker`, issue 45) against the real
//! REAPI server of the tests (`servers reapi`, BuildGrid): as a client,
//! `reapi_client_check.py` (gRPC with BuildGrid's generated protos) uploads an input root
//! and executes actions, which the workers take as leases through the Remote Workers API.
//! An action's outputs (a 6 MiB one both ways through ByteStream), stdout and stderr come
//! back by digest; an exit code of 3 is a result, a command that cannot start and a timeout
//! are statuses; the second action on one input root finds its files in the worker's cache
//! (hard links, not a second download). A worker killed with its process group mid-action
//! takes its command with it, and the other worker completes the action; SIGTERM stops a
//! worker cleanly; a worker of capacity 2 runs two actions at once. Input roots that could
//! reach out of their folder are refused. Arguments that cannot work are refused before
//! anything starts.

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::reapi::{Reapi, Worker, venv_python, wait_gone};
use common::{repo, xtask};

/// `reapi_client_check.py ADDR ARGS...` (the venv's Python); its JSON on success.
fn client(server: &Reapi, args: &[&str]) -> Command {
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo().join("xtask/tests/reapi_client_check.py"))
        .arg(server.addr.to_string())
        .args(args);
    cmd
}

fn facts(out: Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn workers_run_leased_actions_and_a_killed_workers_action_goes_to_the_other() {
    let t = Instant::now();
    let server = Reapi::start(5, &[]);
    let dir = tempfile::tempdir().unwrap();
    // Worker A alone first: every action of the client's `main` runs on it, so the second
    // one on the same input root must find the inputs in A's cache.
    let a = Worker::start(&server, &dir.path().join("a"), "worker-a");
    let v = facts(client(&server, &["main"]).output().unwrap());
    eprintln!("client: {v}");
    assert_eq!(v["outputs"]["exit_code"], 0, "{v}");
    assert_eq!(v["outputs"]["worker"], "worker-a", "{v}");
    assert_eq!(v["outputs"]["big_output_bytes"], 6 * 1024 * 1024, "{v}");
    // The input file is a hard link of the cache's copy.
    assert!(
        v["outputs"]["big_input_link_count"].as_u64().unwrap() >= 2,
        "{v}"
    );
    assert_eq!(v["exit_3"]["exit_code"], 3, "{v}");
    assert_eq!(v["cannot_start"]["status"], "FAILED_PRECONDITION", "{v}");
    assert_eq!(v["timeout"]["status"], "DEADLINE_EXCEEDED", "{v}");
    let refused = &v["refused"];
    assert!(
        refused["escaping_link"]
            .as_str()
            .unwrap()
            .contains("leaves the input root"),
        "{v}"
    );
    assert!(
        refused["dot_dot_file"]
            .as_str()
            .unwrap()
            .contains("is not a plain name"),
        "{v}"
    );
    assert!(
        refused["path_as_digest"]
            .as_str()
            .unwrap()
            .contains("is not a SHA-256 digest"),
        "{v}"
    );
    let done = a.events("done");
    assert_eq!(done.len(), 7, "{done:?}");
    assert!(
        done[0]["fetched_bytes"].as_u64().unwrap() > 6 * 1024 * 1024,
        "{done:?}"
    );
    // The same input root again: three files linked, none fetched (the Command's bytes only).
    assert_eq!(done[1]["linked_files"], 3, "{done:?}");
    assert!(
        done[1]["fetched_bytes"].as_u64().unwrap() < 1024,
        "{done:?}"
    );
    assert!(
        std::fs::read_dir(dir.path().join("a/actions"))
            .unwrap()
            .next()
            .is_none(),
        "the actions' folders are deleted"
    );

    // A second worker; an action that sleeps; the worker that took it dies with its group.
    let b = Worker::start(&server, &dir.path().join("b"), "worker-b");
    let sleeper = client(&server, &["sleep", "3", "1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut workers = [a, b];
    let (victim, running) = wait_running(&workers, Duration::from_secs(30));
    let pid = running["pid"].as_u64().unwrap() as u32;
    let killed = Instant::now();
    workers[victim].kill_group();
    assert!(
        wait_gone(pid, Duration::from_secs(5)),
        "the killed worker's command (pid {pid}) outlived it"
    );
    let v = facts(sleeper.wait_with_output().unwrap());
    let survivor = &mut workers[1 - victim];
    eprintln!(
        "sleep action: {v}; completed {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    assert_eq!(v["sleep"][0]["worker"], survivor.name.as_str(), "{v}");
    assert_eq!(v["sleep"][0]["exit_code"], 0, "{v}");

    // SIGTERM: the survivor leaves the server and exits 0.
    let status = survivor.stop();
    assert!(status.success(), "SIGTERM: {status}");
    survivor.wait_for("stopped", Duration::from_secs(1));

    // A worker of capacity 2 runs two actions at once: the second starts before the first
    // ends.
    let c = Worker::start_with(
        &server,
        &dir.path().join("c"),
        "worker-c",
        &["--capacity", "2"],
    );
    let v = facts(client(&server, &["sleep", "2", "2"]).output().unwrap());
    eprintln!("two actions on a worker of capacity 2: {v}");
    for one in v["sleep"].as_array().unwrap() {
        assert_eq!(one["worker"], "worker-c", "{v}");
    }
    let kinds: Vec<String> = c
        .all_events()
        .iter()
        .filter_map(|e| e["event"].as_str().map(str::to_string))
        .filter(|k| k == "running" || k == "done")
        .collect();
    assert_eq!(kinds, ["running", "running", "done", "done"], "{kinds:?}");
    eprintln!("test wall time {:.1} s", t.elapsed().as_secs_f64());
}

/// The first worker of `workers` to start a command: its index and its `running` event.
fn wait_running(workers: &[Worker], timeout: Duration) -> (usize, serde_json::Value) {
    let t = Instant::now();
    loop {
        for (i, w) in workers.iter().enumerate() {
            if let Some(e) = w.events("running").into_iter().next() {
                return (i, e);
            }
        }
        assert!(t.elapsed() < timeout, "no worker started the action");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_workers_clock_offset_and_user_reach_the_commands_it_runs() {
    let server = Reapi::start(5, &[]);
    let dir = tempfile::tempdir().unwrap();
    let mut extra = vec!["--clock-offset-days", "400"];
    let root = rustix::process::geteuid().is_root();
    if root {
        extra.extend(["--run-as", "65534:65534"]);
    }
    let _w = Worker::start_with(&server, &dir.path().join("w"), "w", &extra);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let v = facts(
        client(&server, &["run", "/bin/sh", "-c", "date -u +%s; id -u"])
            .output()
            .unwrap(),
    );
    let out = v["run"]["stdout"].as_str().unwrap().to_string();
    let mut lines = out.lines();
    let seen: i64 = lines.next().unwrap().parse().unwrap();
    let ahead = seen - now;
    assert!(
        (400 * 86_400 - 120..400 * 86_400 + 120).contains(&ahead),
        "the command's clock is {ahead} s ahead, not 400 days: {v}"
    );
    if root {
        assert_eq!(lines.next(), Some("65534"), "{v}");
    }
}

#[test]
fn arguments_that_cannot_work_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |args: &[&str]| {
        let out = xtask()
            .args(["servers", "reapi-worker"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.stdout.is_empty(), "announced nothing: {out:?}");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let root = dir.path().join("root");
    let root_arg = root.to_str().unwrap();

    let (code, err) = refused(&["--server", "grpcs://127.0.0.1:1", "--root", root_arg]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not grpc://HOST:PORT"), "{err}");
    assert!(err.contains("Fix: pass the address"), "{err}");

    let (code, err) = refused(&[
        "--server",
        "grpc://127.0.0.1:1",
        "--root",
        root_arg,
        "--name",
        "a b",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is not a bot name"), "{err}");

    let (code, err) = refused(&[
        "--server",
        "grpc://127.0.0.1:1",
        "--root",
        root_arg,
        "--run-as",
        "nobody",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is not UID:GID"), "{err}");
    assert!(err.contains("Fix: give the numeric user"), "{err}");

    // A root whose lock another worker holds.
    std::fs::create_dir_all(&root).unwrap();
    let lock = std::fs::File::create(root.join("worker.lock")).unwrap();
    lock.lock().unwrap();
    let (code, err) = refused(&["--server", "grpc://127.0.0.1:1", "--root", root_arg]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("another worker uses"), "{err}");
    assert!(
        err.contains("Fix: give each worker its own --root"),
        "{err}"
    );

    let (code, err) = refused(&[
        "--server",
        "grpc://127.0.0.1:1",
        "--root",
        root_arg,
        "--capacity",
        "0",
    ]);
    assert_eq!(code, Some(2), "{err}");
}
