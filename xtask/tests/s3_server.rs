//! The S3-compatible server of the network tests (`cargo xtask servers s3`, issue 20 item
//! 5): started from its pinned wheels on loopback, it answers racing conditional writers
//! (a real S3 client, boto3, many threads at once) with exactly one winner and 412 for every
//! other, for create-if-absent (`If-None-Match: *`) and for compare-and-swap (`If-Match`):
//! what a registry on object storage relies on to publish atomically.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::s3::S3;
use common::{repo, xtask};

/// The venv `servers s3` installed (the project's .cuda-aot/servers/moto-s3-<pins>/).
fn venv_python() -> PathBuf {
    common::server::venv_python("moto-s3-")
}

#[test]
fn racing_conditional_writers_get_exactly_one_winner() {
    let s3 = S3::start(&["race"], &[]);
    let out = Command::new(venv_python())
        .arg(repo().join("xtask/tests/s3_race.py"))
        .arg(format!("http://{}", s3.addr))
        .args(["race", "16"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for race in ["create", "swap"] {
        assert_eq!(v[race]["won"], 1, "{v}");
        assert_eq!(v[race]["refused_412"], 15, "{v}");
        assert_eq!(v[race]["stored_is_a_winner"], true, "{v}");
    }
}

#[test]
fn a_bad_bucket_name_is_refused_before_anything_starts() {
    let out = xtask()
        .args(["servers", "s3", "--bucket", "No_Such"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bucket name \"No_Such\""), "{err}");
}
