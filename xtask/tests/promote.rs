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

mod common;

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
        let out = common::xtask()
            .arg("trust-root")
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
            .arg(env.key("root"))
            .output()
            .unwrap();
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

#[test]
fn issue_7_promotion_without_a_parity_report_is_refused() {
    let env = Env::new(1);
    let out = build_step(&env, &research_spec());
    assert!(out.contains("1/5 AOT build: ntt_fused for sm_90"), "{out}");
    assert!(
        out.contains("parity-runner --spec kernels/research/research.toml --module ntt_fused"),
        "{out}"
    );
    assert!(out.contains("stopped at step 2: no parity report"), "{out}");
    assert!(
        out.contains("Fix: run the parity runner on a GPU host"),
        "{out}"
    );
    assert!(
        !env.build_out().join("promotions").exists(),
        "no promotion record without a report"
    );
    // Built for sm_90 with the pinned toolkit, production channel.
    let man: Manifest = serde_json::from_slice(
        &std::fs::read(env.build_out().join("ntt_fused/sm_90.cubin.manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(man.channel, cuda_aot::Channel::Production);
}

#[test]
fn issue_7_a_parity_report_that_does_not_bind_to_the_manifests_is_refused() {
    let env = Env::new(1);
    let spec = research_spec();
    build_step(&env, &spec);
    let good = report_for(&spec, &env.build_out());
    let reviewer = &env.reviewers[0];
    // A report of another build (one manifest digest changed).
    let mut other = good.clone();
    other.manifests[0] = Digest::of(b"a manifest of another build");
    other.aot[0].manifest = other.manifests[0];
    let p = write_report(&env, "other.json", &other);
    let out = refused(env.promote_with(&spec, &p, reviewer));
    assert!(
        out.contains("does not bind to this build's manifests"),
        "{out}"
    );
    assert!(out.contains(&good.manifests[0].to_string()), "{out}");
    // A report of another parity spec (a case changed).
    let mut spec_changed = good.clone();
    spec_changed.spec_digest = Digest::of(b"another spec");
    let p = write_report(&env, "spec.json", &spec_changed);
    let out = refused(env.promote_with(&spec, &p, reviewer));
    assert!(out.contains("ran parity spec"), "{out}");
    // A failed report, whatever it binds, names its first difference.
    let mut failed = good.clone();
    failed.verdict = Verdict::Fail;
    failed.first_difference = Some(cuda_aot_kernels::parity::compare::Difference {
        case: "2^20 (two full launches)".into(),
        launch: Some(1),
        entry: "ntt_stages".into(),
        buffer: "data".into(),
        index: 4097,
        expected: 17,
        expected_by: "cpu".into(),
        actual: 18,
        actual_by: "nvrtc sm_90".into(),
    });
    let p = write_report(&env, "failed.json", &failed);
    let out = refused(env.promote_with(&spec, &p, reviewer));
    assert!(
        out.contains("parity FAILED: case `2^20 (two full launches)` after launch 1 (ntt_stages): buffer `data` element 4097"),
        "{out}"
    );
    assert!(!env.build_out().join("promotions").exists());
}

#[test]
fn issue_7_a_builder_key_signing_as_reviewer_is_refused() {
    let env = Env::new(1);
    let spec = research_spec();
    build_step(&env, &spec);
    let p = write_report(&env, "r.json", &report_for(&spec, &env.build_out()));
    let builder = env.key("builder");
    let out = refused(env.promote_with(&spec, &p, &builder));
    assert!(
        out.contains("is a builder key, not a reviewer key"),
        "{out}"
    );
    assert!(out.contains("3/5 resource review"), "steps 1-3 ran: {out}");
    assert!(!out.contains("4/5"), "{out}");
    assert!(!env.build_out().join("promotions").exists());
}

/// A production release end to end (issue 7, item 5): build → promote (parity report,
/// resource review, two reviewers) → sign → publish → verify --production; one reviewer
/// under a threshold of two is refused first.
#[test]
fn issue_7_one_signature_under_a_reviewer_threshold_of_two_is_refused_and_two_release() {
    let env = Env::new(2);
    let spec = research_spec();
    build_step(&env, &spec);
    let p = write_report(&env, "r.json", &report_for(&spec, &env.build_out()));
    let report = p.to_str().unwrap();
    let (r1, r2) = (
        env.reviewers[0].to_str().unwrap(),
        env.reviewers[1].to_str().unwrap(),
    );
    let out = refused(env.promote(&spec, &["--parity-report", report, "--reviewer-key", r1]));
    assert!(
        out.contains("1 distinct reviewer key(s) given, under the reviewer threshold 2"),
        "{out}"
    );
    // The same key twice counts once.
    let out = refused(env.promote(
        &spec,
        &[
            "--parity-report",
            report,
            "--reviewer-key",
            r1,
            "--reviewer-key",
            r1,
        ],
    ));
    assert!(out.contains("under the reviewer threshold 2"), "{out}");
    // Two reviewers: promoted, signed, published, verified as production.
    let (b, pk) = (env.key("builder"), env.key("publisher"));
    let out = ok(env.promote(
        &spec,
        &[
            "--parity-report",
            report,
            "--reviewer-key",
            r1,
            "--reviewer-key",
            r2,
            "--note",
            "parity on the H200, shared memory reviewed",
            "--reuse-build",
            "--publish",
            "--builder-key",
            b.to_str().unwrap(),
            "--publisher-key",
            pk.to_str().unwrap(),
        ],
    ));
    println!("{out}");
    for step in [
        "1/5 AOT build",
        "2/5 parity: PASS on NVIDIA H200",
        "3/5 resource review",
        "4/5 promotion record",
        "5/5 release set: ntt_fused joined",
    ] {
        assert!(out.contains(step), "{step}: {out}");
    }
    // The review table: shared memory of the fused kernel, not released before.
    assert!(
        out.contains("ntt_stages") && out.contains("9216") && out.contains("(not released)"),
        "{out}"
    );
    let review = std::fs::read_to_string(env.path("promote/review.json")).unwrap();
    assert!(review.contains("cuda-aot/resource-review/v1"), "{review}");
    let out = ok(env.verify_production());
    assert!(
        out.contains("registry OK") && out.contains("[production]"),
        "{out}"
    );
    assert_eq!(
        out.matches("reviewer ").count(),
        2,
        "two reviewers named: {out}"
    );
}

#[test]
fn issue_7_a_promotion_replayed_against_another_manifest_is_refused() {
    let env = Env::new(1);
    let spec = research_spec();
    build_step(&env, &spec);
    let p = write_report(&env, "r.json", &report_for(&spec, &env.build_out()));
    let r1 = env.reviewers[0].to_str().unwrap();
    ok(env.promote(
        &spec,
        &["--parity-report", p.to_str().unwrap(), "--reviewer-key", r1],
    ));
    let record = env.build_out().join("promotions/ntt_fused.json");
    assert!(record.exists());
    // Another build of the module (its geometry changed: other bytes, other manifests),
    // offered with the first build's promotion.
    let copy = env.path("kernels");
    for (from, to) in [("kernels/research", "research"), ("kernels/cuda", "cuda")] {
        std::fs::create_dir_all(copy.join(to)).unwrap();
        for e in std::fs::read_dir(common::repo().join(from)).unwrap() {
            let e = e.unwrap();
            // The files only: kernels/research/altered/ is another spec's.
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), copy.join(to).join(e.file_name())).unwrap();
            }
        }
    }
    let other_spec = copy.join("research/research.toml");
    let text = std::fs::read_to_string(&other_spec).unwrap();
    std::fs::write(
        &other_spec,
        text.replace("block = 256, tile_log = 10", "block = 128, tile_log = 10"),
    )
    .unwrap();
    let other = env.path("other-build");
    let out = common::xtask()
        .args([
            "build",
            "--module",
            "ntt_fused",
            "--target",
            "sm_90",
            "--channel",
            "production",
        ])
        .arg("--spec")
        .arg(&other_spec)
        .arg("--out")
        .arg(&other)
        .arg("--cache-dir")
        .arg(env.path("cache"))
        .output()
        .unwrap();
    ok(out);
    ok(common::xtask()
        .arg("sign")
        .arg(&other)
        .arg("--builder-key")
        .arg(env.key("builder"))
        .output()
        .unwrap());
    let out = refused(
        common::xtask()
            .args(["publish", "--registry"])
            .arg(env.registry())
            .arg("--trust")
            .arg(env.root())
            .arg("--publisher-key")
            .arg(env.key("publisher"))
            .arg("--promotion")
            .arg(&record)
            .arg(&other)
            .output()
            .unwrap(),
    );
    let digest =
        Digest::of(&std::fs::read(other.join("ntt_fused/sm_90.cubin.manifest.json")).unwrap());
    assert!(
        out.contains("not promoted") || out.contains("NotPromoted") || out.contains("promotion"),
        "{out}"
    );
    assert!(
        out.contains(&digest.to_string()),
        "names the unpromoted manifest {digest}: {out}"
    );
    assert!(out.contains("cargo xtask promote ntt_fused"), "{out}");
}

