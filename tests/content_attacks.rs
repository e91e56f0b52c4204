//! Content checks for every kind (issue 10 item 8): each test publishes a real, validly
//! signed registry whose blob is not what its manifest says, and asserts the specific
//! error. The signatures and digests are all good: only `cuda_aot::content::check` stands
//! between these blobs and the driver.

mod common;

use common::*;
use cuda_aot::{Channel, Error, FunctionName, Kind, Manifest};
use cuda_aot_registry::PublishOptions;

/// Publishes `blob` under `m` (in a build signed by the fixture's builder) and verifies
/// everything.
fn publish_and_verify(m: &Manifest, blob: Vec<u8>) -> Result<(), Error> {
    let f = Fixture::new();
    f.publish_modules(&[(m.clone(), blob)], PublishOptions::default());
    f.verify().map(|_| ())
}

fn ptx_manifest(target: &str, blob: &[u8]) -> Manifest {
    let mut m = manifest("add", target, blob, Channel::Dev);
    m.identity.kind = Kind::Ptx;
    m
}

#[test]
fn clean_ptx_and_family_cubins_verify() {
    let ptx = common::ptx("compute_80");
    let mut m = ptx_manifest("compute_80", &ptx);
    m.functions = functions_of(&ptx);
    publish_and_verify(&m, ptx).unwrap();
    // A family build reads as its plain SM in the ELF header: sm_120f over an sm_120 cubin.
    let blob = cubin("sm_120");
    publish_and_verify(&manifest("add", "sm_120f", &blob, Channel::Dev), blob).unwrap();
}

#[test]
fn an_sm80_cubin_signed_as_ptx_is_refused() {
    let blob = cubin("sm_80");
    let mut m = ptx_manifest("compute_80", &blob);
    m.functions = functions_of(&blob);
    let err = publish_and_verify(&m, blob).unwrap_err();
    assert!(
        matches!(&err, Error::NotPtx { what, reason } if what.contains("add compute_80 (ptx") && reason.contains("binary image")),
        "{err}"
    );
    assert!(err.fix().contains("PTX"), "{}", err.fix());
}

#[test]
fn ptx_for_another_target_is_refused() {
    let ptx = common::ptx("compute_80");
    let mut m = ptx_manifest("compute_90", &ptx);
    m.functions = functions_of(&ptx);
    let err = publish_and_verify(&m, ptx).unwrap_err();
    assert!(
        matches!(&err, Error::PtxTargetMismatch { module, claimed, actual } if module == "add" && claimed == "compute_90" && actual == "sm_80"),
        "{err}"
    );
}

#[test]
fn ptx_signed_as_a_cubin_is_refused() {
    let ptx = common::ptx("compute_90");
    let m = manifest("add", "sm_90", &ptx, Channel::Dev);
    let err = publish_and_verify(&m, ptx).unwrap_err();
    assert!(
        matches!(&err, Error::NotCubin { what, reason } if what == "add sm_90" && reason.contains("not an ELF")),
        "{err}"
    );
}

#[test]
fn ptx_with_a_nul_or_an_escape_sequence_is_refused() {
    for (inject, want) in [(&b"\0.entry evil()"[..], "NUL byte"), (b"\x1b[2J", "0x1b")] {
        let mut ptx = common::ptx("compute_90");
        let at = ptx.len() / 2;
        ptx.splice(at..at, inject.iter().copied());
        let mut m = ptx_manifest("compute_90", &ptx);
        m.functions = functions_of(&common::ptx("compute_90"));
        let err = publish_and_verify(&m, ptx).unwrap_err();
        assert!(
            matches!(&err, Error::NotPtx { reason, .. } if reason.contains(want)),
            "{err}"
        );
    }
}

#[test]
fn a_family_claim_over_another_sms_cubin_is_refused() {
    let blob = cubin("sm_90");
    let err =
        publish_and_verify(&manifest("add", "sm_120f", &blob, Channel::Dev), blob).unwrap_err();
    assert!(
        matches!(&err, Error::ElfSmMismatch { claimed, actual, .. } if claimed == "sm_120f" && actual == "sm_90"),
        "{err}"
    );
}

