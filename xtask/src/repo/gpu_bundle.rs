//! `cargo xtask gpu-bundle`: everything a run on the GPU host needs, built here (the GPU
//! host has no Rust) into one ignored folder: the release registry and the foreign-style
//! registry with the dev trust root, and release builds of the runtime's GPU tests, the
//! prover and README examples, the C++ example prover and the tool (for bench-load),
//! stripped. What `docs/gpu.md`
//! listed as a dozen shell steps, with the test executables found from cargo's own JSON.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{paths, process};

/// Build what a run on the GPU host needs into one folder (`.gpu/` by default).
///
/// Makes the dev release (`release`) and the foreign-style registry (`build`, `sign`,
/// `publish` of kernels/foreign/foreign.toml), then release builds of the runtime crate's
/// GPU tests (runtime, foreign, promoted), the prover and README examples and the tool
/// itself, copies them stripped into the folder with both registries and the dev trust
/// root, and prints the command to run there (`.gpu/xtask gpu-run --out DIR`). The tool is
/// built with NVRTC (`research`), for bench-load's NVRTC baseline. With --research also the
/// runtime's library tests of the research build.
#[derive(clap::Args)]
pub struct Args {
    /// The folder to fill (replaced; it must be ignored by git so it never lands in a
    /// commit).
    #[arg(long, value_name = "DIR", default_value = ".gpu")]
    out: PathBuf,
    /// Also the runtime's library tests of the research build (NVRTC); the tool always has
    /// bench-load's NVRTC baseline.
    #[arg(long)]
    research: bool,
    /// Also the promotion review of the research kernel, which `gpu-run` then runs: the
    /// parity runner, the parity and promoted GPU tests (research builds) and
    /// production-channel AOT builds (sm_90, sm_90a) of kernels/research/research.toml's
    /// ntt_fused and of its altered copy (kernels/research/altered/), in review/.
    #[arg(long)]
    review: bool,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let root = paths::repo_root();
        let out = if self.out.is_absolute() {
            self.out.clone()
        } else {
            root.join(&self.out)
        };
        ignored(&root, &out)?;
        replaceable(&out)?;
        let me = std::env::current_exe().context("finding the running tool")?;
        let work = paths::work_dir();
        let release = process::cargo_target_dir(&root)?.join("release");
        let steps = Steps {
            root,
            me,
            work,
            release,
        };
        // The dev release and the foreign-style registry.
        let foreign_registry = steps.registries()?;
        // Release builds: the examples, the tool with NVRTC, the C ABI and the C++ prover.
        let cpp_prover = steps.binaries()?;
        // The runtime's GPU test executables (with --research also its library tests).
        let tests = steps.tests(self.research)?;
        // With --review: the two AOT builds, the parity runner and the review's tests.
        let review = if self.review {
            Some(steps.review()?)
        } else {
            None
        };
        // The folder, replaced: its marker and every binary, stripped.
        let count = steps.fill(&out, cpp_prover, tests, review.as_ref())?;
        // Both registries and the dev trust root beside them.
        steps.registries_into(&out, &foreign_registry)?;
        // What the folder holds and the command to run there.
        summary(&out, count)
    }
}

/// What the build steps share: the checkout, this tool and the project's work folder.
struct Steps {
    root: PathBuf,
    me: PathBuf,
    work: PathBuf,
    /// Where cargo puts release builds: `<target dir>/release`, wherever
    /// `CARGO_TARGET_DIR` or cargo's configuration puts the target dir.
    release: PathBuf,
}

impl Steps {
    /// Runs this tool with `args` in the checkout, as one step.
    fn tool(&self, args: &[&str]) -> Result<()> {
        step(
            Command::new(&self.me).args(args).current_dir(&self.root),
            &args.join(" "),
        )
    }

    /// Runs cargo with `args` in the checkout, as one step.
    fn cargo(&self, args: &[&str]) -> Result<()> {
        step(
            process::cargo().args(args).current_dir(&self.root),
            &format!("cargo {}", args.join(" ")),
        )
    }

