//! Reviewers: one signature under a threshold of two is refused and two release; two
//! reviewers on different machines sign one after the other.

use crate::{Env, build_step, ok, refused, report_for, research_spec, write_report};

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
