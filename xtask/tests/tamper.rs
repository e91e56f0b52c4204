//! Every file of a registry is checked by someone (issue 43, item 2): every file of a
//! fresh release, rebuild sources included, mutated five ways (a flipped byte, truncated,
//! a byte appended, deleted, replaced by a link to a good copy), is refused by `verify`
//! and by the C ABI's `cuda_aot_verify`; `sync` refuses a damaged source before anything
//! is visible; and docs/trust.md names a checker for every kind of file a registry holds.

mod common;

use std::path::{Path, PathBuf};

use common::{Out, Ws, xtask};

/// The five mutations of one file.
const MUTATIONS: [&str; 5] = ["flip", "truncate", "append", "delete", "symlink"];

/// Applies `how` to `file`; `spare` holds a good copy for the link to point at.
fn mutate(file: &Path, how: &str, spare: &Path) {
    let bytes = std::fs::read(file).unwrap();
    match how {
        // An empty file (an empty header among the sources) has no byte to flip: it gets one.
        "flip" if bytes.is_empty() => std::fs::write(file, b"\x01").unwrap(),
        "flip" => {
            let mut b = bytes;
            let at = b.len() / 2;
            b[at] ^= 0x01;
            std::fs::write(file, b).unwrap();
        }
        "truncate" => std::fs::write(file, &bytes[..bytes.len() / 2]).unwrap(),
        "append" => {
            let mut b = bytes;
            b.push(b'x');
            std::fs::write(file, b).unwrap();
        }
        "delete" => std::fs::remove_file(file).unwrap(),
        "symlink" => {
            std::fs::write(spare, &bytes).unwrap();
            std::fs::remove_file(file).unwrap();
            std::os::unix::fs::symlink(spare, file).unwrap();
        }
        _ => unreachable!(),
    }
}

/// Every file under `dir`, relative to it, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.path().strip_prefix(dir).unwrap().to_path_buf())
        .collect();
    v.sort();
    v
}

fn copy_tree(from: &Path, to: &Path) {
    for rel in files(from) {
        let dst = to.join(&rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(from.join(&rel), dst).unwrap();
    }
}

/// Issue 43, item 2: each of five mutations of each file of a fresh release is refused
/// by `verify` and by `cuda_aot_verify`, each naming what it refused; the untouched
/// release passes both.
#[test]
fn issue_43_every_mutation_of_every_file_of_a_release_is_refused() {
    let ws = Ws::new();
    ws.release();
    let good = ws.path("spec/.cuda-aot/registry");
    let trust = ws.path("spec/.cuda-aot/dev-keys/root.json");
    let tmp = tempfile::tempdir().unwrap();
    // The registry's content: every file of the layout. The one other file is the
    // publishers' lock (`.lock`, empty, never served or read: it only serialises
    // publishes), which no mutation of can change what anyone reads.
    let (all, other): (Vec<PathBuf>, Vec<PathBuf>) = files(&good)
        .into_iter()
        .partition(|f| cuda_aot::source::layout::is_layout_path(f.to_str().unwrap()));
    assert_eq!(other, [PathBuf::from(".lock")]);
    assert!(
        all.iter().any(|f| f.starts_with("sources")),
        "the release keeps its sources: {all:?}"
    );
    let verify = |reg: &Path, state: &Path| {
        Out::of(
            xtask()
                .args(["verify", "--registry"])
                .arg(reg)
                .arg("--trust")
                .arg(&trust)
                .arg("--state")
                .arg(state),
        )
    };
    let state = tmp.path().join("clean.state");
    verify(&good, &state).ok();
    common::capi::c_verify(&good, &trust, &tmp.path().join("clean.c.state")).unwrap();
    let mut accepted = Vec::new();
    let mut tried = 0;
    for (n, rel) in all.iter().enumerate() {
        let empty = std::fs::metadata(good.join(rel)).unwrap().len() == 0;
        // Truncating an empty file changes nothing: not a mutation.
        for how in MUTATIONS
            .into_iter()
            .filter(|h| !(empty && *h == "truncate"))
        {
            let reg = tmp.path().join(format!("r{n}-{how}"));
            copy_tree(&good, &reg);
            mutate(
                &reg.join(rel),
                how,
                &tmp.path().join(format!("spare{n}-{how}")),
            );
            tried += 1;
            let state = tmp.path().join(format!("s{n}-{how}"));
            let out = verify(&reg, &state);
            if out.code == Some(0) {
                accepted.push(format!("verify: {} {how}", rel.display()));
            }
            if common::capi::c_verify(&reg, &trust, &tmp.path().join(format!("c{n}-{how}"))).is_ok()
            {
                accepted.push(format!("cuda_aot_verify: {} {how}", rel.display()));
            }
            std::fs::remove_dir_all(&reg).unwrap();
        }
    }
    assert!(tried >= all.len() * (MUTATIONS.len() - 1));
    assert!(
        accepted.is_empty(),
        "{} of {tried} mutations accepted: {accepted:#?}",
        accepted.len()
    );
    println!(
        "{tried} mutations of {} files: every one refused by verify and cuda_aot_verify",
        all.len()
    );
}

/// The kind of a registry file: its first path component, or the file name at the top.
fn kind(rel: &str) -> String {
    rel.split('/').next().unwrap_or(rel).to_string()
}

/// Issue 43, item 2: docs/trust.md's table "Who checks each file" names a checker for
/// every kind of file the layout makes (read from `cuda_aot::source::layout`'s code), and
/// for nothing else.
#[test]
fn issue_43_trust_md_names_a_checker_for_every_kind_of_registry_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("docs/trust.md")).unwrap();
    let table = doc
        .split("### Who checks each file")
        .nth(1)
        .expect("docs/trust.md has the section");
    let documented: std::collections::BTreeSet<String> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| kind(l.split('`').next().unwrap()))
        .collect();
    let code = std::fs::read_to_string(root.join("src/source.rs")).unwrap();
    let layout = code
        .split("pub mod layout {")
        .nth(1)
        .unwrap()
        .split("\n}\n")
        .next()
        .unwrap();
    // Every path the layout makes: the string literals of its `format!`s and constants.
    let mut made: std::collections::BTreeSet<String> = layout
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|lit| lit.ends_with(".json") || lit.contains('/'))
        .map(kind)
        // Suffixes the layout's path checks strip (`.index.json`) are parts of a kind.
        .filter(|k| k.starts_with(|c: char| c.is_ascii_lowercase()))
        .collect();
    made.insert(".lock".to_string());
    assert!(
        made.contains("sources") && made.contains("timestamp.json"),
        "{made:?}"
    );
    assert_eq!(documented, made, "docs/trust.md's table against the layout");
}

