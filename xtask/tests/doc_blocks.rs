//! Every code block of README.md and docs/*.md is run or checked by a test, so no doc
//! block drifts from the code (issue 17 item 2):
//! - `rust` blocks carry a `<!-- compiled: PATH -->` line: the block is that file's code
//!   (an example or a test that cargo compiles), or, for `PATH` a crate's `lib.rs`, the
//!   markdown file is included there as doctests (`include_str!`), which `cargo test` runs;
//! - `sh` blocks: each command of ours (`cargo xtask`, `cargo cuda-aot`,
//!   `cuda-aot-registry`) names a subcommand that exists and only options its `--help`
//!   lists; cargo's own commands only options `cargo <cmd> --help` lists;
//! - `toml` blocks parse, and release specs (`[build]` with `[[module]]`) load through the
//!   real spec reader (`xtask build --dry-run`);
//! - `c`, `cpp` and `cmake` blocks carry a `<!-- compiled: PATH -->` line and are a run of
//!   lines of that file (which a test compiles: `capi/tests/c_abi.rs` builds
//!   `examples/c/verify.c`, `tests/install.rs` configures `examples/cmake/CMakeLists.txt`);
//! - `json` blocks are docs/json.md's examples, checked by the tests that produce them
//!   (`common/doc_json.rs`); `text` blocks are prose.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{repo, shell_words, xtask};

/// One fenced block: the file, its first line number, the info string and the text.
#[derive(Debug)]
struct Block {
    file: String,
    line: usize,
    lang: String,
    text: String,
    /// The `<!-- compiled: PATH -->` line just above it, if any.
    compiled: Option<String>,
}

fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The fenced blocks of `text` (fences may be indented, as in list items).
fn blocks_of(file: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        if let Some(lang) = t.strip_prefix("```") {
            let indent = lines[i].len() - t.len();
            let compiled = i
                .checked_sub(1)
                .and_then(|j| lines[j].trim().strip_prefix("<!-- compiled: "))
                .and_then(|s| s.strip_suffix(" -->"))
                .map(str::to_string);
            let start = i;
            let mut body = String::new();
            i += 1;
            while i < lines.len() && lines[i].trim() != "```" {
                let l = lines[i];
                body.push_str(
                    l.get(indent.min(l.len() - l.trim_start().len())..)
                        .unwrap_or(""),
                );
                body.push('\n');
                i += 1;
            }
            out.push(Block {
                file: file.to_string(),
                line: start + 1,
                lang: lang.trim().to_string(),
                text: body,
                compiled,
            });
        }
        i += 1;
    }
    out
}

fn all_blocks() -> Vec<Block> {
    doc_files()
        .iter()
        .flat_map(|p| {
            let rel = p.strip_prefix(repo()).unwrap().display().to_string();
            blocks_of(&rel, &std::fs::read_to_string(p).unwrap())
        })
        .collect()
}

/// The commands of a shell block: continuation lines joined, split at `&&`, `|`, `;`.
fn commands(text: &str) -> Vec<Vec<String>> {
    let joined = text.replace("\\\n", " ");
    let mut out = Vec::new();
    for line in joined.lines() {
        let mut cmd = Vec::new();
        for w in shell_words(line) {
            if ["&&", "||", "|", ";", "&"].contains(&w.as_str()) {
                out.push(std::mem::take(&mut cmd));
            } else {
                cmd.push(w);
            }
        }
        out.push(cmd);
    }
    out.into_iter().filter(|c| !c.is_empty()).collect()
}

/// `--help` texts, each asked for once.
#[derive(Default)]
struct Helps(BTreeMap<Vec<String>, Option<String>>);

impl Helps {
    /// The help of `xtask <path>` (`None` when there is no such subcommand).
    fn ours(&mut self, path: &[String]) -> Option<String> {
        let key: Vec<String> = std::iter::once("xtask".to_string())
            .chain(path.iter().cloned())
            .collect();
        self.0
            .entry(key)
            .or_insert_with(|| {
                let out = xtask().args(path).arg("--help").output().unwrap();
                out.status
                    .success()
                    .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            })
            .clone()
    }

    /// The help of `cargo <sub>`.
    fn cargo(&mut self, sub: &str) -> Option<String> {
        let key = vec!["cargo".to_string(), sub.to_string()];
        self.0
            .entry(key)
            .or_insert_with(|| {
                let out = Command::new(env!("CARGO"))
                    .args([sub, "--help"])
                    .output()
                    .unwrap();
                out.status
                    .success()
                    .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            })
            .clone()
    }
}

/// Whether `help` lists option `opt` (`--name` or `-x`).
fn lists(help: &str, opt: &str) -> bool {
    help.match_indices(opt).any(|(i, _)| {
        let before = help[..i].chars().last();
        let after = help[i + opt.len()..].chars().next();
        before.is_none_or(|c| c == ' ' || c == '[' || c == ',')
            && after.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
    })
}

