//! Shard builds: two shards split a release's jobs into the shared cache, and a final
//! release takes them all; a shard with nowhere to put its part is refused.

use crate::common::{Keys, Out, Ws, xtask};
use crate::{build_with, url};

/// Issue 20, item 3: two shard builds on two checkouts split the release's six jobs
/// between them (no job twice, none left out) into the shared cache; a release on a third
/// checkout then finds every job there, runs no nvcc, and signs and publishes the whole set.
#[test]
fn issue_20_two_shards_fill_the_shared_cache_and_a_final_release_runs_no_nvcc() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let remote = tmp.path().join("shared");
    let shard = |k: usize| {
        let part = format!("{k}/2");
        let run = build_with(
            &Ws::new(),
            &remote,
            &keys,
            Some(&keys.key("builder")),
            &["--shard", &part],
        )
        .ok();
        (run.compiled(), run.nvcc_runs())
    };
    let (one, n1) = shard(1);
    let (two, n2) = shard(2);
    assert_eq!((one.len(), two.len()), (3, 3), "{one:?} {two:?}");
    assert!(one.is_disjoint(&two), "{one:?} {two:?}");
    assert_eq!(one.union(&two).count(), 6);
    assert_eq!(n1 + n2, 6);

    let last = Ws::new();
    let out = Out::of(
        xtask()
            .env("CUDA_AOT_BUILD_CACHE", last.path("cache"))
            .args(["release", "--spec"])
            .arg(last.spec_path())
            .args(["--remote-cache", &url(&remote), "--remote-cache-trust"])
            .arg(keys.root())
            .arg("--json"),
    )
    .ok();
    let build = out
        .messages()
        .into_iter()
        .find(|m| m["reason"] == "release-finished")
        .map(|m| m["build"].clone())
        .unwrap_or_else(|| panic!("no release-finished message:\n{}", out.stdout));
    assert_eq!(build["nvcc_runs"], 0, "{build}");
    assert_eq!(build["shared_cache"]["taken"], 6, "{build}");
    assert!(
        last.path("spec/.cuda-aot/registry/timestamp.json")
            .is_file()
    );

    // A shard with nowhere to put its part is refused before anything is built.
    let ws = Ws::new();
    let run = ws.build(&["--shard", "1/2"]).failed();
    assert!(
        run.stderr
            .contains("nothing would carry it to the final build"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("--remote-cache-mode read-write"),
        "{}",
        run.stderr
    );
}
