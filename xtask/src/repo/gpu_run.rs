//! `cargo xtask gpu-run`: the GPU host's half of a GPU run. It runs every GPU test
//! executable, example and measurement of a bundle that `gpu-bundle` made, with each step's
//! whole output in its own log and one summary line per step.

use anyhow::{Context, Result, bail};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::process;

mod review;

use review::Review;

/// Run the GPU tests, examples and bench-load of a bundle on this GPU host.
///
/// Meant for the GPU host, where the bundle's own tool runs it: `.gpu/xtask gpu-run --out
/// DIR`, from the checkout (the GPU host has no Rust; `cargo xtask gpu-bundle` built
/// everything here). In order: the device line (`nvidia-smi`); the runtime's, the
/// foreign-style corpus's and (with a `--research` bundle) the library's GPU tests, run
/// `--ignored --test-threads=1` (the two-device tests skipped, and said so, on a host with
/// one GPU); the Rust prover, the C++ prover (`cuModuleLoadData`, then
/// `cuLibraryLoadData`), `doctor` probing this host for both registries, the LTO speed
/// example, the README example in a fresh project folder, with a `--review` bundle the
/// promotion review of the research kernel (parity of it and of its altered copy, keys and
/// a production trust root, the altered promotion refused, the promotion published and
/// verified, and the promoted kernel run by the runtime and both provers under the
/// production policy), and bench-load. Each step's whole
/// output goes to its own log in --out; `summary.txt` lists each step with its result.
/// Every step runs even when an earlier one failed; the exit status is 1 if any did.
#[derive(clap::Args)]
pub struct Args {
    /// The bundle `cargo xtask gpu-bundle` made.
    #[arg(long, value_name = "DIR", default_value = ".gpu")]
    bundle: PathBuf,
    /// The folder for the logs (created; files in it are replaced).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Leave out bench-load, the longest step (about four minutes on the H200).
    #[arg(long)]
    no_bench: bool,
}

/// One step's result, for the summary.
struct Outcome {
    step: &'static str,
    log: &'static str,
    ok: bool,
    detail: String,
    seconds: f64,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        // A bundle made by gpu-bundle, or advice on making one.
        self.check_bundle()?;
        let run = Run {
            bundle: self.bundle.clone(),
            out: self.out.clone(),
            review: Review::of(&self.bundle, &self.out),
        };
        let gpus = run.device_line()?;
        // The two-device tests are skipped (and said so) on a host with one GPU.
        let skip = run.skip_two_devices(gpus)?;
        // The GPU test executables.
        let mut outcomes = run.gpu_tests(&skip);
        // The Rust and the C++ prover examples.
        outcomes.extend(run.provers());
        let me = path(&std::env::current_exe().context("finding the running tool")?);
        // doctor, LTO speed and the README example.
        outcomes.extend(run.examples(&me)?);
        // The promotion review, with a `--review` bundle.
        if let Some(review) = &run.review {
            outcomes.extend(review.run(&run, &me)?);
        }
        // bench-load, unless --no-bench.
        if !self.no_bench {
            outcomes.push(run.bench_load(&me));
        }
        // summary.txt, printed too; an error if any step failed.
        run.summary(&outcomes)
    }

    /// Refuses a folder that `gpu-bundle` did not make.
    fn check_bundle(&self) -> Result<()> {
        let b = &self.bundle;
        if !b.join(".gpu-bundle").is_file() {
            return Err(crate::advice::fail(
                format!(
                    "{} is not a bundle made by cargo xtask gpu-bundle",
                    b.display()
                ),
                "run `cargo xtask gpu-bundle` on the build host and carry its folder here, then run this from the checkout",
            ));
        }
        Ok(())
    }
}

/// A path as an argument of a step's command.
fn path(p: &Path) -> String {
    p.display().to_string()
}

/// The arguments of a GPU test executable: the ignored (GPU) tests, one at a time, their
/// output shown, then `extra`.
fn test_args(extra: &[String]) -> Vec<String> {
    ["--ignored", "--test-threads=1", "--nocapture"]
        .iter()
        .map(|s| s.to_string())
        .chain(extra.iter().cloned())
        .collect()
}

/// Where one run reads its bundle and writes its logs.
struct Run {
    bundle: PathBuf,
    out: PathBuf,
    /// The promotion review, when the bundle has one (`gpu-bundle --review`).
    review: Option<Review>,
}

impl Run {
    /// The test arguments that skip the two-device tests on a host with fewer than two
    /// GPUs (written to `skipped.txt` and printed); none otherwise.
    fn skip_two_devices(&self, gpus: usize) -> Result<Vec<String>> {
        let mut skip: Vec<String> = Vec::new();
        if gpus < 2 {
            skip = vec!["--skip".into(), "two_devices".into()];
            let note = format!(
                "skipped: gpu_two_devices_* (needs two CUDA devices, this host has {gpus})\n"
            );
            std::fs::write(self.out.join("skipped.txt"), &note)?;
            print!("gpu-run: {note}");
        }
        Ok(skip)
    }

