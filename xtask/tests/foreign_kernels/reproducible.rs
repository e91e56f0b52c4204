//! Reproducible builds: the same identity and bytes from checkouts at other paths, with
//! other file times, line info included.

use crate::common::Ws;
use crate::manifest;

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
    for f in walkdir::WalkDir::new(b.path("lb/deeper/still/foreign/src")) {
        let f = f.unwrap();
        if !f.file_type().is_file() {
            continue;
        }
        let f = std::fs::File::options()
            .append(true)
            .open(f.path())
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
