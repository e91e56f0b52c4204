//! The registry crate and its server link no CUDA code: they depend on the core of
//! `cuda-aot` with its `driver` feature off (issue 10, "a CUDA-free core").

#[test]
fn the_registry_depends_on_no_cuda_binding() {
    let cargo = std::env::var_os("CARGO").expect("run by cargo test");
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "cuda-aot-registry",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tree.lines().any(|l| l.starts_with("cuda-aot ")), "{tree}");
    assert!(
        !tree.contains("cudarc"),
        "the registry links cudarc:\n{tree}"
    );
}
