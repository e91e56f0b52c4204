//! One test per refusal of the offline verifier: each builds a real registry with the real
//! publisher, applies one attack, and asserts the specific error (not just `is_err`).

mod common;

use common::*;
use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::error::{ForeignSignature, ForeignSigner};
use cuda_aot::metadata::{Index, IndexEntry, Role, RoleName, Time, Timestamp};
use cuda_aot::source::layout;
use cuda_aot::verify::Options;
use cuda_aot::{Channel, Digest, Error, Limits, json};
use cuda_aot_registry::PublishOptions;
use std::time::Duration;

fn current_index(f: &Fixture) -> (Timestamp, Index) {
    f.registry().current().unwrap().unwrap()
}

#[test]
fn a_clean_registry_verifies_and_lists_every_module() {
    let f = Fixture::new();
    let p = f.publish_sms(&["sm_80", "sm_90", "sm_90a", "sm_120"]);
    assert_eq!((p.index_version, p.entries, p.blobs_written), (1, 4, 4));
    let (idx, mods) = f.verify().unwrap();
    assert_eq!(idx.index().version, 1);
    let mut sms: Vec<String> = mods
        .iter()
        .map(|m| m.manifest().identity.sm.to_string())
        .collect();
    sms.sort();
    assert_eq!(sms, ["sm_120", "sm_80", "sm_90", "sm_90a"]);
    assert!(
        mods.iter()
            .all(|m| Digest::of(m.bytes()) == m.manifest().module_digest)
    );
}

#[test]
fn one_flipped_byte_in_a_blob_is_refused() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let p = f.blob_path("sm_90");
    let mut b = std::fs::read(&p).unwrap();
    b[100] ^= 0x01;
    std::fs::write(&p, b).unwrap();
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::DigestMismatch { what, .. } if what.contains("add sm_90 blob")),
        "{err}"
    );
}

#[test]
fn a_truncated_blob_is_refused() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let p = f.blob_path("sm_90");
    let b = std::fs::read(&p).unwrap();
    std::fs::write(&p, &b[..b.len() - 1]).unwrap();
    let err = f.verify().unwrap_err();
    let want = b.len() as u64;
    assert!(
        matches!(err, Error::SizeMismatch { expected, actual, at_least: false, .. } if expected == want && actual == want - 1),
        "{err}"
    );
}

#[test]
fn a_blob_longer_than_its_manifest_is_read_only_to_size_plus_one() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let p = f.blob_path("sm_90");
    let mut b = std::fs::read(&p).unwrap();
    let size = b.len() as u64;
    b.extend(std::iter::repeat_n(0u8, 10 << 20)); // 10 MiB more: must not be read
    std::fs::write(&p, b).unwrap();
    let err = f.verify().unwrap_err();
    assert!(
        matches!(err, Error::SizeMismatch { expected, actual, at_least: true, .. } if expected == size && actual == size + 1),
        "{err}"
    );
}

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

#[test]
fn a_manifest_swapped_for_another_file_is_refused() {
    let f = Fixture::new();
    f.publish_sms(&["sm_80", "sm_90"]);
    let (_, idx) = current_index(&f);
    let e80 = idx
        .entries
        .iter()
        .find(|e| e.sm.to_string() == "sm_80")
        .unwrap();
    let e90 = idx
        .entries
        .iter()
        .find(|e| e.sm.to_string() == "sm_90")
        .unwrap();
    // Put the (validly signed) sm_80 manifest where the index expects the sm_90 one.
    let m80 = f.read(&layout::manifest(&e80.manifest));
    f.write(&layout::manifest(&e90.manifest), &m80);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::SizeMismatch { what, .. } | Error::DigestMismatch { what, .. } if what.contains("manifest of add sm_90")),
        "{err}"
    );
}

#[test]
fn an_index_entry_pointing_at_another_sms_manifest_is_not_attested() {
    let f = Fixture::new();
    f.publish_sms(&["sm_80", "sm_90"]);
    let (ts, mut idx) = current_index(&f);
    // A publisher (or a compromised one) lists the sm_80 manifest as sm_90.
    let e80: IndexEntry = idx
        .entries
        .iter()
        .find(|e| e.sm.to_string() == "sm_80")
        .unwrap()
        .clone();
    for e in idx
        .entries
        .iter_mut()
        .filter(|e| e.sm.to_string() == "sm_90")
    {
        e.manifest = e80.manifest;
        e.manifest_size = e80.manifest_size;
    }
    republish_index(&f, &ts, &idx);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::NotAttested { what, .. } if what.contains("add sm_90")),
        "{err}"
    );
}

