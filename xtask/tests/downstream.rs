//! `examples/downstream/` (issue 36, item 5): a prover crate outside this workspace, built
//! from a fresh copy with no nvcc reachable, against a release served by `serve` on
//! loopback, and by the pinned OCI registry. Its build script fetches the locked release,
//! verified, and its program embeds it: it verifies the bundle and says there is no driver
//! (on a GPU host it launches a kernel against its CPU reference). A flipped byte in a
//! served blob fails the build naming the blob; a registry republished without a module
//! fails it with the lock's difference; offline, a warm cache builds and a cold one says what
//! to do; the binary grows by the bundle's size and less than 1 % more.

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
    cargo_build_command(dir, cache).output().unwrap()
}

/// [`cargo_build`], which must succeed (its stderr shown when it does not).
fn build_ok(dir: &Path, cache: &Path) {
    let built = cargo_build(dir, cache);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
}

/// The command of [`cargo_build`], to adjust before running.
fn cargo_build_command(dir: &Path, cache: &Path) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target = repo().join("target/downstream");
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(dir)
        .env("PATH", build_path())
        .env("CARGO_TARGET_DIR", &target)
        .env("CUDA_AOT_CACHE_DIR", cache)
        .env_remove("CUDA_AOT_BUNDLE_DIR")
        .env_remove("DOCS_RS")
        .args(["build", "--quiet"]);
    cmd
}

/// Runs the built program: its exit code and what it printed.
fn run_program() -> (Option<i32>, String) {
    let exe = repo().join("target/downstream/debug/downstream-prover");
    let run = Command::new(&exe).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    (run.status.code(), text)
}

/// The built program's size in bytes.
fn program_size() -> u64 {
    std::fs::metadata(repo().join("target/downstream/debug/downstream-prover"))
        .unwrap()
        .len()
}

