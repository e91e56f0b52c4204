//! Issue 7 at process level: `cargo xtask promote`, `publish` and `verify --production` as
//! real processes, with generated root, builder, reviewer and publisher keys, a production
//! trust root, real nvcc builds of the research kernel and a real directory registry.
//!
//! The GPU half (the parity runner) cannot run here: these tests write the parity report
//! the way `parity-runner` does, bound to the manifests the test just built (`report_for`).
//! The reports of real runs on the H200 are in docs/evidence/; the GPU script
//! (`gpu-bundle --review`, then `gpu-run` there) runs the whole path there, the load under Policy::production()
//! included.
//!
//! The altered research kernel of that run (kernels/research/altered/, a committed fixture)
//! is held to `ntt_fused` but for one line here, and built (issue 17 item 8).
//!
//! The tests, by concern: `refusals` (promotions refused before a record is written),
//! `reviewers` (a reviewer threshold of two, reviewers signing one after the other),
//! `production` (what `verify --production` says of a release without promotions),
//! `teams` (a delegated team's reviewers promote its module, issue 46) and `altered` (the
//! altered research kernel fixture). This file holds the generated keys and
//! trust root of one promotion (`Env`) and the parity report the tests write.

#[path = "../common/mod.rs"]
mod common;

mod altered;
mod production;
mod refusals;
mod reviewers;
mod teams;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use cuda_aot::{Digest, Manifest};
use cuda_aot_kernels::parity::module::ParityModule;
use cuda_aot_kernels::parity::report::{
    AotRecord, BufferRecord, CaseRecord, DeviceRecord, ParityReport, ResearchBuildRecord,
    ResourceRecord, Resources, Verdict,
};
use cuda_aot_kernels::parity::spec::Element;

fn research_spec() -> PathBuf {
    common::repo().join("kernels/research/research.toml")
}

/// Generated keys, a production trust root, and the folders of one promotion.
struct Env {
    dir: tempfile::TempDir,
    reviewers: Vec<PathBuf>,
}

impl Env {
    /// Keys for every role (two reviewers) and a production root with a reviewer threshold
    /// of `threshold`.
    fn new(threshold: u32) -> Env {
        Env::with_root_args(threshold, |_| {})
    }

    /// [`Env::new`], with `extra` adding to the `trust-root` command (a delegations role).
    fn with_root_args(threshold: u32, extra: impl FnOnce(&mut std::process::Command)) -> Env {
        common::toolkit_root();
        let dir = tempfile::tempdir().unwrap();
        let env = Env {
            reviewers: vec![
                dir.path().join("reviewer.key"),
                dir.path().join("reviewer2.key"),
            ],
            dir,
        };
        let mut pubs = BTreeMap::new();
        for role in ["root", "builder", "reviewer", "reviewer2", "publisher"] {
            pubs.insert(
                role,
                common::keygen(role.trim_end_matches('2'), &env.key(role)),
            );
        }
        let mut cmd = common::xtask();
        cmd.arg("trust-root")
            .arg("--out")
            .arg(env.root())
            .args(["--channel", "production", "--root", &pubs["root"]])
            .args([
                "--builder",
                &pubs["builder"],
                "--publisher",
                &pubs["publisher"],
            ])
            .args([
                "--reviewer",
                &pubs["reviewer"],
                "--reviewer",
                &pubs["reviewer2"],
            ])
            .args(["--reviewer-threshold", &threshold.to_string()])
            .arg("--sign-with")
            .arg(env.key("root"));
        extra(&mut cmd);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        env
    }

