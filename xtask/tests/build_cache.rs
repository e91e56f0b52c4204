//! The build cache with real nvcc: a no-op rebuild runs no nvcc, changing a shared header
//! rebuilds exactly the modules that include it, changing a flag or a geometry value
//! rebuilds what it affects, reverting a change (switching a branch back) rebuilds nothing,
//! `--explain` names the input that changed, and the cache stays under its bound without
//! evicting what the build uses (issue 12).

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

#[test]
fn issue_12_reverting_a_header_edit_or_switching_branches_back_runs_no_nvcc() {
    let ws = Ws::new();
    let first = ws.build(&[]).ok();
    let branch = format!("{}// branch b\n", common::COMMON_CUH);
    ws.write("src/common.cuh", &branch);
    let b = ws.build(&[]).ok();
    assert_eq!(b.nvcc_runs(), 4);

    // Back to the first content: every job is a cache hit with the first identities.
    ws.write("src/common.cuh", common::COMMON_CUH);
    let back = ws.build(&[]).ok();
    assert_eq!(back.nvcc_runs(), 0, "{}", back.stdout);
    assert_eq!(back.cached(), set(&ALL, &TARGETS));
    for m in ALL {
        for t in TARGETS {
            assert_eq!(back.identity(m, t), first.identity(m, t), "{m} {t}");
        }
    }
    assert!(
        back.stdout.contains("cache: 6 hits, 0 misses"),
        "{}",
        back.stdout
    );
    let out_back = ws.snapshot("out");

    // And forth again: the branch's builds are still there too.
    ws.write("src/common.cuh", &branch);
    let again = ws.build(&[]).ok();
    assert_eq!(again.nvcc_runs(), 0, "{}", again.stdout);
    assert_eq!(
        again.identity("alpha", "sm_90"),
        b.identity("alpha", "sm_90")
    );

    // A source edit on top, then both reverted at once: still nothing to compile, and the
    // output is byte for byte what the first content built.
    ws.write("src/alpha.cu", &format!("{}// tweak\n", common::ALPHA_CU));
    assert_eq!(ws.build(&[]).ok().nvcc_runs(), 2);
    ws.write("src/alpha.cu", common::ALPHA_CU);
    ws.write("src/common.cuh", common::COMMON_CUH);
    let reverted = ws.build(&[]).ok();
    assert_eq!(reverted.nvcc_runs(), 0, "{}", reverted.stdout);
    assert_eq!(
        common::outputs_and_definition(ws.snapshot("out")),
        common::outputs_and_definition(out_back)
    );
}

