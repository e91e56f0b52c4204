//! Replays every input kept in git under `fuzz/` (seeds and regressions) through the
//! fuzz harness on the stable toolchain, so CI checks on each run what the fuzzer once
//! checked: no input panics a parser, and known-bad inputs are refused. The working
//! corpus a fuzz run grows (`fuzz/corpus/`, not in git) is replayed by an ignored test.
//!
//! The harness is `fuzz/src/lib.rs` itself, compiled here as a module: the fuzz targets
//! and this test call exactly the same functions. `docs/fuzzing.md` says how to fuzz.

#[path = "../fuzz/src/lib.rs"]
mod harness;

use std::path::{Path, PathBuf};

use harness::Verdict;

/// A harness function: one fuzz target's body.
type Target = fn(&[u8]) -> Verdict;

/// Every fuzz target and the harness function it runs.
const TARGETS: [(&str, Target); 10] = [
    ("envelope", harness::envelope),
    ("trust_root", harness::trust_root),
    ("rotate", harness::rotate),
    ("manifest", harness::manifest),
    ("index", harness::index),
    ("timestamp", harness::timestamp),
    ("elf", harness::elf),
    ("ptx", harness::ptx),
    ("verify", harness::verify),
    ("bundle", harness::bundle),
];

/// Regression inputs that still panic on this branch, `(target, file)`, each replayed by
/// its own `#[ignore]`d test until the fix lands. Remove an entry with its `#[ignore]`.
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

/// One input of `fuzz/<kind>/<target>/`.
fn input(kind: &str, target: &str, name: &str) -> Vec<u8> {
    let path = fuzz_dir(kind, target).join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `inputs` through `run`: `ok-*` must be accepted, `bad-*` refused.
fn judge(kind: &str, target: &str, run: Target, skip: &[(&str, &str)]) -> usize {
    let mut ok = 0;
    for (name, bytes) in inputs(kind, target) {
        if skip.contains(&(target, name.as_str())) {
            continue;
        }
        let verdict = run(&bytes);
        if name.starts_with("ok-") {
            assert_eq!(verdict, Verdict::Accepted, "{kind}/{target}/{name}");
            ok += 1;
        } else {
            assert!(
                name.starts_with("bad-"),
                "{kind}/{target}/{name}: name it ok-* or bad-*"
            );
            assert!(!verdict.accepted(), "{kind}/{target}/{name} was accepted");
        }
    }
    ok
}

#[test]
fn seeds_from_the_real_release_are_judged_as_their_names_say() {
    for (target, run) in TARGETS {
        let ok = judge("seeds", target, run, &[]);
        assert!(ok > 0, "{target}: no ok-* seed in fuzz/seeds/{target}");
    }
}

#[test]
fn every_regression_input_is_judged_as_its_name_says_without_a_panic() {
    let mut judged = 0;
    for (target, run) in TARGETS {
        judge("regressions", target, run, KNOWN_CRASHES);
        judged += inputs("regressions", target).len();
    }
    // A replay of nothing would pass having checked nothing (a moved folder, say).
    assert!(
        judged >= 5,
        "only {judged} regression inputs under fuzz/regressions/: the folder moved or lost files"
    );
}

#[test]
#[ignore = "replays the working corpus fuzz/corpus/, which is not in git: run with --ignored after a fuzz run (docs/fuzzing.md)"]
fn working_corpus_replays_without_a_panic() {
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
fn known_crashes_name_files_that_exist() {
    for (target, name) in KNOWN_CRASHES {
        assert!(
            fuzz_dir("regressions", target).join(name).is_file(),
            "{target}/{name}"
        );
    }
}

/// Issue 10 item 5: a section-name-table offset near `u64::MAX` overflowed in the old
/// `src/elf.rs` (`names + name`). The new reader refuses it, and so does the loader's
/// structure check.
#[test]
fn elf_name_table_offset_near_u64_max_is_refused() {
    let bytes = input("regressions", "elf", "bad-name-table-offset-overflow");
    assert!(!harness::elf(&bytes).accepted());
    assert!(cuda_aot::elf::check_structure(&bytes).is_err());
}

/// Issue 10 item 2: a trust anchor at version `u64::MAX` overflowed `version + 1` while
/// walking the rotation chain (`src/verify.rs`), and `from + 1` in `trust::rotate`.
#[test]
fn a_trust_anchor_at_version_u64_max_is_refused_without_overflow() {
    let bytes = input("regressions", "verify", "bad-anchor-version-u64-max");
    assert!(!harness::verify(&bytes).accepted());
    let files = harness::Files::build(&bytes);
    let limits = cuda_aot::Limits::default();
    let anchor = files.get("anchor").unwrap();
    let trusted = cuda_aot::trust::verify_anchor(anchor, &limits, "anchor")
        .expect("an anchor may have any version");
    assert_eq!(trusted.root().version, u64::MAX);
    let next = harness::Files::build(&input("seeds", "rotate", "ok-v2"));
    let next = next.get("next").unwrap();
    assert!(cuda_aot::trust::rotate(&trusted, next, &limits, "next").is_err());
}

/// Issue 10 item 6: a clock-skew allowance of `u64::MAX` seconds overflowed
/// `expires + skew` (`src/verify.rs`). With a clock at 9999-12-31, that skew accepts the
/// expired registry, as asked, and nothing panics; a zero skew refuses it.
#[test]
fn the_largest_clock_skew_and_grace_do_not_panic() {
    let bytes = input("regressions", "verify", "ok-skew-u64-max");
    assert_eq!(harness::verify(&bytes), Verdict::Accepted);
    let seed = input("seeds", "verify", "ok-release");
    for options in [
        "253402300799 0 0",
        "18446744073709551615 0 18446744073709551615",
        "18446744073709551615 18446744073709551615 18446744073709551615",
    ] {
        let mut with = seed.clone();
        with.extend_from_slice(format!("\n%%file o raw - options\n{options}").as_bytes());
        let verdict = harness::verify(&with);
        if options.starts_with("253402300799 0") {
            match verdict {
                Verdict::Refused(e) => assert!(e.contains("expired"), "{e}"),
                Verdict::Accepted => panic!("expired registry accepted without skew"),
            }
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
        format!("3 {d} {{{{nothing:b}}}} {}", harness::fuzz_key(1).public())
    );
    // A signed record verifies as what it claims to be.
    let anchor = harness::anchor_payload(1);
    let input = format!("%%file a root 0 anchor\n{anchor}");
    assert_eq!(harness::trust_root(input.as_bytes()), Verdict::Accepted);
    let input = format!("%%file a root 1 anchor\n{anchor}");
    assert!(!harness::trust_root(input.as_bytes()).accepted());
}
