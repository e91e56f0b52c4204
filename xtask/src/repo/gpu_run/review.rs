//! The promotion review on the GPU host: the steps `gpu-run` adds when its bundle has a
//! `review/` folder (`cargo xtask gpu-bundle --review`). The research kernel `ntt_fused`
//! passes parity and is promoted into a production registry that the runtime, the Rust and
//! the C++ provers then load under the production policy; its deliberately altered copy
//! (`kernels/research/altered/`, committed) fails parity at its first differing output and
//! its promotion is refused.
//!
//! Private keys are generated into a temporary folder outside `--out` and deleted when the
//! run ends: only public files (trust root, reports, review, registry) reach the logs folder.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

use super::{Outcome, Run};

/// The research spec and the module the review promotes (paths from the checkout).
const SPEC: &str = "kernels/research/research.toml";
/// The altered copy's spec: the same but for its include folder.
const ALTERED_SPEC: &str = "kernels/research/altered/research.toml";
/// The module.
const MODULE: &str = "ntt_fused";

/// Where the review's inputs are in a bundle, and where its public outputs go.
pub(super) struct Review {
    /// `BUNDLE/review`: the parity runner, the GPU tests and the two AOT builds.
    inputs: PathBuf,
    /// `OUT/review`: reports, trust root, review, promotion record and the registry.
    out: PathBuf,
}

impl Review {
    /// The review of `bundle`, if it has one (`gpu-bundle --review`).
    pub(super) fn of(bundle: &Path, out: &Path) -> Option<Review> {
        let inputs = bundle.join("review");
        inputs.join("parity-runner").is_file().then(|| Review {
            inputs,
            out: out.join("review"),
        })
    }

    /// The environment the review's GPU tests read (`kernels/tests/parity_gpu.rs`,
    /// `tests/promoted.rs`).
    pub(super) fn environment(&self) -> Vec<(&'static str, PathBuf)> {
        let abs = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
        vec![
            (
                "CUDA_AOT_PARITY_RUNNER",
                abs(self.inputs.join("parity-runner")),
            ),
            ("CUDA_AOT_PARITY_SPEC", PathBuf::from(SPEC)),
            ("CUDA_AOT_PARITY_BUILD", abs(self.build("ntt_fused"))),
            ("CUDA_AOT_PARITY_ALTERED_SPEC", PathBuf::from(ALTERED_SPEC)),
            (
                "CUDA_AOT_PARITY_ALTERED_BUILD",
                abs(self.build("ntt_fused_altered")),
            ),
            ("CUDA_AOT_PROMOTED_REGISTRY", abs(self.out.join("registry"))),
            ("CUDA_AOT_PROMOTED_TRUST", abs(self.out.join("root.json"))),
        ]
    }

    fn build(&self, name: &str) -> PathBuf {
        self.inputs.join("build").join(name)
    }

    /// Runs the review's ten steps with `me` (this tool); every step runs whatever the
    /// previous did, as the rest of `gpu-run` does.
    pub(super) fn run(&self, run: &Run, me: &str) -> Result<Vec<Outcome>> {
        std::fs::create_dir_all(&self.out)
            .with_context(|| format!("creating {}", self.out.display()))?;
        // Written by the tool itself, before any step: the output folder starts empty.
        let _ = std::fs::remove_dir_all(self.out.join("registry"));
        let keys = tempfile::Builder::new()
            .prefix("cuda-aot-review-keys.")
            .tempdir()
            .context("a temporary folder for the review's private keys")?;
        let work = tempfile::Builder::new()
            .prefix("cuda-aot-review-work.")
            .tempdir()
            .context("a temporary work folder")?;
        let o = &self.out;
        let steps = Steps {
            review: self,
            run,
            me,
            keys: keys.path(),
            work: work.path(),
            report: o.join("parity-ntt_fused.json"),
            altered_report: o.join("parity-ntt_fused-altered.json"),
            registry: o.join("registry"),
            trust: o.join("root.json"),
        };
        let mut outcomes = Vec::new();
        // Steps 1-3: parity of ntt_fused, of its altered copy (stopped at a difference)
        // and the parity GPU tests.
        outcomes.extend(steps.parity());
        // Step 4: the keys and a production trust root.
        outcomes.extend(steps.trust_root());
        // Step 5: the promotion with the altered kernel's report, refused.
        outcomes.push(steps.promote_altered()?);
        // Step 6: ntt_fused promoted and published into a production registry.
        outcomes.push(steps.promote()?);
        // Steps 7-10: the registry verified and the promoted kernel run under the
        // production policy (GPU tests, Rust and C++ provers).
        outcomes.extend(steps.production());
        Ok(outcomes)
    }
}

/// A path as an argument of a step's command.
fn p(p: &Path) -> String {
    p.display().to_string()
}

/// Arguments of a step's command.
fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect::<Vec<String>>()
}

