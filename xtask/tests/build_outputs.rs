//! What `cargo xtask build` produces, with real nvcc for several targets: the output
//! layout, manifests that match their blobs, the ELF SM cross-check refusing a relabelled
//! cubin, PTX as a labelled opt-in, stale-output removal, checkout-path independence, the
//! system toolkit's distinct identity, and the repository's own release spec.

mod common;

use common::{Ws, set, xtask};
use cuda_aot::{Kind, Manifest};

fn manifest(ws: &Ws, rel: &str) -> Manifest {
    let bytes = std::fs::read(ws.path(rel)).unwrap();
    cuda_aot::json::parse(&bytes, 1 << 20, rel).unwrap()
}

#[test]
fn outputs_follow_the_layout_and_manifests_match_their_blobs() {
    let ws = Ws::new();
    ws.build(&[]).ok();
    for (module, entry, params) in [
        ("alpha", "alpha_mix", 12),
        ("beta", "beta_salt", 20),
        ("gamma", "gamma_twice", 12),
    ] {
        for target in ["sm_80", "sm_90"] {
            let m = manifest(&ws, &format!("out/{module}/{target}.cubin.manifest.json"));
            let blob = std::fs::read(ws.path(&format!("out/{module}/{target}.cubin"))).unwrap();
            let id = &m.identity;
            assert_eq!(
                (id.module.as_str(), id.sm.to_string().as_str(), id.kind),
                (module, target, Kind::Cubin)
            );
            assert_eq!(m.module_digest, cuda_aot::Digest::of(&blob));
            assert_eq!(m.size, blob.len() as u64);
            assert_eq!(m.channel, cuda_aot::Channel::Dev);
            assert_eq!(id.toolkit.source, "pinned-wheels");
            assert_eq!(id.toolkit.nvcc, "13.0.88");
            assert_eq!(id.driver_floor.to_string(), "13.0");
            assert!(!id.host_toolchain.is_empty());
            assert_eq!(
                &id.flags[..2],
                ["-cubin".to_string(), format!("-arch={target}")]
            );
            assert_eq!(m.functions.len(), 1);
            assert_eq!(m.functions[0].name.as_str(), entry);
            assert_eq!(m.functions[0].symbol.as_str(), entry);
            assert_eq!(m.functions[0].abi.param_bytes, params, "{module} {target}");
            cuda_aot::content::check(&m, &blob).unwrap();
        }
    }
    let run = ws.build(&["--channel", "production"]).ok();
    assert_eq!(run.nvcc_runs(), 0, "the channel is not a build input");
    assert_eq!(
        manifest(&ws, "out/beta/sm_80.cubin.manifest.json").channel,
        cuda_aot::Channel::Production
    );
}

#[test]
fn elf_sm_cross_check_refuses_a_relabelled_cubin() {
    let ws = Ws::new();
    ws.build(&[
        "--module", "alpha", "--target", "sm_80", "--target", "sm_90", "--target", "sm_90a",
    ])
    .ok();
    let blob = |t: &str| std::fs::read(ws.path(&format!("out/alpha/{t}.cubin"))).unwrap();
    let m90 = manifest(&ws, "out/alpha/sm_90.cubin.manifest.json");
    let m90a = manifest(&ws, "out/alpha/sm_90a.cubin.manifest.json");
    cuda_aot::content::check(&m90, &blob("sm_90")).unwrap();
    cuda_aot::content::check(&m90a, &blob("sm_90a")).unwrap();
    // An sm_80 cubin under a manifest that says sm_90, and the a-variant mix-ups.
    for (m, t, actual) in [
        (&m90, "sm_80", "sm_80"),
        (&m90, "sm_90a", "sm_90a"),
        (&m90a, "sm_90", "sm_90"),
    ] {
        let err = cuda_aot::content::check(m, &blob(t)).unwrap_err();
        assert!(
            matches!(&err, cuda_aot::Error::ElfSmMismatch { claimed, actual: a, .. } if *claimed == m.identity.sm.to_string() && a == actual),
            "{err}"
        );
    }
}