#[test]
fn issue_7_verify_production_on_a_fresh_dev_release_names_the_missing_promotions() {
    common::toolkit_root();
    let dir = tempfile::tempdir().unwrap();
    let p = |r: &str| dir.path().join(r);
    common::Keys::new(dir.path(), "dev");
    ok(common::xtask()
        .args([
            "build",
            "--module",
            "ntt_fused",
            "--target",
            "sm_90",
            "--target",
            "sm_90a",
        ])
        .arg("--spec")
        .arg(research_spec())
        .arg("--out")
        .arg(p("build"))
        .arg("--cache-dir")
        .arg(p("cache"))
        .output()
        .unwrap());
    ok(common::xtask()
        .arg("sign")
        .arg(p("build"))
        .arg("--builder-key")
        .arg(p("builder.key"))
        .output()
        .unwrap());
    ok(common::xtask()
        .args(["publish", "--registry"])
        .arg(p("registry"))
        .arg("--trust")
        .arg(p("root.json"))
        .arg("--publisher-key")
        .arg(p("publisher.key"))
        .arg(p("build"))
        .output()
        .unwrap());
    let verify = |production: bool| {
        let mut c = common::xtask();
        c.args(["verify", "--registry"])
            .arg(p("registry"))
            .arg("--trust")
            .arg(p("root.json"))
            .arg("--state")
            .arg(p("state.json"));
        if production {
            c.arg("--production");
        }
        c.output().unwrap()
    };
    ok(verify(false));
    let out = refused(verify(true));
    assert!(
        out.contains("channel \"dev\" where \"production\" is required"),
        "{out}"
    );
    assert!(
        out.contains("2 manifest(s) lack the promotion a production verifier requires"),
        "{out}"
    );
    for sm in ["sm_90", "sm_90a"] {
        let d = Digest::of(
            &std::fs::read(p(&format!("build/ntt_fused/{sm}.cubin.manifest.json"))).unwrap(),
        );
        assert!(out.contains(&format!("manifest {d}")), "{sm} {d}: {out}");
    }
    assert!(out.contains("no promotion record for this module"), "{out}");
    assert!(
        out.contains("Fix: promote each module") && out.contains("cargo xtask promote ntt_fused"),
        "{out}"
    );
}

