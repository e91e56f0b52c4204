//! Signatures, keys and thresholds: unknown keys, keys of another role, one key counted
//! once, the signature cap, payload types, and how many signatures an open checks.

use crate::common::*;
use crate::current_index;
use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::error::{ForeignSignature, ForeignSigner};
use cuda_aot::metadata::{Role, RoleName};
use cuda_aot::source::layout;
use cuda_aot::verify::Options;
use cuda_aot::{Channel, Error, Limits, json};
use cuda_aot_registry::PublishOptions;

#[test]
fn a_build_statement_signed_by_an_unknown_key_is_refused() {
    let f = Fixture::new();
    let stranger = key();
    let build = Build::new(&[add_module("sm_90", Channel::Dev)], &[&stranger]);
    // The real publisher refuses to publish it ...
    let err = f
        .publish(build, vec![], PublishOptions::default())
        .unwrap_err();
    assert!(
        matches!(
            &err,
            cuda_aot_registry::Error::Core(Error::Threshold {
                role: RoleName::Builder,
                ..
            })
        ),
        "{err}"
    );
    // ... and a verifier refuses it when a publisher key alone put it in the index.
    let build = Build::new(&[add_module("sm_90", Channel::Dev)], &[&stranger]);
    f.forge(&build, &[]);
    let err = f.verify().unwrap_err();
    match &err {
        Error::Threshold {
            role,
            valid: 0,
            threshold: 1,
            foreign,
            what,
            ..
        } => {
            assert_eq!(*role, RoleName::Builder);
            assert!(what.contains("build statement"), "{what}");
            assert_eq!(
                foreign,
                &vec![ForeignSignature {
                    key: stranger.public().key_id().short(),
                    signer: ForeignSigner::UnknownKey,
                }]
            );
        }
        _ => panic!("{err}"),
    }
    assert!(err.fix().contains("builder"), "{}", err.fix());
}

#[test]
fn a_builder_key_where_a_publisher_signature_is_required_is_refused() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    // Re-sign the timestamp with the builder key.
    let (ts, _) = current_index(&f);
    let forged = Envelope::sign(
        PayloadType::Timestamp,
        &json::to_vec(&ts),
        &[&f.keys.builder],
    )
    .to_bytes();
    f.write(layout::TIMESTAMP, &forged);
    let err = f.verify().unwrap_err();
    match &err {
        Error::Threshold {
            role,
            valid: 0,
            foreign,
            ..
        } => {
            assert_eq!(*role, RoleName::Publisher);
            assert_eq!(
                foreign[0].signer,
                ForeignSigner::OtherRole(RoleName::Builder)
            );
            assert_eq!(foreign[0].key, f.keys.builder.public().key_id().short());
            assert!(
                err.to_string()
                    .contains("a builder key, not a publisher key"),
                "{err}"
            );
        }
        _ => panic!("{err}"),
    }
}

#[test]
fn the_same_key_twice_does_not_reach_a_threshold_of_two() {
    let f = Fixture::new();
    // Root v1 cannot list one key twice ...
    let mut root = root_payload(&f.keys, 1, Channel::Dev);
    root.roles.builder = Role {
        keys: vec![f.keys.builder.public(), f.keys.builder.public()],
        threshold: 2,
    };
    let file = sign_root(&root, &[&f.keys.root]);
    let err = cuda_aot::trust::verify_anchor(&file, &Default::default(), "root").unwrap_err();
    assert!(
        matches!(&err, Error::BadRoot { reason, .. } if reason.contains("same key twice")),
        "{err}"
    );
    // ... and a signature repeated in an envelope counts its key once.
    let other = key();
    let mut root = root_payload(&f.keys, 1, Channel::Dev);
    root.roles.root = Role {
        keys: vec![f.keys.root.public(), other.public()],
        threshold: 2,
    };
    let mut env = Envelope::sign(PayloadType::Root, &json::to_vec(&root), &[&f.keys.root]);
    env.signatures.push(env.signatures[0].clone());
    let err =
        cuda_aot::trust::verify_anchor(&env.to_bytes(), &Default::default(), "root").unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Threshold {
                valid: 1,
                threshold: 2,
                role: RoleName::Root,
                ..
            }
        ),
        "{err}"
    );
    env.add_signature(&other).unwrap();
    assert!(cuda_aot::trust::verify_anchor(&env.to_bytes(), &Default::default(), "root").is_ok());
}

/// Issue 18: the signature cap per envelope is part of `Limits` (it was a constant).
#[test]
fn issue_18_the_signature_cap_is_a_limit() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let opts = Options {
        limits: Limits {
            max_signatures: 0,
            ..Limits::default()
        },
        ..Options::default()
    };
    let err = f.verify_with(&opts).unwrap_err();
    assert!(
        matches!(&err, Error::TooLarge { what, limit: 0, actual: 1 } if what.contains("signatures")),
        "{err}"
    );
    f.verify().unwrap();
}

#[test]
fn a_signature_for_another_payload_type_is_refused() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let (ts, _) = current_index(&f);
    // Validly publisher-signed bytes, but signed as an index, served as the timestamp.
    let env = Envelope::sign(PayloadType::Index, &json::to_vec(&ts), &[&f.keys.publisher]);
    f.write(layout::TIMESTAMP, &env.to_bytes());
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::WrongPayloadType { actual, .. } if actual.contains("index")),
        "{err}"
    );
    // Relabelling the payload type breaks the signature (PAE covers the type).
    let mut env = env;
    env.payload_type = PayloadType::Timestamp.as_str().into();
    f.write(layout::TIMESTAMP, &env.to_bytes());
    let err = f.verify().unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Threshold {
                valid: 0,
                role: RoleName::Publisher,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn issue_12_signature_checks_are_the_same_at_3_and_at_30_modules() {
    let checks = |n: usize| {
        let f = Fixture::new();
        let mods: Vec<_> = (0..n)
            .map(|i| {
                let (mut m, b) = add_module("sm_90", Channel::Dev);
                m.identity.module = cuda_aot::ModuleName::new(&format!("m{i}")).unwrap();
                (m, b)
            })
            .collect();
        f.publish_modules(&mods, PublishOptions::default());
        let (v, loaded) = f.verify().unwrap();
        assert_eq!(loaded.len(), n);
        v.signature_checks()
    };
    let (three, thirty) = (checks(3), checks(30));
    assert_eq!(three, thirty);
    // Anchor, timestamp, index, one build statement.
    assert_eq!(three, 4);
}
