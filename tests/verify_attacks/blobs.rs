//! Manifests and blobs: a blob flipped, truncated or grown, a manifest swapped for another
//! file, a cubin of another SM than its manifest claims, and nothing saved when a blob fails.

use crate::common::*;
use crate::current_index;
use cuda_aot::source::layout;
use cuda_aot::{Channel, Digest, Error};
use cuda_aot_registry::PublishOptions;

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
