//! The bench-load gate over CSVs: the committed H200 evidence passes it, and the gate
//! really refuses a too-slow verified load or a too-small NVRTC gap.

use std::process::Command;

fn gate(dir: &std::path::Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bench-load", "--gate-only", "--out"])
        .arg(dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_committed_h200_evidence_passes_the_gate() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/evidence");
    let (ok, text) = gate(&dir);
    assert!(ok && text.contains("gate: PASS"), "{text}");
}

#[test]
fn the_gate_fails_on_a_slow_verified_load_or_a_small_nvrtc_gap() {
    let dir = tempfile::tempdir().unwrap();
    let csv = |verified: f64, raw: f64, nvrtc: f64| {
        format!(
            "# synthetic\nscope,method,bytes,reps,median_us,p10_us,p90_us\nbundle,verified_load,1,20,{verified},0,0\nbundle,raw_cuModuleLoadData,1,20,{raw},0,0\nbundle,nvrtc_compile_load,1,20,{nvrtc},0,0\n"
        )
    };
    std::fs::write(dir.path().join("bench-load.csv"), csv(131.0, 100.0, 1e6)).unwrap();
    let (ok, text) = gate(dir.path());
    assert!(
        !ok && text.contains("verified load is 1.310x the bare load"),
        "{text}"
    );
    std::fs::write(dir.path().join("bench-load.csv"), csv(100.0, 100.0, 5000.0)).unwrap();
    let (ok, text) = gate(dir.path());
    assert!(!ok && text.contains("only 50x faster than NVRTC"), "{text}");
    std::fs::write(dir.path().join("bench-load.csv"), csv(105.0, 100.0, 1e6)).unwrap();
    assert!(gate(dir.path()).0);
}