/// Reviewers on different machines: the first signs a partial record, the second derives
/// steps 1-3 again and co-signs it; a co-signer who derived something else is refused.
#[test]
fn issue_7_two_reviewers_sign_one_after_the_other() {
    let env = Env::new(2);
    let spec = research_spec();
    build_step(&env, &spec);
    let report = report_for(&spec, &env.build_out());
    let p = write_report(&env, "r.json", &report);
    let r1 = env.reviewers[0].to_str().unwrap();
    let out = ok(env.promote(
        &spec,
        &[
            "--parity-report",
            p.to_str().unwrap(),
            "--reviewer-key",
            r1,
            "--partial",
            "--note",
            "alice: parity and shared memory",
        ],
    ));
    assert!(
        out.contains("PARTIAL, 1 of 2 reviewer signature(s)"),
        "{out}"
    );
    let partial = env.path("promote/promotion.partial.json");
    assert!(partial.exists() && !env.build_out().join("promotions").exists());
    // A co-signer with another report (the same run, another file) is refused.
    let mut other = report.clone();
    other.finished = "2026-11-30T00:00:02Z".into();
    let q = write_report(&env, "other.json", &other);
    let out = refused(env.cosign(&spec, &q, &partial, &env.reviewers[1]));
    assert!(
        out.contains("the partial record promises parity report"),
        "{out}"
    );
    // The same reviewer again does not reach the threshold.
    let out = refused(env.cosign(&spec, &p, &partial, &env.reviewers[0]));
    assert!(out.contains("reviewer"), "{out}");
    // The second reviewer: promoted with both signatures and alice's note.
    let out = ok(env.cosign(&spec, &p, &partial, &env.reviewers[1]));
    assert!(
        out.contains("4/5 promotion record") && out.contains("threshold 2"),
        "{out}"
    );
    let record = std::fs::read(env.build_out().join("promotions/ntt_fused.json")).unwrap();
    let env_json: serde_json::Value = serde_json::from_slice(&record).unwrap();
    assert_eq!(env_json["signatures"].as_array().unwrap().len(), 2);
    let parsed = cuda_aot::envelope::Envelope::parse(
        &record,
        1 << 20,
        cuda_aot::envelope::PayloadType::Promotion,
        "record",
    )
    .unwrap();
    let payload = String::from_utf8(parsed.payload_bytes("record").unwrap()).unwrap();
    assert!(
        payload.contains("alice: parity and shared memory"),
        "{payload}"
    );
}

