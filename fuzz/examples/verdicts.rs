//! Tallies what a fuzz target makes of each input in folders: accepted, or refused with
//! which error variant. Shows how deep a corpus reaches (docs/fuzzing.md).
//!
//! ```text
//! cargo run --release --manifest-path fuzz/Cargo.toml --example verdicts -- verify fuzz/corpus/verify
//! ```
//!
//! With `--each` first, it also prints `verdict<TAB>path` for every input.

use std::collections::BTreeMap;

use cuda_aot_fuzz::Verdict;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let each = args.first().is_some_and(|a| a == "--each");
    if each {
        args.remove(0);
    }
    let Some((target, dirs)) = args.split_first() else {
        eprintln!("usage: verdicts TARGET DIR...");
        std::process::exit(2);
    };
    let run: fn(&[u8]) -> Verdict = match target.as_str() {
        "envelope" => cuda_aot_fuzz::envelope,
        "trust_root" => cuda_aot_fuzz::trust_root,
        "rotate" => cuda_aot_fuzz::rotate,
        "manifest" => cuda_aot_fuzz::manifest,
        "index" => cuda_aot_fuzz::index,
        "timestamp" => cuda_aot_fuzz::timestamp,
        "elf" => cuda_aot_fuzz::elf,
        "verify" => cuda_aot_fuzz::verify,
        other => panic!("unknown target {other}"),
    };
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for dir in dirs {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let key = match run(&bytes) {
                Verdict::Accepted => "accepted".to_string(),
                Verdict::Refused(e) => match e.strip_prefix('[').and_then(|r| r.split_once(']')) {
                    Some((variant, _)) => format!("refused: {variant}"),
                    None => "refused: (parser message)".to_string(),
                },
            };
            if each {
                println!("{key}\t{}", path.display());
            }
            *tally.entry(key).or_default() += 1;
        }
    }
    let total: usize = tally.values().sum();
    println!("{target}: {total} inputs");
    for (k, n) in &tally {
        println!("{n:>7}  {k}");
    }
}
