//! Derives the launch contract of the release set (`MODULES`) from
//! `manifests/release.toml` at build time, so the spec is the one definition of the release
//! set: which modules exist, their sources, entry points and block size.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // Read at run time, not baked in with env!(): cargo may reuse this build script's
    // binary for another checkout sharing the target folder, and must read that
    // checkout's spec.
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let spec = Path::new(&dir).join("../manifests/release.toml");
    println!("cargo:rerun-if-changed={}", spec.display());
    let text = std::fs::read_to_string(&spec)
        .unwrap_or_else(|e| panic!("{}: {e} (the release set is defined there)", spec.display()));
    let v: toml::Value =
        toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", spec.display()));
    let sources = v["build"]["sources"].as_str().expect("build.sources");
    // `sources` is relative to manifests/; the contract names files relative to kernels/.
    let prefix = sources
        .strip_prefix("../kernels/")
        .expect("the release set's sources live under kernels/");
    let mut out = String::from(
        "/// The modules of the release set, derived from manifests/release.toml when this\n\
         /// crate was built.\npub const MODULES: &[ModuleContract] = &[\n",
    );
    for m in v["module"].as_array().expect("[[module]] tables") {
        let name = m["name"].as_str().expect("module name");
        let source = m["source"].as_str().expect("module source");
        let entries: Vec<String> = m["entry_points"]
            .as_array()
            .expect("entry_points")
            .iter()
            .map(|e| format!("{:?}", e.as_str().expect("entry point")))
            .collect();
        let block = m
            .get("geometry")
            .and_then(|g| g.get("block"))
            .and_then(toml::Value::as_integer)
            .unwrap_or_else(|| panic!("module {name}: geometry.block"));
        writeln!(
            out,
            "    ModuleContract {{ name: {name:?}, source: {:?}, entry_points: &[{}], block: {block} }},",
            format!("{prefix}/{source}"),
            entries.join(", ")
        )
        .expect("write to a string");
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("contract.rs");
    std::fs::write(&dest, out).expect("write the generated contract");
}
