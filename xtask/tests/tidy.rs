//! Keeps the house honest. Issue 42: in the whole repository no non-test file is past 800
//! lines and no function past 150; the modules of the runtime crate, of the builder and of
//! xtask import each other in no circle; no repository-only task is reachable from the
//! installed tool; each rule is shown failing on a planted violation. Issue 10 ("one owner
//! per concern"): xtask's support modules import only support modules (so helpers never
//! live in a task's file). Issue 11: the `cargo xtask` alias does not hide cargo's progress,
//! and build scripts find their checkout at run time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Modules that tasks share; they never import a task.
const SUPPORT: &[&str] = &["args", "features"];

/// The builder's support modules, which xtask's root imports under their own names
/// (`crate::advice`, ...): support too, and no task of xtask can be imported by them. Read
/// from the one `use cuda_aot_builder::{...}` line of `src/lib.rs` that names them.
fn builder_support() -> BTreeSet<String> {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let file = syn::parse_file(&std::fs::read_to_string(lib).unwrap()).unwrap();
    let mut names = BTreeSet::new();
    for item in &file.items {
        let syn::Item::Use(u) = item else { continue };
        let syn::UseTree::Path(p) = &u.tree else {
            continue;
        };
        if p.ident != "cuda_aot_builder" {
            continue;
        }
        if let syn::UseTree::Group(g) = &*p.tree {
            for t in &g.items {
                if let syn::UseTree::Name(n) = t {
                    names.insert(n.ident.to_string());
                }
            }
        }
    }
    assert!(
        names.contains("advice"),
        "no builder support modules in src/lib.rs: {names:?}"
    );
    names
}

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

/// xtask's import graph.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    import_graph_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// Top-level module -> the top-level modules its files refer to, for the crate whose
/// sources are in `src`.
fn import_graph_of(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in walkdir::WalkDir::new(src) {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(src).unwrap();
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
    let builder = builder_support();
    for m in SUPPORT {
        let refs = graph
            .get(*m)
            .unwrap_or_else(|| panic!("support module {m} is gone; update SUPPORT"));
        let tasks: Vec<&String> = refs
            .iter()
            .filter(|r| !SUPPORT.contains(&r.as_str()) && !builder.contains(*r))
            .collect();
        assert!(
            tasks.is_empty(),
            "support module `{m}` imports {tasks:?}: move what it needs into a support module"
        );
    }
}

/// The first import circle of `graph` (its modules in order, the first repeated at the
/// end), if any: a depth-first search.
fn first_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
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
        if done.contains(m) || !graph.contains_key(m) {
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
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done).err())
}

#[test]
fn module_imports_form_no_cycle() {
    let graph = import_graph();
    assert!(graph.len() > SUPPORT.len(), "{graph:?}");
    if let Some(cycle) = first_cycle(&graph) {
        panic!("import cycle in xtask: {}", cycle.join(" -> "));
    }
}

