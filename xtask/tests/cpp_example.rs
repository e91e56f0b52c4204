//! Issue 22: the C++ example prover (`examples/cpp/prover.cpp`, on `cuda_aot.hpp` over the C
//! ABI) and `examples/c/verify.c` compile with the commands docs/capi.md gives, warnings as
//! errors, against the C ABI installed as that page says (`install-capi`, its dev build,
//! into a temporary prefix) and the pinned toolkit's CUDA headers and static runtime; and
//! on a real dev release (real nvcc, generated keys)
//! it says why it cannot run: no driver here (after the registry verified), a flipped blob
//! byte (before any driver call), a dev registry under the production policy. On the GPU
//! host `gpu-run` runs the same program against the release and checks its kernels.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine;

use common::capi::Installed;
use common::{Ws, toolkit_root};

/// The build command of docs/capi.md that starts with `program` (one line of a shell
/// block), so the test builds exactly what the page tells users to run.
fn doc_command(program: &str) -> String {
    let doc = std::fs::read_to_string(common::repo().join("docs/capi.md")).unwrap();
    doc.lines()
        .find(|l| l.starts_with(&format!("{program} ")))
        .unwrap_or_else(|| panic!("docs/capi.md has no `{program} ...` command"))
        .to_string()
}

/// Runs the documented build command `program ...` with warnings as errors, the
/// documented prefix `.cuda-aot/capi` replaced by `prefix` (where the test installed the
/// library), `CUDA` the pinned toolkit, and the output `-o` replaced by `out`.
fn build_as_documented(program: &str, prefix: &Path, out: &Path) {
    let prefix = prefix.display().to_string();
    let cmd = doc_command(program);
    let output = cmd.split(" -o ").nth(1).expect("an -o in the command");
    let cmd = cmd
        .replace("$PWD/.cuda-aot/capi", &prefix)
        .replace(".cuda-aot/capi", &prefix)
        .replace(&format!(" -o {output}"), &format!(" -o {}", out.display()));
    let done = Command::new("sh")
        .arg("-c")
        .arg(format!("{cmd} -Wall -Wextra -Werror"))
        .current_dir(common::repo())
        .env("CUDA", toolkit_root())
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "{cmd}\nfailed:\n{}",
        String::from_utf8_lossy(&done.stderr)
    );
}

fn run(prover: &Path, ws: &Ws, args: &[&str]) -> (Output, String, String) {
    let out = Command::new(prover)
        .arg(ws.path("spec/.cuda-aot/registry"))
        .arg(ws.path("spec/.cuda-aot/dev-keys/root.json"))
        .args(args)
        .env("CUDA_AOT_STATE_DIR", ws.path("state"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

#[test]
fn issue_22_the_cpp_example_prover_compiles_and_says_why_it_cannot_run_here() {
    let ws = Ws::new();
    ws.release();
    // The library as docs/capi.md has it built: installed into a prefix (`install-capi`).
    let capi = Installed::new();
    let prover = ws.path("prover-cpp");
    build_as_documented("c++", &capi.prefix(), &prover);

    // Bad arguments: the usage line, exit 2.
    let out = Command::new(&prover).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage:"));

    if !Path::new("/dev/nvidiactl").exists() {
        // No driver (CI): the registry verifies, then the driver is missing, with its Fix.
        let (out, _, stderr) = run(&prover, &ws, &[]);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("(CUDA_AOT_STATUS_DRIVER)") && stderr.contains("libcuda"),
            "{stderr}"
        );
        assert!(
            stderr.contains("\nFix: install the NVIDIA driver"),
            "{stderr}"
        );
    }

    // The production policy refuses a dev registry as a whole, naming both channels.
    let (out, _, stderr) = run(&prover, &ws, &["--production"]);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("(CUDA_AOT_STATUS_POLICY)"), "{stderr}");
    assert!(
        stderr.contains("production") && stderr.contains("dev"),
        "{stderr}"
    );
    assert!(stderr.contains("\nFix: "), "{stderr}");

    // A timestamp whose signed payload was changed (version 1 -> 9): refused before any
    // driver call, whether or not this host has one.
    let ts = ws.path("spec/.cuda-aot/registry/timestamp.json");
    let mut env: serde_json::Value = serde_json::from_slice(&std::fs::read(&ts).unwrap()).unwrap();
    let payload =
        String::from_utf8(b64().decode(env["payload"].as_str().unwrap()).unwrap()).unwrap();
    let forged = payload.replacen("\"version\": 1,", "\"version\": 9,", 1);
    assert_ne!(forged, payload, "{payload}");
    env["payload"] = b64().encode(forged).into();
    let original = std::fs::read(&ts).unwrap();
    std::fs::write(&ts, serde_json::to_vec(&env).unwrap()).unwrap();
    let (out, stdout, stderr) = run(&prover, &ws, &[]);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("(CUDA_AOT_STATUS_BAD_SIGNATURE)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("timestamp") && stderr.contains("\nFix: "),
        "{stderr}"
    );
    assert!(!stdout.contains("loaded"), "nothing loaded: {stdout}");
    std::fs::write(&ts, original).unwrap();

    // examples/c/verify.c on the same fresh release: accepted, one line per module and
    // target; then one flipped byte of a blob is refused, naming module, target and file.
    let verify = ws.path("verify");
    build_as_documented("cc", &capi.prefix(), &verify);
    let check = |expect: i32| {
        let out = Command::new(&verify)
            .arg(ws.path("spec/.cuda-aot/registry"))
            .arg(ws.path("spec/.cuda-aot/dev-keys/root.json"))
            .env("CUDA_AOT_STATE_DIR", ws.path("state-verify"))
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(expect), "{text}");
        text
    };
    let good = check(0);
    for module in ["alpha", "beta", "gamma"] {
        assert!(
            good.lines()
                .any(|l| l.split_whitespace().take(3).eq([module, "sm_90", "cubin"])),
            "{good}"
        );
    }
    let blob = first_blob(&ws.path("spec/.cuda-aot/registry/blobs/blake3"));
    let mut bytes = std::fs::read(&blob).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&blob, &bytes).unwrap();
    let bad = check(1);
    assert!(bad.contains("(CUDA_AOT_STATUS_TAMPERED)"), "{bad}");
    assert!(
        bad.contains("[module ") && bad.contains(&blob.display().to_string()),
        "{bad}"
    );
    assert!(bad.contains("\nFix: "), "{bad}");
}

/// The first blob file (in name order) under the sharded blob folder.
fn first_blob(dir: &Path) -> PathBuf {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flat_map(|shard| std::fs::read_dir(shard.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.into_iter().next().expect("a blob")
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}
