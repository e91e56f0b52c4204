//! The index: entries pointing at another manifest or identity, and an index holding
//! exactly the release.

use crate::common::*;
use crate::{current_index, republish_index};
use cuda_aot::metadata::IndexEntry;
use cuda_aot::{Channel, Digest, Error};
use cuda_aot_registry::PublishOptions;

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
