//! The registry crate asks for no CUDA code: its own dependency graph (what
//! `cargo build -p cuda-aot-registry` compiles) has `cuda-aot` without its `driver`
//! feature (issue 10). A workspace build still unifies `driver` into the one `cuda-aot` it
//! compiles, so its registry binary does link the driver layer: that needs a runtime crate
//! split into a CUDA-free core and the loader (issue 17 item 3, open).

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
