//! The trust root and its rotation: rotations need old and new root keys, the chain is
//! capped, torsion twins, recovery from a stolen publisher key, another trust root, and
//! roots the tools never sign out.

use crate::common::*;
use crate::current_index;
use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::metadata::{Role, RoleName};
use cuda_aot::source::layout;
use cuda_aot::verify::Options;
use cuda_aot::{Channel, Error, Limits, json};
use cuda_aot_registry::PublishOptions;

#[test]
fn root_rotation_needs_old_and_new_root_keys() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let new_keys = Keys {
        root: key(),
        builder: key(),
        reviewer: key(),
        publisher: key(),
    };
    let mut v2 = root_payload(&new_keys, 2, Channel::Dev);
    // Keep builder and publisher so the existing release still verifies under v2.
    v2.roles.builder = Role {
        keys: vec![f.keys.builder.public()],
        threshold: 1,
    };
    v2.roles.publisher = Role {
        keys: vec![f.keys.publisher.public()],
        threshold: 1,
    };
    // Signed only by the new root key: refused.
    f.write(&layout::root(2), &sign_root(&v2, &[&new_keys.root]));
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::RootRotation { from: 1, to: 2, reason } if reason.contains("root v1's root keys")),
        "{err}"
    );
    // Signed only by the old root key: refused too.
    f.write(&layout::root(2), &sign_root(&v2, &[&f.keys.root]));
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::RootRotation { from: 1, to: 2, reason } if reason.contains("its own root keys")),
        "{err}"
    );
    // Signed by both: accepted, and v2 is now the trusted root.
    f.write(
        &layout::root(2),
        &sign_root(&v2, &[&f.keys.root, &new_keys.root]),
    );
    let (idx, _) = f.verify().unwrap();
    assert_eq!(idx.root().root().version, 2);
    assert_eq!(idx.state().root, 2);
}

/// Issue 18: the root chain is walked at most `Limits::max_root_updates` rotations (1,024 by
/// default, as tough): a registry holding 3,000 valid rotations is refused past the cap,
/// naming it, instead of being walked; a chain within the cap still verifies.
#[test]
fn issue_18_3000_root_rotations_are_refused_past_the_cap() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    for v in 2..=3001 {
        f.write(
            &layout::root(v),
            &sign_root(&root_payload(&f.keys, v, Channel::Dev), &[&f.keys.root]),
        );
    }
    let limit = Limits::default().max_root_updates;
    assert_eq!(limit, 1024);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(
            &err,
            Error::RootChainTooLong {
                from: 1,
                limit: 1024,
                next: 1026
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("more than 1024 rotations"),
        "{err}"
    );
    assert!(err.fix().contains("max_root_updates"), "{}", err.fix());
    // Nothing was saved.
    assert!(!f.state_path().exists());
    // The cap is data: with room for all 3,000 the same chain verifies.
    let opts = Options {
        limits: Limits {
            max_root_updates: 3000,
            ..Limits::default()
        },
        ..Options::default()
    };
    let (idx, _) = f.verify_with(&opts).unwrap();
    assert_eq!(idx.root().root().version, 3001);
}

/// Finding 1: one secret counts once. A root listing a key and the same key plus a
/// small-order point is refused when it is loaded.
#[test]
fn issue_10_a_root_listing_a_key_and_its_torsion_twin_is_refused() {
    use curve25519_dalek::constants::EIGHT_TORSION;
    use curve25519_dalek::edwards::CompressedEdwardsY;
    let f = Fixture::new();
    let a = f.keys.builder.public();
    let a_hex = a.to_string();
    let point = CompressedEdwardsY(
        hex::decode(a_hex.strip_prefix("ed25519:").unwrap())
            .unwrap()
            .try_into()
            .unwrap(),
    )
    .decompress()
    .unwrap();
    let twin = format!(
        "ed25519:{}",
        hex::encode((point + EIGHT_TORSION[4]).compress().as_bytes())
    );
    // Builder threshold 2 over [A, A + T]: one builder secret would meet it alone.
    let mut root = root_payload(&f.keys, 1, Channel::Dev);
    root.roles.builder.threshold = 2;
    let text = String::from_utf8(json::to_vec(&root))
        .unwrap()
        .replace(&format!("\"{a_hex}\""), &format!("\"{a_hex}\", \"{twin}\""));
    let file = Envelope::sign(PayloadType::Root, text.as_bytes(), &[&f.keys.root]).to_bytes();
    let err = cuda_aot::trust::verify_anchor(&file, &Default::default(), "root").unwrap_err();
    assert!(
        matches!(&err, Error::Json { message, .. } if message.contains("torsion")),
        "{err}"
    );
}

