//! Issue 9, item 4: a prover team keeps its kernels in its own repository and runs the
//! pipeline there without copying cuda-aot's tree — through the installed command
//! `cargo cuda-aot` (what `cargo install --path xtask` puts on PATH), started by the real
//! `cargo` in a fresh git repository that holds nothing but its own kernels and spec.

mod common;
#[path = "common/doc_json.rs"]
mod doc_json;

use common::Out;
use std::path::{Path, PathBuf};
use std::process::Command;

const SAXPY_CU: &str = "#include \"lanes.cuh\"\n\
extern \"C\" __global__ void saxpy(float a, const float* x, float* y, unsigned int n) {\n\
    unsigned int i = lane();\n\
    if (i < n) y[i] = a * x[i] + y[i];\n\
}\n";

const LANES_CUH: &str = "#pragma once\n\
__device__ __forceinline__ unsigned int lane() { return blockIdx.x * blockDim.x + threadIdx.x; }\n";

/// The spec sits in `gpu/`; every path in it is relative to it.
const SPEC: &str = r#"[build]
sources = "kernels"
targets = ["sm_90"]
nvcc_flags = ["-O3"]

[[module]]
name = "saxpy"
source = "saxpy.cu"
entry_points = ["saxpy"]
protocol = "prover-blas-v1"
schedule_version = 1
"#;

