//! One test per refusal of the offline verifier: each builds a real registry with the real
//! publisher, applies one attack, and asserts the specific error (not just `is_err`).
//!
//! The tests are grouped by what they attack, one file per concern: `root` (the trust root
//! and its rotation), `timestamps` (expiry and rollback), `index`, `statements` (build
//! statements), `signatures` (keys and thresholds), `blobs` (manifests and blobs),
//! `promotions` (the production channel) and `files` (file-system and parsing attacks).
//! The helpers several of them use are here.

#[path = "../common/mod.rs"]
mod common;

mod blobs;
mod files;
mod index;
mod promotions;
mod root;
mod signatures;
mod statements;
mod timestamps;

use common::Fixture;
use cuda_aot::metadata::{Index, Timestamp};

fn current_index(f: &Fixture) -> (Timestamp, Index) {
    f.registry().current().unwrap().unwrap()
}

/// Writes `idx` as the next index file and points a new timestamp at it (publisher-signed).
fn republish_index(f: &Fixture, ts: &Timestamp, idx: &Index) {
    let mut idx = idx.clone();
    idx.version = ts.index.version + 1;
    f.write_index(&idx, ts.version + 1);
}
