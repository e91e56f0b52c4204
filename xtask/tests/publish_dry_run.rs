//! The crates a prover and its users depend on can be published: the runtime crate
//! `cuda-aot` (issue 43, item 6), whose package holds the library's sources, the README and
//! docs/runtime.md and nothing else of the repository; and, for a prover's build script,
//! `cuda-aot-build` with the `cuda-aot-registry` it fetches through (issue 36). Each builds
//! from its packaged sources alone, the workspace's own crates it needs coming from the
//! packages made in the same run (cargo's multi-package publish): nothing else of the
//! workspace need be published.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// `cargo ARGS` in the repository (`--allow-dirty`: a developer's checkout may hold
/// uncommitted work; CI's is clean).
fn cargo(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO"))
        .args(args)
        .current_dir(common::repo())
        .output()
        .expect("run cargo")
}

/// What the package holds beside the library's sources: the manifest (and cargo's
/// original of it), the lock file and VCS note cargo adds, the README, and the document
/// whose Rust blocks are doctests of the crate (src/lib.rs `RuntimeMdDoctests`).
const BESIDE_SOURCES: [&str; 6] = [
    "Cargo.toml",
    "Cargo.toml.orig",
    "Cargo.lock",
    ".cargo_vcs_info.json",
    "README.md",
    "docs/runtime.md",
];

#[test]
fn the_runtime_crate_packages_its_sources_and_nothing_else_of_the_repository() {
    let out = cargo(&["package", "-p", "cuda-aot", "--list", "--allow-dirty"]);
    assert!(
        out.status.success(),
        "cargo package --list failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();

    // Every source file of the library is in it.
    let src = common::repo().join("src");
    for e in walkdir::WalkDir::new(&src) {
        let e = e.unwrap();
        if e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "rs") {
            let rel = e.path().strip_prefix(common::repo()).unwrap();
            let rel = rel.to_str().unwrap();
            assert!(listed.contains(rel), "{rel} is not in the package");
        }
    }
    for f in ["Cargo.toml", "README.md", "docs/runtime.md", "src/lib.rs"] {
        assert!(listed.contains(f), "{f} is not in the package");
    }

    // Nothing else: not the tests and their data, docs/evidence, the kernels, fuzz, the
    // examples, manifests, keys, the work folder, target, nor another crate's files.
    for f in &listed {
        assert!(
            (f.starts_with("src/") && f.ends_with(".rs"))
                || BESIDE_SOURCES.contains(&f.as_str())
                || f.starts_with("LICENSE"),
            "{f} is in the package"
        );
    }
    for dir in [
        "tests/",
        "docs/evidence/",
        "kernels/",
        "fuzz/",
        "examples/",
        "manifests/",
        "keys/",
        ".cuda-aot/",
        "target/",
        "registry/",
        "xtask/",
    ] {
        assert!(
            !listed.iter().any(|f| f.starts_with(dir)),
            "the package holds files of {dir}"
        );
    }
}

/// A digest of the three crates' manifests and sources: the name of the verification
/// builds' target folder. Cargo unpacks the packages it just made into its home's registry
/// cache under a name derived from that folder's path and never unpacks the same name and
/// version again, so one folder for changing sources would verify a stale package.
fn sources_digest() -> String {
    let mut h = Vec::new();
    for dir in ["src", "registry/src", "fetch/src"] {
        let root = common::repo().join(dir);
        let mut files: Vec<_> = walkdir::WalkDir::new(&root)
            .into_iter()
            .map(|e| e.unwrap().into_path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for f in files {
            h.extend_from_slice(f.to_string_lossy().as_bytes());
            h.extend_from_slice(&std::fs::read(&f).unwrap());
        }
    }
    for manifest in [
        "Cargo.toml",
        "registry/Cargo.toml",
        "fetch/Cargo.toml",
        "Cargo.lock",
    ] {
        h.extend_from_slice(&std::fs::read(common::repo().join(manifest)).unwrap());
    }
    cuda_aot::Digest::of(&h).hex()[..16].to_string()
}

/// `cargo publish --dry-run` of the three crates packages each, builds each from its
/// unpacked package alone (no file of the checkout beside it; `cuda-aot-registry` and
/// `cuda-aot-build` against the packages just made of the crates they depend on) and stops
/// before uploading; it reads crates.io's index, as CI can. The verification builds compile
/// their dependencies into a target folder of their own under target/tmp, named by the
/// sources (`sources_digest`); the folders of other sources are removed.
#[test]
fn the_prover_crates_build_from_their_packages_alone() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let name = format!("publish-dry-run-{}", sources_digest());
    for e in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
        let other = e.file_name().to_string_lossy().into_owned();
        if other.starts_with("publish-dry-run") && other != name {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    let target = tmp.join(name);
    let target = target.to_str().unwrap();
    let out = cargo(&[
        "publish",
        "--dry-run",
        "-p",
        "cuda-aot",
        "-p",
        "cuda-aot-registry",
        "-p",
        "cuda-aot-build",
        "--allow-dirty",
        "--target-dir",
        target,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cargo publish --dry-run failed:\n{stderr}"
    );
    for krate in ["cuda-aot", "cuda-aot-registry", "cuda-aot-build"] {
        assert!(
            stderr.contains(&format!("Verifying {krate} v")),
            "{krate}: {stderr}"
        );
    }
    assert_eq!(
        stderr.matches("aborting upload due to dry run").count(),
        3,
        "{stderr}"
    );
}
