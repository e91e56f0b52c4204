//! Replays every input kept under `fuzz/` (seeds, the committed corpus, regressions)
//! through the fuzz harness on the stable toolchain, so CI checks on each run what the
//! fuzzer once checked: no input panics a parser, and known-bad inputs are refused.
//!
//! The harness is `fuzz/src/lib.rs` itself, compiled here as a module: the fuzz targets
//! and this test call exactly the same functions. `docs/fuzzing.md` says how to fuzz.

#[path = "../fuzz/src/lib.rs"]
mod harness;

use std::path::{Path, PathBuf};

use harness::Verdict;

/// Every fuzz target and the harness function it runs.
const TARGETS: [(&str, fn(&[u8]) -> Verdict); 8] = [
    ("envelope", harness::envelope),
    ("trust_root", harness::trust_root),
    ("rotate", harness::rotate),
    ("manifest", harness::manifest),
    ("index", harness::index),
    ("timestamp", harness::timestamp),
    ("elf", harness::elf),
    ("verify", harness::verify),
];

/// Regression inputs that still panic on this branch, with the test that replays each
/// (ignored until the fix lands). Remove an entry together with its `#[ignore]`.
const KNOWN_CRASHES: &[(&str, &str)] = &[];

fn fuzz_dir(kind: &str, target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind)
        .join(target)
}

/// The files of `fuzz/<kind>/<target>/`, sorted (none when the folder is absent).
fn inputs(kind: &str, target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir(kind, target);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Vec<u8>)> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn seeds_from_the_real_release_are_judged_as_their_names_say() {
    for (target, run) in TARGETS {
        let seeds = inputs("seeds", target);
        let ok = seeds.iter().filter(|(n, _)| n.starts_with("ok-")).count();
        assert!(ok > 0, "{target}: no ok-* seed in fuzz/seeds/{target}");
        for (name, bytes) in &seeds {
            let verdict = run(bytes);
            if name.starts_with("ok-") {
                assert_eq!(verdict, Verdict::Accepted, "{target}/{name}");
            } else {
                assert!(
                    name.starts_with("bad-"),
                    "{target}/{name}: seeds are named ok-* or bad-*"
                );
                assert!(!verdict.accepted(), "{target}/{name} was accepted");
            }
        }
    }
}

#[test]
fn committed_corpus_replays_without_a_panic() {
    for (target, run) in TARGETS {
        let corpus = inputs("corpus", target);
        assert!(
            !corpus.is_empty(),
            "{target}: fuzz/corpus/{target} is empty; run the fuzzer (docs/fuzzing.md)"
        );
        for (_, bytes) in &corpus {
            run(bytes);
        }
    }
}

#[test]
fn every_regression_input_is_refused_without_a_panic() {
    for (target, run) in TARGETS {
        for (name, bytes) in inputs("regressions", target) {
            if KNOWN_CRASHES.contains(&(target, name.as_str())) {
                continue;
            }
            let verdict = run(&bytes);
            assert!(!verdict.accepted(), "{target}/{name} was accepted");
        }
    }
}

#[test]
fn the_container_format_resolves_references_and_signs() {
    let input = b"%%file b blob - blobs/blake3/{{hex2:b}}/{{hex:b}}\nabc\n\
%%file r raw - note\n{{size:b}} {{digest:b}} {{nothing:b}} {{key:9}}";
    let files = harness::Files::build(input);
    let d = cuda_aot::Digest::of(b"abc");
    let blob = format!("blobs/blake3/{}/{}", &d.hex()[..2], d.hex());
    assert_eq!(files.get(&blob), Some(&b"abc"[..]));
    let note = String::from_utf8(files.get("note").unwrap().to_vec()).unwrap();
    assert_eq!(
        note,
        format!(
            "3 {d} {{{{nothing:b}}}} {}",
            harness::fuzz_key(1).public()
        )
    );
    // A signed record verifies as what it claims to be.
    let anchor = harness::anchor_payload(1);
    let input = format!("%%file a root 0 anchor\n{anchor}");
    assert_eq!(harness::trust_root(input.as_bytes()), Verdict::Accepted);
    let input = format!("%%file a root 1 anchor\n{anchor}");
    assert!(!harness::trust_root(input.as_bytes()).accepted());
}

#[test]
fn skews_that_overflow_are_capped_by_the_fuzz_target_only() {
    // The verify target caps the skew (see harness::MAX_SKEW_SECS); the uncapped call is
    // what the library must survive too (issue 10 item 6).
    let seed = inputs("seeds", "verify")
        .into_iter()
        .find(|(n, _)| n == "ok-release")
        .expect("verify seed")
        .1;
    let mut input = seed.clone();
    input.extend_from_slice(b"\n%%file o raw - options\n1800000000 18446744073709551615");
    assert_eq!(harness::verify(&input), Verdict::Accepted);
    let _ = harness::verify_with(&seed, 0);
    assert_eq!(harness::MAX_SKEW_SECS, 100 * 365 * 86_400);
}