    /// The dev release (`release`) and the foreign-style registry (`build`, `sign`,
    /// `publish` of kernels/foreign/foreign.toml); returns the foreign registry's folder.
    fn registries(&self) -> Result<PathBuf> {
        let foreign_build = self.work.join("foreign-build");
        let foreign_registry = self.work.join("foreign-registry");
        self.tool(&["release"])?;
        let (fb, fr) = (
            foreign_build.display().to_string(),
            foreign_registry.display().to_string(),
        );
        self.tool(&[
            "build",
            "--spec",
            "kernels/foreign/foreign.toml",
            "--out",
            &fb,
        ])?;
        self.tool(&["sign", &fb])?;
        self.tool(&["publish", "--registry", &fr, &fb])?;
        Ok(foreign_registry)
    }

    /// Release builds of the examples, the tool (with NVRTC) and the C ABI, and the C++
    /// example prover compiled against it; returns the C++ prover's path.
    fn binaries(&self) -> Result<PathBuf> {
        self.cargo(&[
            "build",
            "--release",
            "-p",
            "cuda-aot",
            "--example",
            "prover",
            "--example",
            "readme",
            "--example",
            "lto_speed",
        ])?;
        // The tool always with NVRTC: bench-load's gate against an NVRTC build needs it
        // (the GPU host has libnvrtc), and without it that gate cannot pass.
        self.cargo(&[
            "build",
            "--release",
            "-p",
            "xtask",
            "--features",
            "research",
        ])?;
        self.cargo(&["build", "--release", "-p", "cuda-aot-capi"])?;
        let cpp_prover = paths::work_dir().join("prover-cpp");
        compile_cpp_prover(&self.root, &self.release, &cpp_prover)?;
        Ok(cpp_prover)
    }

    /// The runtime crate's GPU test executables (runtime, embedded, delegated_runtime,
    /// foreign, promoted) and, with
    /// `research`, its library tests of the research build.
    fn tests(&self, research: bool) -> Result<Vec<(String, PathBuf)>> {
        let root = &self.root;
        let mut tests = test_executables(
            root,
            &["--release", "-p", "cuda-aot"],
            &[
                "runtime",
                "embedded",
                "delegated_runtime",
                "foreign",
                "promoted",
            ],
        )?;
        if research {
            let lib = test_executables(
                root,
                &[
                    "--release",
                    "-p",
                    "cuda-aot",
                    "--features",
                    "research",
                    "--lib",
                ],
                &["cuda_aot"],
            )?;
            tests.extend(
                lib.into_iter()
                    .map(|(_, p)| ("lib_tests_research".to_string(), p)),
            );
        }
        Ok(tests)
    }

    /// The review's inputs: production-channel AOT builds of ntt_fused and of its altered
    /// copy, the parity runner, and the parity and promoted test executables; returns the
    /// builds' folder and the executables.
    fn review(&self) -> Result<Review> {
        let builds = self.work.join("review-build");
        for (name, spec) in [
            ("ntt_fused", "kernels/research/research.toml"),
            (
                "ntt_fused_altered",
                "kernels/research/altered/research.toml",
            ),
        ] {
            let dest = builds.join(name).display().to_string();
            self.tool(&[
                "build",
                "--spec",
                spec,
                "--module",
                "ntt_fused",
                "--target",
                "sm_90",
                "--target",
                "sm_90a",
                "--channel",
                "production",
                "--out",
                &dest,
            ])?;
        }
        let kernels = [
            "--release",
            "-p",
            "cuda-aot-kernels",
            "--features",
            "research",
        ];
        self.cargo(&[
            "build",
            "--release",
            "-p",
            "cuda-aot-kernels",
            "--features",
            "research",
            "--bin",
            "parity-runner",
        ])?;
        let mut exes = test_executables(&self.root, &kernels, &["parity_gpu"])?;
        exes.extend(test_executables(
            &self.root,
            &["--release", "-p", "cuda-aot", "--features", "research"],
            &["promoted"],
        )?);
        Ok((builds, exes))
    }

