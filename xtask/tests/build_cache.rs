//! The build cache with real nvcc: a no-op rebuild runs no nvcc, changing a shared header
//! rebuilds exactly the modules that include it, and changing a flag or a geometry value
//! rebuilds what it affects.

mod common;

use common::{Ws, set};

const ALL: [&str; 3] = ["alpha", "beta", "gamma"];
const TARGETS: [&str; 2] = ["sm_80", "sm_90"];

#[test]
fn noop_rebuild_spawns_no_nvcc() {
    let ws = Ws::new();
    let first = ws.build(&[]).ok();
    assert_eq!(first.nvcc_runs(), 6);
    assert_eq!(first.compiled(), set(&ALL, &TARGETS));
    let out = ws.snapshot("out");
    let cache = ws.snapshot("cache");

    let again = ws.build(&[]).ok();
    assert_eq!(again.nvcc_runs(), 0, "{}", again.stdout);
    assert_eq!(again.cached(), set(&ALL, &TARGETS));
    assert!(
        again
            .stdout
            .contains("0 compiled (0 nvcc runs), 6 from cache"),
        "{}",
        again.stdout
    );
    assert_eq!(ws.snapshot("out"), out, "a no-op rebuild rewrote outputs");
    assert_eq!(
        ws.snapshot("cache"),
        cache,
        "a no-op rebuild changed the cache"
    );
}

#[test]
fn changing_a_shared_header_rebuilds_exactly_its_dependents() {
    let ws = Ws::new();
    let first = ws.build(&[]).ok();

    // A new mtime with the same content is not a change.
    let f = std::fs::File::options()
        .append(true)
        .open(ws.path("src/common.cuh"))
        .unwrap();
    f.set_modified(std::time::SystemTime::now()).unwrap();
    drop(f);
    assert_eq!(ws.build(&[]).ok().nvcc_runs(), 0);

    // common.cuh is included by alpha and beta, not by gamma.
    ws.write(
        "src/common.cuh",
        &format!(
            "{}// a comment changes the source digest\n",
            common::COMMON_CUH
        ),
    );
    let run = ws.build(&[]).ok();
    assert_eq!(run.compiled(), set(&["alpha", "beta"], &TARGETS));
    assert_eq!(run.cached(), set(&["gamma"], &TARGETS));
    assert_eq!(run.nvcc_runs(), 4);
    assert_ne!(
        run.identity("alpha", "sm_90"),
        first.identity("alpha", "sm_90")
    );
    assert_eq!(
        run.identity("gamma", "sm_90"),
        first.identity("gamma", "sm_90")
    );

    // other.cuh only by gamma.
    ws.write(
        "src/other.cuh",
        &format!("{}// changed\n", common::OTHER_CUH),
    );
    let run = ws.build(&[]).ok();
    assert_eq!(run.compiled(), set(&["gamma"], &TARGETS));
    assert_eq!(run.nvcc_runs(), 2);
}

#[test]
fn changing_flags_or_geometry_rebuilds_what_they_affect() {
    let ws = Ws::new();
    ws.build(&[]).ok();

    // A module's own flag: that module only, and the flag is recorded.
    ws.edit_spec(|s| {
        s.replace(
            "entry_points = [\"gamma_twice\"]",
            "entry_points = [\"gamma_twice\"]\nnvcc_flags = [\"-DGAMMA_EXTRA=1\"]",
        )
    });
    let run = ws.build(&[]).ok();
    assert_eq!(run.compiled(), set(&["gamma"], &TARGETS));
    let manifest = ws.read("out/gamma/sm_90.cubin.manifest.json");
    assert!(manifest.contains("-DGAMMA_EXTRA=1"), "{manifest}");

    // Geometry: -DCUDA_AOT_BLOCK changes for alpha only.
    ws.edit_spec(|s| s.replace("geometry = { block = 128 }", "geometry = { block = 64 }"));
    let run = ws.build(&[]).ok();
    assert_eq!(run.compiled(), set(&["alpha"], &TARGETS));
    assert!(
        ws.read("out/alpha/sm_80.cubin.manifest.json")
            .contains("-DCUDA_AOT_BLOCK=64")
    );

    // A build-wide flag: everything.
    ws.edit_spec(|s| {
        s.replace(
            "nvcc_flags = [\"--std=c++17\"]",
            "nvcc_flags = [\"--std=c++17\", \"-Xptxas=-O2\"]",
        )
    });
    let run = ws.build(&[]).ok();
    assert_eq!(run.compiled(), set(&ALL, &TARGETS));
    assert_eq!(run.nvcc_runs(), 6);
}

#[test]
fn a_damaged_cache_entry_is_rebuilt_not_used() {
    let ws = Ws::new();
    let first = ws.build(&[]).ok();
    let id = first.identity("alpha", "sm_80");
    let blob = ws.path(&format!(
        "cache/objects/{}/blob",
        id.strip_prefix("blake3:").unwrap()
    ));
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&blob, bytes).unwrap();

    let run = ws.build(&[]).ok();
    assert_eq!(run.compiled(), set(&["alpha"], &["sm_80"]));
    assert_eq!(run.digest("alpha", "sm_80"), first.digest("alpha", "sm_80"));
    assert_eq!(
        std::fs::read(ws.path("out/alpha/sm_80.cubin")).unwrap(),
        std::fs::read(&blob).unwrap(),
        "the entry was replaced by the rebuilt blob"
    );
}
