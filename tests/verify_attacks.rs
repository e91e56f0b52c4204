//! One test per refusal of the offline verifier: each builds a real registry with the real
//! publisher, applies one attack, and asserts the specific error (not just `is_err`).

mod common;

use common::*;
use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::metadata::{Index, IndexEntry, Role, Time, Timestamp};
use cuda_aot::source::layout;
use cuda_aot::verify::Options;
use cuda_aot::{Channel, Digest, Error, json};
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
        matches!(&err, cuda_aot_registry::Error::Core(Error::Threshold { role, .. }) if role == "builder"),
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
            assert_eq!(role, "builder");
            assert!(what.contains("build statement"), "{what}");
            assert_eq!(
                foreign,
                &vec![(
                    stranger.public().key_id().short(),
                    "unknown key".to_string()
                )]
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
            assert_eq!(role, "publisher");
            assert_eq!(foreign[0].1, "a builder key, not a publisher key");
            assert_eq!(foreign[0].0, f.keys.builder.public().key_id().short());
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
        matches!(&err, Error::Threshold { valid: 1, threshold: 2, role, .. } if role == "root"),
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
        Envelope::sign(PayloadType::Build, text.as_bytes(), &[&f.keys.builder]).to_bytes();
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
        matches!(&err, Error::Threshold { valid: 0, role, .. } if role == "publisher"),
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