    /// Replaces `out` with a folder holding its marker, every binary stripped and, with
    /// `review`, the review's builds and binaries in `review/`; returns how many binaries
    /// (outside `review/`) it holds.
    fn fill(
        &self,
        out: &Path,
        cpp_prover: PathBuf,
        tests: Vec<(String, PathBuf)>,
        review: Option<&Review>,
    ) -> Result<usize> {
        let _ = std::fs::remove_dir_all(out);
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        std::fs::write(
            out.join(MARKER),
            b"made by cargo xtask gpu-bundle; replaced by the next\n",
        )
        .with_context(|| format!("writing {}", out.join(MARKER).display()))?;
        let release = &self.release;
        let mut binaries: Vec<(String, PathBuf)> = vec![
            ("prover".into(), release.join("examples/prover")),
            ("readme".into(), release.join("examples/readme")),
            ("lto_speed".into(), release.join("examples/lto_speed")),
            ("prover_cpp".into(), cpp_prover),
            ("xtask".into(), release.join("xtask")),
        ];
        binaries.extend(tests.into_iter().map(|(name, p)| {
            let name = if name.starts_with("lib_") {
                name
            } else {
                format!("{name}_tests")
            };
            (name, p)
        }));
        for (name, from) in &binaries {
            let to = out.join(name);
            std::fs::copy(from, &to)
                .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
            strip(&to);
        }
        if let Some((builds, exes)) = review {
            let dir = out.join("review");
            crate::files::copy_tree(builds, &dir.join("build"))?;
            let runner = self.release.join("parity-runner");
            let review_binaries = exes
                .iter()
                .map(|(name, p)| (format!("{name}_tests"), p.clone()))
                .chain([("parity-runner".to_string(), runner)]);
            for (name, from) in review_binaries {
                let to = dir.join(&name);
                std::fs::copy(&from, &to)
                    .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
                strip(&to);
            }
        }
        Ok(binaries.len())
    }

    /// Copies the release registry, the foreign-style registry and the dev trust root into
    /// `out`.
    fn registries_into(&self, out: &Path, foreign_registry: &Path) -> Result<()> {
        crate::files::copy_tree(&self.work.join("registry"), &out.join("registry"))?;
        crate::files::copy_tree(foreign_registry, &out.join("foreign-registry"))?;
        std::fs::copy(
            paths::dev_keys_dir().join("root.json"),
            out.join("root.json"),
        )
        .context("copying the dev trust root")?;
        Ok(())
    }
}

/// The review's AOT builds folder and its test executables (name, path).
type Review = (PathBuf, Vec<(String, PathBuf)>);

/// Prints what `out` holds (`binaries` binaries, the registries, the trust root, its size)
/// and the command to run there.
fn summary(out: &Path, binaries: usize) -> Result<()> {
    let bytes: u64 = crate::files::files_under(out)?
        .iter()
        .filter_map(|f| std::fs::metadata(&f.path).ok())
        .map(|m| m.len())
        .sum();
    println!(
        "{}: {} binaries, both registries and the dev trust root, {:.1} MiB",
        paths::shown(out),
        binaries,
        bytes as f64 / (1024.0 * 1024.0)
    );
    println!(
        "there, from the checkout: {}/xtask gpu-run --out <folder for the logs>",
        paths::shown(out)
    );
    Ok(())
}

