//! Build statements: module names, subjects and predicate types the builder signed, and
//! statements of the earlier form.

use crate::common::*;
use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::{Channel, Error};
use cuda_aot_registry::PublishOptions;

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

/// Issue 43, item 2: a builder-signed in-toto statement whose blob subject carries the
/// right blake3 but another sha256 (what cosign and the in-toto verifiers check): a load
/// (which reads blake3) takes it, the registry audit (`verify`, `cuda_aot_verify`, `sync`)
/// refuses it, naming the subject, the statement and both sha256 digests.
#[test]
fn a_subject_whose_sha256_is_not_its_bytes_is_refused_by_the_audit() {
    let f = Fixture::new();
    let mut build = Build::new(&[add_module("sm_90", Channel::Dev)], &[&f.keys.builder]);
    let mut st = build.statement();
    let blob = st
        .subject
        .iter_mut()
        .find(|s| !s.name.ends_with(".manifest.json"))
        .unwrap();
    blob.digest.sha256 = Some(cuda_aot::provenance::Hex32::sha256(b"other bytes"));
    build.statement = sign_doc(&st, &[&f.keys.builder]);
    f.forge(&build, &[]);
    let (verified, modules) = f.verify().unwrap();
    assert_eq!(modules.len(), 1, "a load reads blake3 only");
    let src = cuda_aot::source::DirSource::new(f.reg_path());
    let err = verified.metadata().audit(&src).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, Error::DigestMismatch { .. })
            && text.contains("subject add/sm_90.cubin of build statement")
            && text.contains("its sha256"),
        "{text}"
    );
}
