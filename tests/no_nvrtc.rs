//! The production build holds no NVRTC entry point: the prover example binary, built by
//! `cargo test` beside this test, must not contain the string "nvrtc" at all (cudarc looks
//! driver symbols up by name, so an entry point would leave its name in the binary).
//! That the scan finds the name when NVRTC is linked is shown by the research-feature
//! control test in `src/cuda/mod.rs`.

#[test]
#[cfg(not(feature = "research"))]
fn the_prover_example_binary_contains_no_nvrtc_symbol_name() {
    let exe = std::env::current_exe().unwrap();
    let examples = exe.parent().unwrap().parent().unwrap().join("examples");
    let prover = examples.join("prover");
    let bytes = std::fs::read(&prover)
        .unwrap_or_else(|e| panic!("{}: {e} (cargo test builds examples)", prover.display()));
    assert!(
        bytes.len() > 100_000,
        "{} looks too small to be the prover",
        prover.display()
    );
    let hits = bytes
        .windows(5)
        .filter(|w| w.eq_ignore_ascii_case(b"nvrtc"))
        .count();
    assert_eq!(hits, 0, "{} mentions nvrtc {hits} times", prover.display());
    // The driver entry points are there: the scan would see a name if one were linked.
    assert!(bytes.windows(16).any(|w| w == b"cuModuleLoadData"));
}
