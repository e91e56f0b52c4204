//! Build script of cuda-aot-capi: gives the shared library its versioned soname, the one
//! place that decides it. `cargo xtask install-capi` reads the soname back from the built
//! library (its links and its CMake version check follow it), so nothing restates the rule.
//!
//! The soname is `libcuda_aot_capi.so.<ABI>`, `<ABI>` being the part of the package version
//! that a compatible release keeps, as Cargo's semver reads it: the major version from
//! 1.0 on (`1.4.2` → `.so.1`), and `0.MINOR` before 1.0 (`0.1.0` → `.so.0.1`), since a 0.x
//! minor release may break the ABI (Cargo treats 0.1 → 0.2 as breaking) while a 0.x patch
//! release may not. This is cargo-c's convention for 0.x crates; libtool's `.so.0` would
//! promise that 0.2 can replace 0.1, which 0.x does not. The real file then installs as
//! `libcuda_aot_capi.so.<version>` with the soname as its link.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // An ELF soname, for GNU ld and lld (Linux, the BSDs); other targets keep their default.
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if !matches!(
        os.as_str(),
        "linux" | "android" | "freebsd" | "netbsd" | "openbsd" | "dragonfly"
    ) {
        return;
    }
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("cargo sets {name}"));
    let major = var("CARGO_PKG_VERSION_MAJOR");
    let abi = if major == "0" {
        format!("0.{}", var("CARGO_PKG_VERSION_MINOR"))
    } else {
        major
    };
    // The cdylib only (`[lib] name` of Cargo.toml): the staticlib and rlib have no soname.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda_aot_capi.so.{abi}");
}
