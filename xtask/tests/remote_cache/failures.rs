//! Failures on the way: a store in a 5xx storm, failing, dead, cut or killed mid-transfer,
//! or hanging, and a build killed while storing entries. The build still completes with
//! correct output and never takes or leaves half an entry.

use std::path::{Path, PathBuf};

use crate::common;
use crate::common::s3::S3;
use crate::common::{Keys, Ws, snapshot};
use crate::{assert_shared, build, build_at, build_on_s3, refusals, shared, url};

/// Issue 20, item 6: a slow store (every request waits 100 ms, one at a time) answering
/// every third object request with 503 Slow Down. The shared cache's writes and reads are
/// retried through it: a second checkout still takes every job and runs no nvcc, with the
/// same bytes.
#[test]
fn issue_20_a_slow_store_in_a_5xx_storm_is_retried_through() {
    let tmp = tempfile::tempdir().unwrap();
    let s3 = S3::start(&["cache"], &["--fail-every", "3", "--delay-ms", "100"]);
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let url = "s3://cache/storm";
    assert!(s3.fails_requests(url), "the storm is on");
    let build = |key: Option<&Path>| build_on_s3(&Ws::new(), &s3, url, &keys, key, &[]);
    let first = build(Some(&keys.key("builder"))).ok();
    assert_eq!(shared(&first)["added"], 6, "{}", first.stderr);
    let second = build(None).ok();
    assert_shared(&second, 0, 6, &first);
    assert_eq!(shared(&second)["refused"].as_array().map(Vec::len), Some(0));
}

/// Issue 20, item 6: a store that fails every request (503 on each, after the client's
/// retries), then one that is gone (killed). The build's reads are refused with the reason
/// and compiled; its adds stop with a warning and the reason in the report; the build
/// itself succeeds with every job, and its output is what a build without a shared cache
/// makes.
#[test]
fn issue_20_a_failing_or_dead_s3_store_never_breaks_the_build() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let plain = Ws::new().build(&[]).ok();
    let url = "s3://cache/down";
    let run = |s3: &S3, key: Option<&Path>| build_on_s3(&Ws::new(), s3, url, &keys, key, &[]);

    let failing = S3::start(&["cache"], &["--fail-every", "1"]);
    assert!(failing.fails_requests(url));
    let b = run(&failing, Some(&keys.key("builder"))).ok();
    assert_eq!(b.nvcc_runs(), 6, "{}", b.stderr);
    assert_eq!(b.digests(), plain.digests());
    assert_eq!(shared(&b)["added"], 0);
    let why = shared(&b)["add_failed"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(why.contains("failed"), "{why}");
    assert!(
        b.stderr
            .contains("output and local cache are complete and verified")
            && b.stderr.contains("Fix: check the store"),
        "{}",
        b.stderr
    );
    drop(failing);

    let dead = S3::start(&["cache"], &[]);
    let addr = dead.addr;
    drop(dead);
    let c = build_at(&Ws::new(), url, &keys, None, &[], |c| {
        common::s3::point_at(c, &format!("http://{addr}"));
    })
    .ok();
    assert_shared(&c, 6, 0, &plain);
    // Neither store gave anything, and both builds said why.
    for run in [&b, &c] {
        let said = shared(run)["read_failed"].as_str().unwrap_or_default();
        assert!(said.contains("v1/"), "{}", run.stderr);
        assert!(
            run.stderr.contains("could not be read") && run.stderr.contains("compiled instead"),
            "{}",
            run.stderr
        );
    }
}

/// Issue 20, item 6: the store's connection cut half-way through a blob's upload and
/// through a blob's download (the store serving on), then the store killed mid-upload and,
/// filled, killed mid-download. Each build completes with the bytes a build without a shared
/// cache makes, never takes or leaves half an entry, and says what failed; the cuts are
/// retried through, and the shared cache then holds every entry whole.
#[test]
fn issue_20_a_store_cut_or_killed_mid_transfer_leaves_correct_output_and_no_half_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let plain = Ws::new().build(&[]).ok();
    let url = "s3://cache/cut";
    let run = |ws: &Ws, s3: &S3, key: Option<&Path>| build_on_s3(ws, s3, url, &keys, key, &[]).ok();
    let builder = keys.key("builder");

    // Cut once mid-upload and once mid-download: the client (object_store) retries both.
    let cut = S3::start(
        &["cache"],
        &["--cut-on", "PUT:/blob", "--cut-on", "GET:/blob"],
    );
    let filled = run(&Ws::new(), &cut, Some(&builder));
    assert_shared(&filled, 6, 0, &plain);
    assert_eq!(shared(&filled)["added"], 6, "{}", filled.stderr);
    // The cut download was retried too: every entry is whole in the shared cache.
    let read = run(&Ws::new(), &cut, None);
    assert_shared(&read, 0, 6, &plain);
    drop(cut);

    // Killed mid-upload: the build completes, its local cache whole, and says what failed.
    let killed = S3::start(&["cache"], &["--die-on", "PUT:/blob"]);
    let ws = Ws::new();
    let b = run(&ws, &killed, Some(&builder));
    assert_shared(&b, 6, 0, &plain);
    let why = shared(&b)["add_failed"].as_str().unwrap_or_default();
    assert!(why.contains("v1/entries/"), "{}", b.stderr);
    assert!(
        b.stderr.contains("nothing half-added is taken"),
        "{}",
        b.stderr
    );
    let local = ws.build(&[]).ok();
    assert_eq!(
        local.nvcc_runs(),
        0,
        "the local cache is whole: {}",
        local.stderr
    );
    drop(killed);

    // Filled, then killed mid-download of the first blob: the build compiles what it could
    // not take, and says the store failed.
    let dying = S3::start(&["cache"], &["--die-on", "GET:/blob"]);
    run(&Ws::new(), &dying, Some(&builder));
    let d = run(&Ws::new(), &dying, None);
    assert_eq!(d.digests(), plain.digests());
    assert_eq!(shared(&d)["taken"], 0, "{}", d.stderr);
    assert_eq!(d.nvcc_runs(), 6, "{}", d.stderr);
    let refused = refusals(&d);
    assert!(
        !refused.is_empty() && refused.iter().all(|r| r.contains("cannot be read")),
        "{}",
        d.stderr
    );
}

