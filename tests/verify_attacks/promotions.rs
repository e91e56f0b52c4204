//! The production channel and its promotions: a dev registry under a production verifier,
//! promotion records missing, replayed, of another schedule, signed by the wrong role or
//! under threshold, publish and verify agreeing, and the research channel never verifying.

use crate::common::*;
use cuda_aot::envelope::Envelope;
use cuda_aot::error::ForeignSigner;
use cuda_aot::metadata::{Role, RoleName};
use cuda_aot::verify::Options;
use cuda_aot::{Channel, Digest, Error, Limits, json};
use cuda_aot_registry::PublishOptions;

#[test]
fn a_production_verifier_refuses_a_dev_registry() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let opts = Options {
        required_channel: Some(Channel::Production),
        ..Options::default()
    };
    let err = f.verify_with(&opts).unwrap_err();
    assert!(
        matches!(&err, Error::Channel { required, found, .. } if required == "production" && found == "dev"),
        "{err}"
    );
}

fn production() -> (Fixture, Build) {
    let f = Fixture::with_channel(Channel::Production);
    let build = Build::new(
        &[add_module("sm_90", Channel::Production)],
        &[&f.keys.builder],
    );
    (f, build)
}

#[test]
fn issue_7_a_promoted_production_release_verifies_and_names_its_reviewers() {
    let f = Fixture::with_channel(Channel::Production);
    f.publish_sms(&["sm_80", "sm_90"]);
    let (v, mods) = f.verify().unwrap();
    assert_eq!(mods.len(), 2);
    // Anchor, timestamp, index, one statement, one promotion record.
    assert_eq!(v.signature_checks(), 5);
    assert!(
        v.manifests()
            .iter()
            .all(|m| m.promoted_by() == [f.keys.reviewer.public().key_id()])
    );
}

#[test]
fn issue_7_a_production_module_without_a_promotion_is_refused() {
    let (f, build) = production();
    let d = build.manifest_digests()[0];
    // The publisher refuses it early ...
    let err = f
        .publish(
            Build::new(
                &[add_module("sm_90", Channel::Production)],
                &[&f.keys.builder],
            ),
            vec![],
            PublishOptions::default(),
        )
        .unwrap_err();
    assert!(
        matches!(&err, cuda_aot_registry::Error::Core(Error::NotPromoted { module, .. }) if module == "add"),
        "{err}"
    );
    // ... and a verifier refuses it when a publisher key alone served it.
    f.forge(&build, &[]);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::NotPromoted { module, target, manifest, reason }
            if module == "add" && target == "sm_90" && *manifest == d.to_string() && reason.contains("no promotion record")),
        "{err}"
    );
    assert!(
        err.fix().contains("cargo xtask promote add"),
        "{}",
        err.fix()
    );
}

#[test]
fn issue_7_a_promotion_replayed_against_another_manifest_is_refused() {
    let (f, build) = production();
    let other = Digest::of(b"the manifest the reviewer looked at");
    let p = promotion("add", vec![other], &[&f.keys.reviewer]);
    f.forge(&build, &[p]);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::NotPromoted { reason, .. } if reason.contains("cover other manifests")),
        "{err}"
    );
}

#[test]
fn issue_7_a_promotion_of_another_schedule_version_is_refused() {
    let (f, build) = production();
    let mut p: cuda_aot::metadata::Promotion = {
        let file = promotion("add", build.manifest_digests(), &[&f.keys.reviewer]);
        let env: Envelope = serde_json::from_slice(&file).unwrap();
        json::parse(&env.payload_bytes("p").unwrap(), 1 << 16, "p").unwrap()
    };
    p.schedule_version = 2;
    f.forge(&build, &[sign_doc(&p, &[&f.keys.reviewer])]);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::NotPromoted { reason, .. } if reason.contains("schedule version 2")),
        "{err}"
    );
}

