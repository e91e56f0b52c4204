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

/// The committed H200 evidence and the verdict the GPU run printed agree: re-applying the
/// gate to the committed CSVs prints exactly the gate lines the run logged (pass or fail).
#[test]
fn the_committed_h200_evidence_gives_the_verdict_recorded_with_it() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/evidence/2026-11-30-h200x2");
    let (ok, text) = gate(&dir);
    let gate_lines = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.starts_with("gate:") || l.starts_with("error: gate"))
            .map(str::to_string)
            .collect()
    };
    let logged = std::fs::read_to_string(dir.join("bench-load.txt")).unwrap();
    assert_eq!(gate_lines(&text), gate_lines(&logged), "{text}");
    assert_eq!(ok, !logged.contains("gate FAILED"), "{text}");
}

/// The runs with the balanced order (A/A controls included) pass the gate as logged.
#[test]
fn the_balanced_order_runs_pass_the_gate_with_their_controls() {
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/evidence/2026-11-30-h200x2-order");
    for run in ["run1", "run2", "run3", "run4"] {
        let dir = base.join(run);
        let (ok, text) = gate(&dir);
        assert!(ok, "{run}: {text}");
        assert_eq!(text.matches("A/A control").count(), 2, "{run}: {text}");
        let logged = std::fs::read_to_string(dir.join("bench-load.txt")).unwrap();
        assert!(logged.contains("gate: PASS"), "{run}");
    }
}

#[test]
fn the_gate_fails_on_an_interval_above_its_limit_or_a_small_nvrtc_gap() {
    let dir = tempfile::tempdir().unwrap();
    let write_with = |nvrtc: f64, kept_high: f64, startup: bool, extra: &str| {
        std::fs::write(
            dir.path().join("bench-load.csv"),
            format!(
                "# synthetic\nscope,method,bytes,reps,median_us,p10_us,p90_us\nbundle,verified_load,1,20,100,0,0\nbundle,raw_cuModuleLoadData,1,20,100,0,0\nbundle,nvrtc_compile_load,1,20,{nvrtc},0,0\n"
            ),
        )
        .unwrap();
        let mut ratios = "# synthetic\nratio,numerator,denominator,pairs,median,ci95_low,ci95_high,limit\nbundle_load_unload_vs_bare,a,b,100,1.0100,0.9900,1.0300,1.05\n".to_string();
        ratios += &format!("bundle_load_vs_bare_kept,a,b,100,1.0200,1.0000,{kept_high:.4},1.05\n");
        if startup {
            ratios += "startup_vs_bare,a,b,15,1.0000,0.9800,1.0200,1.05\n";
        }
        ratios += extra;
        std::fs::write(dir.path().join("bench-ratios.csv"), ratios).unwrap();
    };
    let write =
        |nvrtc: f64, kept_high: f64, startup: bool| write_with(nvrtc, kept_high, startup, "");
    write(1e6, 1.04, true);
    let (ok, text) = gate(dir.path());
    assert!(ok && text.contains("gate: PASS"), "{text}");
    // A fine median whose interval reaches past the limit fails.
    write(1e6, 1.08, true);
    let (ok, text) = gate(dir.path());
    assert!(
        !ok && text.contains("bundle_load_vs_bare_kept is up to 1.080x"),
        "{text}"
    );
    // An A/A control (the same arm twice) must lie within [1/1.05, 1.05] on both ends.
    let control = |low: f64, high: f64| {
        format!("bundle_bare_kept_vs_itself,a,a,300,1.0000,{low:.4},{high:.4},-\n")
    };
    write_with(1e6, 1.04, true, &control(0.98, 1.02));
    let (ok, text) = gate(dir.path());
    assert!(
        ok && text.contains("A/A control, within [0.952, 1.05]): ok"),
        "{text}"
    );
    for (low, high) in [(0.99, 1.06), (0.94, 1.01)] {
        write_with(1e6, 1.04, true, &control(low, high));
        let (ok, text) = gate(dir.path());
        assert!(
            !ok && text.contains("cannot resolve a 5 % difference") && text.contains("Fix: run"),
            "{text}"
        );
    }
    // The diagnostic rows are reported, never gated, however far from 1 they lie: the
    // fresh-copy block's own A/A (not named `*_vs_itself`), the context and module loading
    // rows.
    let reported = [
        "bundle_copy_read_again_vs_read,a,a,300,1.0000,0.8000,1.3000,-",
        "foreign_copy_fresh_alloc_vs_reused_buffer,a,b,300,0.9000,0.8500,0.9500,-",
        "bundle_ctx4_library_once_vs_module,a,b,300,0.4000,0.3000,0.5000,-",
        "bundle_ctx4_vs_ctx1_module,a,b,300,4.0000,3.5000,4.5000,-",
        "startup_eager_vs_lazy,a,b,100,1.4000,1.2000,1.6000,-",
    ]
    .join("\n");
    write_with(1e6, 1.04, true, &(reported + "\n"));
    let (ok, text) = gate(dir.path());
    assert!(ok && text.contains("gate: PASS"), "{text}");
    assert_eq!(
        text.matches("(reported, not gated): -").count(),
        5,
        "{text}"
    );
    write(5000.0, 1.04, true);
    let (ok, text) = gate(dir.path());
    assert!(!ok && text.contains("only 50x faster than NVRTC"), "{text}");
    write(1e6, 1.04, false);
    let (ok, text) = gate(dir.path());
    assert!(!ok && text.contains("no startup_vs_bare ratio"), "{text}");
    std::fs::remove_file(dir.path().join("bench-ratios.csv")).unwrap();
    let (ok, text) = gate(dir.path());
    assert!(!ok && text.contains("bench-ratios.csv"), "{text}");
}
