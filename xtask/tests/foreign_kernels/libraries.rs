//! Real prover library shapes (issue 44): a device-linked library of six files whose
//! inline functions make the compiler keep constant aggregates (`<function>$N` objects),
//! and kernels that call a device function with its own stack frame in another file.

use crate::common::Ws;
use crate::manifest;
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

/// Issue 44, items 1 and 4: `foreign_sponge` (six files, `-rdc=true`, one module) builds
/// for sm_80 and sm_90. Its cubin holds cicc's WEAK `.nv.global.init` objects named
/// `<function>$N` (the inline functions assign constexpr-built aggregates), in the same
/// section and binding as the function-local static the library declares; the manifest
/// signs exactly the library's four globals, none of the compiler's. The kernels that call
/// the permutation (another file, its own frame) sign a stack larger than their frame; the
/// one that calls nothing signs a stack equal to it.
#[test]
fn issue_44_a_six_file_library_signs_its_declared_globals_and_whole_stacks() {
    let ws = Ws::foreign("lib");
    let run = ws
        .build(&[
            "--module",
            "foreign_sponge",
            "--target",
            "sm_80",
            "--target",
            "sm_90",
        ])
        .ok();
    assert_eq!(run.nvcc_runs(), 2 * (6 + 1), "six files and a link per SM");
    // ptxas's spills in a device function are said to be a device function's (issue 44,
    // item 5), in the output and the JSON report.
    assert!(
        run.stdout.contains(
            "spills: foreign_sponge sm_90: device function sponge::hash_row(unsigned int const*, unsigned int, unsigned int*) spills"
        ),
        "{}",
        run.stdout
    );
    let report = run.report.as_ref().unwrap();
    let spills: Vec<&serde_json::Value> = report["modules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["spills"].as_array().unwrap())
        .collect();
    assert!(
        spills
            .iter()
            .any(|s| s["function"] == "_ZN6sponge8hash_rowEPKjjPj" && s["kernel"] == false),
        "{spills:?}"
    );
    for sm in ["sm_80", "sm_90"] {
        let m = manifest(&ws, &format!("out/foreign_sponge/{sm}.cubin.manifest.json"));
        assert_eq!(m.identity.sources.len(), 6);
        let mut globals: Vec<(String, u64)> = m
            .globals
            .iter()
            .flatten()
            .map(|g| (g.name.to_string(), g.size))
            .collect();
        globals.sort();
        assert_eq!(
            globals,
            [
                ("sponge::RC".to_string(), 192),
                ("sponge::ROT".to_string(), 24),
                ("sponge::lane_weight(unsigned int)::K".to_string(), 16),
                ("sponge::permutations".to_string(), 8),
            ],
            "{sm}"
        );
        let blob = std::fs::read(ws.path(&format!("out/foreign_sponge/{sm}.cubin"))).unwrap();
        cuda_aot::content::check(&m, &blob).unwrap();
        // The compiler's objects are there, and look like the library's static.
        let elf = object::File::parse(&*blob).unwrap();
        let data_in_init = |name: &str| {
            let sym = elf.symbols().find(|s| s.name() == Ok(name)).unwrap();
            let section = elf.section_by_index(sym.section_index().unwrap()).unwrap();
            (section.name().unwrap().to_string(), sym.is_weak())
        };
        let made: Vec<String> = elf
            .symbols()
            .filter_map(|s| s.name().ok().map(str::to_string))
            .filter(|n| n.contains('$') && n.starts_with("_ZN6sponge"))
            .collect();
        assert!(
            made.iter().any(|n| n.starts_with("_ZN6sponge4initE"))
                && made.iter().any(|n| n.starts_with("_ZN6sponge8load_mix")),
            "{sm}: cicc's aggregates: {made:?}"
        );
        for n in &made {
            assert_eq!(
                data_in_init(n),
                data_in_init("_ZZN6sponge11lane_weightEjE1K"),
                "{sm}: {n}"
            );
        }
        // The whole stack: the permutation's frame on top of the caller's.
        let abi = |k: &str| {
            m.functions
                .iter()
                .find(|f| f.symbol.as_str() == k)
                .unwrap()
                .abi
                .clone()
        };
        for k in ["sponge_absorb", "sponge_merkle_level", "sponge_squeeze"] {
            let a = abi(k);
            assert!(
                a.stack_bytes.unwrap() > a.local_bytes.unwrap(),
                "{sm} {k}: {a:?}"
            );
        }
        let mix = abi("sponge_mix");
        assert_eq!(mix.stack_bytes, mix.local_bytes, "{sm}");
    }
    // `kernels` shows the whole stack where it is more than the frame.
    let out = crate::common::xtask()
        .args([
            "kernels",
            "--module",
            "foreign_sponge",
            "--target",
            "sm_90",
            "--spec",
        ])
        .arg(ws.path("lib/foreign/foreign.toml"))
        .arg("--cache-dir")
        .arg(ws.path("cache"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("B stack with calls"), "{text}");
}
