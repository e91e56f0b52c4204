//! Derives the launch contract of the release set (`MODULES`) from
//! `manifests/release.toml` at build time, so the spec is the one definition of the release
//! set: which modules exist, their sources, entry points and block size. The spec is read by
//! the one spec reader (`cuda_aot_spec`) the build uses, and a spec this script cannot use
//! fails the build with the file and the field named.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // Read at run time, not baked in with env!(): cargo may reuse this build script's
    // binary for another checkout sharing the target folder, and must read that
    // checkout's spec.
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let spec = Path::new(&dir).join("../manifests/release.toml");
    println!("cargo:rerun-if-changed={}", spec.display());
    let out = std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR");
    let written = contract(&spec).and_then(|text| {
        let dest = Path::new(&out).join("contract.rs");
        std::fs::write(&dest, text).map_err(|e| format!("writing {}: {e}", dest.display()))
    });
    if let Err(e) = written {
        eprintln!(
            "error: {e}\nFix: {} defines the release set whose launch contract cuda-aot-kernels derives; docs/build.md describes every field",
            spec.display()
        );
        std::process::exit(1);
    }
}

/// The Rust source of `MODULES`, from the spec at `path`.
fn contract(path: &Path) -> Result<String, String> {
    let spec = cuda_aot_spec::read(path).map_err(|e| e.to_string())?;
    // `sources` is relative to manifests/; the contract names files relative to kernels/.
    let prefix = spec
        .build
        .sources
        .strip_prefix("../kernels/")
        .ok_or_else(|| {
            format!(
                "{}: build.sources is {:?}; the release set's sources live under kernels/",
                path.display(),
                spec.build.sources
            )
        })?;
    let mut out = String::from(
        "/// The modules of the release set, derived from manifests/release.toml when this\n\
         /// crate was built.\npub const MODULES: &[ModuleContract] = &[\n",
    );
    for m in &spec.modules {
        let name = &m.name;
        let [source] = m.source.files()[..] else {
            return Err(format!(
                "{}: module `{name}` has several sources; the release set's contract describes modules of one file",
                path.display()
            ));
        };
        let block = m.geometry.get("block").ok_or_else(|| {
            format!(
                "{}: module `{name}` has no geometry.block; the launch contract needs its block size",
                path.display()
            )
        })?;
        let entries: Vec<String> = m.entry_points.iter().map(|e| format!("{e:?}")).collect();
        writeln!(
            out,
            "    ModuleContract {{ name: {name:?}, source: {:?}, entry_points: &[{}], block: {block} }},",
            format!("{prefix}/{source}"),
            entries.join(", ")
        )
        .expect("write to a string");
    }
    out.push_str("];\n");
    Ok(out)
}