/// Issue 20, item 6: a store that hangs (the first blob read held for an hour, and every
/// request after it, as the one-at-a-time server queues them). With
/// `--remote-cache-timeout-secs 2` the request fails, the build asks the store nothing more
/// (only the reads already waiting fail; no other job's entry is asked for), compiles every
/// job with the bytes a plain build makes, and says so.
#[test]
fn issue_20_a_store_that_hangs_costs_one_timeout_and_the_build_compiles_instead() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let plain = Ws::new().build(&[]).ok();
    let url = "s3://cache/hang";
    let hangs = S3::start(&["cache"], &["--stall-on", "GET:/blob"]);
    let timeout = ["--remote-cache-timeout-secs", "2"];
    let run = |key: Option<&Path>| build_on_s3(&Ws::new(), &hangs, url, &keys, key, &timeout).ok();
    // Filling it reads no blob (there is none yet).
    assert_shared(&run(Some(&keys.key("builder"))), 6, 0, &plain);
    let b = run(None);
    assert_shared(&b, 6, 0, &plain);
    let refused = refusals(&b);
    assert!(
        (1..=2).contains(&refused.len()) && refused.iter().all(|r| r.contains("cannot be read")),
        "the first blob read, and at most the other job's request (the tests build with -j 2) already waiting behind it: {refused:?}"
    );
    assert!(
        b.stderr.contains("asked nothing more in this build")
            && b.stderr.contains("--remote-cache-timeout-secs"),
        "{}",
        b.stderr
    );
}

/// Issue 20, item 6: a build taking from the shared cache is killed part-way through a
/// write (a file-size limit of 4 KiB: the first larger write, the toolkit's header set it
/// imports from the shared cache, gets SIGXFSZ, as a writer stops at a full disk). What it
/// left is only temporary files, never taken: the next build of the same checkout runs no
/// nvcc and has exactly the shared cache's bytes.
#[test]
fn issue_20_a_build_killed_while_storing_shared_entries_leaves_nothing_half_written() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let remote = tmp.path().join("shared");
    let first = build(&Ws::new(), &remote, &keys, Some(&keys.key("builder"))).ok();
    let b = Ws::new();
    let killed = build_at(&b, &url(&remote), &keys, None, &[], |c| {
        // `ulimit -f` is in 1024-byte blocks; the shell then becomes the tool.
        let program = c.get_program().to_owned();
        let args: Vec<_> = c.get_args().map(|a| a.to_owned()).collect();
        let mut sh = std::process::Command::new("bash");
        sh.arg("-c")
            .arg("ulimit -f 4; exec \"$0\" \"$@\"")
            .arg(program)
            .args(args);
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        *c = sh;
    });
    assert!(!killed.ok, "the limit stopped the build: {}", killed.stderr);
    let left: Vec<PathBuf> = snapshot(&b.path("cache")).into_keys().collect();
    assert!(!left.is_empty(), "killed part-way through a write");
    assert!(
        left.iter().all(|p| p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(".tmp."))),
        "only temporary files: {left:?}"
    );
    let again = build(&b, &remote, &keys, None).ok();
    assert_eq!(again.nvcc_runs(), 0, "{}", again.stderr);
    assert_eq!(again.digests(), first.digests());
}

/// Issue 44, item 5: a header set in the shared cache whose bytes were altered (it no
/// longer hashes to its name) is refused: the build warns about it, counts it among the
/// refusals in its summary and report, and `--explain` names the refusal for the jobs that
/// needed it, not "gone from the cache". They compile; the output is what the first build
/// made.
#[test]
fn issue_44_an_altered_header_set_is_named_as_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shared");
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let first = build(&Ws::new(), &dir, &keys, Some(&keys.key("builder"))).ok();
    let sets: Vec<PathBuf> = std::fs::read_dir(dir.join("v1/sets"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!sets.is_empty());
    // One digest of each set altered (a header's content claimed to be other bytes).
    for set in &sets {
        let text = std::fs::read_to_string(set).unwrap();
        let at = text.find("\"blake3:").unwrap() + 8;
        let flipped = if &text[at..=at] == "0" { "1" } else { "0" };
        std::fs::write(set, format!("{}{flipped}{}", &text[..at], &text[at + 1..])).unwrap();
    }
    let second = crate::build_with(&Ws::new(), &dir, &keys, None, &["--explain"]).ok();
    assert_eq!(second.digests(), first.digests());
    let refused = refusals(&second);
    assert!(
        refused
            .iter()
            .any(|r| r.starts_with("header set ") && r.contains("does not hash to its name")),
        "{refused:?}"
    );
    assert!(
        second
            .stdout
            .contains("the shared cache's entry was refused: header set ")
            && !second.stdout.contains("header set is gone from the cache"),
        "{}",
        second.stdout
    );
    assert!(
        second.stderr.contains("refused the entry for header set "),
        "{}",
        second.stderr
    );
}
