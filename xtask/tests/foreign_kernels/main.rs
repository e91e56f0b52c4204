//! Foreign-style kernels (issue 9): the corpus in `kernels/foreign` — C++ template kernels
//! over two fields, device `assert()`, headers in two trees outside the sources folder, one
//! source in two define variants — built by the real nvcc for cubin and PTX, from a spec
//! outside the sources folder, in a copy of the corpus outside the repository.
//!
//! The tests, by concern: `corpus` (what the corpus builds, family targets, include folders),
//! `reproducible` (the same identity and bytes from any checkout), `names` (entry points and
//! their spellings), `abi` (the signed parameter layouts and device globals),
//! `device_link` (modules of several files, extern tables, link-time optimisation) and
//! `diagnostics` (nvcc warnings and register spills).

#[path = "../common/mod.rs"]
mod common;

mod abi;
mod corpus;
mod device_link;
mod diagnostics;
mod libraries;
mod names;
mod reproducible;

use common::Ws;
use cuda_aot::Manifest;

fn manifest(ws: &Ws, rel: &str) -> Manifest {
    let bytes = std::fs::read(ws.path(rel)).unwrap();
    cuda_aot::json::parse(&bytes, 1 << 20, rel).unwrap()
}
