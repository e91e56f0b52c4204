//! What the manifests sign of a kernel's ABI: exact layouts of large by-value parameters and
//! every device global with its size and space; a `__managed__` variable is refused.

use crate::common as common_consts;
use crate::common::{Ws, set};
use crate::manifest;
use cuda_aot::Manifest;

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
