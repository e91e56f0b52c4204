//! Embedded bundles (issue 36, item 3): `Runtime::open_embedded` verifies a bundle compiled
//! into the program exactly as `Runtime::open` verifies a folder, refuses one made for
//! another trust root, damaged or rolled back before the driver is touched, and (on the GPU
//! host) hands the driver the program's own bytes.

mod common;

use common::*;
use cuda_aot::bundle::Embedded;
use cuda_aot::cuda;
use cuda_aot::{Digest, Error, ErrorKind, Policy, Runtime};

/// `bytes` with the first occurrence of `needle` changed in its first byte.
fn flip(bytes: &[u8], needle: &[u8]) -> &'static [u8] {
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("present");
    let mut v = bytes.to_vec();
    v[at] ^= 1;
    Box::leak(v.into_boxed_slice())
}

/// A policy keeping its rollback state in the fixture's folder.
fn policy(f: &Fixture) -> Policy {
    Policy::development().with_state_file(f.state_path())
}

/// The refusals that come before the driver: on this machine (no driver in CI) they are
/// the error, not the driver's absence.
#[test]
fn issue_36_a_bundle_of_another_root_damaged_or_empty_is_refused_before_the_driver() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let bundle = embed(&f);
    let other = Fixture::new();
    other.publish_sms(&["sm_90"]);
    let err = Runtime::open_embedded(bundle, &other.root_file, policy(&f))
        .err()
        .unwrap();
    assert!(matches!(err, Error::BundleOtherRoot { .. }), "{err}");
    assert_eq!(err.kind(), ErrorKind::UntrustedKey);
    let text = err.to_string();
    assert!(text.contains(&Digest::of(&f.root_file).short()), "{text}");
    assert!(
        text.contains(&Digest::of(&other.root_file).short()),
        "{text}"
    );
    assert!(err.fix().contains("lock"), "{}", err.fix());
    println!("another root: {err}\nFix: {}", err.fix());

    // A flipped byte of the cubin: the blob's digest, named (the blob a device loads is
    // known once the device is: without a driver, the offline verification says it).
    let cubin = std::fs::read(f.blob_path("sm_90")).unwrap();
    let damaged = flip(bundle, &cubin[cubin.len() / 2..cubin.len() / 2 + 32]);
    let err = match cuda::driver_present() {
        true => Runtime::open_embedded(damaged, &f.root_file, policy(&f))
            .err()
            .unwrap(),
        false => {
            *cuda_aot::verify::verify_all(
                &Embedded::parse(damaged).unwrap(),
                &f.root_file,
                Default::default(),
                &Default::default(),
            )
            .err()
            .unwrap()
            .error
        }
    };
    assert!(matches!(err, Error::DigestMismatch { .. }), "{err}");
    assert!(err.to_string().contains("sm_90 blob"), "{err}");

    // A forged header claiming the right root does not help: the signatures decide.
    let mut forged = embed(&other).to_vec();
    forged[24..56].copy_from_slice(&Digest::of(&f.root_file).0);
    let forged: &'static [u8] = Box::leak(forged.into_boxed_slice());
    let err = Runtime::open_embedded(forged, &f.root_file, policy(&f))
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::UntrustedKey, "{err}");

    for (bytes, why) in [
        (&b""[..], "empty"),
        (&bundle[..bundle.len() / 2], "past the end"),
    ] {
        let err = Runtime::open_embedded(bytes, &f.root_file, policy(&f))
            .err()
            .unwrap();
        assert!(matches!(err, Error::BadBundle { .. }), "{err}");
        assert!(err.to_string().contains(why), "{err}");
    }
}

/// The same rollback rules as a folder: a program built with an older release of the
/// registry than one already run is refused, the state being kept per trust root and
/// registry of the bundle.
#[test]
fn issue_36_an_older_embedded_release_than_one_seen_is_a_rollback() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let v1 = embed(&f);
    f.append(&["sm_80"]);
    let v2 = embed(&f);
    // What a run of the v2 program saved (the runtime saves it after a successful open).
    let seen = cuda_aot::verify::verify_all(
        &Embedded::parse(v2).unwrap(),
        &f.root_file,
        Default::default(),
        &Default::default(),
    )
    .unwrap();
    let p = Policy::development();
    let state = p
        .embedded_state_path(&Embedded::parse(v1).unwrap())
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.json");
    seen.state().save(&file).unwrap();
    let err = Runtime::open_embedded(v1, &f.root_file, p.clone().with_state_file(&file))
        .err()
        .unwrap();
    assert!(matches!(err, Error::Rollback { .. }), "{err}");
    // The per-user file is one per trust root and registry: another origin has its own.
    let state_v2 = p
        .embedded_state_path(&Embedded::parse(v2).unwrap())
        .unwrap();
    assert_eq!(state, state_v2, "one registry, one state file");
    let elsewhere = Embedded::pack(
        &f.reg_path(),
        &layout_paths(&f.reg_path()),
        &Digest::of(&f.root_file),
        "https://mirror.example/",
    )
    .unwrap();
    let elsewhere = Embedded::parse(Box::leak(elsewhere.into_boxed_slice())).unwrap();
    assert_ne!(p.embedded_state_path(&elsewhere).unwrap(), state);
}

/// A good bundle verifies, then meets the driver: its absence here, clearly; on the GPU
/// host the runtime opens.
#[test]
fn issue_36_a_good_bundle_verifies_then_meets_the_driver() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let bundle = embed(&f);
    match (
        cuda::driver_present(),
        Runtime::open_embedded(bundle, &f.root_file, policy(&f)),
    ) {
        (false, Err(err)) => assert!(
            matches!(&err, Error::Cuda(e) if e.is_driver_missing()),
            "{err}"
        ),
        (false, Ok(_)) => panic!("opened a runtime without a CUDA driver"),
        (true, opened) => {
            let rt = opened.unwrap();
            assert_eq!(rt.counters().modules_verified, 1);
        }
    }
}

/// On the GPU: the embedded cubin is what the driver gets (its address lies inside the
/// bundle: no copy), and the kernel runs and matches its CPU reference.
#[test]
#[ignore = "needs an sm_90 CUDA device (the fixture cubins are sm_90)"]
fn gpu_an_embedded_bundle_runs_its_kernel_in_place() {
    let f = Fixture::new();
    f.publish_sms(&["sm_80", "sm_90"]);
    let bundle = embed(&f);
    let rt = Runtime::open_embedded(bundle, &f.root_file, policy(&f)).unwrap();
    let bytes = rt.verified_bytes("add").expect("selected");
    let range = bundle.as_ptr_range();
    assert!(
        range.contains(&bytes.as_ptr()),
        "the verified cubin is a copy, not the embedded bytes"
    );
    rt.preload().unwrap();
    let module = rt.module("add").unwrap();
    assert_eq!(module.manifest().identity.sm.to_string(), "sm_90");
    // b[i] += a[i], checked against the CPU inside.
    run_add(&rt);
    println!(
        "embedded bundle of {} bytes: add sm_90 loaded in place at offset {}",
        bundle.len(),
        bytes.as_ptr() as usize - bundle.as_ptr() as usize
    );
}