#[test]
fn an_index_entry_with_another_identity_digest_is_mix_and_match() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let (ts, mut idx) = current_index(&f);
    idx.entries[0].identity = Digest::of(b"another build's identity");
    republish_index(&f, &ts, &idx);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::MixAndMatch { listed, found, .. } if listed.starts_with("add sm_90") && found.starts_with("add sm_90")),
        "{err}"
    );
}

/// Writes `idx` as the next index file and points a new timestamp at it (publisher-signed).
fn republish_index(f: &Fixture, ts: &Timestamp, idx: &Index) {
    let mut idx = idx.clone();
    idx.version = ts.index.version + 1;
    f.write_index(&idx, ts.version + 1);
}

#[test]
fn an_older_index_replayed_after_a_newer_one_was_seen_is_refused() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let old_ts = f.read(layout::TIMESTAMP);
    f.verify().unwrap();
    f.publish_sms(&["sm_80"]);
    let (idx, _) = f.verify().unwrap();
    assert_eq!(idx.index().version, 2);
    // A mirror (or attacker) serves the old, validly signed timestamp again.
    f.write(layout::TIMESTAMP, &old_ts);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::Rollback { what, seen: 2, got: 1 } if what == "timestamp"),
        "{err}"
    );
}

#[test]
fn an_expired_timestamp_is_refused_unless_within_the_explicit_skew() {
    let f = Fixture::new();
    let opts = PublishOptions {
        now: Time::from_unix(Time::now().unix() - 3600),
        timestamp_ttl: Duration::from_secs(60),
        ..Default::default()
    };
    f.publish_modules(&[add_module("sm_90", Channel::Dev)], opts);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::Expired { what, skew_secs: 0, .. } if what == "timestamp v1"),
        "{err}"
    );
    // An explicit two-hour skew allowance accepts it (and is reported).
    let lenient = Options {
        skew: Duration::from_secs(7200),
        ..Options::default()
    };
    let (idx, _) = f.verify_with(&lenient).unwrap();
    assert_eq!(idx.skew(), Duration::from_secs(7200));
}

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
fn a_module_name_with_dot_dot_slash_is_refused() {
    let f = Fixture::new();
    let build = Build::new(&[add_module("sm_90", Channel::Dev)], &[&f.keys.builder]);
    // A builder-signed statement whose text names "../add".
    let env: Envelope = serde_json::from_slice(&build.statement).unwrap();
    let text = String::from_utf8(env.payload_bytes("st").unwrap())
        .unwrap()
        .replace("\"module\": \"add\"", "\"module\": \"../add\"");
    assert!(text.contains("../add"));
    let statement =
        Envelope::sign(PayloadType::InToto, text.as_bytes(), &[&f.keys.builder]).to_bytes();
    let err = f
        .publish(
            Build {
                statement,
                files: build.files,
            },
            vec![],
            PublishOptions::default(),
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("invalid module name \"../add\""),
        "{err}"
    );
}

#[test]
fn an_sm80_cubin_claimed_as_sm90_is_refused_by_the_elf_check() {
    let f = Fixture::new();
    let blob = cubin("sm_80");
    let m = manifest("add", "sm_90", &blob, Channel::Dev);
    f.publish_modules(&[(m, blob)], PublishOptions::default());
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::ElfSmMismatch { module, claimed, actual } if module == "add" && claimed == "sm_90" && actual == "sm_80"),
        "{err}"
    );
    // sm_90 claimed as sm_90a (the arch-specific variant) is refused too.
    let f = Fixture::new();
    let blob = cubin("sm_90");
    let m = manifest("add", "sm_90a", &blob, Channel::Dev);
    f.publish_modules(&[(m, blob)], PublishOptions::default());
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::ElfSmMismatch { claimed, actual, .. } if claimed == "sm_90a" && actual == "sm_90"),
        "{err}"
    );
}

#[test]
fn a_symlinked_registry_file_is_refused() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let ts = f.reg_path().join(layout::TIMESTAMP);
    let elsewhere = f.dir.path().join("ts-elsewhere.json");
    std::fs::rename(&ts, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &ts).unwrap();
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::Symlink { path } if path.ends_with("timestamp.json")),
        "{err}"
    );
}

