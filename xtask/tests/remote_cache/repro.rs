//! `repro --remote-cache`: auditing the shared cache by rebuilding its entries, which finds
//! a validly signed entry of bytes the sources do not build.

use crate::common;
use crate::common::{Keys, Out, Ws, xtask};
use crate::{build, entry, identities, url};

/// Issue 20: `repro --remote-cache` audits the shared cache. A clean cache: every entry
/// equals what two fresh rebuilds make. Then a builder key signs, under alpha sm_80's
/// identity, a well-formed entry of other bytes (the same kernel built with another block
/// size): a build would take it, every check passes, and only a rebuild can tell; repro
/// names it and fails.
#[test]
fn issue_20_repro_finds_a_validly_signed_shared_entry_that_the_sources_do_not_build() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let remote = tmp.path().join("shared");
    let a = Ws::new();
    let first = build(&a, &remote, &keys, Some(&keys.key("builder"))).ok();
    let repro = || {
        Out::of(
            xtask()
                .args(["repro", "--spec"])
                .arg(a.spec_path())
                .args(["--remote-cache", &url(&remote), "--remote-cache-trust"])
                .arg(keys.root()),
        )
    };
    let clean = repro().ok();
    assert!(
        clean
            .stdout
            .contains("6 entries equal to the rebuilds, 0 differ"),
        "{}",
        clean.stdout
    );

    let other = Ws::new();
    other.edit_spec(|s| s.replace("geometry = { block = 128 }", "geometry = { block = 64 }"));
    other.build(&[]).ok();
    let blob = std::fs::read(other.path("out/alpha/sm_80.cubin")).unwrap();
    let mut manifest: cuda_aot::Manifest = serde_json::from_slice(
        &std::fs::read(other.path("out/alpha/sm_80.cubin.manifest.json")).unwrap(),
    )
    .unwrap();
    let ours: cuda_aot::Manifest = serde_json::from_slice(
        &std::fs::read(a.path("out/alpha/sm_80.cubin.manifest.json")).unwrap(),
    )
    .unwrap();
    assert_ne!(manifest.module_digest, ours.module_digest, "other bytes");
    manifest.identity = ours.identity.clone();
    let file = cuda_aot::json::to_vec(&manifest);
    let forged = cuda_aot::metadata::CacheEntry::over(&manifest, &file, &blob);
    let signed = cuda_aot::metadata::sign_doc(&forged, &[&common::read_key(&keys.key("builder"))]);
    let dir = entry(&remote, &identities(&first)["alpha sm_80"]);
    std::fs::write(dir.join("blob"), &blob).unwrap();
    std::fs::write(dir.join("manifest.json"), &file).unwrap();
    std::fs::write(dir.join("entry.json"), signed.to_bytes()).unwrap();

    // A build would take it (it passes every check)...
    let taken = build(&Ws::new(), &remote, &keys, None).ok();
    assert_eq!(taken.nvcc_runs(), 0, "{}", taken.stderr);
    // ...and repro does not.
    let caught = repro().failed();
    assert!(
        caught
            .stdout
            .contains("shared cache: alpha sm_80: entry blob")
            && caught.stdout.contains("NOT what these sources build")
            && caught
                .stdout
                .contains("5 entries equal to the rebuilds, 1 differ"),
        "{}",
        caught.stdout
    );
    assert!(
        caught
            .stderr
            .contains("Fix: a builder key the trust root lists signed them"),
        "{}",
        caught.stderr
    );
}
