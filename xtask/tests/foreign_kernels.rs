//! Foreign-style kernels (issue 9): the corpus in `kernels/foreign` — C++ template kernels
//! over two fields, device `assert()`, headers in two trees outside the sources folder, one
//! source in two define variants — built by the real nvcc for cubin and PTX, from a spec
//! outside the sources folder, in a copy of the corpus outside the repository.

mod common;

use common as common_consts;
use common::{Ws, set};
use cuda_aot::{Kind, Manifest};

fn manifest(ws: &Ws, rel: &str) -> Manifest {
    let bytes = std::fs::read(ws.path(rel)).unwrap();
    cuda_aot::json::parse(&bytes, 1 << 20, rel).unwrap()
}

const MODULES: [&str; 4] = [
    "foreign_fields",
    "foreign_poly_gl",
    "foreign_poly_bb",
    "foreign_poseidon",
];

#[test]
fn the_corpus_builds_for_cubin_and_ptx_with_demangled_entry_points() {
    let ws = Ws::foreign("a");
    let run = ws
        .build(&["--target", "sm_90", "--target", "compute_90"])
        .ok();
    // The three-file module has no PTX: it gets sm_90 only.
    let mut want = set(&MODULES, &["sm_90", "compute_90"]);
    want.extend(set(&["big_params"], &["sm_90", "compute_90"]));
    want.insert("foreign_ntt sm_90".to_string());
    want.insert("foreign_ntt_lto sm_90".to_string());
    assert_eq!(run.compiled(), want);
    for module in MODULES {
        let cubin = manifest(&ws, &format!("out/{module}/sm_90.cubin.manifest.json"));
        let ptx = manifest(&ws, &format!("out/{module}/compute_90.ptx.manifest.json"));
        assert_eq!(ptx.identity.kind, Kind::Ptx);
        for m in [&cubin, &ptx] {
            // Device assert() imports __assertfail: never an entry point, in either kind.
            assert!(
                m.functions
                    .iter()
                    .all(|f| !f.symbol.as_str().contains("assert")),
                "{module}: {:?}",
                m.functions
            );
            // Include folders are recorded as written, relative to the spec file.
            assert_eq!(
                m.identity.include_dirs,
                ["include", "third_party/fields/include"]
            );
            let blob = std::fs::read(ws.path(&format!(
                "out/{module}/{}.{}",
                m.identity.sm, m.identity.kind
            )))
            .unwrap();
            cuda_aot::content::check(m, &blob).unwrap();
        }
        // The cubin and the PTX agree on the kernel set and every parameter layout.
        let layout = |m: &Manifest| {
            let mut v: Vec<(String, String, String, u32)> = m
                .functions
                .iter()
                .map(|f| {
                    (
                        f.symbol.to_string(),
                        f.name.to_string(),
                        f.abi.describe_params(),
                        f.abi.param_bytes,
                    )
                })
                .collect();
            v.sort();
            v
        };
        assert_eq!(layout(&cubin), layout(&ptx), "{module}");
    }
    // The cubin's imports show what assert() brought in: it is there, just not a kernel.
    let blob = std::fs::read(ws.path("out/foreign_fields/sm_90.cubin")).unwrap();
    let info = cuda_aot::elf::inspect(&blob).unwrap();
    assert_eq!(info.imports, ["__assertfail"]);
    assert_eq!(info.kernels.len(), 6);

    let fields = manifest(&ws, "out/foreign_fields/sm_90.cubin.manifest.json");
    let by_name = |n: &str| {
        fields
            .functions
            .iter()
            .find(|f| f.name.as_str() == n)
            .unwrap_or_else(|| panic!("no {n}"))
    };
    let axpy_bb = by_name("fields::vec_axpy<bb31_t>");
    assert_eq!(
        axpy_bb.symbol.as_str(),
        "_ZN6fields8vec_axpyI6bb31_tEEvPT_S2_PKS2_j"
    );
    assert_eq!(
        axpy_bb.signature.as_ref().unwrap().as_str(),
        "fields::vec_axpy<bb31_t>(bb31_t*, bb31_t, bb31_t const*, unsigned int)"
    );
    // alpha by value: 4 bytes for BabyBear, 8 for Goldilocks; the signed ABI says so.
    assert_eq!(axpy_bb.abi.describe_params(), "0:8 8:4 16:8 24:4");
    let axpy_gl = by_name("fields::vec_axpy<gl64_t>");
    assert_eq!(axpy_gl.abi.describe_params(), "0:8 8:8 16:8 24:4");
    assert_eq!(axpy_gl.abi.max_threads, Some(256));
    assert!(axpy_gl.abi.registers.is_some_and(|r| r > 0));

    // The two define variants of poly.cu: their own kernel sets and names.
    let names = |m: &str| -> Vec<String> {
        let mut v: Vec<String> = manifest(&ws, &format!("out/{m}/sm_90.cubin.manifest.json"))
            .functions
            .iter()
            .map(|f| f.name.to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names("foreign_poly_gl"),
        ["poly::derivative<gl64_t>", "poly::eval<gl64_t>"]
    );
    assert_eq!(names("foreign_poly_bb"), ["poly::eval<bb31_t>"]);

    // A header of the third-party tree changes: exactly the modules that include it rebuild
    // (the three-file NTT module's files include it through its context header).
    let h = "a/foreign/third_party/fields/include/fields/bb31_t.cuh";
    ws.write(h, &(ws.read(h) + "// edited\n"));
    let run = ws.build(&["--target", "sm_90"]).ok();
    assert_eq!(
        run.compiled(),
        set(
            &[
                "foreign_fields",
                "foreign_poly_bb",
                "foreign_ntt",
                "foreign_ntt_lto"
            ],
            &["sm_90"]
        )
    );
    assert_eq!(
        run.cached(),
        set(
            &["foreign_poly_gl", "foreign_poseidon", "big_params"],
            &["sm_90"]
        )
    );
}

#[test]
fn the_identity_is_the_same_from_two_checkouts_at_different_paths() {
    let a = Ws::foreign("one");
    let b = Ws::foreign("two/levels/deeper");
    let args = ["--target", "sm_90", "--module", "foreign_poly_bb"];
    let ra = a.build(&args).ok();
    let rb = b.build(&args).ok();
    assert_eq!(ra.nvcc_runs(), 1);
    assert_eq!(
        rb.nvcc_runs(),
        1,
        "each checkout compiles with its own cache"
    );
    assert_eq!(
        ra.identity("foreign_poly_bb", "sm_90"),
        rb.identity("foreign_poly_bb", "sm_90")
    );
    assert_eq!(
        ra.digest("foreign_poly_bb", "sm_90"),
        rb.digest("foreign_poly_bb", "sm_90")
    );
    // No path of either machine layout appears in the signed identity.
    for ws in [&a, &b] {
        let text =
            std::fs::read_to_string(ws.path("out/foreign_poly_bb/sm_90.cubin.manifest.json"))
                .unwrap();
        let root = ws.dir.path().canonicalize().unwrap();
        assert!(!text.contains(&*root.to_string_lossy()), "{text}");
        assert!(!text.contains(&*ws.dir.path().to_string_lossy()), "{text}");
    }
}

#[test]
fn include_dir_mistakes_are_refused_before_nvcc_runs() {
    let ws = Ws::foreign("c");
    // A missing folder: refused when the spec loads, naming the folder.
    ws.edit_spec(|s| s.replace("\"third_party/fields/include\"]", "\"third_party/gone\"]"));
    let run = ws.build(&["--target", "sm_90"]).failed();
    assert!(
        run.stderr.contains("build.include_dirs")
            && run.stderr.contains("include folder `third_party/gone`"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("nvcc failed"), "{}", run.stderr);
    assert!(!ws.path("out").exists() && !ws.path("cache").exists());
    // An absolute folder would put this machine's path into every identity: refused.
    let abs = ws.path("c/foreign/third_party/fields/include");
    ws.edit_spec(|s| {
        s.replace(
            "\"third_party/gone\"]",
            &format!("{:?}]", abs.display().to_string()),
        )
    });
    let run = ws.build(&["--target", "sm_90"]).failed();
    assert!(
        run.stderr.contains("relative to the spec file"),
        "{}",
        run.stderr
    );
    // So would -I in nvcc_flags.
    ws.edit_spec(|s| {
        s.replace(
            &format!("{:?}]", abs.display().to_string()),
            "\"third_party/fields/include\"]",
        )
        .replace("\"-O3\",", &format!("\"-O3\", \"-I{}\",", abs.display()))
    });
    let run = ws.build(&["--target", "sm_90"]).failed();
    assert!(run.stderr.contains("include_dirs"), "{}", run.stderr);
    // Without the third-party folder, the missing header's advice names what was searched.
    ws.edit_spec(|s| {
        s.replace(&format!("\"-I{}\",", abs.display()), "")
            .replace(", \"third_party/fields/include\"]", "]")
    });
    let run = ws
        .build(&["--target", "sm_90", "--module", "foreign_poly_bb"])
        .failed();
    let e = &run.stderr;
    assert!(e.contains("header `fields/bb31_t.cuh` not found"), "{e}");
    assert!(e.contains("(include_dirs `include`)"), "{e}");
    assert!(
        e.contains("Fix: add the folder that holds `fields/bb31_t.cuh` to include_dirs"),
        "{e}"
    );
}

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

#[test]
fn a_family_target_builds_and_the_manifest_records_it() {
    let ws = Ws::foreign("e");
    ws.edit_spec(|s| {
        s.replace(
            "targets = [\"sm_80\", \"sm_90\", \"sm_120\"]",
            "targets = [\"sm_90\", \"sm_100f\"]",
        )
    });
    let run = ws.build(&["--module", "foreign_poly_bb"]).ok();
    assert_eq!(
        run.compiled(),
        set(&["foreign_poly_bb"], &["sm_90", "sm_100f", "compute_90"])
    );
    let m = manifest(&ws, "out/foreign_poly_bb/sm_100f.cubin.manifest.json");
    assert_eq!(m.identity.sm.to_string(), "sm_100f");
    assert!(m.identity.flags.contains(&"-arch=sm_100f".to_string()));
    let blob = std::fs::read(ws.path("out/foreign_poly_bb/sm_100f.cubin")).unwrap();
    // The ELF header says sm_100: only the signed manifest knows it is a family build.
    let info = cuda_aot::elf::inspect(&blob).unwrap();
    assert_eq!(info.target().to_string(), "sm_100");
    cuda_aot::content::check(&m, &blob).unwrap();
    assert!(m.identity.sm.is_family_for(10, 3) && !m.identity.sm.is_exact_for(10, 0));
}

/// Issue 19, item 5: kernels taking structs of 4 KiB, 8 KiB followed by scalars, and
/// 32,000 bytes by value get their exact parameter layout signed, on sm_80 and sm_90
/// (nvcc records parameters past 4 KiB in a second attribute form, which the build used
/// to miss and sign `params: []`). The sizes and offsets are the source's static_asserts.
#[test]
fn issue_19_large_by_value_parameters_get_their_exact_layout() {
    let ws = Ws::foreign("big");
    // sm_120 marks pointers in the second form's size word: read as well.
    ws.build(&["--module", "big_params"]).ok();
    let layout = |m: &Manifest, kernel: &str| {
        let f = m
            .functions
            .iter()
            .find(|f| f.symbol.as_str() == kernel)
            .unwrap_or_else(|| panic!("{kernel} in {:?}", m.functions));
        (
            f.abi
                .params
                .iter()
                .map(|p| (p.offset, p.size))
                .collect::<Vec<_>>(),
            f.abi.param_bytes,
        )
    };
    for sm in ["sm_80", "sm_90", "sm_120"] {
        let m = manifest(&ws, &format!("out/big_params/{sm}.cubin.manifest.json"));
        // RoundConstants (4,096), a pointer, an int.
        assert_eq!(
            layout(&m, "add_round_constants"),
            (vec![(0, 4096), (4096, 8), (4104, 4)], 4108),
            "{sm}"
        );
        // A pointer, StageTwiddles (8,196), then the scalars after it.
        assert_eq!(
            layout(&m, "twiddle_stage"),
            (vec![(0, 8), (8, 8196), (8204, 4), (8208, 1)], 8209),
            "{sm}"
        );
        // LeafBlock (32,000) and a pointer: 32,008 of the 32,764 bytes allowed.
        assert_eq!(
            layout(&m, "sum_leaf_block"),
            (vec![(0, 32000), (32000, 8)], 32008),
            "{sm}"
        );
    }
}

/// Issue 19, item 2: a module whose source declares an `extern __constant__` table that no
/// file of the module defines (nvcc's #20044-D: a private zero-filled copy) fails the build,
/// naming the module, the target, the symbol and where it is declared, with advice; nothing
/// reaches the output folder or the cache. (It used to build, and be signed, silently.)
#[test]
fn issue_19_an_extern_table_no_file_of_the_module_defines_is_refused() {
    let ws = Ws::foreign("ext").with_spec("ext/foreign/forgotten_table.toml");
    let run = ws.build(&["--module", "ntt_stage"]).failed();
    let e = &run.stderr;
    assert!(
        e.contains("module `ntt_stage` target sm_")
            && e.contains("`ntt_twiddles` (declared extern at ntt_stage.cu(7))")
            && e.contains("zero-filled")
            && e.contains("Fix: add the file that defines `ntt_twiddles` to the module: `source = [\"ntt_stage.cu\", \"<defining file>.cu\"]`"),
        "{e}"
    );
    assert!(ws.snapshot("out").is_empty(), "nothing written");
    // What the advice says works: with the defining file listed, the module is compiled as
    // relocatable device code and device-linked, and the table is the defined one.
    let spec = std::fs::read_to_string(ws.path("ext/foreign/forgotten_table.toml")).unwrap();
    ws.write(
        "ext/foreign/forgotten_table.toml",
        &spec.replace(
            "source = \"ntt_stage.cu\"",
            "source = [\"ntt_stage.cu\", \"ntt_tables.cu\"]",
        ),
    );
    ws.build(&["--module", "ntt_stage"]).ok();
    let m = manifest(&ws, "out/ntt_stage/sm_90.cubin.manifest.json");
    assert_eq!(m.identity.sources, ["ntt_stage.cu", "ntt_tables.cu"]);
}

/// Issue 19, items 1 and 2: a module of several files whose device link finds no definition
/// of an `extern` table fails the build, naming the module, the target, each symbol (by its
/// C++ name) and the file that uses it, with advice; nothing is written.
#[test]
fn issue_19_a_linked_module_that_forgets_its_defining_file_is_refused() {
    let ws = Ws::foreign("fgt").with_spec("fgt/foreign/forgotten_table.toml");
    let run = ws
        .build(&["--module", "ntt_forgot", "--target", "sm_90"])
        .failed();
    let e = &run.stderr;
    assert!(
        e.contains("module `ntt_forgot` target sm_90")
            && e.contains("`ntt::twiddles` (declared extern and used in ntt_kernels.cu)")
            && e.contains("`ntt::scale` (declared extern and used in ntt_kernels.cu)")
            && e.contains("the device link of ntt_kernels.cu + ntt_field.cu failed")
            && e.contains("Undefined reference to")
            && e.contains("Fix: add the file that defines `ntt::twiddles`"),
        "{e}"
    );
    assert!(ws.snapshot("out").is_empty(), "nothing written");
    assert!(
        !ws.path("cache/objects").exists()
            || std::fs::read_dir(ws.path("cache/objects")).unwrap().count() == 0,
        "nothing cached"
    );
}

/// Issue 19, item 1: the three-file module of the corpus (tables defined in one file,
/// field code in another, kernels in a third) is compiled as relocatable device code and
/// device-linked into one cubin per SM; its identity names every file and the link; a
/// rebuild runs no nvcc; editing one file recompiles that file and relinks; a header every
/// file includes recompiles all three; two checkouts build the same bytes; and PTX, which a
/// linked module has none of, is refused with a reason.
#[test]
fn issue_19_a_module_of_three_files_is_device_linked_and_relinks_only_what_changed() {
    let ws = Ws::foreign("lnk");
    let args = [
        "--module",
        "foreign_ntt",
        "--target",
        "sm_80",
        "--target",
        "sm_90",
    ];
    let run = ws.build(&args).ok();
    assert_eq!(run.compiled(), set(&["foreign_ntt"], &["sm_80", "sm_90"]));
    // Per target: three files compiled, one link.
    assert_eq!(run.nvcc_runs(), 2 * (3 + 1));
    for sm in ["sm_80", "sm_90"] {
        let m = manifest(&ws, &format!("out/foreign_ntt/{sm}.cubin.manifest.json"));
        let id = &m.identity;
        assert_eq!(
            id.sources,
            ["ntt_kernels.cu", "ntt_context.cu", "ntt_field.cu"]
        );
        assert_eq!(id.link_flags, [format!("--arch={sm}")]);
        assert_eq!(
            id.flags[..3],
            ["-cubin", "-rdc=true", &format!("-arch={sm}")]
        );
        let mut kernels: Vec<&str> = m.functions.iter().map(|f| f.symbol.as_str()).collect();
        kernels.sort();
        assert_eq!(
            kernels,
            [
                "_ZN3ntt11bit_reverseILj10EEEvP6bb31_t",
                "ntt_dit_stage",
                "ntt_pow",
                "ntt_scale"
            ]
        );
        let blob = std::fs::read(ws.path(&format!("out/foreign_ntt/{sm}.cubin"))).unwrap();
        cuda_aot::content::check(&m, &blob).unwrap();
        // Linked: nothing left undefined (the tables and the field's `mul` were resolved).
        assert_eq!(
            cuda_aot::elf::undefined_symbols(&blob).unwrap(),
            Vec::<String>::new()
        );
    }
    let first = manifest(&ws, "out/foreign_ntt/sm_90.cubin.manifest.json");

    let run = ws.build(&args).ok();
    assert_eq!(run.cached(), set(&["foreign_ntt"], &["sm_80", "sm_90"]));
    assert_eq!(run.nvcc_runs(), 0);

    // One file changes: that file compiles again, the other two come from the cache.
    let field = std::fs::read_to_string(ws.path("lnk/foreign/src/ntt_field.cu")).unwrap();
    ws.write(
        "lnk/foreign/src/ntt_field.cu",
        &format!("{field}\n__device__ uint32_t ntt_field_version() {{ return 2u; }}\n"),
    );
    let run = ws.build(&[&args[..], &["--explain"]].concat()).ok();
    assert_eq!(run.compiled(), set(&["foreign_ntt"], &["sm_80", "sm_90"]));
    assert_eq!(run.nvcc_runs(), 2 * (1 + 1), "{}", run.stdout);
    assert!(
        run.stdout.contains("source `ntt_field.cu` changed"),
        "{}",
        run.stdout
    );
    let edited = manifest(&ws, "out/foreign_ntt/sm_90.cubin.manifest.json");
    assert_ne!(edited.identity.source_digest, first.identity.source_digest);

    // The header all three include: every file compiles again.
    let header =
        std::fs::read_to_string(ws.path("lnk/foreign/include/foreign/ntt_context.cuh")).unwrap();
    ws.write(
        "lnk/foreign/include/foreign/ntt_context.cuh",
        &format!("{header}\n// edited\n"),
    );
    let run = ws.build(&args).ok();
    assert_eq!(run.nvcc_runs(), 2 * (3 + 1));

    // Back to the first inputs: module and units all come from the cache.
    ws.write("lnk/foreign/src/ntt_field.cu", &field);
    ws.write("lnk/foreign/include/foreign/ntt_context.cuh", &header);
    let run = ws.build(&args).ok();
    assert_eq!(run.nvcc_runs(), 0);
    assert_eq!(
        manifest(&ws, "out/foreign_ntt/sm_90.cubin.manifest.json"),
        first
    );

    // Another checkout, another cache: the same bytes.
    let other = Ws::foreign("lnk2");
    other
        .build(&["--module", "foreign_ntt", "--target", "sm_90"])
        .ok();
    assert_eq!(
        manifest(&other, "out/foreign_ntt/sm_90.cubin.manifest.json").module_digest,
        first.module_digest
    );

    // No PTX for a linked module: named with --module, a compute target is an error.
    let run = ws
        .build(&["--module", "foreign_ntt", "--target", "compute_90"])
        .failed();
    assert!(
        run.stderr.contains("module `foreign_ntt` lists 3 sources")
            && run.stderr.contains("no PTX form"),
        "{}",
        run.stderr
    );
}

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

/// Issue 19, item 7: `-lineinfo` builds are byte-identical across checkouts and file times
/// (nvcc alone embeds the absolute working folder and each source's mtime): the build
/// compiles to PTX, makes its `.file` paths relative to the sources folder and assembles
/// it where no such path exists. The line table names the sources as the manifest does;
/// a one-file module, its PTX, and a three-file linked module all reproduce.
#[test]
fn issue_19_line_info_builds_are_reproducible_across_checkouts_and_file_times() {
    let with_line_info = |ws: &Ws, prefix: &str| {
        let spec = format!("{prefix}/foreign/foreign.toml");
        let text = std::fs::read_to_string(ws.path(&spec)).unwrap();
        // (Line info and link-time optimisation do not go together: LTO off here.)
        ws.write(
            &spec,
            &text
                .replace(
                    "\"-DFOREIGN_BLOCK=256\"]",
                    "\"-DFOREIGN_BLOCK=256\", \"-lineinfo\"]",
                )
                .replace(
                    "link_time_optimisation = true",
                    "link_time_optimisation = false",
                ),
        );
    };
    let a = Ws::foreign("la");
    with_line_info(&a, "la");
    // The second checkout lies deeper, and its sources carry other modification times.
    let b = Ws::foreign("lb/deeper/still");
    with_line_info(&b, "lb/deeper/still");
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    for f in std::fs::read_dir(b.path("lb/deeper/still/foreign/src")).unwrap() {
        let f = std::fs::File::options()
            .append(true)
            .open(f.unwrap().path())
            .unwrap();
        f.set_modified(old).unwrap();
    }
    let builds = [
        ("foreign_fields", "sm_90"),
        ("foreign_fields", "compute_90"),
        ("foreign_ntt", "sm_90"),
    ];
    // Each build's outputs are read before the next (a build's output folder holds only
    // what it built).
    let mut seen = Vec::new();
    for ws in [&a, &b] {
        for (module, target) in builds {
            let runs = ws
                .build(&["--module", module, "--target", target])
                .ok()
                .nvcc_runs();
            // A cubin with line info: compile to PTX, then assemble (the linked module:
            // per file, then the link); PTX: one run.
            let want = match (module, target) {
                ("foreign_ntt", _) => 3 * 2 + 1,
                (_, "sm_90") => 2,
                _ => 1,
            };
            assert_eq!(runs, want, "{module} {target}");
            let kind = if target.starts_with("sm_") {
                "cubin"
            } else {
                "ptx"
            };
            let rel = format!("out/{module}/{target}.{kind}");
            let m = manifest(ws, &format!("{rel}.manifest.json"));
            assert!(m.identity.flags.iter().any(|f| f == "-lineinfo"));
            let blob = std::fs::read(ws.path(&rel)).unwrap();
            let text = String::from_utf8_lossy(&blob);
            let root = ws.path("").display().to_string();
            assert!(
                !text.contains(root.trim_end_matches('/')),
                "{module} {target}: carries {root}"
            );
            // The line table names the files relative to the spec file, as the spec names
            // its folders (`src`, `include`).
            let file = if module == "foreign_ntt" {
                "ntt_kernels.cu"
            } else {
                "field_ops.cu"
            };
            assert!(text.contains(file), "{module} {target}");
            // (A cubin's line table keeps folders and names apart.)
            assert!(
                text.contains("include/foreign")
                    && text.contains("launch.cuh")
                    && !text.contains("../include"),
                "{module} {target}"
            );
            if kind == "ptx" {
                assert!(
                    text.contains(".file\t1 \"src/field_ops.cu\"")
                        && text.contains("\"include/foreign/launch.cuh\""),
                    "{text}"
                );
            }
            if kind == "cubin" {
                assert!(
                    text.contains(".debug_line"),
                    "{module} {target}: no line table"
                );
            }
            seen.push(m.module_digest);
        }
    }
    let (first, second) = seen.split_at(builds.len());
    assert_eq!(first, second, "the two checkouts built other bytes");
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
        assert!(spills[0]["stores"].as_u64().unwrap() > 0);
        assert!(spills[0]["loads"].as_u64().unwrap() > 0);
    }
}

/// Issue 19, item 4: the manifests of `foreign_poseidon` (sm_80 and sm_90 cubins, the
/// compute_90 PTX) sign exactly the globals `poseidon_consts.cu` defines: each one's
/// symbol, demangled name, `sizeof`, memory space and whether it has a non-zero initial
/// value; schema v2. The content check passes on each blob.
#[test]
fn issue_19_the_manifests_sign_every_device_global_with_its_size_and_space() {
    use cuda_aot::GlobalSpace::{Constant, Device};
    let ws = Ws::foreign("g");
    let run = ws
        .build(&[
            "--module",
            "foreign_poseidon",
            "--target",
            "sm_80",
            "--target",
            "sm_90",
            "--target",
            "compute_90",
        ])
        .ok();
    assert_eq!(
        run.compiled(),
        set(&["foreign_poseidon"], &["sm_80", "sm_90", "compute_90"])
    );
    let want = [
        (
            "_ZN8poseidon15ROUND_CONSTANTSE",
            "poseidon::ROUND_CONSTANTS",
            8 * 8 * 4,
            Constant,
            false,
        ),
        (
            "_ZN8poseidon3MDSE",
            "poseidon::MDS",
            8 * 8 * 4,
            Constant,
            false,
        ),
        ("_ZN8poseidon6PARAMSE", "poseidon::PARAMS", 16, Device, true),
        (
            "_ZN8poseidon12PERMUTATIONSE",
            "poseidon::PERMUTATIONS",
            8,
            Device,
            false,
        ),
        (
            "_ZN8poseidon7SCRATCHE",
            "poseidon::SCRATCH",
            1024 * 4,
            Device,
            false,
        ),
    ];
    let mut want: Vec<_> = want
        .iter()
        .map(|(s, n, size, space, init)| (s.to_string(), n.to_string(), *size, *space, *init))
        .collect();
    want.sort();
    for file in ["sm_80.cubin", "sm_90.cubin", "compute_90.ptx"] {
        let m = manifest(&ws, &format!("out/foreign_poseidon/{file}.manifest.json"));
        assert_eq!(m.schema, Manifest::SCHEMA, "{file}");
        assert_eq!(m.check_schema(), Ok(()), "{file}");
        let mut got: Vec<_> = m
            .globals
            .as_ref()
            .expect("v2 manifests list globals")
            .iter()
            .map(|g| {
                (
                    g.symbol.to_string(),
                    g.name.to_string(),
                    g.size,
                    g.space,
                    g.initialised,
                )
            })
            .collect();
        got.sort();
        assert_eq!(got, want, "{file}");
        let blob = std::fs::read(ws.path(&format!("out/foreign_poseidon/{file}"))).unwrap();
        cuda_aot::content::check(&m, &blob).unwrap();
    }
    // The other modules of the corpus define none: an empty list, still signed.
    let fields = ws
        .build(&["--module", "foreign_fields", "--target", "sm_90"])
        .ok();
    assert_eq!(fields.compiled().len(), 1);
    let m = manifest(&ws, "out/foreign_fields/sm_90.cubin.manifest.json");
    assert_eq!(m.globals, Some(Vec::new()));
}

/// Issue 19, item 4: a `__managed__` variable fails the build, naming the module, the
/// target and the variable, with advice: managed memory is not part of a signed module.
/// Nothing is written.
#[test]
fn issue_19_a_managed_variable_is_refused_naming_it() {
    let ws = Ws::new();
    ws.write(
        "src/gamma.cu",
        &format!(
            "{}\n__device__ __managed__ unsigned int gamma_total;\n",
            common_consts::GAMMA_CU
        ),
    );
    let run = ws
        .build(&["--module", "gamma", "--target", "sm_90"])
        .failed();
    let e = &run.stderr;
    assert!(
        e.contains("module `gamma` target sm_90")
            && e.contains("`gamma_total` is a __managed__ variable")
            && e.contains("not supported in a signed module")
            && e.contains("Fix: declare `gamma_total` __device__"),
        "{e}"
    );
    assert!(ws.snapshot("out").is_empty(), "nothing written");
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

/// Issue 19, item 1: link-time optimisation (`link_time_optimisation = true`): each file of
/// `foreign_ntt_lto` is compiled to LTO IR (a fatbin), and nvlink optimises across them
/// with the toolkit's libnvvm: the field multiply `ntt::mul`, a separate function in the
/// plain link, is inlined away. The identity records the LTO flags and libnvvm is an input
/// (its digest is in the source digest); editing one file recompiles it and relinks; two
/// checkouts build the same bytes. A one-file module, or line info, with LTO is refused.
#[test]
fn issue_19_link_time_optimisation_links_lto_ir_and_inlines_across_files() {
    let ws = Ws::foreign("lto");
    let args = [
        "--module",
        "foreign_ntt_lto",
        "--module",
        "foreign_ntt",
        "--target",
        "sm_90",
    ];
    let run = ws.build(&args).ok();
    assert_eq!(run.nvcc_runs(), 2 * (3 + 1));
    let lto = manifest(&ws, "out/foreign_ntt_lto/sm_90.cubin.manifest.json");
    let plain = manifest(&ws, "out/foreign_ntt/sm_90.cubin.manifest.json");
    assert_eq!(
        lto.identity.flags[..4],
        ["-fatbin", "-rdc=true", "-dlto", "-arch=sm_90"]
    );
    assert_eq!(
        lto.identity.link_flags,
        [
            "--arch=sm_90",
            "-dlto",
            "-nvvmpath",
            "nvvm",
            "-Xptxas=--warn-on-spills"
        ]
    );
    assert_ne!(lto.module_digest, plain.module_digest);
    let blob = |m: &str| std::fs::read(ws.path(&format!("out/{m}/sm_90.cubin"))).unwrap();
    let has_mul = |b: &[u8]| b.windows(12).any(|w| w == b"_ZN3ntt3mulE");
    assert!(
        has_mul(&blob("foreign_ntt")),
        "the plain link calls ntt::mul"
    );
    assert!(!has_mul(&blob("foreign_ntt_lto")), "LTO inlined ntt::mul");
    cuda_aot::content::check(&lto, &blob("foreign_ntt_lto")).unwrap();

    // One file changes: that file and the link run again.
    let field = std::fs::read_to_string(ws.path("lto/foreign/src/ntt_field.cu")).unwrap();
    ws.write(
        "lto/foreign/src/ntt_field.cu",
        &format!("{field}\n// edited\n"),
    );
    let run = ws
        .build(&["--module", "foreign_ntt_lto", "--target", "sm_90"])
        .ok();
    assert_eq!(run.nvcc_runs(), 1 + 1);

    let other = Ws::foreign("lto2/deeper");
    other
        .build(&["--module", "foreign_ntt_lto", "--target", "sm_90"])
        .ok();
    assert_eq!(
        manifest(&other, "out/foreign_ntt_lto/sm_90.cubin.manifest.json").module_digest,
        lto.module_digest
    );

    // Refused: LTO on a module of one file, and LTO with line info.
    let spec = std::fs::read_to_string(ws.path("lto/foreign/foreign.toml")).unwrap();
    ws.write(
        "lto/foreign/foreign.toml",
        &spec.replace(
            "source = \"big_params.cu\"",
            "source = \"big_params.cu\"\nlink_time_optimisation = true",
        ),
    );
    let e = ws.build(&args).failed().stderr;
    assert!(
        e.contains("module `big_params`: sets link_time_optimisation with one source"),
        "{e}"
    );
    ws.write(
        "lto/foreign/foreign.toml",
        &spec.replace(
            "\"-DFOREIGN_BLOCK=256\"]",
            "\"-DFOREIGN_BLOCK=256\", \"-lineinfo\"]",
        ),
    );
    let e = ws.build(&args).failed().stderr;
    assert!(
        e.contains("module `foreign_ntt_lto`: sets link_time_optimisation and asks for line info"),
        "{e}"
    );
}
