//! Publishing with real processes: the real `xtask` binary, real keys made by `keygen`, a
//! trust root made by `trust-root`, two publishers racing for the same index version, and
//! a publisher killed (SIGKILL) after each step of a publish.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, SystemTime};

mod common;

use cuda_aot::{
    Channel, Digest, Function, FunctionName, Identity, Kind, Manifest, ModuleName, Toolkit,
};

fn xtask() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    c.env("CUDA_AOT_STATE_DIR", common::state_dir());
    c
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Keys, a trust root and three signed build outputs (add for sm_90, sm_80, sm_120).
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let s = Setup {
            dir: tempfile::tempdir().unwrap(),
        };
        // Keys for every role and a dev root: <dir>/<role>.key, <dir>/root.json.
        common::Keys::new(s.dir.path(), "dev");
        s.build_output("a", "sm_90");
        s.build_output("b", "sm_80");
        s.build_output("c", "sm_120");
        s
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn key(&self, role: &str) -> PathBuf {
        self.p(&format!("{role}.key"))
    }
    fn root(&self) -> PathBuf {
        self.p("root.json")
    }
    fn registry(&self) -> PathBuf {
        self.p("registry")
    }

    /// A build output folder holding one real cubin and its manifest, signed by `xtask sign`.
    fn build_output(&self, name: &str, sm: &str) {
        let blob = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/data/elf/add_{sm}.cubin")),
        )
        .unwrap();
        let m = Manifest {
            schema: Manifest::SCHEMA.into(),
            identity: Identity {
                module: ModuleName::new("add").unwrap(),
                sm: sm.parse().unwrap(),
                kind: Kind::Cubin,
                toolkit: Toolkit {
                    nvcc: "13.0.88".into(),
                    digest: Digest::of(b"tk"),
                    source: "pinned-wheels".into(),
                },
                driver_floor: "13.0".parse().unwrap(),
                host_toolchain: "g++".into(),
                flags: vec![format!("-arch={sm}")],
                include_dirs: vec![],
                source_digest: Digest::of(b"add.cu"),
                sources: Vec::new(),
                link_flags: Vec::new(),
                protocol: "test".into(),
                geometry: Default::default(),
                schedule_version: 1,
            },
            module_digest: Digest::of(&blob),
            size: blob.len() as u64,
            functions: cuda_aot::elf::inspect(&blob)
                .unwrap()
                .kernels
                .into_iter()
                .map(|k| Function {
                    symbol: FunctionName::new(&k.symbol).unwrap(),
                    name: cuda_aot::KernelName::new(&k.symbol).unwrap(),
                    signature: None,
                    abi: k.abi,
                })
                .collect(),
            globals: Some(Vec::new()),
            channel: Channel::Dev,
        };
        let dir = self.p(name).join("add");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{sm}.cubin")), &blob).unwrap();
        std::fs::write(
            dir.join(format!("{sm}.cubin.manifest.json")),
            cuda_aot::json::to_vec(&m),
        )
        .unwrap();
        common::record_provenance(&self.p(name), Channel::Dev);
        run_ok(
            xtask()
                .arg("sign")
                .arg(self.p(name))
                .arg("--builder-key")
                .arg(self.key("builder")),
        );
    }

    fn publish_cmd(&self, output: &str) -> Command {
        let mut c = xtask();
        c.arg("publish")
            .arg("--registry")
            .arg(self.registry())
            .arg("--trust")
            .arg(self.root());
        c.arg("--publisher-key")
            .arg(self.key("publisher"))
            .arg(self.p(output));
        c
    }

    /// Runs `xtask verify`; returns (success, stdout + stderr).
    fn verify(&self) -> (bool, String) {
        self.verify_with(&[])
    }

    /// `verify` with extra arguments.
    fn verify_with(&self, extra: &[&str]) -> (bool, String) {
        let out = xtask()
            .arg("verify")
            .args(extra)
            .arg("--registry")
            .arg(self.registry())
            .arg("--trust")
            .arg(self.root())
            .arg("--state")
            .arg(self.p("state.json"))
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

/// Starts a publisher that pauses after `step`, announcing it in `pause_dir`.
fn paused_publisher(s: &Setup, output: &str, step: &str, pause_dir: &Path) -> Child {
    common::paused(&mut s.publish_cmd(output), step, pause_dir)
}

#[test]
fn publishing_the_same_release_twice_changes_nothing() {
    let s = Setup::new();
    let first = run_ok(&mut s.publish_cmd("a"));
    assert!(
        String::from_utf8_lossy(&first.stderr).contains("1 blob(s) written, 0 already present")
    );
    let ts = std::fs::read(s.registry().join("timestamp.json")).unwrap();
    let second = run_ok(&mut s.publish_cmd("a"));
    let text = String::from_utf8_lossy(&second.stderr);
    assert!(text.contains("unchanged: index v1"), "{text}");
    assert_eq!(
        std::fs::read(s.registry().join("timestamp.json")).unwrap(),
        ts,
        "a no-op publish rewrote the timestamp"
    );
    assert!(!s.registry().join("index/2.index.json").exists());
    let (ok, text) = s.verify();
    assert!(ok && text.contains("index v1"), "{text}");
}

#[test]
fn two_concurrent_publishers_one_wins_the_other_conflicts_then_succeeds_on_retry() {
    let s = Setup::new();
    run_ok(&mut s.publish_cmd("a")); // index v1
    let pause = s.p("pause");
    std::fs::create_dir(&pause).unwrap();
    // Both prepare index v2 from v1 and stop before taking the lock.
    let p1 = paused_publisher(&s, "b", "manifests", &pause);
    let p2 = paused_publisher(&s, "c", "manifests", &pause);
    common::wait_for_pauses(&pause, 2);
    std::fs::write(pause.join("go"), b"").unwrap();
    let (o1, o2) = (
        p1.wait_with_output().unwrap(),
        p2.wait_with_output().unwrap(),
    );
    let results = [(&o1, "b"), (&o2, "c")];
    let winners: Vec<_> = results.iter().filter(|(o, _)| o.status.success()).collect();
    let losers: Vec<_> = results
        .iter()
        .filter(|(o, _)| !o.status.success())
        .collect();
    assert_eq!(
        (winners.len(), losers.len()),
        (1, 1),
        "exactly one publisher must win"
    );
    let loser_err = String::from_utf8_lossy(&losers[0].0.stderr);
    assert!(
        loser_err.contains("publish conflict: index version 2"),
        "{loser_err}"
    );
    assert!(
        loser_err.contains("Fix: another release was published at the same time"),
        "{loser_err}"
    );
    let (ok, text) = s.verify();
    assert!(ok && text.contains("index v2"), "{text}");
    // The loser retries and lands on top of the winner; the index holds exactly its
    // release (b has sm_80, c has sm_120).
    run_ok(&mut s.publish_cmd(losers[0].1));
    let (ok, text) = s.verify();
    let (mine, theirs) = match losers[0].1 {
        "b" => ("sm_80", "sm_120"),
        _ => ("sm_120", "sm_80"),
    };
    assert!(
        ok && text.contains("index v3") && text.contains(mine) && !text.contains(theirs),
        "{text}"
    );
}

#[test]
fn a_publisher_killed_after_any_step_leaves_a_registry_that_verifies() {
    for (step, visible) in [
        ("blobs", false),
        ("manifests", false),
        ("locked", false),
        ("index", false),
        ("timestamp", true),
    ] {
        let s = Setup::new();
        run_ok(&mut s.publish_cmd("a")); // index v1
        let pause = s.p("pause");
        std::fs::create_dir(&pause).unwrap();
        let mut child = paused_publisher(&s, "b", step, &pause);
        common::wait_for_pauses(&pause, 1);
        child.kill().unwrap(); // SIGKILL: no cleanup runs
        child.wait().unwrap();
        let (ok, text) = s.verify();
        let expect = if visible { "index v2" } else { "index v1" };
        assert!(ok && text.contains(expect), "killed after {step}: {text}");
        // The next publish succeeds, whatever the dead one left behind (after a kill at
        // the last step the release is already there: the publish is a no-op).
        let out = run_ok(&mut s.publish_cmd("b"));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).contains("unchanged"),
            visible,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (ok, text) = s.verify();
        let expect = "index v2";
        assert!(
            ok && text.contains(expect) && text.contains("sm_80"),
            "publish after a kill at {step}: {text}"
        );
    }
}