#[test]
fn a_manifest_naming_kernels_the_blob_lacks_is_refused() {
    let blob = cubin("sm_90");
    let mut m = manifest("add", "sm_90", &blob, Channel::Dev);
    m.functions[0].symbol = FunctionName::new("add_renamed").unwrap();
    let err = publish_and_verify(&m, blob.clone()).unwrap_err();
    assert!(
        matches!(&err, Error::FunctionMismatch { what, reason } if what == "add sm_90" && reason.contains("not in the blob")),
        "{err}"
    );
    // Dropping the kernel from the manifest hides nothing either.
    let mut m = manifest("add", "sm_90", &blob, Channel::Dev);
    m.functions.clear();
    let err = publish_and_verify(&m, blob).unwrap_err();
    assert!(
        matches!(&err, Error::FunctionMismatch { reason, .. } if reason.contains("does not sign: add")),
        "{err}"
    );
}

#[test]
fn a_signed_launch_abi_other_than_the_blobs_is_refused() {
    let blob = cubin("sm_90");
    // add(const u64*, u64*, int): claim the third parameter is 8 bytes.
    let mut m = manifest("add", "sm_90", &blob, Channel::Dev);
    m.functions[0].abi.params[2].size = 8;
    let err = publish_and_verify(&m, blob.clone()).unwrap_err();
    assert!(
        matches!(&err, Error::FunctionMismatch { reason, .. } if reason.contains("kernel add: signed launch ABI")),
        "{err}"
    );
    // Or that it uses fewer registers than it does.
    let mut m = manifest("add", "sm_90", &blob, Channel::Dev);
    m.functions[0].abi.registers = Some(1);
    assert!(matches!(
        publish_and_verify(&m, blob.clone()).unwrap_err(),
        Error::FunctionMismatch { .. }
    ));
    // Or a smaller whole stack (issue 44, item 4).
    let mut m = manifest("add", "sm_90", &blob, Channel::Dev);
    assert!(
        m.functions[0].abi.stack_bytes.is_some(),
        "the blob's stack is read"
    );
    m.functions[0].abi.stack_bytes = m.functions[0].abi.stack_bytes.map(|s| s + 16);
    assert!(matches!(
        publish_and_verify(&m, blob.clone()).unwrap_err(),
        Error::FunctionMismatch { .. }
    ));
    // A manifest signed before the stack was read (none signed) verifies as it did.
    let mut m = manifest("add", "sm_90", &blob, Channel::Dev);
    m.functions[0].abi.stack_bytes = None;
    publish_and_verify(&m, blob).unwrap();
}

/// Issue 19, item 4: a registry published before manifests signed globals (schema v1, no
/// `globals` field) verifies exactly as before; the signed globals of a v2 manifest must be
/// the blob's (an sm_90 cubin with a device table, signed without it, is refused naming
/// it); a v2 manifest without `globals` and a v1 manifest with them are refused by schema.
#[test]
fn issue_19_v1_manifests_verify_and_v2_globals_must_be_the_blobs() {
    let blob = cubin("sm_90");
    let mut v1 = manifest("add", "sm_90", &blob, Channel::Dev);
    v1.schema = Manifest::SCHEMA_V1.into();
    v1.globals = None;
    publish_and_verify(&v1, blob.clone()).unwrap();

    let mut no_list = manifest("add", "sm_90", &blob, Channel::Dev);
    no_list.globals = None;
    let err = publish_and_verify(&no_list, blob.clone()).unwrap_err();
    assert!(
        err.to_string().contains("requires a `globals` list"),
        "{err}"
    );
    let mut v1_with = manifest("add", "sm_90", &blob, Channel::Dev);
    v1_with.schema = Manifest::SCHEMA_V1.into();
    let err = publish_and_verify(&v1_with, blob).unwrap_err();
    assert!(err.to_string().contains("has no `globals` field"), "{err}");

    let tables = data("elf/globals_sm_90.cubin");
    let mut m = manifest("globals", "sm_90", &tables, Channel::Dev);
    m.globals = Some(Vec::new());
    let err = publish_and_verify(&m, tables).unwrap_err();
    assert!(
        matches!(&err, Error::GlobalMismatch { what, reason }
            if what == "globals sm_90" && reason.contains("does not sign") && reason.contains("_ZN6tables7counterE")),
        "{err}"
    );
}
