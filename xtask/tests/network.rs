//! The registry over the network with real processes: a fresh release (real nvcc builds,
//! dev keys) served by `serve` and by a stock nginx (no cuda-aot code on the server),
//! synced with `cargo xtask sync` into folders that `cargo xtask verify` accepts; the same
//! release published to an OCI registry and to a bucket of the S3 test server.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use common::s3::S3;
use common::server::{Server, oci_server};
use common::xtask;

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn files_under(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in walkdir(dir) {
        let rel = e.strip_prefix(dir).unwrap().to_string_lossy().to_string();
        if rel.starts_with('.') || rel.contains("/.") {
            continue;
        }
        out.push((rel, std::fs::read(&e).unwrap()));
    }
    out.sort();
    out
}

fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn sync_and_verify(url: &str, tmp: &Path, name: &str) -> (String, String) {
    sync_and_verify_with(url, tmp, name, &mut xtask())
}

/// [`sync_and_verify`] with the sync run as `sync` (an `xtask` command with its
/// environment).
fn sync_and_verify_with(url: &str, tmp: &Path, name: &str, sync: &mut Command) -> (String, String) {
    let to = tmp.join(name);
    let state = tmp.join(format!("{name}.state.json"));
    let out = run_ok(
        sync.args(["sync", "--from", url, "--to"])
            .arg(&to)
            .arg("--state")
            .arg(&state),
    );
    let synced = String::from_utf8_lossy(&out.stdout).to_string();
    let out = run_ok(
        xtask()
            .args(["verify", "--registry"])
            .arg(&to)
            .arg("--state")
            .arg(tmp.join(format!("{name}.verify-state.json"))),
    );
    (synced, String::from_utf8_lossy(&out.stdout).to_string())
}

/// One fresh release per test process (real nvcc builds, dev keys): `registry/` and the
/// signed build output `out/`.
fn release() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        common::toolkit_root();
        // One folder per process (a static is never dropped to clean up, and test runners
        // such as nextest run each test in its own process at the same time); the folders
        // of processes that have ended are removed here.
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        for e in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(pid) = name.strip_prefix("network-release-")
                && !Path::new("/proc").join(pid).exists()
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let d = tmp.join(format!("network-release-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        run_ok(
            xtask()
                .args(["release", "--registry"])
                .arg(d.join("registry"))
                .arg("--out")
                .arg(d.join("out")),
        );
        d
    })
}

#[test]
fn a_fresh_release_served_by_serve_and_by_nginx_syncs_into_folders_that_verify_accepts() {
    let tmp = tempfile::tempdir().unwrap();
    let reg = release().join("registry");
    let published = files_under(&reg);

    let mut serve = Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[&reg]);
    let (synced, table) = sync_and_verify(&serve.url(), tmp.path(), "from-serve");
    assert!(synced.starts_with("synced "), "{synced}");
    assert!(table.starts_with("registry OK: index v"), "{table}");
    // SIGTERM is how an operator stops the server: a graceful stop, exit status 0.
    let status = serve.stop();
    assert_eq!(status.code(), Some(0), "serve after SIGTERM: {status:?}");

    let nginx = Server::start(
        &["servers", "nginx", "--workers", "1", "--root"],
        &[&reg, Path::new("--work"), &tmp.path().join("nginx")],
    );
    let (synced, table2) = sync_and_verify(&nginx.url(), tmp.path(), "from-nginx");
    assert!(synced.starts_with("synced "), "{synced}");
    assert_eq!(table2, table, "both mirrors hold the same verified release");

    // Each mirror holds exactly the published files: the sources the build statement names
    // (a rebuilder works from a mirror) and root/1, where the audit starts the chain (a new
    // client of the mirror starts there too).
    assert!(
        published
            .iter()
            .any(|(p, _)| p.starts_with("sources/blake3/"))
    );
    assert_eq!(files_under(&tmp.path().join("from-serve")), published);
    assert_eq!(files_under(&tmp.path().join("from-nginx")), published);

    // A second sync from the static server transfers only the timestamp.
    let out = run_ok(
        xtask()
            .args(["sync", "--from", &nginx.url(), "--to"])
            .arg(tmp.path().join("from-nginx"))
            .arg("--state")
            .arg(tmp.path().join("from-nginx.state.json")),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("up to date "), "{text}");
    assert!(text.contains("fetched 1 file(s)"), "{text}");
}