/// Issue 42: the runtime crate (a strict downward graph, as the style guide says) and the
/// builder import in no circle either.
#[test]
fn the_runtime_crate_and_the_builder_have_no_import_circle() {
    for krate in ["src", "builder/src"] {
        let graph = import_graph_of(&repo().join(krate));
        assert!(graph.len() > 5, "{krate}: {graph:?}");
        if let Some(cycle) = first_cycle(&graph) {
            panic!(
                "import cycle among the modules of {krate}: {}. Move the item the lower module needs into it (or into a module both can import), and re-export it where it was",
                cycle.join(" -> ")
            );
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
    for dir in [".", "registry", "xtask", "kernels", "capi"] {
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

/// The repository's root.
fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Issue 42: the most lines a non-test file may have, unit tests included.
const MAX_FILE_LINES: usize = 800;
/// Issue 42: the most lines a function may have, from `fn` to its closing brace.
const MAX_FN_LINES: usize = 150;
/// Generated code the function rule skips, by file name (none today).
const GENERATED: &[&str] = &[];

/// Every Rust file of the repository (relative path, text): the workspace, the fuzz
/// workspace, examples and tests; not build outputs or work folders.
fn rust_files() -> Vec<(std::path::PathBuf, String)> {
    let root = repo();
    let skip = ["target", ".cuda-aot", ".gpu", ".device", ".git"];
    let mut out = Vec::new();
    let walk = walkdir::WalkDir::new(&root)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| !skip.contains(&e.file_name().to_string_lossy().as_ref()));
    for e in walk {
        let e = e.unwrap();
        if e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "rs") {
            let rel = e.path().strip_prefix(&root).unwrap().to_path_buf();
            out.push((rel, std::fs::read_to_string(e.path()).unwrap()));
        }
    }
    out
}

/// A test file: one below a `tests` folder (integration tests and their support).
fn is_test_file(rel: &Path) -> bool {
    rel.components().any(|c| c.as_os_str() == "tests")
}

/// The files of `files` past [`MAX_FILE_LINES`] that are not test files, with their length.
fn long_files(files: &[(std::path::PathBuf, String)]) -> Vec<String> {
    files
        .iter()
        .filter(|(rel, _)| !is_test_file(rel))
        .map(|(rel, text)| (rel, text.lines().count()))
        .filter(|(_, n)| *n > MAX_FILE_LINES)
        .map(|(rel, n)| format!("{} ({n} lines)", rel.display()))
        .collect()
}

/// The functions of `text` (Rust source) past [`MAX_FN_LINES`]: `name:line (N lines)`,
/// counted from the `fn` keyword to the body's closing brace, nested functions each on
/// their own.
fn long_functions(text: &str) -> Result<Vec<String>, syn::Error> {
    use syn::visit::Visit;
    struct Long(Vec<String>);
    impl Long {
        fn check(&mut self, sig: &syn::Signature, block: &syn::Block) {
            let start = sig.fn_token.span.start().line;
            let end = block.brace_token.span.close().end().line;
            let n = end + 1 - start;
            if n > MAX_FN_LINES {
                self.0.push(format!("{}:{start} ({n} lines)", sig.ident));
            }
        }
    }
    impl<'ast> Visit<'ast> for Long {
        fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
            self.check(&f.sig, &f.block);
            syn::visit::visit_item_fn(self, f);
        }
        fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
            self.check(&f.sig, &f.block);
            syn::visit::visit_impl_item_fn(self, f);
        }
        fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
            if let Some(block) = &f.default {
                self.check(&f.sig, block);
            }
            syn::visit::visit_trait_item_fn(self, f);
        }
    }
    let file = syn::parse_file(text)?;
    let mut long = Long(Vec::new());
    long.visit_file(&file);
    Ok(long.0)
}

#[test]
fn no_non_test_file_is_past_800_lines() {
    let files = rust_files();
    assert!(files.len() > 100, "{} Rust files found", files.len());
    let long = long_files(&files);
    assert!(
        long.is_empty(),
        "past {MAX_FILE_LINES} lines: {}. Split each along its seams (a submodule per concern, each with the unit tests that test it)",
        long.join(", ")
    );
}

#[test]
fn no_function_is_past_150_lines() {
    let mut long = Vec::new();
    for (rel, text) in rust_files() {
        if GENERATED.iter().any(|g| rel.ends_with(g)) {
            continue;
        }
        let found = long_functions(&text)
            .unwrap_or_else(|e| panic!("{}: cannot parse: {e}", rel.display()));
        long.extend(found.into_iter().map(|f| format!("{} {f}", rel.display())));
    }
    assert!(
        long.is_empty(),
        "functions past {MAX_FN_LINES} lines: {}. Make each a short list of named steps",
        long.join(", ")
    );
}

/// The repository-only tasks (issue 42): never in the installed `cargo cuda-aot`.
const REPO_TASKS: &[&str] = &[
    "Bench",
    "BenchLoad",
    "BenchServe",
    "Servers",
    "GpuBundle",
    "GpuRun",
];