/// The line of `kernels/research/ntt_fused.cu` that the altered kernel breaks, and what it
/// becomes there (`kernels/research/altered/`: the GPU review shows parity stopping at
/// its first differing output and `promote` refusing its report).
const UNALTERED_LINE: &str = "const unsigned long long kg = ((unsigned long long)k << s0) + l;";
const ALTERED_LINE: &str = "const unsigned long long kg = ((unsigned long long)k << s0); // ALTERED: forgets the low bits l";

/// `altered` is a header of `comment` lines ending with a blank line, then `original` with
/// some lines changed, none added or removed: the changed lines, as (line number in
/// `original`, its text there, its text in `altered`).
fn changed_lines(original: &str, altered: &str, comment: &str) -> Vec<(usize, String, String)> {
    let (o, a): (Vec<&str>, Vec<&str>) = (original.lines().collect(), altered.lines().collect());
    let blank = a.iter().position(|l| l.is_empty());
    let header = &a[..blank.unwrap_or(a.len())];
    assert!(
        blank.is_some() && !header.is_empty() && header.iter().all(|l| l.starts_with(comment)),
        "the altered copy should open with `{comment}` comment lines and a blank line: {header:#?}"
    );
    let body = &a[header.len() + 1..];
    assert_eq!(
        body.len(),
        o.len(),
        "the altered copy has {} lines below its header, the original {}: copy the original \
         again and alter it",
        body.len(),
        o.len()
    );
    o.iter()
        .zip(body)
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| (i + 1, x.to_string(), y.to_string()))
        .collect()
}