/// Finding 2: a stolen publisher key inflates the versions to u64::MAX. Without a
/// rotation a legitimate publish is refused with a clear error (no overflow panic); after
/// the root rotates the publisher key, the publisher starts a new version line and clients
/// discard the inflated versions they saved.
#[test]
fn issue_10_a_stolen_publisher_key_is_recovered_from_by_rotation() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    f.verify().unwrap();
    // The thief re-publishes the current release at version u64::MAX.
    let (_, mut idx) = current_index(&f);
    idx.version = u64::MAX;
    f.write_index(&idx, u64::MAX);
    let (v, _) = f.verify().unwrap();
    assert_eq!((v.state().timestamp, v.state().index), (u64::MAX, u64::MAX));
    // The legitimate publisher cannot go past u64::MAX: a clear error, nothing written.
    let before = f.read(layout::TIMESTAMP);
    let err = f
        .publish(
            Build::new(&[add_module("sm_80", Channel::Dev)], &[&f.keys.builder]),
            vec![],
            PublishOptions::default(),
        )
        .unwrap_err();
    assert!(
        matches!(
            &err,
            cuda_aot_registry::Error::Core(Error::VersionOverflow {
                version: u64::MAX,
                ..
            })
        ),
        "{err}"
    );
    assert!(
        err.fix().contains("rotate the publisher key"),
        "{}",
        err.fix()
    );
    assert_eq!(f.read(layout::TIMESTAMP), before);
    // Root v2 replaces the publisher key.
    let new_publisher = key();
    let mut v2 = root_payload(&f.keys, 2, Channel::Dev);
    v2.roles.publisher = Role {
        keys: vec![new_publisher.public()],
        threshold: 1,
    };
    f.write(&layout::root(2), &sign_root(&v2, &[&f.keys.root]));
    let root = cuda_aot::trust::verify_anchor(&f.root_file, &Default::default(), "r").unwrap();
    let build = Build::new(&[add_module("sm_80", Channel::Dev)], &[&f.keys.builder]);
    let release = cuda_aot_registry::Release {
        build: build.signed(&root).unwrap(),
        promotions: vec![],
    };
    // The old key is refused by the registry's newest root ...
    let err = f
        .registry()
        .publish(
            &f.root_file,
            &release,
            &[&f.keys.publisher],
            &Default::default(),
        )
        .unwrap_err();
    assert!(
        matches!(&err, cuda_aot_registry::Error::NotPublisher { root: 2, .. }),
        "{err}"
    );
    // ... the new one starts a new version line.
    let p = f
        .registry()
        .publish(
            &f.root_file,
            &release,
            &[&new_publisher],
            &Default::default(),
        )
        .unwrap();
    assert!(p.recovered && p.index_version == 2, "{p:?}");
    // The client that saved u64::MAX accepts it and says what it discarded.
    let (v, mods) = f.verify().unwrap();
    assert_eq!(v.index().version, 2);
    assert_eq!(v.discarded_state().unwrap().timestamp, u64::MAX);
    assert_eq!(mods[0].manifest().identity.sm.to_string(), "sm_80");
    assert_eq!((v.state().root, v.state().index), (2, 2));
    // The thief's timestamp, replayed, no longer verifies.
    f.write(layout::TIMESTAMP, &before);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Threshold {
                role: RoleName::Publisher,
                valid: 0,
                ..
            }
        ),
        "{err}"
    );
}

/// Issue 11: a registry signed under another trust root says so and names both key sets.
#[test]
fn issue_11_a_registry_of_another_trust_root_names_both_key_sets() {
    let ours = Fixture::new();
    ours.publish_sms(&["sm_90"]);
    let theirs = Fixture::new();
    let src = cuda_aot::source::DirSource::new(ours.reg_path());
    let err = cuda_aot::verify::verify_all(
        &src,
        &theirs.root_file,
        Default::default(),
        &Options::default(),
    )
    .unwrap_err()
    .error;
    let text = err.to_string();
    assert!(text.contains("another trust root"), "{text}");
    assert!(
        text.contains(&ours.keys.publisher.public().key_id().short()),
        "{text}"
    );
    assert!(
        text.contains(&theirs.keys.publisher.public().key_id().short()),
        "{text}"
    );
    assert!(err.fix().contains("--trust"), "{}", err.fix());
}

/// The tools make roots only through `sign_root`: one its clients would refuse (too few
/// root signatures, a rotation that skips a version) is never handed out.
#[test]
fn a_root_its_clients_would_refuse_is_never_signed_out() {
    use cuda_aot::trust::{rotate, sign_root, verify_anchor};
    let limits = Limits::default();
    let keys = Keys::new();
    let second = key();
    let two_of_two = |version| {
        let mut root = root_payload(&keys, version, Channel::Dev);
        root.roles.root = Role {
            keys: vec![keys.root.public(), second.public()],
            threshold: 2,
        };
        root
    };
    let e = sign_root(&two_of_two(1), &[&keys.root], None, &limits).unwrap_err();
    assert!(matches!(e, Error::Threshold { .. }), "{e}");
    let file = sign_root(&two_of_two(1), &[&keys.root, &second], None, &limits).unwrap();
    let first = verify_anchor(&file, &limits, "root").unwrap();
    assert_eq!(first.root().version, 1);

    let both = [&keys.root, &second];
    assert!(sign_root(&two_of_two(3), &both, Some(&first), &limits).is_err());
    let file = sign_root(&two_of_two(2), &both, Some(&first), &limits).unwrap();
    assert_eq!(
        rotate(&first, &file, &limits, "root")
            .unwrap()
            .root()
            .version,
        2
    );
}
