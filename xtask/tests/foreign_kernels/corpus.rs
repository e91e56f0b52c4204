//! What the corpus builds: cubin and PTX with demangled entry points, a family target, and
//! include folders (their mistakes refused before nvcc runs).

use crate::common::{Ws, set};
use crate::manifest;
use cuda_aot::{Kind, Manifest};

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
    // The modules of several files have no PTX: they get sm_90 only.
    let mut want = set(&MODULES, &["sm_90", "compute_90"]);
    want.extend(set(&["big_params"], &["sm_90", "compute_90"]));
    want.insert("foreign_ntt sm_90".to_string());
    want.insert("foreign_ntt_lto sm_90".to_string());
    want.insert("foreign_sponge sm_90".to_string());
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
            &[
                "foreign_poly_gl",
                "foreign_poseidon",
                "big_params",
                "foreign_sponge"
            ],
            &["sm_90"]
        )
    );
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
