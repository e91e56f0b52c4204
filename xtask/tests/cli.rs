//! The command line as a build engineer meets it (issue 11, items 6 and 7): usage lines
//! and help that fit cargo's conventions, and errors that come before anything slow runs
//! and name the right fix. Real `xtask` processes, real keys and trust roots.

mod common;

use common::{Keys, Out, toolkit_untouched, without_toolkit, xtask};

fn help(args: &[&str]) -> String {
    // (clap shows the value of an option's environment variable; the tests set one)
    Out::of(
        xtask()
            .env_remove("CUDA_AOT_TOOLKIT_DIR")
            .args(args)
            .arg("--help"),
    )
    .ok()
    .stdout
}

#[test]
fn usage_lines_say_cargo_xtask_and_shared_options_are_spelled_alike() {
    for task in [
        "build",
        "release",
        "repro",
        "verify",
        "publish",
        "toolchain",
    ] {
        let text = help(&[task]);
        assert!(
            text.contains(&format!("Usage: cargo xtask {task} [OPTIONS]")),
            "{task}:\n{text}"
        );
        // Defaults are shown relative to the project, never as this machine's paths.
        let root = common::repo().display().to_string();
        assert!(
            !text.contains(&root),
            "{task} shows an absolute path:\n{text}"
        );
        for line in text.lines() {
            assert!(
                line.matches("[default:").count() <= 1,
                "{task}: a default shown twice: {line}"
            );
        }
    }
    for task in ["build", "release", "repro"] {
        let text = help(&[task]);
        for opt in [
            "--spec <FILE>",
            "--module <NAME>",
            "--target <TARGET>",
            "--jobs <N>",
            "--toolkit <KIND>",
            "--toolkit-dir <DIR>",
            "--message-format <FMT>",
            "--json",
        ] {
            assert!(text.contains(opt), "{task} lacks `{opt}`:\n{text}");
        }
    }
    for task in ["build", "release"] {
        let text = help(&[task]);
        assert!(text.contains("--cache-dir <DIR>"), "{task}");
        assert!(
            text.contains("[env: CUDA_AOT_BUILD_CACHE"),
            "{task}:\n{text}"
        );
        assert!(text.contains("--out <DIR>"), "{task}");
    }
    for task in ["release", "verify", "publish"] {
        let text = help(&[task]);
        assert!(text.contains("--registry <DIR>"), "{task}:\n{text}");
        assert!(text.contains("--trust <FILE>"), "{task}:\n{text}");
    }
    for task in ["release", "publish"] {
        assert!(help(&[task]).contains("--publisher-key <FILE>"), "{task}");
    }
    // Every value of every command is named from one small vocabulary.
    let names = [
        "FILE", "DIR", "N", "NAME", "TARGET", "KIND", "KEY", "CHANNEL", "ROLE", "TEXT", "FMT",
        "URL", "ADDR", "SIZE", "TIME", "K/N", "UID:GID",
    ];
    for task in [
        "toolchain",
        "build",
        "repro",
        "keygen",
        "trust-root",
        "sign",
        "publish",
        "verify",
        "release",
        "bench",
        "bench-load",
        "bench-serve",
        "sync",
        "lock",
        "serve",
        "servers",
        "servers nginx",
        "servers oci",
        "servers reapi",
        "servers reapi-worker",
    ] {
        let args: Vec<&str> = task.split(' ').collect();
        let text = help(&args);
        for line in text.lines().filter(|l| l.trim_start().starts_with('-')) {
            if let Some((_, rest)) = line.split_once('<') {
                let name = rest.split('>').next().unwrap();
                assert!(
                    names.contains(&name),
                    "{task}: value name <{name}> in `{line}`"
                );
            }
        }
    }
    let text = help(&["bench-load"]);
    assert!(
        text.contains(".cuda-aot/bench-load") && !text.contains("[default: docs/"),
        "bench-load writes into an ignored folder by default:\n{text}"
    );
}

#[test]
fn installed_as_a_cargo_subcommand_it_names_itself_cargo_cuda_aot() {
    // cargo runs `cargo-cuda-aot cuda-aot ARGS...` for `cargo cuda-aot ARGS...`.
    let out = Out::of(
        std::process::Command::new(env!("CARGO_BIN_EXE_cargo-cuda-aot"))
            .args(["cuda-aot", "build", "--help"]),
    )
    .ok();
    assert!(
        out.stdout.contains("Usage: cargo cuda-aot build [OPTIONS]"),
        "{}",
        out.stdout
    );
    let bad = Out::of(
        std::process::Command::new(env!("CARGO_BIN_EXE_cargo-cuda-aot"))
            .args(["cuda-aot", "biuld"]),
    );
    assert_eq!(bad.code, Some(2), "usage errors exit 2:\n{}", bad.stderr);
}