#[test]
fn duplicated_json_keys_are_refused() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let (ts, _) = current_index(&f);
    let text = String::from_utf8(json::to_vec(&ts)).unwrap().replacen(
        "\"version\": 1,",
        "\"version\": 1,\n  \"version\": 9,",
        1,
    );
    f.write(
        layout::TIMESTAMP,
        &Envelope::sign(
            PayloadType::Timestamp,
            text.as_bytes(),
            &[&f.keys.publisher],
        )
        .to_bytes(),
    );
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::DuplicateKey { key, .. } if key == "version"),
        "{err}"
    );
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

#[test]
fn an_oversized_timestamp_is_refused_before_parsing() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    f.write(layout::TIMESTAMP, &vec![b' '; 1 << 20]);
    let err = f.verify().unwrap_err();
    let limit = cuda_aot::Limits::default().timestamp;
    assert!(
        matches!(err, Error::TooLarge { limit: l, actual, .. } if l == limit && actual == limit + 1),
        "{err}"
    );
}

#[test]
fn nothing_is_saved_when_a_blob_check_fails() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    f.verify().unwrap();
    f.publish_sms(&["sm_80"]);
    let p = f.blob_path("sm_80");
    std::fs::write(&p, b"garbage").unwrap();
    assert!(f.verify().is_err());
    let state = cuda_aot::state::TrustState::load(&f.state_path(), 4096).unwrap();
    assert_eq!(
        (state.timestamp, state.index),
        (1, 1),
        "state must stay at the last fully verified versions"
    );
}

// ---- Issue 10: what the adversarial review found -------------------------------------------

fn now_minus(secs: u64) -> Time {
    Time::from_unix(Time::now().unix() - secs)
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

/// Finding 3: a FIFO in place of a registry file is refused at once, not waited on.
#[test]
fn issue_10_a_fifo_in_place_of_a_registry_file_is_refused_without_blocking() {
    for victim in ["timestamp", "blob"] {
        let f = Fixture::new();
        f.publish_sms(&["sm_90"]);
        let path = match victim {
            "timestamp" => f.reg_path().join(layout::TIMESTAMP),
            _ => f.blob_path("sm_90"),
        };
        std::fs::remove_file(&path).unwrap();
        mkfifo(&path);
        let err = f.verify().unwrap_err();
        assert!(
            matches!(&err, Error::NotRegular { kind, .. } if kind.contains("FIFO")),
            "{victim}: {err}"
        );
    }
}

/// Finding 4: with saved state, deleting the root rotation (to bring back a revoked
/// publisher key) is a rollback.
#[test]
fn issue_10_deleting_a_root_rotation_after_it_was_seen_is_a_rollback() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    f.write(
        &layout::root(2),
        &sign_root(&root_payload(&f.keys, 2, Channel::Dev), &[&f.keys.root]),
    );
    let (v, _) = f.verify().unwrap();
    assert_eq!(v.state().root, 2);
    std::fs::remove_file(f.reg_path().join(layout::root(2))).unwrap();
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::Rollback { what, seen: 2, got: 1 } if what == "trust root"),
        "{err}"
    );
}

/// Finding 4: the production and development policies keep rollback state by default,
/// per user and per registry; turning it off is explicit.
#[test]
fn issue_10_rollback_protection_is_on_by_default() {
    use cuda_aot::runtime::RollbackState;
    for p in [
        cuda_aot::Policy::production(),
        cuda_aot::Policy::development(),
    ] {
        assert_eq!(p.rollback, RollbackState::PerUser);
        let a = p
            .state_path(std::path::Path::new("/srv/a"))
            .unwrap()
            .unwrap();
        let b = p
            .state_path(std::path::Path::new("/srv/b"))
            .unwrap()
            .unwrap();
        assert!(a.to_string_lossy().contains("cuda-aot") && a != b, "{a:?}");
        assert_eq!(
            p.without_rollback_protection()
                .state_path(std::path::Path::new("/srv/a"))
                .unwrap(),
            None
        );
    }
}

/// Finding 6: no clock or skew value panics the verifier.
#[test]
fn issue_10_extreme_clocks_and_skews_do_not_panic() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let opts = Options {
        skew: Duration::from_secs(u64::MAX),
        ..Options::default()
    };
    f.verify_with(&opts).unwrap();
    let opts = Options {
        now: Time::from_unix(u64::MAX),
        ..Options::default()
    };
    let err = f.verify_with(&opts).unwrap_err();
    assert!(
        matches!(&err, Error::Expired { now, .. } if now.contains("after year 9999")),
        "{err}"
    );
}

