//! Issue 20: the shared build cache (`--remote-cache file:///...`). One checkout builds into
//! it (read-write, entries signed by a builder key of a generated trust root); another
//! checkout, at another path with an empty local cache, takes every job from it and runs
//! no nvcc, with the same bytes. Forged, altered, replayed, unsigned and truncated entries
//! are refused, named in the summary and the JSON report, and compiled instead; a reader
//! never writes to the shared cache; bad settings are refused before anything is built.
//!
//! The tests, by concern: `round_trip` (a folder, an S3 bucket and an OCI repository filled
//! and read back, poisoned entries refused), `settings` (bad settings and an expired trust
//! root refused), `shards` (shard builds filling the cache for a final release), `repro`
//! (auditing the cache by rebuilding) and `failures` (stores that fail, hang, are cut or
//! die, and a build killed while storing). This file holds the helpers they share.

#[path = "../common/mod.rs"]
mod common;

mod failures;
mod hostile;
mod repro;
mod round_trip;
mod settings;
mod shards;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::s3::S3;
use common::{Keys, Run, Ws};

fn url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// The shared-cache arguments for the shared cache at `url`: read-write signing with `key`
/// when given, else read-only; entries checked against `keys`' root.
fn shared_args(url: &str, keys: &Keys, key: Option<&Path>) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--remote-cache".into(),
        url.into(),
        "--remote-cache-trust".into(),
        keys.root().display().to_string(),
    ];
    match key {
        Some(k) => args.extend([
            "--remote-cache-mode".into(),
            "read-write".into(),
            "--remote-cache-key".into(),
            k.display().to_string(),
        ]),
        None => args.extend(["--remote-cache-mode".into(), "read".into()]),
    }
    args
}

/// A build of `ws` with the shared cache folder `dir` and `extra`.
fn build_with(ws: &Ws, dir: &Path, keys: &Keys, key: Option<&Path>, extra: &[&str]) -> Run {
    build_at(ws, &url(dir), keys, key, extra, |_| {})
}

/// A build of `ws` with the shared cache at `url` ([`shared_args`]) and `extra`, its
/// command adjusted by `f` (the environment of an S3 store, a wrapper).
fn build_at(
    ws: &Ws,
    url: &str,
    keys: &Keys,
    key: Option<&Path>,
    extra: &[&str],
    f: impl FnOnce(&mut std::process::Command),
) -> Run {
    let args = shared_args(url, keys, key);
    let mut refs: Vec<&str> = args.iter().map(String::as_str).collect();
    refs.extend(extra);
    ws.build_with(&refs, f)
}

/// A build of `ws` with the shared cache at `url` on the S3 test server `s3` and `extra`.
fn build_on_s3(
    ws: &Ws,
    s3: &S3,
    url: &str,
    keys: &Keys,
    key: Option<&Path>,
    extra: &[&str],
) -> Run {
    build_at(ws, url, keys, key, extra, |c| {
        s3.env(c);
    })
}

/// [`build_with`] and nothing else.
fn build(ws: &Ws, dir: &Path, keys: &Keys, key: Option<&Path>) -> Run {
    build_with(ws, dir, keys, key, &[])
}

fn shared(run: &Run) -> &serde_json::Value {
    &run.report.as_ref().expect("a report")["shared_cache"]
}

/// `module target` -> identity digest hex, from a build's report.
fn identities(run: &Run) -> BTreeMap<String, String> {
    run.column("identity_digest")
        .into_iter()
        .map(|(k, v)| (k, v.trim_start_matches("blake3:").to_string()))
        .collect()
}

fn entry(dir: &Path, id: &str) -> PathBuf {
    dir.join("v1/entries").join(id)
}

/// Asserts that `run` ran `nvcc` jobs and took `taken` from the shared cache, and that its
/// blobs are those of `first` (what compiled equals what was shared).
fn assert_shared(run: &Run, nvcc: u64, taken: u64, first: &Run) {
    assert_eq!(run.nvcc_runs(), nvcc, "{}", run.stderr);
    assert_eq!(shared(run)["taken"], taken, "{}", run.stderr);
    assert_eq!(
        run.digests(),
        first.digests(),
        "what compiled equals what was shared"
    );
}

/// `what: reason` of each entry `run` refused, from its report.
fn refusals(run: &Run) -> Vec<String> {
    shared(run)["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}: {}",
                r["what"].as_str().unwrap(),
                r["reason"].as_str().unwrap()
            )
        })
        .collect()
}
