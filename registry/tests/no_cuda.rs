//! The registry links no CUDA code. Its own dependency graph (what
//! `cargo build -p cuda-aot-registry` compiles) has `cuda-aot` without its `driver` feature
//! (issue 10). A workspace build unifies `driver` into the one `cuda-aot` it compiles, and
//! this crate's dev-dependency does the same for `cargo test`. The registry binary then
//! still holds none of the driver layer, because the runtime crate's `Error` carries a driver
//! error behind a trait object that only the driver layer makes (`cuda_aot::DriverFault`).

use std::path::Path;

use object::{Object, ObjectSymbol};

/// Paths (demangled) of code that needs a GPU: cudarc, the runtime crate's driver layer and
/// loader, and the bench crate's bare loaders.
const CUDA_CODE: [&str; 4] = [
    "cudarc::",
    "cuda_aot::cuda::",
    "cuda_aot::runtime::",
    "cuda_aot_baseline::",
];

/// The demangled symbols of an executable that name one of [`CUDA_CODE`], and how many
/// symbols of the runtime crate it has in all.
fn cuda_symbols(exe: &Path) -> (Vec<String>, usize) {
    let bytes = std::fs::read(exe).unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
    let file = object::File::parse(&*bytes).unwrap();
    let names: Vec<String> = file
        .symbols()
        .filter_map(|s| s.name().ok())
        .map(|n| format!("{:#}", rustc_demangle::demangle(n)))
        .collect();
    let runtime_crate = names.iter().filter(|n| n.contains("cuda_aot::")).count();
    let cuda = names
        .into_iter()
        .filter(|n| CUDA_CODE.iter().any(|c| n.contains(c)))
        .collect();
    (cuda, runtime_crate)
}

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

#[test]
fn the_registry_binary_built_with_the_driver_feature_holds_no_cuda_code() {
    let exe = Path::new(env!("CARGO_BIN_EXE_cuda-aot-registry"));
    let (cuda, runtime_crate) = cuda_symbols(exe);
    assert!(
        runtime_crate > 100,
        "{}: only {runtime_crate} symbols of cuda-aot: the scan reads the wrong names",
        exe.display()
    );
    assert!(
        cuda.is_empty(),
        "{} links {} symbol(s) of CUDA code:\n{}",
        exe.display(),
        cuda.len(),
        cuda.join("\n")
    );
}

/// The control: this test binary calls the driver layer, and the same scan finds it there.
#[test]
fn the_scan_finds_the_driver_layer_where_a_binary_calls_it() {
    let present = std::hint::black_box(cuda_aot::cuda::driver_present as fn() -> bool);
    let _ = present();
    let (cuda, _) = cuda_symbols(&std::env::current_exe().unwrap());
    for fragment in ["cudarc::", "cuda_aot::cuda::"] {
        assert!(
            cuda.iter().any(|n| n.contains(fragment)),
            "no {fragment} symbol in this test binary, which calls the driver layer"
        );
    }
}
