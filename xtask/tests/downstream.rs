//! `examples/downstream/` (issue 36, item 5): a prover crate outside this workspace, built
//! from a fresh copy with no nvcc reachable, against a release served by `serve` on
//! loopback. Its build script fetches the locked release, verified; its program verifies
//! the bundle and says there is no driver (on a GPU host it opens it). A flipped byte in a
//! served blob fails the build naming the blob; offline, a warm cache builds and a cold one
//! says what to do.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::server::Server;
use common::{Ws, xtask};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// A fresh copy of the example in `dir`, its path dependencies pointing at this checkout
/// and its dependency versions pinned by this checkout's lock.
fn copy_example(dir: &Path) {
    let from = repo().join("examples/downstream");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    for f in ["build.rs", "src/main.rs"] {
        std::fs::copy(from.join(f), dir.join(f)).unwrap();
    }
    let manifest = std::fs::read_to_string(from.join("Cargo.toml"))
        .unwrap()
        .replace(
            "path = \"../../fetch\"",
            &format!("path = {:?}", repo().join("fetch")),
        )
        .replace("path = \"../..\"", &format!("path = {:?}", repo()));
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::copy(repo().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
}

/// The PATH the build gets: cargo's folder and the system's, no CUDA toolkit.
fn build_path() -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let cargo_dir = Path::new(&cargo)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    format!("{}:/usr/bin:/bin", cargo_dir.display())
}

/// `cargo build` of the copy: no nvcc on PATH, the per-user cache `cache`.
fn cargo_build(dir: &Path, cache: &Path) -> std::process::Output {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target = repo().join("target/downstream");
    Command::new(&cargo)
        .current_dir(dir)
        .env("PATH", build_path())
        .env("CARGO_TARGET_DIR", &target)
        .env("CUDA_AOT_CACHE_DIR", cache)
        .env_remove("CUDA_AOT_BUNDLE_DIR")
        .args(["build", "--quiet"])
        .output()
        .unwrap()
}

#[test]
fn issue_36_the_downstream_example_builds_without_a_toolkit_and_verifies_its_kernels() {
    let ws = Ws::new();
    ws.release();
    let reg = ws.path("spec/.cuda-aot/registry");
    let mut serve = Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[&reg]);
    let project = tempfile::tempdir().unwrap();
    copy_example(project.path());
    std::fs::copy(
        ws.path("spec/.cuda-aot/dev-keys/root.json"),
        project.path().join("kernels-root.json"),
    )
    .unwrap();
    let locking = tempfile::tempdir().unwrap();
    let out = xtask()
        .current_dir(project.path())
        .env("CUDA_AOT_CACHE_DIR", locking.path())
        .args([
            "lock",
            "--registry",
            &serve.url(),
            "--trust",
            "kernels-root.json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // No nvcc is reachable on the PATH the build gets: `command -v` finds none (it exits
    // non-zero and prints nothing; the shell itself ran).
    let which = Command::new("/bin/sh")
        .args(["-c", "command -v nvcc"])
        .env("PATH", build_path())
        .output()
        .unwrap();
    assert!(
        which.status.code().is_some_and(|c| c != 0) && which.stdout.is_empty(),
        "nvcc on PATH: {}",
        String::from_utf8_lossy(&which.stdout)
    );

    let cache = tempfile::tempdir().unwrap();
    let built = cargo_build(project.path(), cache.path());
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let exe = repo().join("target/downstream/debug/downstream-prover");
    let run = Command::new(&exe).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        stdout.contains("verified: 6 module binaries of index v1"),
        "{stdout}"
    );
    match run.status.code() {
        // This machine has no CUDA driver (CI): it says so after verifying.
        Some(3) => assert!(stdout.contains("no CUDA driver"), "{stdout}"),
        // A GPU host: the bundle opened.
        Some(0) => assert!(stdout.contains("loaded on "), "{stdout}"),
        other => panic!(
            "exit {other:?}: {stdout}{}",
            String::from_utf8_lossy(&run.stderr)
        ),
    }

    // Offline: the warm cache builds (the lock touched, so the build script runs again);
    // a cold one fails naming the lock entry and the vendoring command.
    serve.stop();
    let lock = project.path().join("cuda-aot.lock");
    let text = std::fs::read(&lock).unwrap();
    std::fs::write(&lock, &text).unwrap();
    let warm = cargo_build(project.path(), cache.path());
    assert!(
        warm.status.success(),
        "{}",
        String::from_utf8_lossy(&warm.stderr)
    );
    let cold = tempfile::tempdir().unwrap();
    let failed = cargo_build(project.path(), cold.path());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        !failed.status.success()
            && stderr.contains("(first: alpha sm_80 (cubin))")
            && stderr.contains("cargo xtask sync --from"),
        "{stderr}"
    );

    // A flipped byte in a served blob: the build fails naming the blob.
    let blob = walkdir::WalkDir::new(reg.join("blobs"))
        .into_iter()
        .map(|e| e.unwrap())
        .find(|e| e.file_type().is_file())
        .unwrap()
        .into_path();
    let mut bad = std::fs::read(&blob).unwrap();
    let at = bad.len() / 2;
    bad[at] ^= 1;
    std::fs::write(&blob, &bad).unwrap();
    let _serve = Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[&reg]);
    // (The lock names the first server's address; a tampering mirror answers there now.)
    let text = std::fs::read_to_string(&lock).unwrap();
    let old_url = text
        .lines()
        .find_map(|l| l.strip_prefix("url = \""))
        .unwrap()
        .trim_end_matches('"')
        .to_string();
    std::fs::write(&lock, text.replace(&old_url, &_serve.url())).unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let failed = cargo_build(project.path(), fresh.path());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        !failed.status.success()
            && stderr.contains("does not verify")
            && stderr.contains(" blob: blake3 "),
        "{stderr}"
    );
}