/// Issue 17 item 8: the altered kernel is a committed fixture, not made by `sed` on the GPU
/// review's build host; this keeps it from drifting from the research kernel. Its `.cu`
/// is `ntt_fused.cu` with the one line changed, its spec `research.toml` with the include
/// folders re-rooted to its own folder (both under a header comment), and the parity
/// runner reads the same module from it: same flags, geometry, parity spec and include
/// folders, the altered source.
#[test]
fn issue_17_the_altered_kernel_is_ntt_fused_with_one_line_changed() {
    let dir = common::repo().join("kernels/research");
    let read = |rel: &str| std::fs::read_to_string(dir.join(rel)).unwrap();
    let cu = read("ntt_fused.cu");
    assert_eq!(
        cu.matches(UNALTERED_LINE).count(),
        1,
        "ntt_fused.cu should hold `{UNALTERED_LINE}` once: the altered kernel breaks that line"
    );
    let (i, line) = (cu.lines().enumerate())
        .find(|(_, l)| l.contains(UNALTERED_LINE))
        .unwrap();
    let n = i + 1;
    assert_eq!(
        changed_lines(&cu, &read("altered/ntt_fused.cu"), "//"),
        [(
            n,
            line.to_string(),
            line.replace(UNALTERED_LINE, ALTERED_LINE)
        )],
        "altered/ntt_fused.cu should be ../ntt_fused.cu with only its line {n} altered"
    );
    let spec = changed_lines(&read("research.toml"), &read("altered/research.toml"), "#");
    assert!(
        !spec.is_empty(),
        "altered/research.toml should re-root include_dirs to its folder; it equals ../research.toml"
    );
    assert!(
        spec.iter().all(|(_, o, a)| {
            o.starts_with("include_dirs = ") && a.starts_with("include_dirs = ")
        }),
        "altered/research.toml should be ../research.toml with only its include_dirs \
         lines changed: {spec:#?}"
    );

    // The module the parity runner reads: the same but for the source and its folder.
    let canon = |p: &Path| {
        p.canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let original = ParityModule::load(&dir.join("research.toml"), "ntt_fused").unwrap();
    let altered = ParityModule::load(&dir.join("altered/research.toml"), "ntt_fused").unwrap();
    assert_eq!(
        canon(&altered.source),
        canon(&dir.join("altered/ntt_fused.cu"))
    );
    assert_eq!(canon(&altered.include_dirs[0]), canon(&dir.join("altered")));
    let includes = |m: &ParityModule| {
        m.include_dirs[1..]
            .iter()
            .map(|d| canon(d))
            .collect::<Vec<_>>()
    };
    assert_eq!(includes(&altered), includes(&original));
    assert_eq!(
        (
            &altered.source_name,
            &altered.protocol,
            altered.schedule_version,
            &altered.geometry,
            &altered.flags,
            altered.spec_digest()
        ),
        (
            &original.source_name,
            &original.protocol,
            original.schedule_version,
            &original.geometry,
            &original.flags,
            original.spec_digest()
        )
    );
}

/// Issue 17 item 8: the altered kernel builds with the real nvcc, as
/// `cargo xtask gpu-bundle --review` builds it (production channel), and its cubin is not
/// `ntt_fused`'s (the altered line reaches the code).
#[test]
fn issue_17_the_altered_kernel_builds_and_differs_from_ntt_fused() {
    common::toolkit_root();
    let dir = tempfile::tempdir().unwrap();
    let build = |spec: &Path, name: &str| -> String {
        let report = dir.path().join(format!("{name}.json"));
        ok(common::xtask()
            .args(["build", "--module", "ntt_fused", "--target", "sm_90"])
            .args(["--channel", "production", "--spec"])
            .arg(spec)
            .arg("--out")
            .arg(dir.path().join(name))
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .arg("--report-json")
            .arg(&report)
            .output()
            .unwrap());
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let m = r["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["module"] == "ntt_fused" && m["target"] == "sm_90")
            .unwrap_or_else(|| panic!("no ntt_fused sm_90 in {r}"));
        m["module_digest"].as_str().unwrap().to_string()
    };
    let altered = build(
        &common::repo().join("kernels/research/altered/research.toml"),
        "altered",
    );
    assert!(
        dir.path()
            .join("altered/ntt_fused/sm_90.cubin.manifest.json")
            .is_file()
    );
    assert_ne!(altered, build(&research_spec(), "original"));
}