/// The options of `args` (up to a `--` that hands the rest to another program).
fn options(args: &[String]) -> Vec<String> {
    args.iter()
        .take_while(|a| a.as_str() != "--")
        .filter(|a| a.starts_with('-') && a.len() > 1 && !a.starts_with("-D"))
        .map(|a| a.split('=').next().unwrap().to_string())
        .collect()
}

/// What is wrong with one command of a shell block (`None`: not ours or cargo's, or fine).
fn check_command(cmd: &[String], helps: &mut Helps) -> Option<String> {
    let mut w: Vec<String> = cmd
        .iter()
        .skip_while(|w| w.contains('=') && !w.starts_with('-'))
        .cloned()
        .collect();
    if w.is_empty() {
        return None;
    }
    let ours = match (w[0].as_str(), w.get(1).map(String::as_str)) {
        ("cargo", Some("xtask" | "cuda-aot")) => {
            w.drain(..2);
            true
        }
        ("cuda-aot-registry" | ".gpu/xtask", _) => {
            w.drain(..1);
            true
        }
        _ => false,
    };
    if ours {
        let Some(sub) = w.first().filter(|s| !s.starts_with('-')).cloned() else {
            let help = helps.ours(&[])?;
            return options(&w)
                .into_iter()
                .find(|o| !lists(&help, o))
                .map(|o| format!("`{o}` is not an option of the tool"));
        };
        let Some(mut help) = helps.ours(std::slice::from_ref(&sub)) else {
            return Some(format!("`{sub}` is not a subcommand (`--help` fails)"));
        };
        // A subcommand of the subcommand (`servers nginx`).
        if let Some(next) = w.get(1).filter(|n| !n.starts_with('-'))
            && help.contains("Commands:")
        {
            let path = [sub.clone(), next.clone()];
            match helps.ours(&path) {
                Some(h) => help = h,
                None => return Some(format!("`{sub} {next}` is not a subcommand")),
            }
        }
        return options(&w[1..])
            .into_iter()
            .find(|o| !lists(&help, o))
            .map(|o| format!("`{o}` is not an option of `{sub}` (see its --help)"));
    }
    if w[0] == "cargo" {
        let sub = w.get(1)?.clone();
        if sub == "fuzz" {
            return None; // cargo-fuzz: an external tool, installed by the fuzzing doc
        }
        let Some(help) = helps.cargo(&sub) else {
            return Some(format!("`cargo {sub}` is not a cargo command here"));
        };
        return options(&w[2..])
            .into_iter()
            .find(|o| !lists(&help, o))
            .map(|o| format!("`{o}` is not an option of `cargo {sub}`"));
    }
    None
}

