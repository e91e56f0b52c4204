//! Issue 46, "Promotion per team": under delegations a team's reviewers promote that team's
//! research kernels, and production requires the promotion of the reviewers of the
//! delegation that owns the module. The delegations are put in force in an empty
//! production registry (a hub sets them up before any team publishes); the trust root's
//! own reviewer cannot promote the team's module, the team's reviewer can, and the
//! promoted release verifies as production.

use std::path::Path;

use crate::common;
use crate::{Env, build_step, ok, refused, report_for, research_spec, write_report};

/// `keygen` into `dir`: (private key file, public key).
fn key(dir: &Path, name: &str, role: &str) -> (String, String) {
    let file = dir.join(format!("{name}.key"));
    let public = common::keygen(role, &file);
    (file.display().to_string(), public)
}

#[test]
fn a_teams_reviewers_promote_its_module_and_production_requires_them() {
    let keys = tempfile::tempdir().unwrap();
    let (delegations, delegations_pub) = key(keys.path(), "delegations", "publisher");
    let (publisher, publisher_pub) = key(keys.path(), "ntt-publisher", "publisher");
    let (builder, builder_pub) = key(keys.path(), "ntt-builder", "builder");
    let (reviewer, reviewer_pub) = key(keys.path(), "ntt-reviewer", "reviewer");
    let env = Env::with_root_args(1, |c| {
        c.args(["--delegations", &delegations_pub]);
    });
    // The delegations: team ntt owns `ntt_*`.
    let spec = env.path("delegations.toml");
    let role = |k: &str| format!("{{ keys = [\"{k}\"], threshold = 1 }}");
    std::fs::write(
        &spec,
        format!(
            "[[delegation]]\nname = \"ntt\"\npaths = [\"ntt_*\"]\nterminating = true\npublisher = {}\nbuilder = {}\nreviewer = {}\n",
            role(&publisher_pub),
            role(&builder_pub),
            role(&reviewer_pub)
        ),
    )
    .unwrap();
    ok(common::xtask()
        .args(["delegations", "sign", "--spec"])
        .arg(&spec)
        .args(["--key", &delegations, "--version", "1", "--out"])
        .arg(env.path("d1.json"))
        .output()
        .unwrap());
    let out = ok(common::xtask()
        .args(["delegations", "publish"])
        .arg(env.path("d1.json"))
        .arg("--registry")
        .arg(env.registry())
        .arg("--trust")
        .arg(env.root())
        .arg("--publisher-key")
        .arg(env.key("publisher"))
        .output()
        .unwrap());
    assert!(out.contains("published index v1"), "{out}");

    let research = research_spec();
    build_step(&env, &research);
    let report = write_report(&env, "r.json", &report_for(&research, &env.build_out()));
    let report = report.to_str().unwrap();
    // `promote` of the research module with its parity report, by `reviewer`, plus `more`.
    let promote = |reviewer: &str, more: &[&str]| {
        let mut args = vec!["--parity-report", report, "--reviewer-key", reviewer];
        args.extend_from_slice(more);
        env.promote(&research, &args)
    };
    // The trust root's reviewer is not the team's.
    let root_reviewer = env.reviewers[0].to_str().unwrap();
    let out = refused(promote(root_reviewer, &["--team", "ntt"]));
    assert!(
        out.contains("is not a reviewer key of delegated role \"ntt\""),
        "{out}"
    );
    // Promoted under the root's reviewer without --team: the publish is refused, the module
    // is the team's.
    let root_builder = env.key("builder");
    let root_publisher = env.key("publisher");
    let publish_with = |builder| {
        [
            "--publish",
            "--builder-key",
            builder,
            "--publisher-key",
            root_publisher.to_str().unwrap(),
        ]
    };
    let out = refused(promote(
        root_reviewer,
        &publish_with(root_builder.to_str().unwrap()),
    ));
    assert!(out.contains("delegated role \"ntt\""), "{out}");
    // The refused run left its record (the root reviewer's) with the build; it is not the
    // team's, and would be published with the next run's.
    std::fs::remove_dir_all(env.build_out().join("promotions")).unwrap();
    // The team's reviewer promotes, its builder signs, its publisher key signs its metadata.
    let team = ["--team", "ntt", "--team-key", &publisher];
    let out = ok(promote(
        &reviewer,
        &[&team[..], &publish_with(&builder)[..]].concat(),
    ));
    assert!(out.contains("joined the release set"), "{out}");
    let out = ok(env.verify_production());
    assert!(out.contains("ntt_fused"), "{out}");
}
