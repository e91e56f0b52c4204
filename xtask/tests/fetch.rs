//! `cuda-aot-build` (issue 36, item 2), the build-dependency a prover's `build.rs` calls,
//! against a release served by `serve` on loopback: it fetches the locked release into a
//! per-user cache and writes the verified bundle into the build's output folder; a flipped
//! byte in a served blob, or a registry republished without a module, fails the build
//! naming it; offline, a warm cache is enough and a cold one says what to do.

mod common;

use std::path::Path;

use common::server::Server;
use common::{Ws, xtask};
use cuda_aot_build::Fetch;

/// `cargo xtask lock` of `url` into `project`.
fn lock(url: &str, trust: &Path, project: &Path, cache: &Path) {
    let out = xtask()
        .current_dir(project)
        .env("CUDA_AOT_CACHE_DIR", cache)
        .args(["lock", "--registry", url, "--trust"])
        .arg(trust)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn fetch(project: &Path, trust: &Path, cache: &Path) -> Fetch {
    Fetch {
        lock: project.join("cuda-aot.lock"),
        trust: trust.to_path_buf(),
        out: project.join("out"),
        cache: cache.to_path_buf(),
        vendored: None,
    }
}

#[test]
fn issue_36_a_build_fetches_the_locked_release_verified_and_offline_from_a_warm_cache() {
    let ws = Ws::new();
    ws.release();
    let reg = ws.path("spec/.cuda-aot/registry");
    let trust = ws.path("spec/.cuda-aot/dev-keys/root.json");
    let mut serve = Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[&reg]);
    let project = tempfile::tempdir().unwrap();
    let locking = tempfile::tempdir().unwrap();
    lock(&serve.url(), &trust, project.path(), locking.path());

    // `cargo xtask vendor`: the locked release into a folder, for builds with no network.
    let vendor_dir = project.path().join("vendor/kernels");
    let out = xtask()
        .current_dir(project.path())
        .env("CUDA_AOT_CACHE_DIR", locking.path())
        .args(["vendor", "--trust"])
        .arg(&trust)
        .arg("--to")
        .arg(&vendor_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("vendored 6 module binaries (index v1)"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A cold per-user cache: fetched, verified, checked against the lock, written out.
    let cache = tempfile::tempdir().unwrap();
    let got = fetch(project.path(), &trust, cache.path()).run().unwrap();
    assert!(!got.offline);
    assert_eq!(got.binaries, 6, "three modules, two SMs, as locked");
    let verified =
        cuda_aot_testkit::verify_dir(&got.bundle, &std::fs::read(&trust).unwrap()).unwrap();
    assert_eq!(verified.metadata().manifests().len(), got.binaries);

    // The server gone: the warm cache is enough; a cold one says what to do.
    serve.stop();
    let again = fetch(project.path(), &trust, cache.path()).run().unwrap();
    assert!(again.offline);
    let cold = tempfile::tempdir().unwrap();
    let e = fetch(project.path(), &trust, cold.path())
        .run()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("holds no release")
            && e.contains("(first: alpha ")
            && e.contains("cargo xtask vendor --to DIR")
            && e.contains("CUDA_AOT_BUNDLE_DIR"),
        "{e}"
    );
    // The vendored folder instead of the registry, with no network.
    let mut vendored = fetch(project.path(), &trust, cold.path());
    vendored.vendored = Some(vendor_dir.clone());
    let got = vendored.run().unwrap();
    assert_eq!((got.binaries, got.offline), (6, true));
    // A trust root other than the lock's.
    let other = tempfile::tempdir().unwrap();
    let keys = common::Keys::new(other.path(), "dev");
    let e = fetch(project.path(), &keys.root(), cache.path())
        .run()
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not the trust root"), "{e}");
}

#[test]
fn issue_36_a_flipped_blob_or_a_removed_module_fails_the_build_naming_it() {
    let ws = Ws::new();
    ws.release();
    let reg = ws.path("spec/.cuda-aot/registry");
    let trust = ws.path("spec/.cuda-aot/dev-keys/root.json");
    let serve = Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[&reg]);
    let project = tempfile::tempdir().unwrap();
    let locking = tempfile::tempdir().unwrap();
    lock(&serve.url(), &trust, project.path(), locking.path());

    // One byte of one served blob.
    let (blob, good) = common::flip_a_blob(&reg);
    let cache = tempfile::tempdir().unwrap();
    let e = fetch(project.path(), &trust, cache.path())
        .run()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("serves a release that does not verify")
            && e.contains(" blob: blake3 ")
            && e.contains("is signed")
            && e.contains("Fix: "),
        "{e}"
    );
    std::fs::write(&blob, &good).unwrap();

    // The registry released again without `gamma`.
    ws.edit_spec(|s| {
        let at = s
            .find("[[module]]\nname = \"gamma\"")
            .expect("gamma in the spec");
        s[..at].to_string()
    });
    ws.release();
    let cache = tempfile::tempdir().unwrap();
    let e = fetch(project.path(), &trust, cache.path())
        .run()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("serves other kernels") && e.contains("- gamma ") && e.contains("(removed)"),
        "{e}"
    );
}
