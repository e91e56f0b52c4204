//! Kernel names: an ambiguous entry point refused with its candidates, and `cargo xtask
//! kernels` listing both spellings of each name, each of which finds the kernel, for every
//! kind of template argument nvcc mangles (`kernels/foreign/templates.toml`).

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

/// `cargo xtask kernels --json` of `module` (sm_90) of the spec at `spec` in `ws`: its one
/// module's listing.
fn kernels_json(ws: &Ws, spec: &str, module: &str) -> serde_json::Value {
    let out = common::xtask()
        .args([
            "kernels", "--json", "--module", module, "--target", "sm_90", "--spec",
        ])
        .arg(ws.path(spec))
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
    let module_doc = doc["modules"][0].clone();
    assert_eq!(module_doc["module"], module);
    module_doc
}

/// What binutils' c++filt (the host compiler's) prints for `symbol`, with `flags`.
fn cxxfilt(flags: &[&str], symbol: &str) -> String {
    let out = std::process::Command::new("c++filt")
        .args(flags)
        .arg(symbol)
        .output()
        .expect("c++filt (binutils) runs");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The kernels of a `kernels --json` module listing, as the manifest records them.
fn listed_functions(kernels: &[serde_json::Value]) -> Vec<cuda_aot::Function> {
    serde_json::from_value(serde_json::Value::Array(
        kernels
            .iter()
            .map(|k| {
                serde_json::json!({"symbol": k["symbol"], "name": k["name"],
                        "signature": k["cpp_demangle"], "abi": k["abi"]})
            })
            .collect(),
    ))
    .unwrap()
}

/// Each spelling finds exactly the kernel of `symbol` among `functions`, through the
/// resolver the build and the runtime use.
fn each_finds(functions: &[cuda_aot::Function], symbol: &str, spellings: &[&str]) {
    for spelling in spellings {
        let found = cuda_aot::lookup::resolve_function(functions, spelling)
            .unwrap_or_else(|c| panic!("{spelling}: {} candidates", c.len()));
        assert_eq!(found.symbol.as_str(), symbol, "{spelling}");
    }
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
    let module = kernels_json(&ws, "names/foreign/foreign.toml", "foreign_ntt");
    let kernels = module["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 4, "{module}");
    let manifest = listed_functions(kernels);
    let mut differing = 0;
    for k in kernels {
        let symbol = k["symbol"].as_str().unwrap();
        let Some(ours) = k["cpp_demangle"].as_str() else {
            assert!(!symbol.starts_with("_Z"), "{k}");
            continue;
        };
        let theirs = cxxfilt(&[], symbol);
        // c++filt prints the return type first.
        assert_eq!(
            format!("void {}", k["cxxfilt"].as_str().unwrap()),
            theirs,
            "{symbol}"
        );
        differing += usize::from(theirs != format!("void {ours}"));
        each_finds(
            &manifest,
            symbol,
            &[symbol, ours, theirs.as_str(), &theirs["void ".len()..]],
        );
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

/// Issue 44, item 3: every spelling of a kernel's name resolves, whatever its template
/// arguments. `foreign_msm_templates` (kernels/foreign/src/msm_templates.cu) has a kernel per
/// kind nvcc mangles: a null `const M*` with `M` a nested type of `F` (cpp_demangle misprints
/// it `(b12::fp2_t const::mem_t*)0`), addresses of a variable, a data member, a const member
/// function and a function template, a null pointer to a member, `nullptr`, enums, negative,
/// 64-bit and 128-bit literals, bool and chars, nested templates and a template template
/// parameter. Its spec names some by c++filt's spelling and some by cpp_demangle's, so the
/// build resolves both. For every kernel: the listing's c++filt spelling is exactly what
/// binutils' c++filt prints (and its name what `c++filt -p` prints), and c++filt's spelling
/// with and without `void` and parameters, cpp_demangle's with and without parameters, and
/// the symbol each find exactly that kernel through the resolver the build and the runtime
/// use.
#[test]
fn issue_44_every_spelling_of_every_template_argument_kind_finds_its_kernel() {
    let ws = Ws::foreign("msm").with_spec("msm/foreign/templates.toml");
    let module = kernels_json(&ws, "msm/foreign/templates.toml", "foreign_msm_templates");
    let kernels = module["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 14, "{module}");
    let manifest = listed_functions(kernels);
    let mut differing = Vec::new();
    for (k, f) in kernels.iter().zip(&manifest) {
        let symbol = k["symbol"].as_str().unwrap();
        let ours = k["cxxfilt"].as_str().unwrap();
        let theirs = cxxfilt(&[], symbol);
        // Every kernel here is a template: c++filt prints its `void`.
        assert_eq!(format!("void {ours}"), theirs, "{symbol}");
        let bare = cxxfilt(&["-p"], symbol);
        assert_eq!(f.cxxfilt().unwrap().name, bare, "{symbol}");
        let recorded = k["cpp_demangle"].as_str().unwrap();
        if recorded != ours {
            differing.push(symbol);
        }
        each_finds(
            &manifest,
            symbol,
            &[
                &theirs,
                ours,
                &bare,
                recorded,
                k["name"].as_str().unwrap(),
                symbol,
            ],
        );
    }
    // Eight kernels are spelt two ways: five misprinted, three with literals or nullptr.
    assert_eq!(differing.len(), 8, "{differing:?}");
    // The manifest records cpp_demangle's text as earlier builds did, misprint included, so
    // an old manifest is the same and names copied from it still resolve.
    let null = kernels
        .iter()
        .find(|k| k["symbol"] == "_ZN3msm10load_basesIN3b125fp2_tENS2_5mem_tELPKS3_0EEEvPjPKT0_j")
        .unwrap();
    assert_eq!(
        null["name"],
        "msm::load_bases<b12::fp2_t, b12::fp2_t::mem_t, (b12::fp2_t const::mem_t*)0>"
    );
    // `build` resolves the spec's entry points, written both ways, to all fourteen (on a
    // cache hit too).
    let run = ws.build(&["--target", "sm_90"]).ok();
    assert_eq!(run.cached(), set(&["foreign_msm_templates"], &["sm_90"]));
}