/// The program verified its embedded bundle, then met the driver (CI) or ran its kernel
/// against the CPU (a GPU host). Returns the bundle's size as it printed it.
fn assert_verified_and_ran(code: Option<i32>, text: &str, binaries: usize) -> u64 {
    assert!(
        text.contains(&format!("verified: {binaries} module binaries of index v")),
        "{text}"
    );
    match code {
        // This machine has no CUDA driver (CI): it says so after verifying.
        Some(3) => assert!(text.contains("no CUDA driver"), "{text}"),
        // A GPU host: the embedded bundle opened and the kernel matched the CPU.
        Some(0) => assert!(text.contains("values match the CPU reference"), "{text}"),
        other => panic!("exit {other:?}: {text}"),
    }
    text.lines()
        .find_map(|l| l.strip_prefix("embedded bundle: "))
        .and_then(|l| l.strip_suffix(" bytes"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no bundle size: {text}"))
}

/// `cargo xtask lock --registry url --trust kernels-root.json` in the project.
fn lock(project: &Path, url: &str) {
    let locking = tempfile::tempdir().unwrap();
    let out = xtask()
        .current_dir(project)
        .env("CUDA_AOT_CACHE_DIR", locking.path())
        .args(["lock", "--registry", url, "--trust", "kernels-root.json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Points the project's lock at `url` (a registry that moved, or a mirror).
fn relock_url(project: &Path, url: &str) {
    let lock = project.join("cuda-aot.lock");
    let text = std::fs::read_to_string(&lock).unwrap();
    let old = text
        .lines()
        .find_map(|l| l.strip_prefix("url = \""))
        .unwrap()
        .trim_end_matches('"')
        .to_string();
    std::fs::write(&lock, text.replace(&old, url)).unwrap();
}

/// A fresh copy of the example with the workspace's dev trust root.
fn project_for(ws: &Ws) -> tempfile::TempDir {
    let project = tempfile::tempdir().unwrap();
    copy_example(project.path());
    std::fs::copy(
        ws.path("spec/.cuda-aot/dev-keys/root.json"),
        project.path().join("kernels-root.json"),
    )
    .unwrap();
    project
}

#[test]
fn issue_36_the_downstream_example_builds_without_a_toolkit_and_verifies_its_kernels() {
    let ws = Ws::new();
    ws.release();
    let reg = ws.path("spec/.cuda-aot/registry");
    let mut serve = Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[&reg]);
    let project = project_for(&ws);
    lock(project.path(), &serve.url());

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
    build_ok(project.path(), cache.path());
    let (code, text) = run_program();
    let bundle = assert_verified_and_ran(code, &text, 6);
    let full = program_size();

    // A flipped byte in a served blob: the build fails naming the blob (the blob is put
    // back after).
    let (blob, good) = common::flip_a_blob(&reg);
    let fresh = tempfile::tempdir().unwrap();
    let failed = cargo_build(project.path(), fresh.path());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        !failed.status.success()
            && stderr.contains("does not verify")
            && stderr.contains(" blob: blake3 "),
        "{stderr}"
    );
    std::fs::write(&blob, &good).unwrap();

    // Offline: the warm cache builds (the lock touched, so the build script runs again);
    // a cold one fails naming the lock entry and the vendoring command.
    serve.stop();
    let lock = project.path().join("cuda-aot.lock");
    let text = std::fs::read(&lock).unwrap();
    std::fs::write(&lock, &text).unwrap();
    build_ok(project.path(), cache.path());
    let cold = tempfile::tempdir().unwrap();
    let failed = cargo_build(project.path(), cold.path());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        !failed.status.success()
            && stderr.contains("(first: alpha sm_80 (cubin))")
            && stderr.contains("cargo xtask vendor --to DIR"),
        "{stderr}"
    );

    // Where nothing can be fetched by design (docs.rs), the crate still builds, with an
    // empty bundle that the program reports: the binary with the bundle is larger by the
    // bundle's size, and by less than 1 % more.
    let docs = tempfile::tempdir().unwrap();
    let mut cmd = cargo_build_command(project.path(), docs.path());
    let empty = cmd.env("DOCS_RS", "1").output().unwrap();
    assert!(
        empty.status.success(),
        "{}",
        String::from_utf8_lossy(&empty.stderr)
    );
    let (code, text) = run_program();
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("the kernel bundle is missing"), "{text}");
    let base = program_size();
    let growth = full.saturating_sub(base);
    println!("program: {base} bytes without the bundle, {full} with it ({bundle} bytes of bundle)");
    assert!(
        growth >= bundle && growth - bundle < base / 100,
        "{full} - {base} = {growth} bytes for a bundle of {bundle} bytes"
    );

    // The registry republished without one module (gamma): the build fails with the lock's
    // difference, naming what went missing.
    std::fs::write(
        ws.path("spec/less.toml"),
        std::fs::read_to_string(ws.spec_path())
            .unwrap()
            .split("[[module]]\nname = \"gamma\"")
            .next()
            .unwrap(),
    )
    .unwrap();
    let out = xtask()
        .env("CUDA_AOT_BUILD_CACHE", ws.path("cache"))
        .args(["release", "--spec"])
        .arg(ws.path("spec/less.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let serve = Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[&reg]);
    relock_url(project.path(), &serve.url());
    let fresh = tempfile::tempdir().unwrap();
    let failed = cargo_build(project.path(), fresh.path());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        !failed.status.success()
            && stderr.contains("serves other kernels than")
            && stderr.contains("gamma sm_80")
            && stderr.contains("cargo xtask lock --update"),
        "{stderr}"
    );
}

/// The same downstream crate locked to a release on the pinned OCI registry
/// (`oci://HOST/REPO:TAG`): it fetches, embeds and verifies it.
#[test]
fn issue_36_the_downstream_example_fetches_from_an_oci_registry() {
    let ws = Ws::new();
    ws.release();
    let tmp = tempfile::tempdir().unwrap();
    let oci = common::server::oci_server(tmp.path());
    let reference = format!("oci://{}/prover/kernels:v1", oci.addr);
    let keys = ws.path("spec/.cuda-aot/dev-keys");
    let out = xtask()
        .args(["publish", "--registry", &reference, "--trust"])
        .arg(keys.join("root.json"))
        .arg("--publisher-key")
        .arg(keys.join("publisher.key"))
        .arg(ws.path("spec/.cuda-aot/build"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let project = project_for(&ws);
    lock(project.path(), &reference);
    let text = std::fs::read_to_string(project.path().join("cuda-aot.lock")).unwrap();
    assert!(text.contains(&format!("url = \"{reference}\"")), "{text}");
    let cache = tempfile::tempdir().unwrap();
    build_ok(project.path(), cache.path());
    let (code, text) = run_program();
    assert_verified_and_ran(code, &text, 6);
}
