//! Keeps xtask's structure honest (issue 10, "one owner per concern"): the modules' imports
//! form no cycle, support modules import only support modules (so helpers never live in a
//! task's file), the `cargo xtask` alias does not hide cargo's progress (issue 11), and
//! build scripts find their checkout at run time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Modules that tasks share; they never import a task.
const SUPPORT: &[&str] = &["args", "features"];

/// The builder's support modules, which xtask's root imports under their own names
/// (`crate::advice`, ...): support too, and no task of xtask can be imported by them.
const BUILDER_SUPPORT: &[&str] = &[
    "advice", "anchor", "devkeys", "files", "limits", "message", "outdir", "paths", "process",
];

/// Every `crate::<module>` that `text` refers to (in `use` trees and in paths).
fn crate_refs(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            // The first segment of each item of the outermost `{...}`.
            let mut depth = 0;
            let mut items = vec![String::new()];
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => items.push(String::new()),
                    c => items.last_mut().expect("one item").push(c),
                }
            }
            for item in items {
                let ident: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !ident.is_empty() {
                    out.insert(ident);
                }
            }
        } else {
            let ident: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !ident.is_empty() {
                out.insert(ident);
            }
        }
        rest = after;
    }
    out.remove("self");
    out
}

/// Top-level module -> the top-level modules its files refer to.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in walkdir::WalkDir::new(&src) {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(&src).unwrap();
        if rel.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if ["lib", "main", "bin"].contains(&module.as_str()) {
            continue; // the dispatcher and the binaries refer to every task
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        let refs = graph.entry(module.clone()).or_default();
        refs.extend(crate_refs(&text).into_iter().filter(|r| *r != module));
    }
    graph
}

#[test]
fn crate_refs_reads_use_trees_and_paths() {
    let text = "use crate::advice::{Advise, fail};\nuse crate::{anchor, devkeys, paths::{a, b}};\n\
                // use crate::commented;\nlet x = crate::files::write(p);\n";
    let refs: Vec<String> = crate_refs(text).into_iter().collect();
    assert_eq!(refs, ["advice", "anchor", "devkeys", "files", "paths"]);
}

#[test]
fn support_modules_import_only_support_modules() {
    let graph = import_graph();
    for m in SUPPORT {
        let refs = graph
            .get(*m)
            .unwrap_or_else(|| panic!("support module {m} is gone; update SUPPORT"));
        let tasks: Vec<&String> = refs
            .iter()
            .filter(|r| !SUPPORT.contains(&r.as_str()) && !BUILDER_SUPPORT.contains(&r.as_str()))
            .collect();
        assert!(
            tasks.is_empty(),
            "support module `{m}` imports {tasks:?}: move what it needs into a support module"
        );
    }
}

#[test]
fn module_imports_form_no_cycle() {
    let graph = import_graph();
    assert!(graph.len() > SUPPORT.len(), "{graph:?}");
    // Depth-first search, reporting the first cycle found.
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Result<(), Vec<String>> {
        if let Some(i) = stack.iter().position(|s| s == m) {
            let mut cycle = stack[i..].to_vec();
            cycle.push(m.to_string());
            return Err(cycle);
        }
        if done.contains(m) {
            return Ok(());
        }
        stack.push(m.to_string());
        for next in graph.get(m).into_iter().flatten() {
            visit(next, graph, stack, done)?;
        }
        stack.pop();
        done.insert(m.to_string());
        Ok(())
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        if let Err(cycle) = visit(m, &graph, &mut Vec::new(), &mut done) {
            panic!("import cycle: {}", cycle.join(" -> "));
        }
    }
}

/// Issue 11, item 3: the first `cargo xtask` on a fresh clone compiles for minutes; the
/// alias must let cargo show that.
#[test]
fn the_xtask_alias_shows_cargo_progress() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cargo/config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let alias = text
        .lines()
        .find(|l| l.trim_start().starts_with("xtask"))
        .expect("an xtask alias");
    assert!(alias.contains("--package xtask"), "{alias}");
    // Issue 17 item 4: the first command compiles the local pipeline only, with the
    // repository's own tasks (issue 42).
    assert!(alias.contains("--no-default-features"), "{alias}");
    assert!(alias.contains("--features repo"), "{alias}");
    assert!(
        !alias.contains("--quiet") && !alias.contains(" -q"),
        "{alias}"
    );
}

/// A build script reads `CARGO_MANIFEST_DIR` when it runs, never with `env!()`: cargo may
/// reuse a build script's binary for another checkout that shares the target folder, and
/// a path baked in at compile time would make it read that other checkout's files (or
/// fail once it is deleted).
#[test]
fn build_scripts_find_their_checkout_at_run_time() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut scripts = 0;
    for dir in [".", "registry", "xtask", "kernels"] {
        let script = repo.join(dir).join("build.rs");
        let Ok(text) = std::fs::read_to_string(&script) else {
            continue;
        };
        scripts += 1;
        assert!(
            !text.contains("env!(\"CARGO_MANIFEST_DIR\")"),
            "{}: read CARGO_MANIFEST_DIR with std::env::var_os at run time",
            script.display()
        );
    }
    assert!(
        scripts >= 1,
        "no build script found under {}",
        repo.display()
    );
}

/// Issue 17 item 4: what the `cargo xtask` alias builds (xtask without `net`, with the
/// repository's tasks) needs none of the network stack; the network commands bring it on
/// first use. Issue 42: at most the 107 crates it compiled before the build engine became a
/// crate of its own.
#[test]
fn the_first_command_compiles_no_network_stack() {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            "xtask",
            "--no-default-features",
            "--features",
            "repo",
        ])
        .args(["-e", "normal,build", "--prefix", "none", "--format", "{p}"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crates: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_end_matches(" (*)").to_string())
        .filter(|l| !l.is_empty())
        .collect();
    let names: BTreeSet<&str> = crates.iter().filter_map(|c| c.split(' ').next()).collect();
    for heavy in [
        "tokio",
        "hyper",
        "axum",
        "reqwest",
        "rustls",
        "oci-client",
        "h2",
    ] {
        assert!(!names.contains(heavy), "the first command compiles {heavy}");
    }
    assert!(
        crates.len() <= 107,
        "the first command compiles {} crates (at most 107)",
        crates.len()
    );
    // The local pipeline keeps the registry's publish half (the directory store).
    assert!(crates.iter().any(|c| c.starts_with("cuda-aot-registry ")));
}