/// Finding 7: text from unsigned files (key id hints, field names) is escaped before it
/// can reach a terminal.
#[test]
fn issue_10_escape_sequences_from_files_never_reach_the_terminal() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let mut env: Envelope = serde_json::from_slice(&f.read(layout::TIMESTAMP)).unwrap();
    env.signatures[0].keyid = "\u{1b}[2J\u{1b}[31mPWNED".into();
    env.signatures[0].sig = "AAAA".into();
    f.write(layout::TIMESTAMP, &env.to_bytes());
    let err = f.verify().unwrap_err();
    let text = format!("{err} {}", err.fix());
    assert!(matches!(&err, Error::Threshold { .. }), "{text}");
    assert!(!text.contains('\u{1b}'), "{text:?}");
    assert!(text.contains("\\u{1b}"), "{text:?}");
    // A field name carrying an escape sequence, in a publisher-signed timestamp.
    let (ts, _) = current_index(&f);
    let mut v: serde_json::Value = serde_json::from_slice(&json::to_vec(&ts)).unwrap();
    v["\u{1b}]0;owned\u{7}"] = 1.into();
    let forged = Envelope::sign(
        PayloadType::Timestamp,
        &serde_json::to_vec(&v).unwrap(),
        &[&f.keys.publisher],
    );
    f.write(layout::TIMESTAMP, &forged.to_bytes());
    let err = f.verify().unwrap_err();
    let text = err.to_string();
    assert!(matches!(&err, Error::Json { .. }), "{text}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
}

/// Finding 9: the trust root bounds how far ahead timestamps and indexes may expire.
#[test]
fn issue_10_metadata_expiring_past_the_freeze_bound_is_refused() {
    let f = Fixture::new();
    let far = PublishOptions {
        timestamp_ttl: Duration::from_secs(40 * 86_400),
        ..Default::default()
    };
    f.publish_modules(&[add_module("sm_90", Channel::Dev)], far);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::FreezeBound { what, bound_days: 31, root: 1, .. } if what == "timestamp v1"),
        "{err}"
    );
    // Year 9999 for the index.
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let (ts, mut idx) = current_index(&f);
    idx.expires = "9999-12-31T00:00:00Z".parse::<FakeTime>().unwrap().0;
    republish_index(&f, &ts, &idx);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::FreezeBound { what, bound_days: 400, .. } if what == "index v2"),
        "{err}"
    );
}

/// Parses an RFC 3339 time the way documents carry it.
struct FakeTime(Time);
impl std::str::FromStr for FakeTime {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_value::<Time>(serde_json::Value::String(s.into()))
            .map(FakeTime)
            .map_err(|e| e.to_string())
    }
}