#[test]
fn ptx_is_an_explicit_labelled_opt_in() {
    let ws = Ws::new();
    ws.edit_spec(|s| {
        s.replace(
            "geometry = { block = 128 }",
            "geometry = { block = 128 }\nptx = [\"compute_90\"]",
        )
    });
    let run = ws.build(&["--module", "alpha"]).ok();
    assert_eq!(
        run.compiled(),
        set(&["alpha"], &["sm_80", "sm_90", "compute_90"])
    );
    assert!(
        run.stdout.contains("ptx (compatibility mode)"),
        "{}",
        run.stdout
    );
    let ptx = std::fs::read_to_string(ws.path("out/alpha/compute_90.ptx")).unwrap();
    assert!(ptx.contains(".entry alpha_mix("));
    let m = manifest(&ws, "out/alpha/compute_90.ptx.manifest.json");
    assert_eq!(m.identity.kind, Kind::Ptx);
    assert!(m.label().contains("compatibility mode"));
    assert_eq!(m.identity.driver_floor.to_string(), "13.0");
    let cubin = manifest(&ws, "out/alpha/sm_90.cubin.manifest.json");
    let layout = |m: &Manifest| -> Vec<(String, String, u32)> {
        m.functions
            .iter()
            .map(|f| {
                (
                    f.symbol.to_string(),
                    f.abi.describe_params(),
                    f.abi.param_bytes,
                )
            })
            .collect()
    };
    assert_eq!(
        layout(&m),
        layout(&cubin),
        "PTX kernels and parameter layout match the cubin's"
    );
}

#[test]
fn stale_outputs_of_earlier_builds_are_removed() {
    let ws = Ws::new();
    ws.build(&[]).ok();
    ws.write("out/alpha/notes.txt", "not a build output");
    // Per-manifest signatures of an earlier format are outputs too.
    ws.write("out/alpha/sm_80.cubin.manifest.dsse.json", "{}");
    ws.write("out/alpha/sm_90.cubin.manifest.dsse.json", "{}");
    ws.write("out/beta/sm_90.cubin.manifest.dsse.json", "{}");
    // The build statement `cargo xtask sign` left.
    ws.write("out/build.statement.json", "{}");
    let run = ws.build(&["--target", "sm_90"]).ok();
    assert_eq!(run.nvcc_runs(), 0);
    let all: Vec<String> = ws
        .snapshot("out")
        .keys()
        .map(|p| p.display().to_string())
        .collect();
    // What the build read, for the provenance: the record and the files it names.
    assert!(all.iter().any(|p| p == "build.provenance.json"), "{all:?}");
    assert!(
        all.iter().any(|p| p.starts_with("build.sources/")),
        "{all:?}"
    );
    let left: Vec<&String> = all
        .iter()
        .filter(|p| !p.starts_with("build.provenance") && !p.starts_with("build.sources/"))
        .collect();
    assert_eq!(
        left,
        [
            "alpha/notes.txt",
            "alpha/sm_90.cubin",
            "alpha/sm_90.cubin.manifest.json",
            "beta/sm_90.cubin",
            "beta/sm_90.cubin.manifest.json",
            "gamma/sm_90.cubin",
            "gamma/sm_90.cubin.manifest.json"
        ],
        "the statement covered the removed sm_80 outputs, so it went too"
    );
    assert!(
        run.stdout.contains("removed 9 stale file(s)"),
        "{}",
        run.stdout
    );

    // A no-op rebuild keeps the statement; a manifest that changes (here its channel)
    // removes it: it no longer covers what the folder holds.
    ws.write("out/build.statement.json", "{}");
    ws.build(&["--target", "sm_90"]).ok();
    assert!(ws.path("out/build.statement.json").exists());
    ws.build(&[
        "--target",
        "sm_90",
        "--module",
        "alpha",
        "--channel",
        "production",
    ])
    .ok();
    assert!(!ws.path("out/build.statement.json").exists());
}

/// Regression: nvcc names internal-linkage symbols (beta's `static __constant__` table)
/// after a hash of the source's absolute path, so two checkouts built different bytes.
#[test]
fn cubins_do_not_depend_on_the_checkout_path() {
    let ws = Ws::new();
    let here = ws.build(&["--module", "beta", "--target", "sm_90"]).ok();
    // Another workspace (own cache and output), its sources at another path and depth.
    let other = Ws::new();
    let elsewhere = other.path("elsewhere/much/deeper/src");
    std::fs::create_dir_all(&elsewhere).unwrap();
    for f in ["common.cuh", "other.cuh", "alpha.cu", "beta.cu", "gamma.cu"] {
        std::fs::copy(ws.path(&format!("src/{f}")), elsewhere.join(f)).unwrap();
    }
    let there = other.build_with(&["--module", "beta", "--target", "sm_90"], |c| {
        c.arg("--sources").arg(&elsewhere);
    });
    let there = there.ok();
    assert_eq!(there.nvcc_runs(), 1, "a separate cache really compiles");
    assert_eq!(there.digest("beta", "sm_90"), here.digest("beta", "sm_90"));
    assert_eq!(
        there.identity("beta", "sm_90"),
        here.identity("beta", "sm_90")
    );
}