#[test]
fn the_shell_words_are_split_as_the_shell_does() {
    assert_eq!(
        shell_words(r#"a --note "x; y" && b | c # comment"#),
        ["a", "--note", "x; y", "&&", "b", "|", "c"]
    );
    let cmds = commands("cargo xtask build \\\n  --out d && cargo xtask sign d\n# note\n");
    assert_eq!(
        cmds,
        [
            vec!["cargo", "xtask", "build", "--out", "d"],
            vec!["cargo", "xtask", "sign", "d"],
        ]
    );
    assert!(lists("  --out <DIR>\n  -j, --jobs <N>", "--out"));
    assert!(lists("  --out <DIR>\n  -j, --jobs <N>", "-j"));
    assert!(!lists("  --outdir <DIR>", "--out"));
}

#[test]
fn every_command_in_a_doc_shell_block_exists_with_the_options_it_uses() {
    let mut helps = Helps::default();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for b in all_blocks()
        .iter()
        .filter(|b| b.lang == "sh" || b.lang == "yaml")
    {
        // A workflow's commands are its `run:` lines.
        let text = if b.lang == "yaml" {
            b.text
                .lines()
                .filter_map(|l| l.trim_start().strip_prefix("- run: "))
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            b.text.clone()
        };
        for cmd in commands(&text) {
            checked += 1;
            if let Some(why) = check_command(&cmd, &mut helps) {
                wrong.push(format!("{}:{}: {}: {why}", b.file, b.line, cmd.join(" ")));
            }
        }
    }
    assert!(
        checked > 40,
        "only {checked} commands found in shell blocks"
    );
    assert!(
        wrong.is_empty(),
        "doc commands that do not work as written:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn a_doc_command_with_a_wrong_option_or_subcommand_is_caught() {
    let mut helps = Helps::default();
    let c = |s: &str| commands(s).remove(0);
    assert!(check_command(&c("cargo xtask build --module ntt -j 4"), &mut helps).is_none());
    assert!(check_command(&c("cargo xtask build --modul ntt"), &mut helps).is_some());
    assert!(check_command(&c("cargo xtask biuld"), &mut helps).is_some());
    assert!(check_command(&c("cargo cuda-aot servers nginx --root d"), &mut helps).is_none());
    assert!(check_command(&c("cuda-aot-registry serve --rooot d"), &mut helps).is_some());
    assert!(check_command(&c("cargo test --no-runn"), &mut helps).is_some());
    assert!(check_command(&c(".gpu/xtask gpu-run --out d --no-bench"), &mut helps).is_none());
    assert!(check_command(&c(".gpu/xtask gpu-run --outt d"), &mut helps).is_some());
}

/// Whether the lines of `block` are a run of lines of `code`, indentation aside.
fn contains_lines(code: &str, block: &str) -> bool {
    let code: Vec<&str> = code.lines().map(str::trim).collect();
    let block: Vec<&str> = block.lines().map(str::trim).collect();
    !block.is_empty() && code.windows(block.len()).any(|w| w == block.as_slice())
}

/// The file a block's `<!-- compiled: PATH -->` line names and its code, or what is wrong.
fn compiled_source(b: &Block) -> Result<(String, String), String> {
    let at = format!("{}:{}", b.file, b.line);
    let Some(path) = &b.compiled else {
        return Err(format!(
            "{at}: no `<!-- compiled: PATH -->` line above the block"
        ));
    };
    let code =
        std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{at}: {path}: {e}"));
    Ok((path.clone(), code))
}

#[test]
fn every_rust_block_in_the_docs_is_compiled() {
    let mut wrong = Vec::new();
    let mut seen = 0;
    for b in all_blocks().iter().filter(|b| b.lang.starts_with("rust")) {
        seen += 1;
        let at = format!("{}:{}", b.file, b.line);
        let (path, code) = match compiled_source(b) {
            Ok(found) => found,
            Err(e) => {
                wrong.push(e);
                continue;
            }
        };
        if path.ends_with("lib.rs") {
            // The markdown file is that crate's doctests.
            let name = Path::new(&b.file).file_name().unwrap().to_string_lossy();
            let include = format!("include_str!(\"{}", "../".repeat(path.matches('/').count()));
            if !code.contains(&format!("{include}{}\")", b.file)) {
                wrong.push(format!("{at}: {path} does not include {name} as doctests"));
            }
            if b.lang.contains("ignore") {
                wrong.push(format!("{at}: an `ignore`d doctest is never compiled"));
            }
        } else if !contains_lines(&code, &b.text) {
            wrong.push(format!("{at}: the block is not the code of {path}"));
        }
    }
    assert!(seen >= 4, "only {seen} rust blocks found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_c_cpp_and_cmake_block_in_the_docs_is_code_of_a_compiled_file() {
    let mut wrong = Vec::new();
    let mut seen = 0;
    for b in all_blocks()
        .iter()
        .filter(|b| ["c", "cpp", "cmake"].contains(&b.lang.as_str()))
    {
        seen += 1;
        match compiled_source(b) {
            Err(e) => wrong.push(e),
            Ok((path, code)) if !contains_lines(&code, &b.text) => wrong.push(format!(
                "{}:{}: the block is not the code of {path}",
                b.file, b.line
            )),
            Ok(_) => {}
        }
    }
    assert!(
        seen >= 5,
        "only {seen} c, cpp and cmake blocks found (docs/capi.md has five)"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_toml_block_parses_and_release_specs_load() {
    let mut specs = 0;
    for b in all_blocks().iter().filter(|b| b.lang == "toml") {
        let at = format!("{}:{}", b.file, b.line);
        let v: toml::Table = toml::from_str(&b.text).unwrap_or_else(|e| panic!("{at}: {e}"));
        if !(v.contains_key("build") && v.contains_key("module")) {
            continue;
        }
        specs += 1;
        // The spec in a folder of its own, with (empty) sources where it says they are.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("project/spec");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("release.toml"), &b.text).unwrap();
        let sources = dir.join(v["build"]["sources"].as_str().unwrap());
        std::fs::create_dir_all(&sources).unwrap();
        // Include folders are checked to exist: they are made too, where they are said to be.
        let mut includes: Vec<&toml::Value> = Vec::new();
        for m in v["module"].as_array().unwrap() {
            // `source` is one file or a list of them.
            let files = match &m["source"] {
                toml::Value::Array(list) => list.iter().map(|f| f.as_str().unwrap()).collect(),
                one => vec![one.as_str().unwrap()],
            };
            for f in files {
                std::fs::write(sources.join(f), "").unwrap();
            }
            includes.extend(
                m.get("include_dirs")
                    .and_then(|d| d.as_array())
                    .into_iter()
                    .flatten(),
            );
        }
        includes.extend(
            v["build"]
                .get("include_dirs")
                .and_then(|d| d.as_array())
                .into_iter()
                .flatten(),
        );
        for d in includes {
            std::fs::create_dir_all(dir.join(d.as_str().unwrap())).unwrap();
        }
        let out = xtask()
            .args(["build", "--dry-run", "--spec"])
            .arg(dir.join("release.toml"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{at}: the spec does not load:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        specs >= 2,
        "only {specs} release specs found in toml blocks"
    );
}