/// Compiles `examples/cpp/prover.cpp` into `out` against the C ABI's static library
/// (`libcuda_aot_capi.a` of `release`, cargo's release folder) and the pinned toolkit's
/// CUDA headers and static runtime, so the GPU host needs nothing but its driver to run it.
fn compile_cpp_prover(root: &Path, release: &Path, out: &Path) -> Result<()> {
    let toolkit = cuda_aot_builder::toolchain::ensure_with(
        &cuda_aot_builder::toolchain::ToolchainOptions::new(crate::args::ToolkitChoice::Pinned),
    )?;
    let cuda = &toolkit.root;
    step(
        Command::new("c++")
            .current_dir(root)
            .args(["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror"])
            .arg("examples/cpp/prover.cpp")
            .arg("-Icapi/include")
            .arg(format!("-I{}", cuda.join("include").display()))
            .arg(release.join("libcuda_aot_capi.a"))
            .arg(cuda.join("lib/libcudart_static.a"))
            // What a Rust static library needs from the system, and cudart's own.
            .args([
                "-lgcc_s",
                "-lutil",
                "-lrt",
                "-lpthread",
                "-lm",
                "-ldl",
                "-o",
            ])
            .arg(out),
        "c++ examples/cpp/prover.cpp (static libcuda_aot_capi, static cudart)",
    )
}

/// Runs one step with its output shown, naming it when it fails.
fn step(cmd: &mut Command, what: &str) -> Result<()> {
    eprintln!("gpu-bundle: {what}");
    let status = process::status(cmd).with_context(|| format!("running {what}"))?;
    if !status.success() {
        bail!("{what}: {}", process::describe_status(&status));
    }
    Ok(())
}

/// The test executables of `cargo test --no-run ARGS` whose target is one of `names`,
/// read from cargo's JSON messages (`executable` of each compiler artifact).
fn test_executables(root: &Path, args: &[&str], names: &[&str]) -> Result<Vec<(String, PathBuf)>> {
    let what = format!("cargo test --no-run {}", args.join(" "));
    eprintln!("gpu-bundle: {what}");
    // stdout is cargo's JSON; its progress and errors go to the user's stderr as they come.
    let out = process::stdout_of(
        process::cargo()
            .args(["test", "--no-run", "--message-format=json"])
            .args(args)
            .current_dir(root)
            .stdin(Stdio::null()),
    )
    .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what}: {} (cargo's messages above)",
            process::describe_status(&out.status)
        );
    }
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(m) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(exe), Some(name)) = (m["executable"].as_str(), m["target"]["name"].as_str())
        else {
            continue;
        };
        if m["reason"] == "compiler-artifact" && names.contains(&name) {
            found.push((name.to_string(), PathBuf::from(exe)));
        }
    }
    for n in names {
        if !found.iter().any(|(f, _)| f == n) {
            bail!("{what} built no test executable `{n}`");
        }
    }
    Ok(found)
}

/// The file that marks a folder as a bundle, so that the next bundle may replace it.
const MARKER: &str = ".gpu-bundle";

/// Refuses to replace a folder that is not an earlier bundle (`--out .cuda-aot` would
/// otherwise delete the toolkit, the dev keys and the registry it is about to copy).
fn replaceable(out: &Path) -> Result<()> {
    let empty = std::fs::read_dir(out).map_or(true, |mut d| d.next().is_none());
    if empty || out.join(MARKER).is_file() {
        return Ok(());
    }
    Err(crate::advice::fail(
        format!(
            "{} holds files that no earlier gpu-bundle made (no {MARKER} in it)",
            paths::shown(out)
        ),
        "choose an empty or new folder, or delete this one yourself if nothing in it is needed",
    ))
}

/// Refuses a bundle folder git does not ignore (binaries must never land in a commit).
fn ignored(root: &Path, out: &Path) -> Result<()> {
    let probe = out.join("probe");
    let status = Command::new("git")
        .args(["check-ignore", "-q"])
        .arg(&probe)
        .current_dir(root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(_) => Err(crate::advice::fail(
            format!("{} is not ignored by git", paths::shown(out)),
            "bundle into .gpu/ (ignored), or add the folder to .gitignore or .git/info/exclude",
        )),
        Err(_) => Ok(()), // no git: nothing can be committed by accident
    }
}

/// Strips `path` when `strip` is there (smaller to send; the bundle works unstripped).
fn strip(path: &Path) {
    let _ = Command::new("strip")
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