/// Issue 11, item 6: the spec is parsed and checked before the toolkit download.
#[test]
fn a_bad_spec_is_refused_before_the_toolkit_is_fetched() {
    let ws = common::Ws::new();
    ws.edit_spec(|s| {
        s.replace(
            "protocol = \"test-v1\"\nschedule_version = 1\ngeometry",
            "protocoll = \"x\"\nschedule_version = 1\ngeometry",
        )
    });
    for task in ["build", "release"] {
        let tmp = tempfile::tempdir().unwrap();
        let mut cmd = xtask();
        cmd.arg(task)
            .arg("--spec")
            .arg(ws.path("spec/release.toml"));
        without_toolkit(&mut cmd, tmp.path());
        let out = Out::of(&mut cmd).failed();
        assert!(
            out.stderr.contains("parsing the release spec") && out.stderr.contains("protocoll"),
            "{task}: {}",
            out.stderr
        );
        assert!(out.fix().contains("fix the spec"), "{}", out.stderr);
        assert!(
            toolkit_untouched(tmp.path()),
            "{task} fetched a toolkit first"
        );
    }
    // An unknown module is refused as early.
    let ws = common::Ws::new();
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = xtask();
    cmd.args(["release", "--module", "nope", "--spec"])
        .arg(ws.path("spec/release.toml"));
    without_toolkit(&mut cmd, tmp.path());
    let out = Out::of(&mut cmd).failed();
    assert!(
        out.stderr.contains("unknown module `nope`"),
        "{}",
        out.stderr
    );
    assert!(toolkit_untouched(tmp.path()));
}

/// Issue 11, item 6: the registry's writability and the keys are checked before building.
#[test]
fn release_checks_keys_and_registry_before_building() {
    let ws = common::Ws::new();
    let keys = Keys::new(&ws.path("keys"), "dev");
    let other = Keys::new(&ws.path("other-keys"), "dev");
    let release = |extra: &[&std::ffi::OsStr]| {
        let tmp = tempfile::tempdir().unwrap();
        let mut cmd = xtask();
        cmd.arg("release")
            .arg("--spec")
            .arg(ws.path("spec/release.toml"))
            .arg("--out")
            .arg(ws.path("out"))
            .args(extra);
        cmd.env_remove("CUDA_AOT_BUILDER_KEY")
            .env_remove("CUDA_AOT_PUBLISHER_KEY");
        without_toolkit(&mut cmd, tmp.path());
        let out = Out::of(&mut cmd).failed();
        assert!(
            toolkit_untouched(tmp.path()),
            "fetched a toolkit before refusing:\n{}",
            out.stderr
        );
        assert!(!ws.path("out").exists(), "built before refusing");
        out
    };
    let os = |p: &std::path::Path| p.as_os_str().to_owned();
    let flag = |s: &str| std::ffi::OsString::from(s);

    // A builder key that the trust root does not list.
    let out = release(&[
        &flag("--builder-key"),
        &os(&other.key("builder")),
        &flag("--publisher-key"),
        &os(&keys.key("publisher")),
        &flag("--trust"),
        &os(&keys.root()),
        &flag("--registry"),
        &os(&ws.path("registry")),
    ]);
    assert!(
        out.stderr.contains("builder key")
            && out.stderr.contains("is not a builder key of trust root"),
        "{}",
        out.stderr
    );
    assert!(out.fix().contains("--builder-key"), "{}", out.stderr);

    // A registry that cannot be created (its parent is a file).
    std::fs::write(ws.path("a-file"), "x").unwrap();
    let out = release(&[
        &flag("--builder-key"),
        &os(&keys.key("builder")),
        &flag("--publisher-key"),
        &os(&keys.key("publisher")),
        &flag("--trust"),
        &os(&keys.root()),
        &flag("--registry"),
        &os(&ws.path("a-file/registry")),
    ]);
    assert!(
        out.stderr.contains("the registry") && out.stderr.contains("cannot be created"),
        "{}",
        out.stderr
    );
    assert!(out.fix().contains("--registry"), "{}", out.stderr);

    // --trust without keys is not silently a dev release.
    let out = release(&[&flag("--trust"), &os(&keys.root())]);
    assert!(out.stderr.contains("given without keys"), "{}", out.stderr);
    assert!(out.fix().contains("--builder-key"), "{}", out.stderr);
}

/// Issue 11, item 6: `publish` with a production `--trust` and no publisher key refuses,
/// instead of silently signing with the dev key.
#[test]
fn publish_with_a_production_root_and_no_key_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "production");
    std::fs::create_dir_all(tmp.path().join("out")).unwrap();
    let out = Out::of(
        xtask()
            .current_dir(tmp.path())
            .arg("publish")
            .arg("--registry")
            .arg(tmp.path().join("registry"))
            .arg("--trust")
            .arg(keys.root())
            .arg(tmp.path().join("out"))
            .env_remove("CUDA_AOT_PUBLISHER_KEY"),
    )
    .failed();
    assert!(
        out.stderr
            .contains("is a production trust root and no publisher key was given"),
        "{}",
        out.stderr
    );
    assert!(out.fix().contains("--publisher-key"), "{}", out.stderr);
    assert!(!tmp.path().join("registry").exists(), "nothing published");
    assert!(
        !tmp.path().join(".cuda-aot/dev-keys").exists(),
        "no dev keys generated"
    );
}