/// What makes a repository-only task reachable from the installed tool, given xtask's
/// `Cargo.toml`, `src/lib.rs` and `src/repo.rs`: a default feature that turns on `repo`, a
/// `mod repo` or a `Task` variant of lib.rs that is not behind `cfg(feature = "repo")`, or a
/// repository task that is a `Task` variant of lib.rs rather than of `repo::Task`.
fn repo_task_leaks(cargo_toml: &str, lib_rs: &str, repo_rs: &str) -> Vec<String> {
    let mut leaks = Vec::new();
    // 1. The default features, and everything they turn on, leave `repo` off.
    let manifest: toml::Value = toml::from_str(cargo_toml).unwrap();
    let features = manifest["features"].as_table().unwrap();
    let mut on: Vec<String> = vec!["default".into()];
    let mut seen = BTreeSet::new();
    while let Some(f) = on.pop() {
        if !seen.insert(f.clone()) {
            continue;
        }
        for g in features
            .get(&f)
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            let g = g.as_str().unwrap();
            if !g.contains(['/', ':']) {
                on.push(g.to_string());
            }
        }
    }
    if seen.contains("repo") {
        leaks.push("the default features turn on `repo`".into());
    }
    // 2. lib.rs: `mod repo` and every variant naming `repo::` sit behind the feature.
    let gated = |attrs: &[syn::Attribute]| {
        attrs.iter().any(|a| {
            a.path().is_ident("cfg")
                && a.meta
                    .require_list()
                    .is_ok_and(|l| l.tokens.to_string() == "feature = \"repo\"")
        })
    };
    let lib = syn::parse_file(lib_rs).unwrap();
    for item in &lib.items {
        match item {
            syn::Item::Mod(m) if m.ident == "repo" && !gated(&m.attrs) => {
                leaks.push("`mod repo` is not behind cfg(feature = \"repo\")".into());
            }
            syn::Item::Enum(e) if e.ident == "Task" => {
                for v in &e.variants {
                    let ty = quote_fields(&v.fields);
                    if ty.contains("repo ::") && !gated(&v.attrs) {
                        leaks.push(format!(
                            "Task::{} is not behind cfg(feature = \"repo\")",
                            v.ident
                        ));
                    }
                    if REPO_TASKS.contains(&v.ident.to_string().as_str()) {
                        leaks.push(format!("Task::{} is a task of the installed tool", v.ident));
                    }
                }
            }
            _ => {}
        }
    }
    // 3. repo.rs: its Task holds exactly the repository's tasks.
    let repo = syn::parse_file(repo_rs).unwrap();
    let variants: BTreeSet<String> = repo
        .items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Enum(e) if e.ident == "Task" => Some(e),
            _ => None,
        })
        .flat_map(|e| e.variants.iter().map(|v| v.ident.to_string()))
        .collect();
    for t in REPO_TASKS {
        if !variants.contains(*t) {
            leaks.push(format!("repo::Task has no {t}"));
        }
    }
    leaks
}

/// The fields of a variant as token text (`( repo :: Task )`).
fn quote_fields(fields: &syn::Fields) -> String {
    use quote::ToTokens;
    fields.to_token_stream().to_string()
}

#[test]
fn no_repository_task_is_reachable_from_the_installed_tool() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
    let leaks = repo_task_leaks(
        &read("Cargo.toml"),
        &read("src/lib.rs"),
        &read("src/repo.rs"),
    );
    assert!(leaks.is_empty(), "{}", leaks.join("; "));
}