#[test]
fn verify_names_the_first_failure_with_a_fix_and_exits_non_zero() {
    let s = Setup::new();
    run_ok(&mut s.publish_cmd("a"));
    let blob = walkdir_first_blob(&s.registry());
    let mut b = std::fs::read(&blob).unwrap();
    b[64] ^= 0xff;
    std::fs::write(&blob, b).unwrap();
    let (ok, text) = s.verify();
    assert!(!ok, "{text}");
    assert!(text.contains("error: add sm_90 blob: blake3"), "{text}");
    assert!(
        text.contains("Fix: the file was altered or truncated after signing"),
        "{text}"
    );
}

fn walkdir_first_blob(registry: &Path) -> PathBuf {
    let dir = registry.join("blobs/blake3");
    let sub = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read_dir(sub)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
}

#[test]
fn keygen_writes_mode_0600_and_refuses_a_tracked_path_or_an_existing_file() {
    use std::os::unix::fs::PermissionsExt;
    let s = Setup::new();
    let mode = std::fs::metadata(s.key("builder"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    // Inside the working tree and not ignored: refused, nothing written.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let tracked = repo.join("kernels/test-builder.key");
    let out = xtask()
        .args(["keygen", "--role", "builder", "--out"])
        .arg(&tracked)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("inside the working tree and not ignored by git"),
        "{err}"
    );
    assert!(err.contains("Fix:"), "{err}");
    assert!(!tracked.exists());
    // An existing key is never overwritten.
    let out = xtask()
        .args(["keygen", "--role", "builder", "--out"])
        .arg(s.key("builder"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    // A key readable by others is refused when used.
    std::fs::set_permissions(s.key("builder"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = xtask()
        .arg("sign")
        .arg(s.p("a"))
        .arg("--builder-key")
        .arg(s.key("builder"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("readable by other users")
            && err.contains("Fix: chmod 600"),
        "{err}"
    );
}

#[test]
fn refresh_timestamp_revives_an_expired_registry_and_refuses_a_wrong_key() {
    let s = Setup::new();
    // Publish with a timestamp that expires at once (0 days).
    run_ok(s.publish_cmd("a").args(["--timestamp-days", "0"]));
    // Verified as of a minute from now (the clock option, not a sleep): expired.
    let later = humantime::format_rfc3339_seconds(SystemTime::now() + Duration::from_secs(60));
    let (ok, text) = s.verify_with(&["--at", &later.to_string()]);
    assert!(!ok && text.contains("timestamp v1: expired"), "{text}");
    // A time in the past is refused before anything is read.
    let (ok, text) = s.verify_with(&["--at", "2020-01-01T00:00:00Z"]);
    assert!(!ok && text.contains("is before now"), "{text}");
    // A refresh signed with the builder key is refused before anything is written.
    let ts_before = std::fs::read(s.registry().join("timestamp.json")).unwrap();
    let mut wrong = xtask();
    wrong
        .arg("publish")
        .arg("--registry")
        .arg(s.registry())
        .arg("--trust")
        .arg(s.root());
    let out = wrong
        .arg("--publisher-key")
        .arg(s.key("builder"))
        .arg("--refresh-timestamp")
        .output()
        .unwrap();
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("is not a publisher key")
    );
    assert_eq!(
        std::fs::read(s.registry().join("timestamp.json")).unwrap(),
        ts_before
    );
    // The publisher's refresh: same index, new timestamp version and expiry.
    let out = run_ok(s.publish_cmd("a").arg("--refresh-timestamp"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("timestamp v2 for index v1"));
    let (ok, text) = s.verify();
    assert!(ok && text.contains("index v1 (timestamp v2"), "{text}");
}