/// Finding 10: an expired timestamp is accepted within the offline grace counted from the
/// last fresh verification, and refused one second after it.
#[test]
fn issue_10_offline_grace_holds_up_to_its_deadline_and_not_a_second_longer() {
    let f = Fixture::new();
    let t0 = now_minus(10 * 86_400);
    let opts = PublishOptions {
        now: t0,
        timestamp_ttl: Duration::from_secs(3600),
        ..Default::default()
    };
    f.publish_modules(&[add_module("sm_90", Channel::Dev)], opts);
    let at = |secs: u64, grace_days: u64| Options {
        now: t0.plus(Duration::from_secs(secs)),
        offline_grace: Duration::from_secs(grace_days * 86_400),
        ..Options::default()
    };
    // Fresh at t0 + 10 s: recorded.
    let (v, _) = f.verify_with(&at(10, 2)).unwrap();
    assert_eq!(v.freshness(), cuda_aot::verify::Freshness::Fresh);
    assert_eq!(v.state().fresh_at, Some(t0.plus(Duration::from_secs(10))));
    let deadline = 10 + 2 * 86_400;
    assert_eq!(
        v.loadable_until(Duration::from_secs(2 * 86_400)),
        t0.plus(Duration::from_secs(deadline))
    );
    // Expired, without grace: refused.
    let err = f.verify_with(&at(7200, 0)).unwrap_err();
    assert!(matches!(&err, Error::Expired { .. }), "{err}");
    // Expired, within the grace: accepted, with the deadline named.
    let (v, _) = f.verify_with(&at(7200, 2)).unwrap();
    assert!(
        matches!(v.freshness(), cuda_aot::verify::Freshness::Grace { deadline: d, .. } if d == t0.plus(Duration::from_secs(deadline))),
        "{:?}",
        v.freshness()
    );
    assert_eq!(
        v.state().fresh_at,
        Some(t0.plus(Duration::from_secs(10))),
        "a grace verification does not move the start of the grace"
    );
    // Exactly at the deadline: accepted; one second later: refused.
    f.verify_with(&at(deadline, 2)).unwrap();
    let err = f.verify_with(&at(deadline + 1, 2)).unwrap_err();
    assert!(
        matches!(&err, Error::Expired { what, .. } if what == "timestamp v1"),
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

// ---- Issue 11: the registry holds exactly what the release says ---------------------------

#[test]
fn issue_11_the_index_holds_exactly_the_release_and_since_survives_republishing() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    f.publish_sms(&["sm_80", "sm_90"]);
    let (_, idx) = current_index(&f);
    let since = |sm: &str| {
        idx.entries
            .iter()
            .find(|e| e.sm.to_string() == sm)
            .map(|e| e.since)
    };
    assert_eq!(
        (idx.version, since("sm_90"), since("sm_80")),
        (2, Some(1), Some(2))
    );
    // sm_80 dropped from the release: gone from the next index.
    let p = f.publish_sms(&["sm_90"]);
    assert_eq!((p.index_version, p.entries, p.removed), (3, 1, 1));
    let (_, idx) = current_index(&f);
    assert_eq!(idx.entries.len(), 1);
    assert_eq!(idx.entries[0].since, 1);
    // The same release again: nothing committed.
    let p = f.publish_sms(&["sm_90"]);
    assert!(p.unchanged && p.index_version == 3, "{p:?}");
    // Keeping unlisted entries is explicit.
    let keep = PublishOptions {
        keep_unlisted: true,
        ..Default::default()
    };
    let p = f.publish_modules(&[add_module("sm_120", Channel::Dev)], keep);
    assert_eq!((p.index_version, p.entries, p.removed), (4, 2, 0));
    let (v, mods) = f.verify().unwrap();
    assert_eq!(
        v.index().statements.len(),
        2,
        "each kept entry keeps its statement"
    );
    assert_eq!(mods.len(), 2);
}

// ---- Issue 12: signature checks per open are constant -------------------------------------

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

// ---- Issue 7: production requires promotion --------------------------------------------------

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

#[test]
fn a_registry_with_a_statement_of_the_earlier_form_still_verifies() {
    let f = Fixture::new();
    let build = Build::legacy(&[add_module("sm_90", Channel::Dev)], &[&f.keys.builder]);
    f.publish(build, vec![], PublishOptions::default()).unwrap();
    let (_, modules) = f.verify().unwrap();
    assert_eq!(modules.len(), 1);
}

#[test]
fn a_blob_subject_other_than_the_manifests_blob_is_refused() {
    // A builder-signed in-toto statement whose blob subject names other bytes than the
    // manifest does: a tool that checks subjects would vouch for a blob the runtime never
    // loads. The publisher refuses it, and a verifier refuses a registry that holds it.
    let f = Fixture::new();
    let mut build = Build::new(&[add_module("sm_90", Channel::Dev)], &[&f.keys.builder]);
    let mut st = build.statement();
    let blob = st
        .subject
        .iter_mut()
        .find(|s| !s.name.ends_with(".manifest.json"))
        .unwrap();
    blob.digest = cuda_aot::provenance::DigestSet::of(b"other bytes");
    build.statement = sign_doc(&st, &[&f.keys.builder]);
    let err = f
        .publish(
            Build {
                statement: build.statement.clone(),
                files: build.files.clone(),
            },
            vec![],
            PublishOptions::default(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("blob subject"), "{err}");
    f.forge(&build, &[]);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::MixAndMatch { what, listed, .. } if what.contains("add sm_90") && listed.contains("blob subject")),
        "{err}"
    );
}

#[test]
fn a_subject_not_named_for_its_module_or_without_its_pair_is_refused() {
    let f = Fixture::new();
    let build = Build::new(&[add_module("sm_90", Channel::Dev)], &[&f.keys.builder]);
    let mut renamed = build.statement();
    renamed.subject[0].name = "add/sm_80.cubin".into();
    let mut unpaired = build.statement();
    unpaired
        .subject
        .retain(|s| s.name.ends_with(".manifest.json"));
    let mut other_predicate = build.statement();
    other_predicate.predicate_type = "https://slsa.dev/provenance/v0.2".into();
    for (st, expected) in [
        (renamed, "is not named for add sm_90"),
        (unpaired, "has no blob subject"),
        (other_predicate, "predicate type"),
    ] {
        let b = Build {
            statement: sign_doc(&st, &[&f.keys.builder]),
            files: build.files.clone(),
        };
        let err = f.publish(b, vec![], PublishOptions::default()).unwrap_err();
        assert!(err.to_string().contains(expected), "{expected}: {err}");
    }
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
