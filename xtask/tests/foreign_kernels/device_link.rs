//! Device-linked modules of several files: extern tables whose defining file is missing are
//! refused, relinking only what changed, and link-time optimisation across files.

use crate::common::{Ws, set};
use crate::manifest;

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

/// Issue 44, item 2: no flag hides the undefined-extern check. Each module of
/// forgotten_table.toml that adds a warning-hiding flag to `ntt_stage` is refused like it,
/// naming the module, the symbol and the flag; a source that turns the warning off with a
/// pragma is refused naming the file and line. Nothing is written.
#[test]
fn issue_44_no_flag_or_pragma_hides_an_extern_no_file_defines() {
    let ws = Ws::foreign("hush").with_spec("hush/foreign/forgotten_table.toml");
    for (module, flag) in [
        ("ntt_stage_w", "`-w`"),
        ("ntt_stage_disable_warnings", "`--disable-warnings`"),
        ("ntt_stage_diag_suppress", "`-diag-suppress=20044`"),
        (
            "ntt_stage_diag_suppress_list",
            "`--diag-suppress 177,20044`",
        ),
        ("ntt_stage_xcudafe", "`-Xcudafe --diag_suppress=20044`"),
        (
            "ntt_stage_xcudafe_joined",
            "`-Xcudafe=--diag_suppress=20044`",
        ),
    ] {
        let run = ws
            .build(&["--module", module, "--target", "sm_90"])
            .failed();
        let e = &run.stderr;
        assert!(
            e.contains(&format!("module `{module}` target sm_90"))
                && e.contains("`ntt_twiddles` (declared extern at ntt_stage.cu(7))")
                && e.contains(&format!("nvcc_flags {flag} hide nvcc's warning"))
                && e.contains("Fix: add the file that defines `ntt_twiddles`"),
            "{module}: {e}"
        );
    }
    let run = ws
        .build(&["--module", "ntt_stage_pragma", "--target", "sm_90"])
        .failed();
    let e = &run.stderr;
    assert!(
        e.contains("module `ntt_stage_pragma` target sm_90")
            && e.contains(
                "ntt_stage_hushed.cu:4 turns off nvcc's #20044-D (`#pragma nv_diag_suppress 20044`)"
            )
            && e.contains("Fix: remove the pragma"),
        "{e}"
    );
    assert!(ws.snapshot("out").is_empty(), "nothing written");
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