/// Issue 18: `cargo xtask sync` saves its rollback state in the file the prover runtime
/// reads by default for the synced folder (`TrustState::file_in` of the state folder, the
/// function behind `TrustState::default_path` and `Policy::state_path`), not in a
/// checkout-local file: `verify` without `--state` then starts from what the sync saw.
#[test]
fn issue_18_cargo_xtask_sync_updates_the_state_file_the_runtime_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let reg = release().join("registry");
    let state_dir = tmp.path().join("state");
    let to = tmp.path().join("mirror");
    let mut serve = Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[&reg]);
    run_ok(
        xtask()
            .env("CUDA_AOT_STATE_DIR", &state_dir)
            .args(["sync", "--from", &serve.url(), "--to"])
            .arg(&to),
    );
    let _ = serve.stop();
    let file = cuda_aot::state::TrustState::file_in(&state_dir, &to);
    let saved = cuda_aot::state::TrustState::load(&file, 4096).unwrap();
    let index = cuda_aot_registry::DirRegistry::new(&to)
        .current()
        .unwrap()
        .unwrap()
        .1;
    assert!(
        saved.index == index.version && saved.root >= 1 && saved.fresh_at.is_some(),
        "{file:?}: {saved:?}"
    );
    let names: Vec<_> = std::fs::read_dir(&state_dir).unwrap().collect();
    assert_eq!(
        names.len(),
        2,
        "the state file and its lock only: {names:?}"
    );
    // verify, with no --state, reads that file: a floor above the mirror is a rollback.
    let inflated = cuda_aot::state::TrustState {
        index: index.version + 1,
        timestamp: saved.timestamp + 1,
        ..saved
    };
    std::fs::write(&file, cuda_aot::json::to_vec(&inflated)).unwrap();
    let out = xtask()
        .env("CUDA_AOT_STATE_DIR", &state_dir)
        .args(["verify", "--registry"])
        .arg(&to)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("rollback refused"),
        "{err}"
    );
}