/// One review run: where its inputs, keys, work and outputs are.
struct Steps<'a> {
    review: &'a Review,
    run: &'a Run,
    /// This tool.
    me: &'a str,
    /// The temporary folder of the private keys.
    keys: &'a Path,
    /// The temporary work folder.
    work: &'a Path,
    /// The parity reports of ntt_fused and of its altered copy.
    report: PathBuf,
    altered_report: PathBuf,
    /// The production registry and its trust root.
    registry: PathBuf,
    trust: PathBuf,
}

impl Steps<'_> {
    /// The parity runner's command for the AOT build `build` of `spec`, writing `report`.
    fn parity_command(&self, build: &str, spec: &str, report: &Path) -> Vec<String> {
        let runner = p(&self.review.inputs.join("parity-runner"));
        let mut v = s(&[&runner, "--spec", spec, "--module", MODULE, "--build"]);
        v.push(p(&self.review.build(build)));
        v.push("--report".into());
        v.push(p(report));
        v
    }

    /// The private key file of `name`.
    fn key(&self, name: &str) -> PathBuf {
        self.keys.join(format!("{name}.key"))
    }

    /// The promote command of `spec`'s build copied to `folder`, with the parity `report`
    /// and both reviewers' keys, into `registry`.
    fn promote_command(
        &self,
        spec: &str,
        folder: &Path,
        report: &Path,
        registry: &Path,
    ) -> Vec<String> {
        let mut v = s(&[self.me, "promote", MODULE, "--spec", spec, "--out"]);
        v.push(p(folder));
        v.extend(s(&["--reuse-build", "--trust"]));
        v.push(p(&self.trust));
        v.push("--registry".into());
        v.push(p(registry));
        v.push("--parity-report".into());
        v.push(p(report));
        for r in ["reviewer", "reviewer2"] {
            v.push("--reviewer-key".into());
            v.push(p(&self.key(r)));
        }
        v
    }

    /// Steps 1-3: parity of ntt_fused, parity of the altered kernel (which must stop at a
    /// difference) and the parity GPU tests.
    fn parity(&self) -> Vec<Outcome> {
        let (run, mut outcomes) = (self.run, Vec::new());
        outcomes.push(run.step(
            "review 1: parity of ntt_fused (NVRTC, AOT sm_90 and sm_90a, CPU)",
            "review-1-parity.txt",
            &[self.parity_command("ntt_fused", SPEC, &self.report)],
            None,
        ));
        let altered = self.parity_command("ntt_fused_altered", ALTERED_SPEC, &self.altered_report);
        let mut o2 = run.step(
            "review 2: parity of the altered kernel stops at a difference",
            "review-2-parity-altered.txt",
            &[altered],
            None,
        );
        refused(&mut o2, first_difference(&self.altered_report));
        outcomes.push(o2);
        outcomes.push(run.tests(
            "review 3: parity GPU tests (passes, and the altered kernel named)",
            "review-3-parity-tests.txt",
            "review/parity_gpu_tests",
            &super::test_args(&[]),
        ));
        outcomes
    }

    /// Step 4: keys of every role, then a production trust root listing them with a
    /// reviewer threshold of 2.
    fn trust_root(&self) -> Vec<Outcome> {
        let (run, me, mut outcomes) = (self.run, self.me, Vec::new());
        const ROLES: [(&str, &str); 5] = [
            ("root", "root"),
            ("builder", "builder"),
            ("reviewer", "reviewer"),
            ("reviewer2", "reviewer"),
            ("publisher", "publisher"),
        ];
        let keygens: Vec<Vec<String>> = ROLES
            .iter()
            .map(|(name, role)| {
                let mut v = s(&[me, "keygen", "--role", role, "--out"]);
                v.push(p(&self.key(name)));
                v
            })
            .collect();
        outcomes.push(run.step(
            "review 4: keys (root, builder, two reviewers, publisher; deleted at the end)",
            "review-4-keys.txt",
            &keygens,
            None,
        ));
        let public = |name: &str| -> String {
            crate::devkeys::read_key(&self.key(name))
                .map(|k| k.public().to_string())
                .unwrap_or_else(|e| format!("(unreadable key {name}: {e:#})"))
        };
        let mut root = s(&[me, "trust-root", "--out"]);
        root.push(p(&self.trust));
        root.extend(s(&["--channel", "production", "--root"]));
        root.push(public("root"));
        root.push("--builder".into());
        root.push(public("builder"));
        for r in ["reviewer", "reviewer2"] {
            root.push("--reviewer".into());
            root.push(public(r));
        }
        root.extend(s(&["--reviewer-threshold", "2", "--publisher"]));
        root.push(public("publisher"));
        root.push("--sign-with".into());
        root.push(p(&self.key("root")));
        outcomes.push(run.step(
            "review 4: a production trust root, reviewer threshold 2",
            "review-4-trust-root.txt",
            &[root],
            None,
        ));
        outcomes
    }

    /// Step 5: the promotion with the altered kernel's report must be refused, saying
    /// `parity FAILED`.
    fn promote_altered(&self) -> Result<Outcome> {
        let (run, work) = (self.run, self.work);
        let altered_dir = work.join("altered");
        crate::files::copy_tree(
            &self.review.build("ntt_fused_altered"),
            &altered_dir.join("build"),
        )?;
        let mut o5 = run.step(
            "review 5: promotion with the altered kernel's report is refused",
            "review-5-promote-altered.txt",
            &[self.promote_command(
                ALTERED_SPEC,
                &altered_dir,
                &self.altered_report,
                &work.join("unused-registry"),
            )],
            None,
        );
        let log5 = std::fs::read_to_string(run.out.join(o5.log)).unwrap_or_default();
        refused(
            &mut o5,
            if log5.contains("parity FAILED") {
                Ok(())
            } else {
                Err("the refusal does not say `parity FAILED`".into())
            },
        );
        Ok(o5)
    }

    /// Step 6: ntt_fused promoted and published into the production registry; its review
    /// and promotion record copied into the outputs.
    fn promote(&self) -> Result<Outcome> {
        let (run, o) = (self.run, &self.review.out);
        let promote_dir = self.work.join("promote");
        crate::files::copy_tree(&self.review.build("ntt_fused"), &promote_dir.join("build"))?;
        let mut publish = self.promote_command(SPEC, &promote_dir, &self.report, &self.registry);
        publish.extend(s(&[
            "--note",
            "parity on the GPU host (NVRTC, sm_90, sm_90a, CPU); resources reviewed",
            "--publish",
            "--builder-key",
        ]));
        publish.push(p(&self.key("builder")));
        publish.push("--publisher-key".into());
        publish.push(p(&self.key("publisher")));
        let outcome = run.step(
            "review 6: promote ntt_fused into a production registry",
            "review-6-promote.txt",
            &[publish],
            None,
        );
        for (from, to) in [
            (promote_dir.join("review.json"), o.join("review.json")),
            (
                promote_dir.join("build/promotions/ntt_fused.json"),
                o.join("promotion-ntt_fused.json"),
            ),
        ] {
            let _ = std::fs::copy(from, to);
        }
        Ok(outcome)
    }

    /// Steps 7-10: `verify --production` of the registry, the promoted GPU tests, and the
    /// Rust and C++ provers under the production policy.
    fn production(&self) -> Vec<Outcome> {
        let (run, me, work, mut outcomes) = (self.run, self.me, self.work, Vec::new());
        let (registry, trust) = (&self.registry, &self.trust);
        let mut verify = s(&[me, "verify", "--production", "--registry"]);
        verify.push(p(registry));
        verify.push("--trust".into());
        verify.push(p(trust));
        verify.push("--state".into());
        verify.push(p(&work.join("state.json")));
        outcomes.push(run.step(
            "review 7: verify --production",
            "review-7-verify.txt",
            &[verify],
            None,
        ));
        outcomes.push(run.tests(
            "review 8: the promoted kernel under Policy::production(); research refused",
            "review-8-promoted-tests.txt",
            "review/promoted_tests",
            &super::test_args(&[]),
        ));
        let mut prover = s(&[&p(&run.bundle.join("prover")), "--production", "--registry"]);
        prover.push(p(registry));
        prover.push("--trust".into());
        prover.push(p(trust));
        prover.extend(s(&["--log-n", "20"]));
        outcomes.push(run.step(
            "review 9: the Rust prover under Policy::production()",
            "review-9-prover.txt",
            &[prover],
            None,
        ));
        let mut cpp = vec![p(&run.bundle.join("prover_cpp")), p(registry), p(trust)];
        cpp.extend(s(&["--production", "--state"]));
        cpp.push(p(&work.join("cpp-state.json")));
        outcomes.push(run.step(
            "review 10: the C++ prover under the production policy",
            "review-10-prover-cpp.txt",
            &[cpp],
            None,
        ));
        outcomes
    }
}

/// A step that must be refused: it passes when its command failed and `why` shows the
/// refusal was the expected one.
fn refused(o: &mut Outcome, why: std::result::Result<(), String>) {
    let failed = !o.ok;
    o.ok = failed && why.is_ok();
    o.detail = match (failed, why) {
        (true, Ok(())) => format!("refused as expected ({})", o.detail),
        (true, Err(e)) => format!("failed, but not as expected: {e} ({})", o.detail),
        (false, _) => format!("NOT refused ({})", o.detail),
    };
}

/// Whether the parity report at `path` says FAIL with a first difference.
fn first_difference(path: &Path) -> std::result::Result<(), String> {
    let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if v["verdict"] == "pass" || v["first_difference"].is_null() {
        return Err(format!(
            "{}: verdict {}, first difference {}",
            path.display(),
            v["verdict"],
            v["first_difference"]
        ));
    }
    Ok(())
}