    fn key(&self, role: &str) -> PathBuf {
        self.dir.path().join(format!("{role}.key"))
    }
    fn root(&self) -> PathBuf {
        self.dir.path().join("root.json")
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn registry(&self) -> PathBuf {
        self.path("registry")
    }

    /// `cargo xtask promote ntt_fused` for sm_90 with this environment's root, registry,
    /// folders and `extra` arguments.
    /// `promote` continuing from the parity report `report`, signed by one reviewer key.
    fn promote_with(&self, spec: &Path, report: &Path, reviewer: &Path) -> Output {
        self.promote(
            spec,
            &[
                "--parity-report",
                report.to_str().unwrap(),
                "--reviewer-key",
                reviewer.to_str().unwrap(),
            ],
        )
    }

    /// Co-signs the partial record `partial` with `reviewer`, deriving again from `report`.
    fn cosign(&self, spec: &Path, report: &Path, partial: &Path, reviewer: &Path) -> Output {
        self.promote(
            spec,
            &[
                "--parity-report",
                report.to_str().unwrap(),
                "--cosign",
                partial.to_str().unwrap(),
                "--reviewer-key",
                reviewer.to_str().unwrap(),
            ],
        )
    }

    fn promote(&self, spec: &Path, extra: &[&str]) -> Output {
        common::xtask()
            .args(["promote", "ntt_fused", "--target", "sm_90"])
            .arg("--spec")
            .arg(spec)
            .arg("--out")
            .arg(self.path("promote"))
            .arg("--cache-dir")
            .arg(self.path("cache"))
            .arg("--trust")
            .arg(self.root())
            .arg("--registry")
            .arg(self.registry())
            .args(extra)
            .output()
            .unwrap()
    }

    fn verify_production(&self) -> Output {
        common::xtask()
            .args(["verify", "--production", "--registry"])
            .arg(self.registry())
            .arg("--trust")
            .arg(self.root())
            .arg("--state")
            .arg(self.path("state.json"))
            .output()
            .unwrap()
    }

    fn build_out(&self) -> PathBuf {
        self.path("promote/build")
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", text(&o));
    text(&o)
}

fn refused(o: Output) -> String {
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    text(&o)
}

/// A passing parity report for the module built in `build_out` from `spec`, written as the
/// parity runner writes one (its GPU figures are the cubin's, as an H200 reports them for
/// these kernels).
fn report_for(spec: &Path, build_out: &Path) -> ParityReport {
    let m = ParityModule::load(spec, "ntt_fused").unwrap();
    let dir = build_out.join("ntt_fused");
    let mut manifests = Vec::new();
    let mut aot = Vec::new();
    let mut resources = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if !p.to_string_lossy().ends_with(".manifest.json") {
            continue;
        }
        let bytes = std::fs::read(&p).unwrap();
        let man: Manifest = serde_json::from_slice(&bytes).unwrap();
        manifests.push(Digest::of(&bytes));
        if man.identity.sm.to_string() == "sm_90" {
            aot.push(AotRecord {
                target: "sm_90".into(),
                manifest: Digest::of(&bytes),
                module_digest: man.module_digest,
                toolkit: format!("nvcc {}", man.identity.toolkit.nvcc),
            });
            for build in ["nvrtc sm_90", "aot sm_90"] {
                for f in &man.functions {
                    let r = Resources::of_abi(&f.abi);
                    resources.push(ResourceRecord {
                        entry: f.symbol.to_string(),
                        build: build.into(),
                        cubin: r,
                        device: r,
                    });
                }
            }
        }
    }
    manifests.sort();
    let source = std::fs::read(&m.source).unwrap();
    let programs = m.parity.programs(&m.geometry).unwrap();
    ParityReport {
        schema: ParityReport::SCHEMA.into(),
        module: "ntt_fused".into(),
        schedule_version: m.schedule_version,
        verdict: Verdict::Pass,
        first_difference: None,
        error: None,
        spec_digest: m.spec_digest(),
        source_digest: Digest::of(&source),
        device: DeviceRecord {
            name: "NVIDIA H200".into(),
            uuid: "GPU-00000000-0000-0000-0000-000000000000".into(),
            sm: "sm_90".into(),
            driver: "13.0".into(),
        },
        research_build: ResearchBuildRecord {
            version: "NVRTC 13.0".into(),
            target: "sm_90".into(),
            options: m.research_options(),
            module_digest: Digest::of(b"nvrtc cubin"),
            size: 1,
            compile_ms: 1.0,
        },
        aot,
        manifests,
        cases: programs
            .iter()
            .map(|p| CaseRecord {
                name: p.case.clone(),
                seed: p.seed,
                vars: p.vars.clone(),
                launches: p.launches.len(),
                inputs: vec![BufferRecord {
                    name: "data".into(),
                    element: Element::U64,
                    elements: 1 << p.vars["log_n"],
                    blake3: Digest::of(b"inputs"),
                }],
                outputs: vec![],
                time_ms: BTreeMap::new(),
                pass: true,
            })
            .collect(),
        resources,
        started: "2026-11-30T00:00:00Z".into(),
        finished: "2026-11-30T00:00:01Z".into(),
        command: vec!["parity-runner".into()],
    }
}

fn write_report(env: &Env, name: &str, r: &ParityReport) -> PathBuf {
    let p = env.path(name);
    std::fs::write(&p, serde_json::to_vec_pretty(r).unwrap()).unwrap();
    p
}

/// Step 1 only (no report yet): builds, prints the GPU-host commands, refuses to promote.
fn build_step(env: &Env, spec: &Path) -> String {
    refused(env.promote(spec, &[]))
}