#[test]
fn a_release_round_trips_through_an_oci_registry() {
    let tmp = tempfile::tempdir().unwrap();
    let oci = oci_server(tmp.path());
    let reference = format!("oci://{}/cuda-aot/release:stable", oci.addr);
    let out = release().join("out");
    let publish = |out: &Path| {
        let o = run_ok(xtask().args(["publish", "--registry", &reference]).arg(out));
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    let text = publish(&out);
    assert!(text.contains("published index v1 "), "{text}");
    assert!(text.contains("OCI layers"), "{text}");
    let (synced, table) = sync_and_verify(&reference, tmp.path(), "pulled");
    assert!(synced.starts_with("synced "), "{synced}");
    assert!(table.starts_with("registry OK: index v"), "{table}");
    let local_reg = files_under(&release().join("registry"));
    let modules = local_reg
        .iter()
        .filter(|(p, _)| p.starts_with("manifests/"))
        .count();
    assert!(
        table.contains(&format!("{modules} module(s)")),
        "every module of the release came back: {table}"
    );
    // The same build again: the tag already holds it, nothing is pushed.
    let text = publish(&out);
    assert!(text.contains("unchanged: index v1 "), "{text}");
    assert!(!text.contains("OCI layers"), "{text}");

    // The next build (one module only) is published on top of what the tag holds: index
    // v2; a sync fetches only the new timestamp, index and build statement.
    let out2 = tmp.path().join("out2");
    run_ok(
        xtask()
            .args(["build", "--module", "ntt", "--out"])
            .arg(&out2),
    );
    run_ok(xtask().arg("sign").arg(&out2));
    let text = publish(&out2);
    assert!(text.contains("published index v2 "), "{text}");
    let o = run_ok(
        xtask()
            .args(["sync", "--from", &reference, "--to"])
            .arg(tmp.path().join("pulled"))
            .arg("--state")
            .arg(tmp.path().join("pulled.state.json")),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("index v2"), "{text}");
    assert!(text.contains("fetched 3 file(s)"), "{text}");

    // A layer altered inside the OCI registry's storage is refused (its sha256 no longer
    // matches the artifact manifest), and nothing reaches the local folder.
    let sha = hex_sha256(&std::fs::read(out2.join("ntt/sm_90.cubin")).unwrap());
    let data = tmp
        .path()
        .join("oci-storage/docker/registry/v2/blobs/sha256")
        .join(&sha[..2])
        .join(&sha)
        .join("data");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[64] ^= 1;
    std::fs::write(&data, &bytes).unwrap();
    let fresh = tmp.path().join("fresh");
    let o = xtask()
        .args(["sync", "--from", &reference, "--to"])
        .arg(&fresh)
        .arg("--state")
        .arg(tmp.path().join("fresh.state.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("digest"), "{err}");
    assert!(
        !fresh.join("timestamp.json").exists(),
        "nothing is visible after a refused sync"
    );
}

fn hex_sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[test]
fn publishers_racing_over_http_one_wins_and_the_other_is_told_to_retry() {
    let tmp = tempfile::tempdir().unwrap();
    let out = release().join("out");
    let out2 = tmp.path().join("out2");
    run_ok(
        xtask()
            .args(["build", "--module", "merkle", "--out"])
            .arg(&out2),
    );
    run_ok(xtask().arg("sign").arg(&out2));
    let trust = common::repo().join(".cuda-aot/dev-keys/root.json");
    let (server, token) =
        common::server::publishing(tmp.path(), &tmp.path().join("served"), &trust);
    let url = server.url();

    // Without the token file the publisher says what is missing.
    let o = xtask()
        .args(["publish", "--registry", &url])
        .arg(&out)
        .env_remove("CUDA_AOT_PUBLISH_TOKEN_FILE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("needs the server's token") && err.contains("Fix: pass --token-file"),
        "{err}"
    );

    // The token never goes in clear to another machine: refused before any connection
    // (`.invalid` never resolves), unless the publisher says the network is trusted.
    let o = xtask()
        .args([
            "publish",
            "--registry",
            "http://registry.invalid:8080/",
            "--token-file",
        ])
        .arg(&token)
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("would cross the network in clear")
            && err.contains("Fix: publish over https://")
            && err.contains("--allow-plain-http"),
        "{err}"
    );

    // Two publishers prepare on the same (empty) registry, then commit at the same time.
    let pause = tmp.path().join("pause");
    std::fs::create_dir_all(&pause).unwrap();
    let spawn = |o: &Path| {
        xtask()
            .args(["publish", "--registry", &url, "--token-file"])
            .arg(&token)
            .arg(o)
            .env(
                "CUDA_AOT_PUBLISH_PAUSE",
                format!("manifests:{}", pause.display()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let a = spawn(&out);
    let b = spawn(&out2);
    common::wait_for_pauses(&pause, 2);
    std::fs::write(pause.join("go"), b"").unwrap();
    let results = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
    let won: Vec<bool> = results.iter().map(|r| r.status.success()).collect();
    assert_eq!(
        won.iter().filter(|w| **w).count(),
        1,
        "exactly one publisher wins: {:?}",
        results
            .iter()
            .map(|r| String::from_utf8_lossy(&r.stderr).to_string())
            .collect::<Vec<_>>()
    );
    let loser = &results[won.iter().position(|w| !w).unwrap()];
    let err = String::from_utf8_lossy(&loser.stderr);
    assert!(err.contains("publish conflict"), "{err}");
    assert!(
        err.contains("Fix: another release was published at the same time; run the publish again"),
        "{err}"
    );

    // The loser retries and builds on the winner's index.
    let loser_out = if won[0] { &out2 } else { &out };
    let o = run_ok(
        xtask()
            .args(["publish", "--registry", &url, "--token-file"])
            .arg(&token)
            .arg(loser_out),
    );
    let text = String::from_utf8_lossy(&o.stderr);
    assert!(text.contains("published index v2 "), "{text}");
    let (synced, table) = sync_and_verify(&url, tmp.path(), "from-http");
    assert!(synced.contains("index v2"), "{synced}");
    assert!(table.starts_with("registry OK: index v2"), "{table}");
}

/// Issue 21: a rebuilder works from a mirror. A candidate release awaiting its rebuild (one
/// builder of the two the root wants) is served over HTTP; `sync` refuses it as a prover's
/// copy, mirrors it with `--awaiting-rebuild` (the sources included), and `rebuild` from the
/// mirror compiles every job and co-signs.
#[test]
fn a_candidate_awaiting_its_rebuild_syncs_over_http_and_rebuilds_from_the_mirror() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = common::Keys::with_builders(&tmp.path().join("keys"), "dev", 2, 2);
    let ws = common::Ws::new();
    let built = ws.build(&[]);
    assert!(built.ok, "{}", built.stderr);
    run_ok(
        xtask()
            .arg("sign")
            .arg(ws.path("out"))
            .arg("--builder-key")
            .arg(keys.builder(1)),
    );
    let candidate = tmp.path().join("candidate");
    run_ok(
        xtask()
            .args(["publish", "--awaiting-rebuild", "--registry"])
            .arg(&candidate)
            .arg("--trust")
            .arg(keys.root())
            .arg("--publisher-key")
            .arg(keys.key("publisher"))
            .arg(ws.path("out")),
    );
    let serve = Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[&candidate]);
    let sync = |mirror: &str, awaiting: bool| {
        let mut c = xtask();
        c.args(["sync", "--from", &serve.url(), "--to"])
            .arg(tmp.path().join(mirror))
            .arg("--trust")
            .arg(keys.root())
            .arg("--state")
            .arg(tmp.path().join(format!("{mirror}.state.json")));
        if awaiting {
            c.arg("--awaiting-rebuild");
        }
        c.output().unwrap()
    };
    let refused = sync("prover-copy", false);
    assert!(!refused.status.success());
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(text.contains("1 of the 2 required builder"), "{text}");
    assert!(!tmp.path().join("prover-copy/timestamp.json").exists());

    let out = sync("mirror", true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mirror = tmp.path().join("mirror");
    let published = files_under(&candidate);
    assert!(
        published
            .iter()
            .any(|(p, _)| p.starts_with("sources/blake3/"))
    );
    assert_eq!(files_under(&mirror), published, "the sources are mirrored");

    let machine = tempfile::tempdir().unwrap();
    let out = run_ok(
        xtask()
            .current_dir(machine.path())
            .args(["rebuild", "--registry"])
            .arg(&mirror)
            .arg("--trust")
            .arg(keys.root())
            .arg("--builder-key")
            .arg(keys.builder(2))
            .arg("--out")
            .arg(machine.path().join("rebuild")),
    );
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("with 6 nvcc run(s)") && text.contains("bit-identical rebuild"),
        "{text}"
    );
}

/// The signed build output of one module of the project's release (real nvcc, dev keys),
/// in `dir`: a second release to publish over the first.
fn module_output(dir: &Path, module: &str) -> PathBuf {
    let out = dir.join(format!("out-{module}"));
    run_ok(
        xtask()
            .args(["build", "--module", module, "--out"])
            .arg(&out),
    );
    run_ok(xtask().arg("sign").arg(&out));
    out
}

/// `xtask publish --registry URL OUT` against `s3`, paused at `pause` when given.
fn publish_s3(s3: &S3, url: &str, out: &Path, pause: Option<String>) -> Command {
    let mut c = s3.xtask();
    c.args(["publish", "--registry", url]).arg(out);
    if let Some(p) = pause {
        c.env("CUDA_AOT_PUBLISH_PAUSE", p);
    }
    c
}

/// `xtask publish --registry URL OUT` against `s3`, which must succeed: what it printed.
fn published_s3(s3: &S3, url: &str, out: &Path) -> String {
    let o = run_ok(&mut publish_s3(s3, url, out, None));
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// Issue 20, item 4: a registry in a bucket of the S3 test server. A release published to
/// `s3://` is mirrored by `sync` and accepted by `verify`; publishing it again commits
/// nothing. Two publishers prepared on the same index commit at once: exactly one wins
/// (the index is created with If-None-Match: *, the timestamp replaced with If-Match) and
/// the other is told to retry. A publisher killed between its index and its timestamp
/// leaves a registry that still verifies, and the next publish goes past its orphaned
/// index.
#[test]
fn a_release_published_to_s3_syncs_verifies_and_racing_publishers_get_one_winner() {
    let tmp = tempfile::tempdir().unwrap();
    let s3 = S3::start(&["registry"], &[]);
    let url = "s3://registry/cuda-aot/release";
    let first = published_s3(&s3, url, &release().join("out"));
    assert!(first.contains("published index v1 "), "{first}");
    assert!(first.contains(url), "{first}");
    let again = published_s3(&s3, url, &release().join("out"));
    assert!(again.contains("unchanged: index v1"), "{again}");
    let (synced, table) = sync_and_verify_with(url, tmp.path(), "from-s3", &mut s3.xtask());
    assert!(synced.starts_with("synced "), "{synced}");
    assert!(table.starts_with("registry OK: index v1"), "{table}");
    // The bucket holds the same content-addressed files and roots as the local registry
    // the release published (the index and timestamp are signed anew, with their own
    // times).
    let bucket = s3.client(url);
    for (rel, bytes) in files_under(&release().join("registry"))
        .into_iter()
        .filter(|(rel, _)| !rel.starts_with("index/") && rel != "timestamp.json")
    {
        assert_eq!(
            bucket.get(&rel, bytes.len() as u64).unwrap().as_deref(),
            Some(bytes.as_slice()),
            "{rel}"
        );
    }

    // Two publishers prepare on v1 and commit at the same time.
    let merkle = module_output(tmp.path(), "merkle");
    let ntt = module_output(tmp.path(), "ntt");
    let pause = tmp.path().join("pause");
    std::fs::create_dir_all(&pause).unwrap();
    let spawn = |out: &Path| {
        publish_s3(
            &s3,
            url,
            out,
            Some(format!("manifests:{}", pause.display())),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
    };
    let a = spawn(&merkle);
    let b = spawn(&ntt);
    common::wait_for_pauses(&pause, 2);
    std::fs::write(pause.join("go"), b"").unwrap();
    let results = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
    let said: Vec<String> = results
        .iter()
        .map(|r| String::from_utf8_lossy(&r.stderr).to_string())
        .collect();
    let won: Vec<bool> = results.iter().map(|r| r.status.success()).collect();
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "{said:?}");
    let lost = won.iter().position(|w| !w).unwrap();
    assert!(said[lost].contains("publish conflict"), "{said:?}");
    assert!(
        said[lost]
            .contains("Fix: another release was published at the same time; run the publish again"),
        "{said:?}"
    );
    assert!(said[1 - lost].contains("published index v2 "), "{said:?}");

    // A publisher killed after creating its index, before its timestamp: clients still see
    // v2, and the loser's retry goes past every orphaned index (this one, and the loser's
    // own when it chose v3 after the winner's v2 existed).
    let highest = |b: &cuda_aot_registry::s3::S3Client| {
        (1..50)
            .take_while(|v| {
                b.get(&format!("index/{v}.index.json"), 0)
                    .unwrap()
                    .is_some()
            })
            .last()
            .unwrap()
    };
    let dead = tmp.path().join("dead");
    std::fs::create_dir_all(&dead).unwrap();
    let mut killed = publish_s3(
        &s3,
        url,
        &release().join("out"),
        Some(format!("index:{}", dead.display())),
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    common::wait_for_pauses(&dead, 1);
    killed.kill().unwrap();
    killed.wait().unwrap();
    let orphaned = highest(&bucket);
    assert!(orphaned >= 3, "the killed publisher's index exists");
    let (synced, _) = sync_and_verify_with(url, tmp.path(), "after-kill", &mut s3.xtask());
    assert!(synced.contains("index v2"), "{synced}");
    let loser = if lost == 0 { &merkle } else { &ntt };
    let retried = published_s3(&s3, url, loser);
    let next = orphaned + 1;
    assert!(
        retried.contains(&format!("published index v{next} ")),
        "{retried}"
    );
    let (synced, table) = sync_and_verify_with(url, tmp.path(), "from-s3", &mut s3.xtask());
    assert!(synced.contains(&format!("index v{next}")), "{synced}");
    assert!(
        table.starts_with(&format!("registry OK: index v{next}")),
        "{table}"
    );
}

/// Issue 20, items 4 and 6: a store that ignores conditional writes is refused before
/// anything of the registry is written (two publishers could both "win" there); a store
/// answering every third request with 503 is retried through: the release publishes,
/// syncs and verifies.
#[test]
fn s3_without_conditional_writes_is_refused_and_a_5xx_storm_is_retried_through() {
    let tmp = tempfile::tempdir().unwrap();
    let url = "s3://registry/r";
    {
        let s3 = S3::start(&["registry"], &["--ignore-conditions"]);
        let o = publish_s3(&s3, url, &release().join("out"), None)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(
                "s3://registry/r: refusing to publish: the store does not honour conditional writes"
            ),
            "{err}"
        );
        assert!(
            err.contains("Fix: publish to a store with S3 conditional writes"),
            "{err}"
        );
        let bucket = s3.client(url);
        for rel in ["timestamp.json", "root/1.root.json", "index/1.index.json"] {
            assert!(bucket.get(rel, 1 << 20).unwrap().is_none(), "{rel} written");
        }
    }
    let s3 = S3::start(&["registry"], &["--fail-every", "3"]);
    assert!(s3.fails_requests(url), "the storm is on");
    let text = published_s3(&s3, url, &release().join("out"));
    assert!(text.contains("published index v1 "), "{text}");
    let (synced, table) = sync_and_verify_with(url, tmp.path(), "storm", &mut s3.xtask());
    assert!(synced.starts_with("synced "), "{synced}");
    assert!(table.starts_with("registry OK: index v1"), "{table}");
}

/// Issue 20, item 4, for OCI: tags have no compare-and-swap, so a publisher reads the tag
/// again just before pushing. One that prepared on a release the tag no longer holds (another
/// publisher pushed meanwhile) pushes nothing and is told to retry; the tag keeps the other
/// release, and the retry builds on it.
#[test]
fn an_oci_publisher_whose_tag_moved_while_it_prepared_pushes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let oci = oci_server(tmp.path());
    let reference = format!("oci://{}/cuda-aot/race:stable", oci.addr);
    let publish = |out: &Path| {
        let o = run_ok(xtask().args(["publish", "--registry", &reference]).arg(out));
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    let first = publish(&release().join("out"));
    assert!(first.contains("published index v1 "), "{first}");
    let merkle = module_output(tmp.path(), "merkle");
    let ntt = module_output(tmp.path(), "ntt");

    // A prepares on v1 and waits; B publishes v2 meanwhile; then A goes on.
    let pause = tmp.path().join("pause");
    std::fs::create_dir_all(&pause).unwrap();
    let a = xtask()
        .args(["publish", "--registry", &reference])
        .arg(&merkle)
        .env(
            "CUDA_AOT_PUBLISH_PAUSE",
            format!("manifests:{}", pause.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for_pauses(&pause, 1);
    let b = publish(&ntt);
    assert!(b.contains("published index v2 "), "{b}");
    std::fs::write(pause.join("go"), b"").unwrap();
    let a = a.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&a.stderr);
    assert_eq!(a.status.code(), Some(1), "{err}");
    assert!(err.contains("publish conflict"), "{err}");
    assert!(
        err.contains("Fix: another release was published at the same time"),
        "{err}"
    );
    assert!(!err.contains("pushed "), "A pushed nothing: {err}");
    let (synced, table) = sync_and_verify(&reference, tmp.path(), "after-race");
    assert!(synced.contains("index v2"), "{synced}");
    assert!(table.starts_with("registry OK: index v2"), "{table}");

    let retried = publish(&merkle);
    assert!(retried.contains("published index v3 "), "{retried}");
}
