//! File-system and parsing attacks: symlinks and FIFOs in place of registry files,
//! oversized files, duplicated JSON keys, and escape sequences from files.

use crate::common::*;
use crate::current_index;
use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::source::layout;
use cuda_aot::{Error, json};

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
