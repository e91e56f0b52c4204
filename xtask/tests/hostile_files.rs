//! Issue 10: what an attacker puts where the tools read, tried with the real `xtask` binary
//! and a deadline: a FIFO in place of `timestamp.json` or a blob, `/dev/zero` as the trust
//! root, and a clock-skew value at the top of its range. Each must end promptly with a clear
//! error (or succeed), never hang or panic.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

fn xtask() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    c.env("CUDA_AOT_STATE_DIR", common::state_dir());
    c
}

/// Runs `cmd`, killing it after `deadline`; returns its output and whether it was killed.
fn run_with_deadline(cmd: &mut Command, deadline: Duration) -> (Output, bool) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut killed = false;
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > deadline {
            child.kill().unwrap();
            killed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (child.wait_with_output().unwrap(), killed)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A dev registry made by the real tools in a temporary folder: keys, trust root, one
/// signed build output with a real cubin, published.
struct Reg {
    dir: tempfile::TempDir,
}

impl Reg {
    fn new() -> Reg {
        let r = Reg {
            dir: tempfile::tempdir().unwrap(),
        };
        // Keys for every role and a dev root: <dir>/<role>.key, <dir>/root.json.
        common::Keys::new(r.dir.path(), "dev");
        // One module: the real sm_90 cubin of tests/data/elf/add.cu, with its manifest.
        let blob = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/elf/add_sm_90.cubin"),
        )
        .unwrap();
        let manifest = format!(
            r#"{{"schema":"cuda-aot/manifest/v1","identity":{{"module":"add","sm":"sm_90","kind":"cubin","toolkit":{{"nvcc":"13.0.88","digest":"{d}","source":"pinned-wheels"}},"driver_floor":"13.0","host_toolchain":"g++","flags":["-arch=sm_90"],"include_dirs":[],"source_digest":"{d}","protocol":"test","geometry":{{}},"schedule_version":1}},"module_digest":"blake3:{b}","size":{n},"functions":{f},"channel":"dev"}}"#,
            d = format!("blake3:{}", blake3::hash(b"x").to_hex()),
            // The kernel with its launch ABI, as the cubin records it (the verifier checks).
            f = serde_json::to_string(
                &cuda_aot::elf::inspect(&blob)
                    .unwrap()
                    .kernels
                    .into_iter()
                    .map(|k| cuda_aot::Function {
                        symbol: cuda_aot::FunctionName::new(&k.symbol).unwrap(),
                        name: cuda_aot::KernelName::new(&k.symbol).unwrap(),
                        signature: None,
                        abi: k.abi,
                    })
                    .collect::<Vec<_>>()
            )
            .unwrap(),
            b = blake3::hash(&blob).to_hex(),
            n = blob.len()
        );
        std::fs::create_dir_all(r.p("out/add")).unwrap();
        std::fs::write(r.p("out/add/sm_90.cubin"), &blob).unwrap();
        std::fs::write(r.p("out/add/sm_90.cubin.manifest.json"), manifest).unwrap();
        common::record_provenance(&r.p("out"), cuda_aot::Channel::Dev);
        for args in [
            vec!["sign", "--builder-key", "builder.key", "out"],
            vec![
                "publish",
                "--registry",
                "registry",
                "--trust",
                "root.json",
                "--publisher-key",
                "publisher.key",
                "out",
            ],
        ] {
            let out = xtask()
                .args(&args)
                .current_dir(r.dir.path())
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {}", text(&out));
        }
        r
    }

    fn p(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }

    fn verify(&self, trust: &Path, extra: &[&str]) -> (Output, bool) {
        run_with_deadline(
            xtask()
                .arg("verify")
                .arg("--registry")
                .arg(self.p("registry"))
                .arg("--trust")
                .arg(trust)
                .arg("--state")
                .arg(self.p("state.json"))
                .args(extra),
            Duration::from_secs(30),
        )
    }

    fn replace_with_fifo(&self, path: &Path) {
        std::fs::remove_file(path).unwrap();
        assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
    }
}

#[test]
fn issue_10_a_fifo_timestamp_is_refused_promptly() {
    let r = Reg::new();
    r.replace_with_fifo(&r.p("registry/timestamp.json"));
    let (out, killed) = r.verify(&r.p("root.json"), &[]);
    assert!(!killed, "verify hung on a FIFO: {}", text(&out));
    assert!(!out.status.success());
    let t = text(&out);
    assert!(
        t.contains("timestamp.json: is a FIFO (named pipe), not a regular file")
            && t.contains("Fix:"),
        "{t}"
    );
}

#[test]
fn issue_10_a_fifo_blob_is_refused_promptly() {
    let r = Reg::new();
    let blob = walkdir::WalkDir::new(r.p("registry/blobs"))
        .into_iter()
        .map(|e| e.unwrap())
        .find(|e| e.file_type().is_file())
        .unwrap()
        .into_path();
    r.replace_with_fifo(&blob);
    let (out, killed) = r.verify(&r.p("root.json"), &[]);
    assert!(!killed, "verify hung on a FIFO: {}", text(&out));
    let t = text(&out);
    assert!(!out.status.success() && t.contains("FIFO"), "{t}");
}

#[test]
fn issue_10_dev_zero_as_the_trust_root_is_refused_promptly() {
    let r = Reg::new();
    let (out, killed) = r.verify(Path::new("/dev/zero"), &[]);
    assert!(!killed, "verify hung on /dev/zero: {}", text(&out));
    let t = text(&out);
    assert!(
        !out.status.success() && t.contains("/dev/zero: is a character device"),
        "{t}"
    );
    // The advice points at the right file, not at rotating the device as a root.
    assert!(
        t.contains("Fix: pass the trust root file with --trust") && !t.contains("--previous"),
        "{t}"
    );
}

#[test]
fn issue_10_the_largest_clock_skew_does_not_panic() {
    let r = Reg::new();
    let (out, killed) = r.verify(
        &r.p("root.json"),
        &["--clock-skew-secs", "18446744073709551615"],
    );
    assert!(!killed);
    let t = text(&out);
    assert!(!t.contains("panicked"), "{t}");
    assert!(out.status.success() && t.contains("registry OK"), "{t}");
}
