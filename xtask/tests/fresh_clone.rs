//! What a build engineer meets on a fresh machine and in CI: the very first command in a
//! fresh clone, and two clones that share one `CARGO_TARGET_DIR` (so one `xtask` binary)
//! each acting on their own files. Real `git clone`s of this repository, the real `xtask`
//! binary, real nvcc.

mod common;

use common::{Out, xtask};
use std::path::{Path, PathBuf};

/// A fresh `git clone` of this repository's committed tree.
fn clone(into: &Path) -> PathBuf {
    let out = std::process::Command::new("git")
        .args(["clone", "--quiet"])
        .arg(common::repo())
        .arg(into)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git clone of {} failed: {}",
        common::repo().display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !into.join(".cuda-aot").exists(),
        "a fresh clone has no .cuda-aot/"
    );
    into.to_path_buf()
}

/// The single message of `reason` among the JSON lines of `out`.
fn message(out: &Out, reason: &str) -> serde_json::Value {
    let mut found: Vec<_> = out
        .messages()
        .into_iter()
        .filter(|m| m["reason"] == reason)
        .collect();
    assert_eq!(found.len(), 1, "one {reason} message in:\n{}", out.stdout);
    let m = found.pop().unwrap();
    assert_eq!(m["schema"], "cuda-aot/xtask/v1");
    m
}

/// Issue 11, items 0 and 2: `cargo xtask build` as the very first command in a fresh clone
/// (which unpacks the toolkit inside the same command) succeeds, acts on that clone, and
/// shows its progress line by line when stderr is not a terminal (CI logs).
#[test]
fn issue_11_the_first_command_in_a_fresh_clone_is_a_build_that_succeeds() {
    common::toolkit_root(); // the pinned wheels are in the per-user cache
    let tmp = tempfile::tempdir().unwrap();
    let clone = clone(&tmp.path().join("clone"));
    let out = Out::of(
        xtask()
            .current_dir(&clone)
            .env_remove("CUDA_AOT_TOOLKIT_DIR")
            .args(["build", "--json"]),
    )
    .ok();
    let done = message(&out, "build-finished");
    let work = clone.join(".cuda-aot");
    assert_eq!(done["out"], work.join("build").display().to_string());
    assert_eq!(
        done["spec"],
        clone.join("manifests/release.toml").display().to_string()
    );
    let modules = done["modules"].as_array().unwrap();
    assert!(
        modules.len() >= 21,
        "the whole release set: {}",
        modules.len()
    );
    assert_eq!(done["nvcc_runs"].as_u64().unwrap() as usize, modules.len());
    assert_eq!(done["cached"], 0);
    for m in modules {
        let blob = PathBuf::from(m["blob"].as_str().unwrap());
        assert!(
            blob.starts_with(work.join("build")) && blob.is_file(),
            "{blob:?}"
        );
    }
    assert!(
        std::fs::read_dir(work.join("toolkit"))
            .unwrap()
            .next()
            .is_some(),
        "the build bootstrapped the clone's own toolkit"
    );
    // Progress without a terminal: the unpack per wheel and every job, line by line.
    let e = &out.stderr;
    // The wheels unpack in parallel: each one is reported, the count reaches 5 of 5 in
    // whichever order they finish.
    assert!(e.contains("toolchain: [5/5] unpacking "), "{e}");
    for wheel in [
        "nvidia-cuda-nvcc",
        "nvidia-cuda-crt",
        "nvidia-nvvm",
        "nvidia-cuda-runtime",
        "nvidia-cuda-cccl",
    ] {
        assert!(e.contains(&format!("] unpacking {wheel}")), "{wheel}: {e}");
    }
    let compiled = e
        .lines()
        .filter(|l| l.starts_with("build: [") && l.contains(": compiled in "))
        .count();
    assert_eq!(compiled, modules.len(), "{e}");
    assert!(
        work.join(".gitignore").is_file(),
        "the work folder ignores itself"
    );
}

/// Issue 11, item 2: two clones sharing one `CARGO_TARGET_DIR` run the same `xtask` binary;
/// each must build and publish its own files. Clone B's spec differs (block size), so the
/// two releases differ byte for byte.
#[test]
fn issue_11_two_clones_sharing_one_xtask_binary_each_publish_their_own_files() {
    common::toolkit_root();
    let tmp = tempfile::tempdir().unwrap();
    let a = clone(&tmp.path().join("a"));
    let b = clone(&tmp.path().join("b"));
    let spec_b = b.join("manifests/release.toml");
    let text = std::fs::read_to_string(&spec_b).unwrap();
    let edited = text.replacen(
        "geometry = { block = 256 }",
        "geometry = { block = 128 }",
        1,
    );
    assert_ne!(text, edited, "the spec has a block size to change");
    std::fs::write(&spec_b, edited).unwrap();

    let release = |clone: &Path| {
        let out = Out::of(
            xtask()
                .current_dir(clone.join("kernels")) // anywhere inside the clone
                .args([
                    "release",
                    "--module",
                    "field_ops",
                    "--target",
                    "sm_90",
                    "--json",
                ]),
        )
        .ok();
        message(&out, "release-finished")
    };
    let (ra, rb) = (release(&a), release(&b));
    let digest = |r: &serde_json::Value| {
        let m = &r["build"]["modules"][0];
        assert_eq!(
            (m["module"].as_str(), m["target"].as_str()),
            (Some("field_ops"), Some("sm_90"))
        );
        m["module_digest"]
            .as_str()
            .unwrap()
            .strip_prefix("blake3:")
            .unwrap()
            .to_string()
    };
    let (da, db) = (digest(&ra), digest(&rb));
    assert_ne!(da, db, "the clones' specs differ, so must their cubins");
    for (clone, r, own, other) in [(&a, &ra, &da, &db), (&b, &rb, &db, &da)] {
        let registry = clone.join(".cuda-aot/registry");
        assert_eq!(r["registry"], registry.display().to_string());
        let blob = |d: &str| registry.join("blobs/blake3").join(&d[..2]).join(d);
        assert!(
            blob(own).is_file(),
            "{} lacks its own blob",
            registry.display()
        );
        assert!(
            !blob(other).exists(),
            "{} holds the other clone's blob",
            registry.display()
        );
        assert!(
            r["build"]["out"]
                .as_str()
                .unwrap()
                .starts_with(&clone.display().to_string())
        );
    }
}