    /// The runtime's, the foreign-style corpus's and (with a `--research` bundle) the
    /// library's GPU tests; the runtime's with `skip`.
    fn gpu_tests(&self, skip: &[String]) -> Vec<Outcome> {
        let b = &self.bundle;
        let mut outcomes = Vec::new();
        let tests = test_args;
        outcomes.push(self.tests(
            "runtime GPU tests",
            "gpu-tests.txt",
            "runtime_tests",
            &tests(skip),
        ));
        outcomes.push(self.tests(
            "foreign-style corpus GPU tests",
            "foreign-tests.txt",
            "foreign_tests",
            &tests(&[]),
        ));
        if b.join("lib_tests_research").is_file() {
            outcomes.push(self.tests(
                "cuda layer GPU tests (research build)",
                "lib-tests-research.txt",
                "lib_tests_research",
                &tests(&[]),
            ));
        }
        outcomes
    }

    /// The Rust prover and the C++ prover (both load APIs).
    fn provers(&self) -> Vec<Outcome> {
        let b = &self.bundle;
        let mut outcomes = Vec::new();
        let (reg, trust) = (b.join("registry"), b.join("root.json"));
        outcomes.push(self.step(
            "Rust prover example",
            "prover.txt",
            &[vec![
                path(&b.join("prover")),
                "--registry".into(),
                path(&reg),
                "--trust".into(),
                path(&trust),
            ]],
            None,
        ));
        let state = path(&self.out.join("cpp-state.json"));
        let cpp = |extra: &[&str]| -> Vec<String> {
            let mut v = vec![
                path(&b.join("prover_cpp")),
                path(&reg),
                path(&trust),
                "--state".into(),
                state.clone(),
            ];
            v.extend(extra.iter().map(|s| s.to_string()));
            v
        };
        outcomes.push(self.step(
            "C++ prover example (cuModuleLoadData, then cuLibraryLoadData)",
            "prover-cpp.txt",
            &[cpp(&[]), cpp(&["--library"])],
            None,
        ));
        outcomes
    }

    /// `doctor` for both registries, the LTO speed example and the README example in a
    /// project folder of its own; `me` is this tool.
    fn examples(&self, me: &str) -> Result<Vec<Outcome>> {
        let b = &self.bundle;
        let mut outcomes = Vec::new();
        let (reg, foreign, trust) = (
            b.join("registry"),
            b.join("foreign-registry"),
            b.join("root.json"),
        );
        let doctor = |r: &Path| {
            vec![
                me.to_string(),
                "doctor".into(),
                "--registry".into(),
                path(r),
                "--trust".into(),
                path(&trust),
            ]
        };
        outcomes.push(self.step(
            "doctor (this host's devices, probed) for both registries",
            "doctor.txt",
            &[doctor(&reg), doctor(&foreign)],
            None,
        ));
        outcomes.push(self.step(
            "LTO speed (foreign_ntt vs foreign_ntt_lto)",
            "lto-speed.txt",
            &[vec![
                path(&b.join("lto_speed")),
                "--registry".into(),
                path(&foreign),
                "--trust".into(),
                path(&trust),
            ]],
            None,
        ));
        // The README example runs in a project folder of its own, as a user's would.
        let project = tempfile::tempdir().context("a temporary project folder")?;
        crate::files::copy_tree(&reg, &project.path().join(".cuda-aot/registry"))?;
        std::fs::create_dir_all(project.path().join(".cuda-aot/dev-keys"))?;
        std::fs::copy(&trust, project.path().join(".cuda-aot/dev-keys/root.json"))?;
        let readme =
            std::fs::canonicalize(b.join("readme")).context("finding the README example")?;
        outcomes.push(self.step(
            "README example",
            "readme.txt",
            &[vec![path(&readme)]],
            Some(project.path()),
        ));
        Ok(outcomes)
    }

    /// bench-load over both registries, its results into the logs folder; `me` is this
    /// tool.
    fn bench_load(&self, me: &str) -> Outcome {
        let b = &self.bundle;
        let (reg, foreign, trust) = (
            b.join("registry"),
            b.join("foreign-registry"),
            b.join("root.json"),
        );
        self.step(
            "bench-load",
            "bench-load.txt",
            &[vec![
                me.to_string(),
                "bench-load".into(),
                "--registry".into(),
                path(&reg),
                "--trust".into(),
                path(&trust),
                "--spec".into(),
                "manifests/release.toml".into(),
                "--also-registry".into(),
                path(&foreign),
                "--out".into(),
                path(&self.out),
                "--reps".into(),
                "20".into(),
            ]],
            None,
        )
    }