/// Issue 18: publish and verify apply one promotion rule (`Promotion::covers`). For every
/// set drawn from five records (the right one; one at another schedule version; one per
/// target; one of another module), a set the publisher accepts verifies, and a set it
/// refuses is refused by the verifier too when a publisher key alone serves it. (The
/// verifier used to take the first record listing a digest and then check its schedule:
/// a set publish accepted could be refused, depending on the digests' order.)
#[test]
fn issue_18_publish_and_verify_agree_on_every_promotion_record_set() {
    let record = |f: &Fixture, module: &str, schedule: u32, manifests: Vec<Digest>| {
        let p = cuda_aot::metadata::Promotion {
            schema: cuda_aot::metadata::Promotion::SCHEMA.into(),
            module: cuda_aot::ModuleName::new(module).unwrap(),
            schedule_version: schedule,
            manifests,
            parity_report: Digest::of(b"parity report"),
            resource_review: Digest::of(b"resource review"),
            note: format!("{module} at {schedule}"),
        };
        sign_doc(&p, &[&f.keys.reviewer])
    };
    let (mut accepted, mut refused) = (0, 0);
    for set in 0u32..32 {
        let f = Fixture::with_channel(Channel::Production);
        let mods = [
            add_module("sm_80", Channel::Production),
            add_module("sm_90", Channel::Production),
        ];
        let build = || Build::new(&mods, &[&f.keys.builder]);
        let d = build().manifest_digests();
        let pool = [
            record(&f, "add", 2, d.clone()),
            record(&f, "other", 1, d.clone()),
            record(&f, "add", 1, vec![d[0]]),
            record(&f, "add", 1, vec![d[1]]),
            record(&f, "add", 1, d.clone()),
        ];
        let records: Vec<Vec<u8>> = (0..pool.len())
            .filter(|k| set & (1 << k) != 0)
            .map(|k| pool[k].clone())
            .collect();
        match f.publish(build(), records.clone(), PublishOptions::default()) {
            Ok(_) => {
                f.verify()
                    .unwrap_or_else(|e| panic!("set {set:05b}: published, then refused: {e}"));
                accepted += 1;
            }
            Err(e) => {
                assert!(
                    matches!(
                        &e,
                        cuda_aot_registry::Error::Core(Error::NotPromoted { .. })
                    ),
                    "set {set:05b}: {e}"
                );
                f.forge(&build(), &records);
                let err = f.verify().map(drop).unwrap_err();
                assert!(
                    matches!(&err, Error::NotPromoted { .. }),
                    "set {set:05b}: publish refused, verify said {err}"
                );
                refused += 1;
            }
        }
    }
    // Covered exactly when the right record, or both per-target ones, are in the set.
    assert_eq!((accepted, refused), (16 + 4, 12));
}

#[test]
fn issue_7_a_builder_key_signing_as_reviewer_is_refused() {
    let (f, build) = production();
    let p = promotion("add", build.manifest_digests(), &[&f.keys.builder]);
    let err = f
        .publish(
            Build::new(
                &[add_module("sm_90", Channel::Production)],
                &[&f.keys.builder],
            ),
            vec![p.clone()],
            PublishOptions::default(),
        )
        .unwrap_err();
    assert!(
        matches!(
            &err,
            cuda_aot_registry::Error::Core(Error::Threshold {
                role: RoleName::Reviewer,
                ..
            })
        ),
        "{err}"
    );
    f.forge(&build, &[p]);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::Threshold { role: RoleName::Reviewer, valid: 0, foreign, .. }
            if foreign[0].signer == ForeignSigner::OtherRole(RoleName::Builder)),
        "{err}"
    );
}

#[test]
fn issue_7_one_signature_under_a_reviewer_threshold_of_two_is_refused() {
    let keys = Keys::new();
    let second = key();
    let mut root = root_payload(&keys, 1, Channel::Production);
    root.roles.reviewer = Role {
        keys: vec![keys.reviewer.public(), second.public()],
        threshold: 2,
    };
    let root_file = sign_root(&root, &[&keys.root]);
    let f = Fixture::with_root(keys, root_file, Channel::Production);
    let build = Build::new(
        &[add_module("sm_90", Channel::Production)],
        &[&f.keys.builder],
    );
    let one = promotion("add", build.manifest_digests(), &[&f.keys.reviewer]);
    f.forge(&build, &[one]);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Threshold {
                role: RoleName::Reviewer,
                valid: 1,
                threshold: 2,
                ..
            }
        ),
        "{err}"
    );
    let both = promotion(
        "add",
        build.manifest_digests(),
        &[&f.keys.reviewer, &second],
    );
    f.forge(&build, &[both]);
    f.verify().unwrap();
}

#[test]
fn issue_7_a_research_channel_trust_root_or_module_never_verifies() {
    // No trust root may be of the research channel (NVRTC builds are never published) ...
    let keys = Keys::new();
    let root = sign_root(&root_payload(&keys, 1, Channel::Research), &[&keys.root]);
    let err = cuda_aot::trust::verify_anchor(&root, &Limits::default(), "root").unwrap_err();
    assert!(
        matches!(&err, Error::BadRoot { reason, .. } if reason.contains("research channel")),
        "{err}"
    );
    // ... and a research-channel manifest served in a production registry (attested,
    // promoted and indexed by stolen keys) is refused as of the wrong channel.
    let f = Fixture::with_channel(Channel::Production);
    let (mut m, blob) = add_module("sm_90", Channel::Production);
    m.channel = Channel::Research;
    let mut build = Build::new(&[(m, blob)], &[&f.keys.builder]);
    let mut statement = build.statement();
    statement
        .predicate
        .build_definition
        .external_parameters
        .channel = Channel::Production;
    build.statement = sign_doc(&statement, &[&f.keys.builder]);
    let p = promotion("add", build.manifest_digests(), &[&f.keys.reviewer]);
    f.forge(&build, &[p]);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::Channel { required, found, .. } if required == "production" && found == "research"),
        "{err}"
    );
}