/// Issue 11, item 6: a garbage trust-root file points to `trust-root`, not to `publish`.
#[test]
fn a_garbage_trust_root_points_to_trust_root() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let garbage = tmp.path().join("root.json");
    std::fs::write(&garbage, "{ this is not a trust root").unwrap();
    std::fs::create_dir_all(tmp.path().join("out")).unwrap();
    let out = Out::of(
        xtask()
            .arg("publish")
            .arg("--registry")
            .arg(tmp.path().join("registry"))
            .arg("--trust")
            .arg(&garbage)
            .arg("--publisher-key")
            .arg(keys.key("publisher"))
            .arg(tmp.path().join("out")),
    )
    .failed();
    assert!(
        out.stderr
            .contains(&format!("{} is not a usable trust root", garbage.display())),
        "{}",
        out.stderr
    );
    let fix = out.fix();
    assert!(
        fix.contains("cargo xtask trust-root") && !fix.contains("xtask publish"),
        "{fix}"
    );
    // verify says the same.
    let out = Out::of(
        xtask()
            .arg("verify")
            .arg("--registry")
            .arg(tmp.path().join("registry"))
            .arg("--trust")
            .arg(&garbage)
            .arg("--state")
            .arg(tmp.path().join("state.json")),
    )
    .failed();
    assert!(
        out.stderr.contains("is not a usable trust root"),
        "{}",
        out.stderr
    );
    assert!(
        out.fix().contains("cargo xtask trust-root"),
        "{}",
        out.stderr
    );
}

/// Issue 17 item 8: `gpu-bundle` fills only a folder git ignores (it copies binaries and
/// dev-signed registries), and refuses any other before it builds anything.
#[test]
fn gpu_bundle_refuses_a_folder_git_would_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = xtask();
    without_toolkit(&mut cmd, tmp.path());
    let out = Out::of(cmd.args(["gpu-bundle", "--out", "docs/gpu-bundle-test"])).failed();
    assert!(
        out.stderr
            .contains("docs/gpu-bundle-test is not ignored by git"),
        "{}",
        out.stderr
    );
    assert!(out.fix().contains(".gpu/"), "{}", out.stderr);
    assert!(!common::repo().join("docs/gpu-bundle-test").exists());
    assert!(toolkit_untouched(tmp.path()), "it started building");
}

/// `gpu-bundle` replaces only a folder an earlier bundle made: pointed at another ignored
/// folder (`.cuda-aot`, say) it would delete the keys and registry it is about to copy.
#[test]
fn gpu_bundle_replaces_only_an_earlier_bundle() {
    let rel = format!("target/gpu-bundle-test-{}", std::process::id());
    let dir = common::repo().join(&rel);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("keep.txt"), "mine").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = xtask();
    without_toolkit(&mut cmd, tmp.path());
    let out = Out::of(cmd.args(["gpu-bundle", "--out", &rel])).failed();
    assert!(
        out.stderr.contains("that no earlier gpu-bundle made"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.txt")).unwrap(),
        "mine"
    );
    assert!(toolkit_untouched(tmp.path()), "it started building");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `gpu-run` (issue 17 item 8) is for the GPU host: given a folder no bundle made it says
/// so and how to make one; on a host without `nvidia-smi` (CI) it says this is not a GPU
/// host. Either way it writes no log and runs nothing.
#[test]
fn gpu_run_refuses_a_folder_that_is_no_bundle_and_a_host_without_a_gpu() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let out = Out::of(
        xtask()
            .args(["gpu-run", "--bundle"])
            .arg(tmp.path())
            .arg("--out")
            .arg(&logs),
    )
    .failed();
    assert!(
        out.stderr
            .contains("is not a bundle made by cargo xtask gpu-bundle"),
        "{}",
        out.stderr
    );
    assert!(
        out.fix().contains("cargo xtask gpu-bundle"),
        "{}",
        out.stderr
    );
    assert!(!logs.exists());
    let bundle = tmp.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(
        bundle.join(".gpu-bundle"),
        "made by cargo xtask gpu-bundle\n",
    )
    .unwrap();
    let has_smi = std::process::Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_smi {
        let out = Out::of(
            xtask()
                .args(["gpu-run", "--bundle"])
                .arg(&bundle)
                .arg("--out")
                .arg(&logs),
        )
        .failed();
        assert!(
            out.stderr.contains("this is not a GPU host"),
            "{}",
            out.stderr
        );
        assert!(!logs.join("device.txt").exists());
    }
}