    /// Writes `summary.txt` (one line per step) and prints it; fails if any step did.
    fn summary(&self, outcomes: &[Outcome]) -> Result<()> {
        let mut summary = String::new();
        for o in outcomes {
            let _ = writeln!(
                summary,
                "{:<6} {:<62} {:>6.1} s  {}  ({})",
                if o.ok { "ok" } else { "FAILED" },
                o.step,
                o.seconds,
                o.detail,
                o.log
            );
        }
        std::fs::write(self.out.join("summary.txt"), &summary)?;
        println!(
            "\ngpu-run summary ({}):\n{summary}",
            self.out.join("summary.txt").display()
        );
        let failed = outcomes.iter().filter(|o| !o.ok).count();
        if failed > 0 {
            bail!(
                "{failed} of {} step(s) failed; their logs are in {}",
                outcomes.len(),
                self.out.display()
            );
        }
        Ok(())
    }

    /// Writes `device.txt` (the time and `nvidia-smi`'s line per GPU) and returns how many
    /// GPUs this host has.
    fn device_line(&self) -> Result<usize> {
        let smi = Command::new("nvidia-smi")
            .args([
                "--query-gpu=index,name,driver_version,compute_cap,memory.total",
                "--format=csv",
            ])
            .output();
        let text = match smi {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
            Ok(o) => bail!(
                "nvidia-smi failed ({}): {}",
                process::describe_status(&o.status),
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => {
                return Err(crate::advice::fail(
                    format!("nvidia-smi cannot be run here ({e}): this is not a GPU host"),
                    "run gpu-run on the GPU host (docs/gpu.md); here, `cargo xtask gpu-bundle` builds what it needs",
                ));
            }
        };
        let when = cuda_aot::metadata::Time::now().to_string();
        std::fs::create_dir_all(&self.out)
            .with_context(|| format!("creating {}", self.out.display()))?;
        std::fs::write(self.out.join("device.txt"), format!("{when}\n{text}"))?;
        print!("gpu-run: {when}\n{text}");
        Ok(text
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .count())
    }

    /// Runs a test executable of the bundle; the detail is its `test result:` line.
    fn tests(&self, step: &'static str, log: &'static str, exe: &str, args: &[String]) -> Outcome {
        let mut cmd = vec![self.bundle.join(exe).display().to_string()];
        cmd.extend(args.iter().cloned());
        let mut o = self.step(step, log, &[cmd], None);
        let text = std::fs::read_to_string(self.out.join(log)).unwrap_or_default();
        let results: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("test result:"))
            .collect();
        if results.is_empty() {
            o.ok = false;
            o.detail = format!("no `test result:` line; {}", o.detail);
        } else {
            o.detail = results.join("; ");
        }
        o
    }

    /// Runs `commands` one after the other (each to the end, whatever the previous did),
    /// their stdout and stderr in the log `log` under each command's line and its exit
    /// status, in `cwd` (the checkout by default), with the test environment the bundle's
    /// tests read.
    fn step(
        &self,
        step: &'static str,
        log: &'static str,
        commands: &[Vec<String>],
        cwd: Option<&Path>,
    ) -> Outcome {
        println!("== {step}");
        let started = Instant::now();
        let mut text = String::new();
        let mut ok = true;
        let mut statuses = Vec::new();
        for argv in commands {
            let _ = writeln!(text, "$ {}", argv.join(" "));
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..]).stdin(Stdio::null());
            if let Some(d) = cwd {
                cmd.current_dir(d);
            }
            self.environment(&mut cmd);
            match process::output(&mut cmd) {
                Ok(out) => {
                    text.push_str(&String::from_utf8_lossy(&out.stdout));
                    text.push_str(&String::from_utf8_lossy(&out.stderr));
                    let status = process::describe_status(&out.status);
                    let _ = writeln!(text, "[{status}]");
                    ok &= out.status.success();
                    statuses.push(status);
                }
                Err(e) => {
                    let _ = writeln!(text, "[could not be started: {e}]");
                    ok = false;
                    statuses.push(format!("could not be started: {e}"));
                }
            }
        }
        let _ = std::fs::write(self.out.join(log), &text);
        // The log's last lines, as the shell script printed them.
        let tail: Vec<&str> = text.lines().rev().take(12).collect();
        for l in tail.iter().rev() {
            println!("{l}");
        }
        Outcome {
            step,
            log,
            ok,
            detail: statuses.join(", "),
            seconds: started.elapsed().as_secs_f64(),
        }
    }

    /// What the bundle's tests and examples read: its registries and trust root, and
    /// NVRTC's folder for the research build.
    fn environment(&self, cmd: &mut Command) {
        let abs = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
        let ld = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
        cmd.env("LD_LIBRARY_PATH", format!("/usr/local/cuda/lib64:{ld}"))
            .env("CUDA_AOT_TEST_REGISTRY", abs(self.bundle.join("registry")))
            .env("CUDA_AOT_TEST_TRUST", abs(self.bundle.join("root.json")))
            .env(
                "CUDA_AOT_FOREIGN_REGISTRY",
                abs(self.bundle.join("foreign-registry")),
            );
        if let Some(review) = &self.review {
            cmd.envs(review.environment());
        }
    }
}