#[test]
fn issue_12_explain_names_the_input_that_changed() {
    let ws = Ws::new();
    let first = ws.build(&["--explain"]).ok();
    assert_eq!(first.inputs("alpha", "sm_80"), ["cache"]);
    assert!(
        first.stdout.contains(
            "explain: alpha sm_80 (cubin): first build: the cache has no earlier build of this job"
        ),
        "{}",
        first.stdout
    );
    let noop = ws.build(&["--explain"]).ok();
    assert!(
        noop.stdout
            .contains("explain: every job was a cache hit; nvcc did not run"),
        "{}",
        noop.stdout
    );

    // A header: the jobs that include it, and only those, name it.
    ws.write(
        "src/common.cuh",
        &format!("{}// edited\n", common::COMMON_CUH),
    );
    let run = ws.build(&["--explain"]).ok();
    assert_eq!(
        run.changed("beta", "sm_90"),
        [(
            "header".to_string(),
            "header `common.cuh` changed".to_string()
        )]
    );
    assert!(
        run.stdout
            .contains("explain: alpha sm_80 (cubin): header `common.cuh` changed"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("explain: gamma"), "{}", run.stdout);
    assert!(
        run.stdout.contains("cache: 2 hits, 4 misses (header 4)"),
        "{}",
        run.stdout
    );

    // The module's own source.
    ws.write("src/gamma.cu", &format!("{}// edited\n", common::GAMMA_CU));
    let run = ws.build(&[]).ok();
    assert_eq!(
        run.changed("gamma", "sm_80"),
        [(
            "source".to_string(),
            "source `gamma.cu` changed".to_string()
        )]
    );
    assert!(
        run.stdout.contains("(source 2; --explain says which)"),
        "{}",
        run.stdout
    );

    // A flag of one module.
    ws.edit_spec(|s| {
        s.replace(
            "entry_points = [\"beta_salt\"]",
            "entry_points = [\"beta_salt\"]\nnvcc_flags = [\"-DBETA_EXTRA=1\"]",
        )
    });
    let run = ws.build(&[]).ok();
    assert_eq!(run.compiled(), set(&["beta"], &TARGETS));
    assert_eq!(
        run.changed("beta", "sm_90"),
        [(
            "flag".to_string(),
            "flags changed: added -DBETA_EXTRA=1".to_string()
        )]
    );

    // The flag dropped again while a header changed: both, against the last build (the
    // flag) and against the record these flags had (the header).
    ws.edit_spec(|s| s.replace("\nnvcc_flags = [\"-DBETA_EXTRA=1\"]", ""));
    ws.write(
        "src/common.cuh",
        &format!("{}// edited again\n", common::COMMON_CUH),
    );
    let run = ws.build(&[]).ok();
    assert_eq!(run.compiled(), set(&["alpha", "beta"], &TARGETS));
    assert_eq!(run.inputs("beta", "sm_80"), ["flag", "header"]);
    assert_eq!(
        run.changed("beta", "sm_80")[0].1,
        "flags changed: removed -DBETA_EXTRA=1"
    );
    assert_eq!(run.inputs("alpha", "sm_80"), ["header"]);

    // A spec value of the identity (same inputs, so the same dependency record).
    ws.edit_spec(|s| {
        s.replacen(
            "name = \"gamma\"\nsource = \"gamma.cu\"\nentry_points = [\"gamma_twice\"]\nprotocol = \"test-v1\"",
            "name = \"gamma\"\nsource = \"gamma.cu\"\nentry_points = [\"gamma_twice\"]\nprotocol = \"test-v2\"",
            1,
        )
    });
    let run = ws.build(&[]).ok();
    assert_eq!(run.compiled(), set(&["gamma"], &TARGETS));
    assert_eq!(
        run.changed("gamma", "sm_80"),
        [(
            "spec".to_string(),
            "protocol changed: test-v1 -> test-v2".to_string()
        )]
    );

    explain_names_the_machine_and_the_cache(&ws);
}

/// The rest of [`issue_12_explain_names_the_input_that_changed`]: the host compiler, the
/// toolkit, and an entry evicted while nothing changed.
fn explain_names_the_machine_and_the_cache(ws: &Ws) {
    // The host compiler (g++ instead of the default c++: another version line).
    let one = ["--module", "alpha", "--target", "sm_90"];
    let run = ws.build_with(&one, |c| {
        c.env("CXX", "g++");
    });
    let run = run.ok();
    assert_eq!(run.inputs("alpha", "sm_90"), ["host_compiler"]);
    assert!(
        run.changed("alpha", "sm_90")[0].1.contains("-> g++ "),
        "{:?}",
        run.changed("alpha", "sm_90")
    );

    // The toolkit (the pinned one's folder used as a system toolkit: another identity).
    let run = ws.build_with(&[&one[..], &["--toolkit", "system"]].concat(), |c| {
        c.env("CXX", "g++")
            .env("CUDA_HOME", common::toolkit_root())
            .arg("--toolkit-dir")
            .arg(ws.path("tk-memo"));
    });
    let run = run.ok();
    let changed = run.changed("alpha", "sm_90");
    assert_eq!(run.inputs("alpha", "sm_90"), ["toolkit"], "{changed:?}");
    assert!(changed[0].1.contains("(system, "), "{changed:?}");

    // Nothing changed but the entry is gone.
    let again = ws.build(&[]).ok();
    let id = again.identity("alpha", "sm_80");
    std::fs::remove_dir_all(ws.path(&format!(
        "cache/objects/{}",
        id.strip_prefix("blake3:").unwrap()
    )))
    .unwrap();
    let run = ws.build(&[]).ok();
    assert_eq!(run.compiled(), set(&["alpha"], &["sm_80"]));
    assert_eq!(run.inputs("alpha", "sm_80"), ["cache"]);
    assert!(run.changed("alpha", "sm_80")[0].1.contains("evicted"));
    assert_eq!(run.identity("alpha", "sm_80"), id);
}

/// Bytes under the cache folder, as the bound counts them (staging excluded).
fn cache_bytes(ws: &Ws) -> u64 {
    ws.snapshot("cache")
        .iter()
        .filter(|(p, _)| !p.starts_with("tmp"))
        .map(|(_, b)| b.len() as u64)
        .sum()
}

#[test]
fn issue_12_eviction_keeps_the_cache_under_its_bound_and_never_evicts_what_the_build_uses() {
    let ws = Ws::new();
    let a = ws.build(&[]).ok();
    let one_build = cache_bytes(&ws);
    let entries: u64 = ws
        .snapshot("cache/objects")
        .values()
        .map(|b| b.len() as u64)
        .sum();

    // Another flag set (everything recompiles) under a bound that holds one build and half
    // the entries of another: entries of the first build go, least recently used first, and
    // every entry of this build stays.
    ws.edit_spec(|s| s.replace("[\"--std=c++17\"]", "[\"--std=c++17\", \"-Xptxas=-O2\"]"));
    let bound = one_build + entries / 2;
    let b = ws.build(&["--cache-max-size", &bound.to_string()]).ok();
    assert_eq!(b.nvcc_runs(), 6);
    let size = cache_bytes(&ws);
    assert!(size <= bound, "cache holds {size} bytes, bound {bound}");
    assert!(
        b.stdout.contains("least recently used entries"),
        "{}",
        b.stdout
    );
    let present = |id: String| {
        ws.path(&format!(
            "cache/objects/{}",
            id.strip_prefix("blake3:").unwrap()
        ))
        .exists()
    };
    let mut evicted = 0;
    for m in ALL {
        for t in TARGETS {
            assert!(present(b.identity(m, t)), "{m} {t} of this build evicted");
            evicted += usize::from(!present(a.identity(m, t)));
        }
    }
    assert!(evicted > 0, "nothing of the first build was evicted");
    // No dependency record is left describing an evicted entry, and every header set left
    // is one a record refers to.
    let mut sets = std::collections::BTreeSet::new();
    for (name, bytes) in ws.snapshot("cache/deps") {
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        for r in v["records"].as_array().unwrap() {
            let id = r["identity"].as_str().unwrap().to_string();
            assert!(present(id), "{name:?} describes an evicted entry");
            sets.insert(format!(
                "{}.json",
                r["set"].as_str().unwrap().strip_prefix("blake3:").unwrap()
            ));
        }
    }
    let stored: std::collections::BTreeSet<String> = ws
        .snapshot("cache/sets")
        .keys()
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(stored, sets);
    // This build is a no-op now; the first flag set compiles what was evicted, and only that.
    assert_eq!(
        ws.build(&["--cache-max-size", &bound.to_string()])
            .ok()
            .nvcc_runs(),
        0
    );
    ws.edit_spec(|s| s.replace(", \"-Xptxas=-O2\"", ""));
    let back = ws.build(&["--cache-max-size", &bound.to_string()]).ok();
    assert_eq!(back.nvcc_runs(), evicted as u64);

    // A bound below what one build needs: the build keeps every entry it uses, says so,
    // and its rerun is still a no-op.
    ws.edit_spec(|s| s.replace("[\"--std=c++17\"]", "[\"--std=c++17\", \"-Xptxas=-O1\"]"));
    let tiny = ws.build(&["--cache-max-size", "1K"]).ok();
    assert_eq!(tiny.nvcc_runs(), 6);
    assert!(tiny.stdout.contains("still over it"), "{}", tiny.stdout);
    assert_eq!(
        ws.build(&["--cache-max-size", "1K"]).ok().nvcc_runs(),
        0,
        "the bound evicted what the build uses"
    );
}
