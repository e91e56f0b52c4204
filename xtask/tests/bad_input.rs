//! Bad input with real nvcc and the real pinned wheels: a kernel that fails to compile, an
//! unknown target, a missing header, undeclared entry points and a tampered wheel each give
//! a clear error naming the module/target/file, and leave the output and caches untouched.

mod common;

use common::{Ws, snapshot, xtask};

/// Builds once, runs `f` (which breaks something and builds), and checks that the failed
/// build left output and cache exactly as they were.
fn fails_without_touching(ws: &Ws, f: impl FnOnce(&Ws) -> common::Run) -> common::Run {
    ws.build(&[]).ok();
    let (out, cache) = (ws.snapshot("out"), ws.snapshot("cache"));
    let run = f(ws).failed();
    assert_eq!(ws.snapshot("out"), out, "a failed build changed the output");
    assert_eq!(
        ws.snapshot("cache"),
        cache,
        "a failed build changed the cache"
    );
    assert!(
        run.stderr.contains("Fix: "),
        "no Fix: advice in\n{}",
        run.stderr
    );
    run
}

#[test]
fn a_kernel_that_fails_to_compile_names_module_target_and_command() {
    let ws = Ws::new();
    let run = fails_without_touching(&ws, |ws| {
        ws.write(
            "src/broken.cu",
            "extern \"C\" __global__ void broken_k(int* p) { int x = ; p[0] = x; }\n",
        );
        ws.edit_spec(|s| {
            s + "\n[[module]]\nname = \"broken\"\nsource = \"broken.cu\"\nentry_points = [\"broken_k\"]\nprotocol = \"t\"\nschedule_version = 1\n"
        });
        ws.build(&[])
    });
    let e = &run.stderr;
    assert!(e.contains("module `broken` target sm_"), "{e}");
    assert!(e.contains("nvcc failed"), "{e}");
    assert!(
        e.contains("command: ") && e.contains("-arch=sm_") && e.contains("broken.cu"),
        "{e}"
    );
    assert!(
        e.contains("error: expected an expression"),
        "nvcc's own message is shown:\n{e}"
    );
    assert!(e.contains("nothing was written"), "{e}");
}

#[test]
fn an_unknown_target_is_refused_before_anything_runs() {
    let ws = Ws::new();
    let run = fails_without_touching(&ws, |ws| ws.build(&["--target", "sm_91"]));
    assert!(
        run.stderr
            .contains("unknown target sm_91 for module `alpha`"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("sm_90"),
        "lists the known targets:\n{}",
        run.stderr
    );

    let run = fails_without_touching(&ws, |ws| {
        ws.edit_spec(|s| s.replace("[\"sm_80\", \"sm_90\"]", "[\"sm_80\", \"sm_89a\"]"));
        ws.build(&[])
    });
    assert!(
        run.stderr.contains("unknown target sm_89a"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_missing_header_names_the_header_and_the_includer() {
    let ws = Ws::new();
    let run = fails_without_touching(&ws, |ws| {
        ws.write(
            "src/gamma.cu",
            &common::GAMMA_CU.replace("other.cuh", "missing.cuh"),
        );
        ws.build(&[])
    });
    let e = &run.stderr;
    assert!(e.contains("module `gamma` target sm_"), "{e}");
    assert!(
        e.contains("header `missing.cuh` not found (included from"),
        "{e}"
    );
    assert!(e.contains("gamma.cu"), "{e}");
    assert!(
        e.contains("searched:") && e.contains("(the including file's folder)"),
        "{e}"
    );
    assert!(
        e.contains("Fix: add the folder that holds `missing.cuh` to include_dirs"),
        "{e}"
    );
}

#[test]
fn missing_or_undeclared_entry_points_are_errors() {
    let ws = Ws::new();
    let run = fails_without_touching(&ws, |ws| {
        ws.edit_spec(|s| s.replace("[\"alpha_mix\"]", "[\"alpha_mix\", \"alpha_gone\"]"));
        ws.build(&[])
    });
    assert!(
        run.stderr
            .contains("declared entry point `alpha_gone` is not a kernel of the built blob (it has: alpha_mix)"),
        "{}",
        run.stderr
    );

    ws.edit_spec(|s| s.replace("[\"alpha_mix\", \"alpha_gone\"]", "[\"alpha_mix\"]"));
    let run = fails_without_touching(&ws, |ws| {
        ws.write(
            "src/gamma.cu",
            &format!(
                "{}extern \"C\" __global__ void gamma_extra() {{}}\n",
                common::GAMMA_CU
            ),
        );
        ws.build(&[])
    });
    assert!(
        run.stderr.contains("undeclared kernel(s) gamma_extra"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_tampered_wheel_is_refused_with_both_digests() {
    common::toolkit_root(); // the genuine wheels are in the user cache now
    let crt_sha = "2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4";
    let tmp = tempfile::tempdir().unwrap();
    let wheels = tmp.path().join("user-cache/wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    // A corrupted copy of the real wheel (one byte flipped), or junk if it is not cached.
    let mut bytes = std::fs::read(common::user_cache_dir().join(format!("wheels/{crt_sha}.whl")))
        .unwrap_or_else(|_| b"PK\x03\x04 not the pinned wheel".to_vec());
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    let wheel = wheels.join(format!("{crt_sha}.whl"));
    std::fs::write(&wheel, &bytes).unwrap();
    let toolkits = tmp.path().join("toolkits");
    let before = snapshot(tmp.path());

    let out = xtask()
        .arg("toolchain")
        .arg("--toolkit-dir")
        .arg(&toolkits)
        .env("CUDA_AOT_CACHE_DIR", tmp.path().join("user-cache"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{e}");
    assert!(
        e.contains("cached wheel nvidia-cuda-crt 13.0.88 fails its sha256 check"),
        "{e}"
    );
    assert!(
        e.contains(&wheel.display().to_string()),
        "names the file:\n{e}"
    );
    assert!(e.contains(&format!("expected sha256 {crt_sha}")), "{e}");
    let actual = e
        .lines()
        .find_map(|l| l.trim().strip_prefix("actual   sha256 "))
        .expect("actual digest");
    assert_eq!(actual.len(), 64);
    assert_ne!(actual, crt_sha);
    assert!(e.contains("Fix: delete"), "{e}");
    assert!(
        !e.contains("downloading"),
        "a tampered cache fails before any download:\n{e}"
    );
    assert_eq!(
        snapshot(tmp.path()),
        before,
        "nothing unpacked, the wheel left for inspection"
    );
    assert!(std::fs::read_dir(&toolkits).map_or(true, |mut d| d.next().is_none()));
}

/// `release` publishes into a folder: a remote `--registry` is refused before anything is
/// built, with the publish command that does reach it, and no folder named after the URL
/// appears where the command ran.
#[test]
fn a_release_into_a_remote_registry_is_refused_with_the_publish_command() {
    let ws = Ws::new();
    for url in [
        "s3://bucket/cuda-aot",
        "oci://registry.example/r:t",
        "https://r.example/x/",
    ] {
        let out = xtask()
            .current_dir(ws.dir.path())
            .args(["release", "--spec"])
            .arg(ws.spec_path())
            .args(["--registry", url])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("is a remote registry"), "{err}");
        assert!(err.contains(&format!("publish --registry {url}")), "{err}");
        let scheme = url.split(':').next().unwrap();
        assert!(!ws.path(&format!("{scheme}:")).exists(), "{url}");
    }
    assert!(snapshot(&ws.path("cache")).is_empty(), "nothing was built");
}