/// `cargo cuda-aot ARGS` in `cwd`, with the installed command on PATH.
fn cargo_cuda_aot(cwd: &Path, args: &[&str]) -> Out {
    let bin = Path::new(env!("CARGO_BIN_EXE_cargo-cuda-aot"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    Out::of(
        Command::new(env!("CARGO"))
            .arg("cuda-aot")
            .args(args)
            .current_dir(cwd)
            .env("PATH", path)
            .env_remove("CUDA_AOT_TOOLKIT_DIR")
            .env_remove("CUDA_AOT_BUILD_CACHE")
            .env_remove("CUDA_AOT_BUILDER_KEY")
            .env_remove("CUDA_AOT_PUBLISHER_KEY"),
    )
}

fn only(out: &Out, reason: &str) -> serde_json::Value {
    let m: Vec<_> = out
        .messages()
        .into_iter()
        .filter(|m| m["reason"] == reason)
        .collect();
    assert_eq!(m.len(), 1, "one {reason} in:\n{}", out.stdout);
    m[0].clone()
}

/// A prover's repository at `repo`: its kernels in `gpu/kernels/`, the spec at `spec`
/// (relative to `repo`), a README, and `git init` (nothing of cuda-aot's tree).
fn prover_repo(repo: &Path, spec: &str) {
    for (rel, text) in [
        ("gpu/kernels/saxpy.cu", SAXPY_CU),
        ("gpu/kernels/lanes.cuh", LANES_CUH),
        (spec, SPEC),
        ("README.md", "a prover\n"),
    ] {
        let p = repo.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let o = Command::new("git")
        .args(["init", "--quiet"])
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git init: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn issue_9_a_prover_repository_releases_its_own_kernels_with_cargo_cuda_aot() {
    common::toolkit_root(); // the pinned wheels are in the per-user cache
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("prover");
    prover_repo(&repo, "gpu/cuda-aot.toml");
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };

    // The whole pipeline: toolkit (from the pins built into the tool), build, sign,
    // publish, verify; everything lands beside the spec.
    let out = cargo_cuda_aot(&repo, &["release", "--spec", "gpu/cuda-aot.toml", "--json"]).ok();
    let r = only(&out, "release-finished");
    let work = repo.join("gpu/.cuda-aot");
    let registry = work.join("registry");
    assert_eq!(r["registry"], registry.display().to_string());
    assert_eq!(r["build"]["out"], work.join("build").display().to_string());
    assert_eq!(r["channel"], "dev");
    assert_eq!(r["verified_modules"], 1);
    let m = &r["build"]["modules"][0];
    assert_eq!(
        (m["module"].as_str(), m["target"].as_str()),
        (Some("saxpy"), Some("sm_90"))
    );
    assert!(work.join("toolkit").is_dir() && work.join("dev-keys/root.json").is_file());
    // Nothing of it can be committed by accident (dev keys are private keys).
    assert_eq!(
        git(&["status", "--porcelain", "--untracked-files=all"]),
        "?? README.md\n?? gpu/cuda-aot.toml\n?? gpu/kernels/lanes.cuh\n?? gpu/kernels/saxpy.cu\n"
    );

    // From anywhere in the repository, relative paths resolve against the spec: a rebuild
    // from the kernels folder finds the same cache and outputs and compiles nothing.
    let out = cargo_cuda_aot(
        &repo.join("gpu/kernels"),
        &["build", "--spec", "../cuda-aot.toml", "--json"],
    )
    .ok();
    let b = only(&out, "build-finished");
    assert_eq!(
        (b["nvcc_runs"].as_u64(), b["cached"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(b["out"], work.join("build").display().to_string());

    // The registry verifies on its own, as a prover host would check it.
    let root = work.join("dev-keys/root.json");
    let out = cargo_cuda_aot(
        &repo,
        &[
            "verify",
            "--registry",
            &registry.display().to_string(),
            "--trust",
            &root.display().to_string(),
            "--state",
            &tmp.path().join("state.json").display().to_string(),
        ],
    )
    .ok();
    assert!(
        out.stdout.contains("registry OK") && out.stdout.contains("saxpy"),
        "{}",
        out.stdout
    );

    // Reproducible from the external spec too.
    let out = cargo_cuda_aot(&repo, &["repro", "--spec", "gpu/cuda-aot.toml", "--json"]).ok();
    let p = only(&out, "repro-finished");
    doc_json::check("repro-finished", &p, tmp.path());
    assert_eq!(p["reproducible"], true, "{p}");
    assert_eq!(p["nvcc_runs"], serde_json::json!([1, 1]));
}

/// The spec's project is its folder, not the current folder and not cuda-aot's checkout:
/// a build of an external spec started inside this checkout writes nothing into it.
#[test]
fn an_external_spec_built_from_inside_this_checkout_writes_beside_the_spec() {
    let ws = common::Ws::new();
    let before: Vec<PathBuf> = list(&common::repo().join(".cuda-aot"));
    let out = Out::of(
        common::xtask()
            .current_dir(common::repo())
            .args([
                "build", "--module", "gamma", "--target", "sm_80", "--json", "--spec",
            ])
            .arg(ws.path("spec/release.toml")),
    )
    .ok();
    let b = only(&out, "build-finished");
    let work = ws.path("spec/.cuda-aot");
    assert_eq!(b["out"], work.join("build").display().to_string());
    assert!(work.join("cache/objects").is_dir());
    assert_eq!(list(&common::repo().join(".cuda-aot")), before);
}

/// The top two levels of a folder.
fn list(dir: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .max_depth(2)
        .sort_by_file_name()
        .into_iter()
        .filter_map(|e| e.ok().map(|e| e.into_path()))
        .collect()
}

/// The command after `marker` on a line of `text`, as shell words.
fn printed_command(text: &str, marker: &str) -> Vec<String> {
    let line = text
        .lines()
        .find_map(|l| l.split_once(marker).map(|(_, c)| c.trim().to_string()))
        .unwrap_or_else(|| panic!("no `{marker}` in:\n{text}"));
    common::shell_words(&line)
}

/// Runs a printed `cargo cuda-aot ...` command in `cwd`, as a user pasting it would.
fn run_printed(cwd: &Path, words: &[String]) -> Out {
    assert_eq!(
        words[..2],
        ["cargo", "cuda-aot"],
        "the printed command names another tool: {words:?}"
    );
    let args: Vec<&str> = words[2..].iter().map(String::as_str).collect();
    cargo_cuda_aot(cwd, &args)
}

/// Issue 17 item 7: in a prover's own repository (a spec outside cuda-aot, a folder with
/// a space in its name), every next step and `Fix:` line the tool prints names the
/// command the user ran, `cargo cuda-aot`, and works when pasted where the user stands.
#[test]
fn printed_next_steps_and_fix_lines_work_as_pasted_in_a_prover_repository() {
    common::toolkit_root();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("my prover");
    prover_repo(&repo, "gpu/kernels.toml");
    let out = cargo_cuda_aot(&repo, &["release", "--spec", "gpu/kernels.toml"]).ok();
    // 1. The release's own next step.
    let next = printed_command(&out.stdout, "verify with: ");
    let v = run_printed(&repo, &next).ok();
    assert!(v.stdout.contains("registry OK"), "{}", v.stdout);
    // 2. What the user types first, without --trust: the Fix names the dev root the
    //    release made, and that command works.
    let bare = cargo_cuda_aot(&repo, &["verify", "--registry", "gpu/.cuda-aot/registry"]).failed();
    let fix = bare.fix();
    assert!(
        fix.contains("--trust gpu/.cuda-aot/dev-keys/root.json"),
        "{}",
        bare.stderr
    );
    let mut again: Vec<String> = [
        "cargo",
        "cuda-aot",
        "verify",
        "--registry",
        "gpu/.cuda-aot/registry",
    ]
    .map(String::from)
    .to_vec();
    again.extend(printed_command(fix, "pass "));
    run_printed(&repo, &again).ok();
    // 3. A Fix line that names a command names the one the user ran.
    let e = cargo_cuda_aot(&repo, &["sign", "gpu/no-such-build"]).failed();
    assert!(
        e.fix().contains("cargo cuda-aot build") && !e.stderr.contains("cargo xtask"),
        "{}",
        e.stderr
    );
    // 4. The examples of --help too.
    let help = cargo_cuda_aot(&repo, &["release", "--help"]).ok();
    assert!(
        help.stdout.contains("cargo cuda-aot release --module")
            && !help.stdout.contains("cargo xtask"),
        "{}",
        help.stdout
    );
}