/// Issue 43, item 2: `sync` from a server whose registry has one damaged rebuild source
/// (a flipped byte) refuses it, naming the source, and nothing becomes visible in the
/// folder it syncs into; with the source repaired, the same sync succeeds.
#[test]
fn issue_43_sync_refuses_a_damaged_source_before_anything_is_visible() {
    let ws = Ws::new();
    ws.release();
    let reg = ws.path("spec/.cuda-aot/registry");
    let trust = ws.path("spec/.cuda-aot/dev-keys/root.json");
    let source = files(&reg)
        .into_iter()
        .find(|f| f.starts_with("sources") && std::fs::metadata(reg.join(f)).unwrap().len() > 0)
        .unwrap();
    let good = std::fs::read(reg.join(&source)).unwrap();
    let mut bad = good.clone();
    bad[0] ^= 0x01;
    std::fs::write(reg.join(&source), &bad).unwrap();
    let mut serve =
        common::server::Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[&reg]);
    let tmp = tempfile::tempdir().unwrap();
    let to = tmp.path().join("mirror");
    let sync = || {
        Out::of(
            xtask()
                .args(["sync", "--from", &serve.url(), "--to"])
                .arg(&to)
                .arg("--trust")
                .arg(&trust)
                .arg("--state")
                .arg(tmp.path().join("state")),
        )
    };
    let short = source.file_name().unwrap().to_string_lossy()[..12].to_string();
    let out = sync().failed();
    assert!(
        out.stderr.contains("source ") && out.stderr.contains(&short),
        "{}",
        out.stderr
    );
    let visible: Vec<PathBuf> = files(&to)
        .into_iter()
        .filter(|f| cuda_aot::source::layout::is_layout_path(f.to_str().unwrap()))
        .collect();
    assert!(visible.is_empty(), "nothing visible: {visible:?}");
    std::fs::write(reg.join(&source), &good).unwrap();
    sync().ok();
    assert!(to.join(&source).is_file());
    serve.stop();
}
