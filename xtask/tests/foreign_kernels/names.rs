//! Kernel names: an ambiguous entry point refused with its candidates, and `cargo xtask
//! kernels` listing both spellings of each name, each of which finds the kernel.

use crate::common;
use crate::common::{Ws, set};

#[test]
fn an_ambiguous_entry_point_is_refused_with_its_candidates() {
    let ws = Ws::foreign("d");
    // Two overloads share the name `fields::scale`.
    ws.write(
        "d/foreign/src/overloads.cu",
        "#include <fields/bb31_t.cuh>\n#include <fields/gl64_t.cuh>\n\
         namespace fields {\n\
         __global__ void scale(gl64_t* d, gl64_t s) { d[threadIdx.x] = d[threadIdx.x] * s; }\n\
         __global__ void scale(bb31_t* d, bb31_t s) { d[threadIdx.x] = d[threadIdx.x] * s; }\n\
         }\n",
    );
    ws.edit_spec(|s| {
        s + "\n[[module]]\nname = \"overloads\"\nsource = \"overloads.cu\"\n\
             entry_points = [\"fields::scale\"]\nprotocol = \"t\"\nschedule_version = 1\n"
    });
    let run = ws
        .build(&["--target", "sm_90", "--module", "overloads"])
        .failed();
    assert!(
        run.stderr.contains(
            "entry point `fields::scale` is ambiguous: it matches fields::scale(gl64_t*, gl64_t), fields::scale(bb31_t*, bb31_t)"
        ) || run.stderr.contains(
            "entry point `fields::scale` is ambiguous: it matches fields::scale(bb31_t*, bb31_t), fields::scale(gl64_t*, gl64_t)"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("Fix: name one kernel per entry point"),
        "{}",
        run.stderr
    );
    // Naming each by its signature builds.
    ws.edit_spec(|s| {
        s.replace(
            "[\"fields::scale\"]",
            "[\"fields::scale(gl64_t*, gl64_t)\", \"fields::scale(bb31_t*, bb31_t)\"]",
        )
    });
    let run = ws
        .build(&["--target", "sm_90", "--module", "overloads"])
        .ok();
    assert_eq!(run.compiled(), set(&["overloads"], &["sm_90"]));
}

/// Issue 19, item 6: `cargo xtask kernels` lists every kernel and global of a built module
/// with its symbol, its cpp_demangle spelling (what the manifest records) and its c++filt
/// spelling, and the latter is exactly what binutils' c++filt prints for the symbol (the
/// host compiler's binutils, run here); each spelling, with or without the return type,
/// resolves to the kernel through the runtime's matching. `ntt::bit_reverse<10u>` is the
/// corpus kernel whose two spellings differ (and the spec names it by c++filt's).
#[test]
fn issue_19_kernels_lists_both_spellings_and_each_finds_the_kernel() {
    let ws = Ws::foreign("names");
    let out = common::xtask()
        .args([
            "kernels",
            "--json",
            "--module",
            "foreign_ntt",
            "--target",
            "sm_90",
            "--spec",
        ])
        .arg(ws.path("names/foreign/foreign.toml"))
        .arg("--cache-dir")
        .arg(ws.path("cache"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(
        out.stdout
            .split(|b| *b == b'\n')
            .find(|l| l.windows(9).any(|w| w == b"\"kernels\""))
            .unwrap(),
    )
    .unwrap();
    let module = &doc["modules"][0];
    assert_eq!(module["module"], "foreign_ntt");
    let kernels = module["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 4, "{module}");
    let cxxfilt = |symbol: &str| {
        let out = std::process::Command::new("c++filt")
            .arg(symbol)
            .output()
            .expect("c++filt (binutils) runs");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let manifest: Vec<cuda_aot::Function> = serde_json::from_value(serde_json::Value::Array(
        kernels
            .iter()
            .map(|k| {
                serde_json::json!({"symbol": k["symbol"], "name": k["name"],
                        "signature": k["cpp_demangle"], "abi": k["abi"]})
            })
            .collect(),
    ))
    .unwrap();
    let mut differing = 0;
    for k in kernels {
        let symbol = k["symbol"].as_str().unwrap();
        let Some(ours) = k["cpp_demangle"].as_str() else {
            assert!(!symbol.starts_with("_Z"), "{k}");
            continue;
        };
        let theirs = cxxfilt(symbol);
        // c++filt prints the return type first.
        assert_eq!(
            format!("void {}", k["cxxfilt"].as_str().unwrap()),
            theirs,
            "{symbol}"
        );
        differing += usize::from(theirs != format!("void {ours}"));
        for spelling in [symbol, ours, theirs.as_str(), &theirs["void ".len()..]] {
            let found = cuda_aot::lookup::resolve_function(&manifest, spelling)
                .unwrap_or_else(|c| panic!("{spelling}: {} candidates", c.len()));
            assert_eq!(found.symbol.as_str(), symbol, "{spelling}");
        }
    }
    assert_eq!(differing, 1, "ntt::bit_reverse<10u> is spelled two ways");
    // The globals, each with its size and space.
    let globals: Vec<(String, u64)> = module["globals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["cxxfilt"].as_str().unwrap().to_string(),
                g["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        globals.contains(&("ntt::twiddles".to_string(), 2048)),
        "{globals:?}"
    );
    // The human table names the differing spellings.
    let out = common::xtask()
        .args([
            "kernels",
            "--module",
            "foreign_ntt",
            "--target",
            "sm_90",
            "--spec",
        ])
        .arg(ws.path("names/foreign/foreign.toml"))
        .arg("--cache-dir")
        .arg(ws.path("cache"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("cpp_demangle  ntt::bit_reverse<(unsigned int)10>(bb31_t*)")
            && text.contains("c++filt       ntt::bit_reverse<10u>(bb31_t*)")
            && text.contains("global _ZN3ntt8twiddlesE (2048 bytes, constant)"),
        "{text}"
    );
}
