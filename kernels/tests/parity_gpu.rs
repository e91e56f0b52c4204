//! Issue 7 on the GPU host: the parity runner holds the research kernel's NVRTC build, its
//! AOT cubins and its CPU reference equal, and a deliberately altered research kernel stops
//! the promotion at its first differing output, named by entry point, buffer, element index
//! and both values.
//!
//! `gpu-run` sets the inputs (built on the build host by
//! `cargo xtask gpu-bundle --review`):
//! - `CUDA_AOT_PARITY_RUNNER`: the `parity-runner` binary;
//! - `CUDA_AOT_PARITY_SPEC` / `CUDA_AOT_PARITY_BUILD`: the research spec and the AOT build
//!   of `ntt_fused`;
//! - `CUDA_AOT_PARITY_ALTERED_SPEC` / `CUDA_AOT_PARITY_ALTERED_BUILD`: the same with the
//!   altered kernel, the committed fixture `kernels/research/altered/` (the twiddle index
//!   of `ntt_stages` forgets the tile's low bits, which only matters from the second fused
//!   launch on: stages 10 and up; `xtask/tests/promote/altered.rs` keeps it equal to `ntt_fused`
//!   but for that line).

use std::path::{Path, PathBuf};
use std::process::Command;

use cuda_aot_kernels::parity::report::{ParityReport, Verdict};

fn var(k: &str) -> PathBuf {
    std::env::var_os(k)
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("{k} is not set: run it through `cargo xtask gpu-bundle --review`, then `gpu-run` on the GPU host"))
}

fn run(spec: &str, build: &str, report: &Path) -> (i32, String) {
    let out = Command::new(var("CUDA_AOT_PARITY_RUNNER"))
        .args(["--module", "ntt_fused", "--spec"])
        .arg(var(spec))
        .arg("--build")
        .arg(var(build))
        .arg("--report")
        .arg(report)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("{text}");
    (out.status.code().unwrap_or(-1), text)
}

fn read(report: &Path) -> ParityReport {
    serde_json::from_slice(&std::fs::read(report).unwrap()).unwrap()
}

#[test]
#[ignore = "needs a CUDA device"]
fn issue_7_the_research_kernel_passes_parity() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("parity.json");
    let (code, text) = run("CUDA_AOT_PARITY_SPEC", "CUDA_AOT_PARITY_BUILD", &report);
    assert_eq!(code, 0, "{text}");
    let r = read(&report);
    assert_eq!(r.verdict, Verdict::Pass);
    assert!(r.cases.len() >= 5 && r.cases.iter().all(|c| c.pass));
    assert!(!r.aot.is_empty(), "an AOT cubin for this device ran");
    // Resources came from the cubin and the driver for both builds, and agree.
    let stages: Vec<_> = r
        .resources
        .iter()
        .filter(|x| x.entry == "ntt_stages")
        .collect();
    assert!(stages.len() >= 2, "{stages:?}");
    let sm: u32 = r.device.sm.trim_start_matches("sm_").parse().unwrap();
    for x in &stages {
        assert_eq!(x.cubin.registers, x.device.registers, "{x:?}");
        // The cubin's shared section counts the block's reserved bytes (sm_90 on); the
        // driver does not.
        let cubin = x
            .cubin
            .shared_bytes
            .map(|b| cuda_aot::elf::driver_shared_bytes(sm, b));
        assert_eq!(cubin, x.device.shared_bytes, "{x:?}");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn issue_7_an_altered_research_kernel_is_stopped_at_its_first_differing_output() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("parity-altered.json");
    let (code, text) = run(
        "CUDA_AOT_PARITY_ALTERED_SPEC",
        "CUDA_AOT_PARITY_ALTERED_BUILD",
        &report,
    );
    assert_eq!(code, 1, "{text}");
    let r = read(&report);
    assert_eq!(r.verdict, Verdict::Fail);
    let d = r.first_difference.expect("the first difference is named");
    // Cases 2^1 and 2^10 need one fused launch (s0 = 0) and pass; 2^13 runs a second one.
    assert_eq!(d.case, "2^13 (two launches, partial second tile)");
    assert_eq!(
        (d.launch, d.entry.as_str(), d.buffer.as_str()),
        (Some(2), "ntt_stages", "data")
    );
    assert_eq!(d.expected_by, "cpu");
    assert!(d.actual_by.starts_with("nvrtc sm_"), "{}", d.actual_by);
    assert_ne!(d.expected, d.actual);
    assert!(
        text.contains(&format!(
            "parity FAILED: case `2^13 (two launches, partial second tile)` after launch 2 (ntt_stages): buffer `data` element {}",
            d.index
        )),
        "{text}"
    );
}
