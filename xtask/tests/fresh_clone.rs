//! What a build engineer meets on a fresh machine: the very first `cargo xtask build` has to
//! bootstrap the pinned toolkit inside the same command, and must still succeed.

mod common;

use common::Ws;

/// Issue 11, item 0: the toolkit was unpacked after the build noted its start time, so the
/// freshly unpacked headers looked "changed while the build was running" and the first
/// build on every fresh clone failed.
#[test]
fn issue_11_first_build_that_unpacks_the_toolkit_succeeds() {
    let ws = Ws::new();
    let fresh_toolkit = ws.path("toolkit");
    let run = ws.build_with(&["--module", "alpha", "--target", "sm_90"], |c| {
        c.env("CUDA_AOT_TOOLKIT_DIR", &fresh_toolkit);
    });
    let run = run.ok();
    assert_eq!(run.nvcc_runs(), 1, "{}", run.stdout);
    assert!(
        std::fs::read_dir(&fresh_toolkit).unwrap().next().is_some(),
        "the build bootstrapped its own toolkit"
    );
}
