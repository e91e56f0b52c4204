//! Shared by the C tests: a real signed registry of `cuda-aot-testkit` (generated keys, real
//! cubins of `tests/data/elf/add.cu`, published in-process with the real publisher) laid out
//! for the C programs, the built library found beside the test binary, and C programs
//! compiled against it with `cc`.

#![allow(dead_code)] // each test file uses a subset

pub use cuda_aot_testkit::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The workspace root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A test registry of the testkit as the C programs see it: the registry folder, its trust
/// root in a file beside it, and a folder for the rollback state.
pub struct Registry {
    /// The published registry, its keys and its temporary folder.
    pub fixture: Fixture,
}

impl Registry {
    /// `add` for sm_80 and sm_90, one dev-channel build signed by a generated builder key,
    /// published by a generated publisher key under a generated root (v1).
    pub fn publish() -> Registry {
        let fixture = Fixture::new();
        std::fs::write(fixture.path("root.json"), &fixture.root_file).unwrap();
        fixture.append(&["sm_80", "sm_90"]);
        Registry { fixture }
    }

    /// The registry folder.
    pub fn path(&self) -> PathBuf {
        self.fixture.reg_path()
    }

    /// The trust root file (beside the registry).
    pub fn trust_root(&self) -> PathBuf {
        self.fixture.path("root.json")
    }

    /// The rollback-state folder the C programs are pointed at (`CUDA_AOT_STATE_DIR`).
    pub fn state_dir(&self) -> PathBuf {
        self.fixture.path("state")
    }

    /// The published blob of `add` for `sm`.
    pub fn blob(&self, sm: &str) -> PathBuf {
        self.fixture.blob_path(sm)
    }
}

/// The folder of the built library: cargo builds `libcuda_aot_capi.{so,a}` for this test
/// into `deps/` beside the test binary (a `cargo build` also copies them one folder up), so
/// under `CARGO_TARGET_DIR` or `target/`, whichever cargo used.
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    let up = deps.parent().unwrap().to_path_buf();
    let has = |d: &Path| {
        ["libcuda_aot_capi.so", "libcuda_aot_capi.a"]
            .iter()
            .all(|lib| d.join(lib).is_file())
    };
    for dir in [deps, up] {
        if has(&dir) {
            return dir;
        }
    }
    panic!(
        "libcuda_aot_capi.so and .a not found beside the test binary {}: run the test through `cargo test -p cuda-aot-capi`, which builds them",
        exe.display()
    );
}

/// The libraries a Rust static library needs from the system when linked into a C program
/// on Linux (what `rustc --print native-static-libs` lists for a std staticlib).
pub const STATIC_LIB_DEPS: [&str; 6] = ["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl"];

/// Compiles the C files `sources` (relative to the workspace) into `out` with `cc`, the
/// header folder included, warnings as errors, and `extra` (the library to link).
pub fn compile_c(sources: &[&str], out: &Path, extra: &[String]) {
    let mut cc = Command::new("cc");
    cc.current_dir(repo())
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-g",
            "-Icapi/include",
        ])
        .args(sources)
        .arg("-o")
        .arg(out)
        .args(extra);
    let done = cc
        .output()
        .unwrap_or_else(|e| panic!("cc could not be started ({e}): the C tests need a C compiler"));
    assert!(
        done.status.success(),
        "{cc:?} failed:\n{}",
        String::from_utf8_lossy(&done.stderr)
    );
}

/// The soname of the shared library `lib`, as `readelf -d` shows it
/// (`libcuda_aot_capi.so.0.1`): what a program linked against it asks the loader for.
pub fn soname(lib: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(lib)
        .output()
        .unwrap_or_else(|e| {
            panic!("readelf could not be started ({e}): the C tests need binutils")
        });
    assert!(out.status.success(), "readelf -d {}", lib.display());
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.split_once("Library soname: [")?.1.strip_suffix(']'))
        .unwrap_or_else(|| panic!("{} has no SONAME:\n{text}", lib.display()))
        .to_string()
}

/// A folder laid out as an install lays the shared library out: a copy of the library
/// cargo built, as `libcuda_aot_capi.so` (what `-lcuda_aot_capi` finds) and under its
/// soname (what the linked program loads). Cargo's own folders hold no file of the soname's
/// name; the copy also keeps the programs of this test binary on one library while other
/// builds of a shared target replace cargo's.
pub fn shared_lib_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("capi-lib-")
            .tempdir()
            .unwrap();
        let built = lib_dir().join("libcuda_aot_capi.so");
        let lib = dir.path().join("libcuda_aot_capi.so");
        std::fs::copy(&built, &lib).unwrap();
        std::os::unix::fs::symlink("libcuda_aot_capi.so", dir.path().join(soname(&lib))).unwrap();
        dir
    })
    .path()
}

/// Linker arguments for the shared library (of [`shared_lib_dir`]), found at run time
/// through an rpath.
pub fn link_shared() -> Vec<String> {
    let dir = shared_lib_dir();
    vec![
        format!("-L{}", dir.display()),
        "-lcuda_aot_capi".into(),
        format!("-Wl,-rpath,{}", dir.display()),
    ]
}

/// Linker arguments for the static library.
pub fn link_static() -> Vec<String> {
    let mut args = vec![lib_dir().join("libcuda_aot_capi.a").display().to_string()];
    args.extend(STATIC_LIB_DEPS.iter().map(|s| s.to_string()));
    args
}

/// Runs `program` with `args`, the rollback state kept in `state_dir`.
pub fn run(program: &Path, args: &[&Path], state_dir: &Path) -> Output {
    Command::new(program)
        .args(args)
        .env("CUDA_AOT_STATE_DIR", state_dir)
        .output()
        .unwrap()
}

/// stdout and stderr of `out`, for assertions and their messages.
pub fn texts(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