/// Each rule above fails on a planted violation (and passes without it).
#[test]
fn each_rule_fails_on_a_planted_violation() {
    // A file of 801 lines, outside and inside a tests folder.
    let text = "// line\n".repeat(MAX_FILE_LINES + 1);
    let files = vec![
        (std::path::PathBuf::from("src/big.rs"), text.clone()),
        (std::path::PathBuf::from("xtask/tests/big.rs"), text),
        (
            std::path::PathBuf::from("src/small.rs"),
            "// line\n".repeat(MAX_FILE_LINES),
        ),
    ];
    assert_eq!(long_files(&files), ["src/big.rs (801 lines)"]);
    // A function of 151 lines in an impl, one of 150 beside it, a long one nested.
    let body = |n: usize| "    let _x = 1;\n".repeat(n - 2);
    let planted = format!(
        "impl A {{\n    fn long() {{\n{}    }}\n}}\nfn ok() {{\n{}}}\nfn outer() {{\n    fn inner() {{\n{}    }}\n}}\n",
        body(MAX_FN_LINES + 1),
        body(MAX_FN_LINES),
        body(MAX_FN_LINES + 1),
    );
    let found = long_functions(&planted).unwrap();
    assert_eq!(found.len(), 3, "{found:?}"); // long, outer (holds inner) and inner
    assert!(found[0].starts_with("long:2 (151 lines)"), "{found:?}");
    assert!(!found.iter().any(|f| f.starts_with("ok:")), "{found:?}");
    // An import circle planted in a copy of a crate's graph.
    let mut graph = import_graph_of(&repo().join("src"));
    assert_eq!(first_cycle(&graph), None);
    graph
        .entry("digest".into())
        .or_default()
        .insert("runtime".into());
    let cycle = first_cycle(&graph).expect("the planted circle");
    assert_eq!(cycle.first(), cycle.last());
    assert!(cycle.contains(&"digest".to_string()) && cycle.contains(&"runtime".to_string()));
    // A repository task reachable from the installed tool, three ways.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
    let (toml_text, lib, repo_rs) = (read("Cargo.toml"), read("src/lib.rs"), read("src/repo.rs"));
    assert!(repo_task_leaks(&toml_text, &lib, &repo_rs).is_empty());
    let default_on = toml_text.replace(
        "default = [\"net\", \"driver\"]",
        "default = [\"net\", \"gpu\"]",
    );
    assert_ne!(default_on, toml_text);
    assert_eq!(
        repo_task_leaks(&default_on, &lib, &repo_rs),
        ["the default features turn on `repo`"]
    );
    let ungated = lib.replacen("#[cfg(feature = \"repo\")]\nmod repo;", "mod repo;", 1);
    assert_ne!(ungated, lib);
    assert_eq!(
        repo_task_leaks(&toml_text, &ungated, &repo_rs),
        ["`mod repo` is not behind cfg(feature = \"repo\")"]
    );
    let moved = lib.replacen(
        "    Sync(sync::Args),",
        "    Sync(sync::Args),\n    Servers(servers::Args),",
        1,
    );
    let moved_repo = repo_rs.replacen("    Servers(servers::Args),\n", "", 1);
    assert_eq!(
        repo_task_leaks(&toml_text, &moved, &moved_repo),
        [
            "Task::Servers is a task of the installed tool",
            "repo::Task has no Servers"
        ]
    );
}

/// Issue 42: `docs/architecture.md` maps every workspace member (what it owns, what it may
/// depend on), and each crate's normal and build dependencies inside the workspace are
/// among those its row allows.
#[test]
fn the_architecture_map_names_every_crate_and_its_allowed_dependencies() {
    let root = repo();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    // Rows of the crates table: | `name` | folder | owns | may depend on |
    let mut allowed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in doc.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() != 6 {
            continue;
        }
        let name = cells[1].trim_matches('`').to_string();
        let deps = cells[4]
            .split(',')
            .map(|d| d.trim().trim_matches('`').to_string())
            .filter(|d| !d.is_empty() && d != "—")
            .collect();
        allowed.insert(name, deps);
    }
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--no-deps",
        ])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let members: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    let listed: BTreeSet<String> = allowed.keys().cloned().collect();
    assert_eq!(
        members, listed,
        "docs/architecture.md's crates table must name exactly the workspace members"
    );
    for p in packages {
        let name = p["name"].as_str().unwrap();
        for d in p["dependencies"].as_array().unwrap() {
            let dep = d["name"].as_str().unwrap();
            let dev = d["kind"].as_str() == Some("dev");
            if members.contains(dep) && dep != name && !dev {
                assert!(
                    allowed[name].contains(dep),
                    "{name} depends on {dep}, which docs/architecture.md does not allow it: change the map (and say why) or the dependency"
                );
            }
        }
    }
}