#[test]
fn system_toolkit_is_an_explicit_choice_with_its_own_identity() {
    let ws = Ws::new();
    let pinned = ws.build(&["--module", "gamma", "--target", "sm_90"]).ok();
    // The pinned toolkit's folder, used as if it were a system install.
    let run = ws.build_with(
        &[
            "--module",
            "gamma",
            "--target",
            "sm_90",
            "--toolkit",
            "system",
        ],
        |c| {
            c.env("CUDA_HOME", common::toolkit_root())
                .arg("--toolkit-dir")
                .arg(ws.path("tk-memo"));
        },
    );
    let run = run.ok();
    assert_eq!(
        run.nvcc_runs(),
        1,
        "a different toolkit identity is a different cache key"
    );
    let m = manifest(&ws, "out/gamma/sm_90.cubin.manifest.json");
    assert_eq!(m.identity.toolkit.source, "system");
    assert_ne!(
        run.identity("gamma", "sm_90"),
        pinned.identity("gamma", "sm_90")
    );
    assert!(run.stdout.contains("(system)"), "{}", run.stdout);

    let out = xtask()
        .args(["build", "--toolkit", "system"])
        .env_remove("CUDA_HOME")
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("Fix: set CUDA_HOME"),
        "{e}"
    );
}

#[test]
fn release_spec_plans_every_module_for_every_target() {
    common::toolkit_root();
    let out = xtask().args(["build", "--dry-run"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 3 modules × 7 targets of cubins, plus whatever PTX the spec opts into.
    let cubins = text
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("cubin"))
        .count();
    assert_eq!(cubins, 21, "{text}");
    for module in ["field_ops", "ntt", "merkle"] {
        for target in [
            "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120",
        ] {
            assert!(
                text.lines()
                    .any(|l| l.split_whitespace().take(2).eq([module, target])),
                "{module} {target} missing:\n{text}"
            );
        }
    }
}

#[test]
fn release_spec_matches_the_kernel_contracts() {
    let spec: toml::Value = toml::from_str(
        &std::fs::read_to_string(common::repo().join("manifests/release.toml")).unwrap(),
    )
    .unwrap();
    let modules = spec["module"].as_array().unwrap();
    assert_eq!(modules.len(), cuda_aot_kernels::MODULES.len());
    for c in cuda_aot_kernels::MODULES {
        let m = modules
            .iter()
            .find(|m| m["name"].as_str() == Some(c.name))
            .unwrap_or_else(|| panic!("{} not in release.toml", c.name));
        let entries: Vec<&str> = m["entry_points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        assert_eq!(entries, c.entry_points, "{}", c.name);
        assert_eq!(
            m["geometry"]["block"].as_integer(),
            Some(i64::from(c.block)),
            "{}",
            c.name
        );
        assert_eq!(
            Some(c.source),
            m["source"].as_str().map(|s| format!("cuda/{s}")).as_deref(),
            "{}",
            c.name
        );
    }
}

#[test]
fn a_real_module_builds_with_its_declared_entry_points() {
    common::toolkit_root();
    let tmp = tempfile::tempdir().unwrap();
    let out = xtask()
        .args(["build", "--module", "ntt", "--target", "sm_90"])
        .arg("--cache-dir")
        .arg(tmp.path().join("cache"))
        .arg("--out")
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(tmp.path().join("out/ntt/sm_90.cubin.manifest.json")).unwrap();
    let m: Manifest = cuda_aot::json::parse(&bytes, 1 << 20, "ntt").unwrap();
    let mut names: Vec<&str> = m.functions.iter().map(|f| f.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["ntt_bit_reverse", "ntt_butterfly", "ntt_scale"]);
    assert_eq!(m.identity.protocol, "goldilocks-ntt-radix2-v1");
    assert_eq!(m.identity.geometry["block"], 256);
}
