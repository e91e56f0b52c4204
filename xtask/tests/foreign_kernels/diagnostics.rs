//! What a build reports besides its outputs: nvcc's warnings and per-kernel register spills,
//! on a cache hit too.

use crate::common as common_consts;
use crate::common::Ws;

/// Issue 19, item 3: nvcc's warnings reach the user, once per (module, target), on a cache
/// hit too (kept with the cache entry), counted in the summary and in the JSON report.
/// (They were swallowed: a successful nvcc run's output was dropped.)
#[test]
fn issue_19_nvcc_warnings_are_shown_and_shown_again_on_a_cache_hit() {
    let ws = Ws::new();
    ws.write(
        "src/gamma.cu",
        &format!(
            "{}\n__device__ unsigned int gamma_unused() {{ int never_used = 1; return 0u; }}\n",
            common_consts::GAMMA_CU
        ),
    );
    let args = ["--module", "gamma", "--target", "sm_90"];
    for (pass, cached) in [(0, false), (1, true)] {
        let run = ws.build(&args).ok();
        let e = &run.stderr;
        assert!(
            e.contains("warning: 1 nvcc warning(s) for module `gamma` target sm_90")
                && e.contains("never_used"),
            "pass {pass}: {e}"
        );
        assert_eq!(
            e.matches("nvcc warning(s) for").count(),
            1,
            "once per job: {e}"
        );
        assert!(
            run.stdout.contains("1 with nvcc warnings"),
            "{}",
            run.stdout
        );
        let report = run.report.as_ref().unwrap();
        let m = &report["modules"][0];
        assert_eq!(m["cached"], cached, "pass {pass}: {report}");
        let lines = m["warnings"].as_array().unwrap();
        assert!(
            lines
                .iter()
                .any(|l| l.as_str().unwrap().contains("warning #177-D")),
            "{report}"
        );
        assert_eq!(report["warned"], 1);
    }
    // A module without warnings reports none.
    let run = ws.build(&["--module", "beta", "--target", "sm_90"]).ok();
    assert!(
        !run.stderr.contains("nvcc warning(s) for"),
        "{}",
        run.stderr
    );
    assert_eq!(run.report.as_ref().unwrap()["warned"], 0);
    // The spec turns chosen warnings into errors (an identity flag: the cached blob of the
    // warning build is not reused), and the build fails naming the module and the warning.
    let spec = std::fs::read_to_string(ws.path("spec/release.toml")).unwrap();
    ws.write(
        "spec/release.toml",
        &spec.replacen(
            "name = \"gamma\"\n",
            "name = \"gamma\"\nwarnings_as_errors = [177]\n",
            1,
        ),
    );
    let run = ws.build(&args).failed();
    assert!(
        run.stderr
            .contains("module `gamma` target sm_90: nvcc failed")
            && run
                .stderr
                .contains("variable \"never_used\" was declared but never referenced")
            && run.stderr.contains("--diag-error=177"),
        "{}",
        run.stderr
    );
}

/// Issue 19, item 3: a kernel that spills registers to local memory is reported per kernel
/// (ptxas `--warn-on-spills`, which every cubin job passes): in the output, with its
/// demangled name and the bytes, again on a cache hit, and in the JSON report's `spills`.
/// A kernel that does not spill is not listed.
#[test]
fn issue_19_register_spills_are_reported_per_kernel() {
    let ws = Ws::new();
    // 64 live 8-byte values per thread under a 32-register cap: ptxas must spill.
    ws.write(
        "src/gamma.cu",
        &format!(
            "{}\nnamespace hash {{ template <int R> __global__ void mix(unsigned long long* x, int n) {{\n\
             unsigned long long a[64];\n\
             #pragma unroll\n for (int i = 0; i < 64; i++) a[i] = x[i * n + threadIdx.x];\n\
             unsigned long long s = 0;\n\
             #pragma unroll\n for (int r = 0; r < R; r++)\n\
             #pragma unroll\n for (int i = 0; i < 64; i++) {{ a[i] = a[i] * a[(i + r) & 63] + s; s ^= a[i]; }}\n\
             #pragma unroll\n for (int i = 0; i < 64; i++) x[i * n + threadIdx.x] = a[i];\n\
             }}\n template __global__ void mix<8>(unsigned long long*, int); }}\n",
            common_consts::GAMMA_CU
        ),
    );
    let spec = std::fs::read_to_string(ws.path("spec/release.toml")).unwrap();
    ws.write(
        "spec/release.toml",
        &spec.replace(
            "entry_points = [\"gamma_twice\"]",
            "entry_points = [\"gamma_twice\", \"hash::mix<8>\"]\nnvcc_flags = [\"-maxrregcount=32\"]",
        ),
    );
    let args = ["--module", "gamma", "--target", "sm_90"];
    for cached in [false, true] {
        let run = ws.build(&args).ok();
        let line = run
            .stdout
            .lines()
            .find(|l| l.starts_with("spills: gamma sm_90: kernel hash::mix<8>"))
            .unwrap_or_else(|| panic!("cached {cached}: {}", run.stdout));
        assert!(
            line.contains("bytes stores") && line.contains("bytes loads"),
            "{line}"
        );
        assert_eq!(run.stdout.matches("spills: ").count(), 1, "{}", run.stdout);
        let report = run.report.as_ref().unwrap();
        let m = &report["modules"][0];
        assert_eq!(m["cached"], cached);
        let spills = m["spills"].as_array().unwrap();
        assert_eq!(spills.len(), 1, "{report}");
        assert_eq!(spills[0]["function"], "_ZN4hash3mixILi8EEEvPyi");
        assert_eq!(spills[0]["kernel"], true);
        assert!(spills[0]["stores"].as_u64().unwrap() > 0);
        assert!(spills[0]["loads"].as_u64().unwrap() > 0);
    }
}
