//! Promotions refused before a record is written: no parity report, a report that does not
//! bind to the manifests, a builder key signing as reviewer, a promotion replayed against
//! another manifest.

use cuda_aot::{Digest, Manifest};
use cuda_aot_kernels::parity::report::Verdict;

use crate::common;
use crate::{Env, build_step, ok, refused, report_for, research_spec, write_report};

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
