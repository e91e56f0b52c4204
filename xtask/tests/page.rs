//! The registry's page for people (issue 46): `serve --trust FILE` answers a browser at `/`
//! with a page rendered from the served folder verified against that trust root. Its
//! module table is `verify --json`'s, row for row; a kernel named `k<script>` (a template
//! instantiated over a type named `script`) is shown as `k&lt;script&gt;`; a change in a kernel's resources
//! between two releases is shown; a tampered blob gets a page naming the refusal with its
//! Fix and nothing of the registry (once the server verifies again: the page is kept until
//! the timestamp changes); a server without --trust shows no page, and the file
//! server is unchanged for everything else.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::server::Server;
use common::{Out, Ws, flip_a_blob, xtask};

const DELTA_CU: &str = "struct script { unsigned int v; };\n\
template <class T> __global__ void k(T* p) { p[threadIdx.x].v += 1u; }\n\
template __global__ void k<script>(script*);\n";

const DELTA_SPEC: &str = r#"
[[module]]
name = "delta"
source = "delta.cu"
entry_points = ["_Z1kI6scriptEvPT_"]
protocol = "test-v1"
schedule_version = 1
"#;

/// `GET url` with `accept`: status, content type, body as text.
fn get(url: &str, accept: &str) -> (u16, String, String) {
    let (status, ctype, body) = common::server::http_get(url, accept);
    (status, ctype, String::from_utf8(body).unwrap())
}

/// The page's module rows: (module, target, kind, size, blake3, identity, builders).
fn page_rows(page: &str) -> BTreeSet<Vec<String>> {
    let table = page
        .split("<table id=\"modules\">")
        .nth(1)
        .unwrap()
        .split("</table>")
        .next()
        .unwrap();
    table
        .split("<tr data-module=")
        .skip(1)
        .map(|row| {
            let cells: Vec<String> = row
                .split("<td")
                .skip(1)
                .map(|c| {
                    let inner = &c[c.find('>').unwrap() + 1..];
                    strip_tags(inner.split("</td>").next().unwrap())
                })
                .collect();
            vec![
                cells[0].clone(),
                cells[1].clone(),
                cells[2].trim_end_matches(" [dev]").to_string(),
                cells[3].clone(),
                cells[4].clone(),
                cells[5].clone(),
                cells[6].clone(),
            ]
        })
        .collect()
}

fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for c in html.chars() {
        match c {
            '<' => inside = true,
            '>' => inside = false,
            c if !inside => out.push(c),
            _ => {}
        }
    }
    out.trim().to_string()
}

/// `verify --json`'s module rows, in the page's columns.
fn verify_rows(registry: &Path, trust: &Path) -> BTreeSet<Vec<String>> {
    let out = Out::of(
        xtask()
            .args(["verify", "--json", "--registry"])
            .arg(registry)
            .arg("--trust")
            .arg(trust)
            .arg("--state")
            .arg(registry.with_extension("state.json")),
    )
    .ok();
    let done = out.messages().pop().unwrap();
    done["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let s = |k: &str| m[k].as_str().unwrap().to_string();
            let builders: Vec<String> = m["builders"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_str().unwrap().to_string())
                .collect();
            vec![
                s("module"),
                s("target"),
                s("kind"),
                m["size"].to_string(),
                s("module_digest"),
                s("identity_digest"),
                builders.join(" "),
            ]
        })
        .collect()
}

/// A workspace whose spec also has `delta` (the `k<script>` kernel), released once; its
/// registry and trust root.
fn released() -> (Ws, PathBuf, PathBuf) {
    let ws = Ws::new();
    ws.write("src/delta.cu", DELTA_CU);
    ws.edit_spec(|s| s + DELTA_SPEC);
    ws.release();
    let registry = ws.path("spec/.cuda-aot/registry");
    let trust = ws.path("spec/.cuda-aot/dev-keys/root.json");
    (ws, registry, trust)
}

/// `serve` of `registry` with its page verified against `trust`.
fn serve_page(registry: &Path, trust: &Path) -> Server {
    let root = format!("--root={}", registry.display());
    let trust = format!("--trust={}", trust.display());
    Server::start(&["serve", "--addr", "127.0.0.1:0", &root, &trust], &[])
}

#[test]
fn issue_46_the_page_shows_the_verified_registry_and_escapes_what_it_shows() {
    let (ws, registry, trust) = released();
    // A second release with one kernel's resources changed: alpha's block size, its launch
    // bound, from 128 to 256.
    ws.edit_spec(|s| s.replace("geometry = { block = 128 }", "geometry = { block = 256 }"));
    ws.release();

    let serve = serve_page(&registry, &trust);
    let url = serve.url();
    let (status, ctype, page) = get(&url, "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8");
    assert_eq!(status, 200, "{page}");
    assert_eq!(ctype, "text/html; charset=utf-8");
    // Row for row what verify --json lists.
    let rows = page_rows(&page);
    assert_eq!(rows, verify_rows(&registry, &trust), "{page}");
    assert_eq!(rows.len(), 8, "4 modules x 2 targets");
    // The hostile name, escaped; no script anywhere.
    assert!(page.contains("<code>k&lt;script&gt;</code>"), "{page}");
    assert!(!page.to_lowercase().contains("<script"), "{page}");
    // The history (two releases) and alpha's new launch bound, against the release before.
    assert!(page.contains("<td>v2 (current)</td>"), "{page}");
    assert!(page.contains("<td>v1</td>"), "{page}");
    assert!(
        page.contains(
            "<td><code>alpha_mix</code></td><td>max threads</td><td>128</td><td>256</td>"
        ),
        "{page}"
    );

    // Anything but HTML at / is still the plain file server's 404; files are served as ever.
    let (status, _, _) = get(&url, "application/json");
    assert_eq!(status, 404);
    let (status, _, _) = get(&format!("{url}timestamp.json"), "text/html");
    assert_eq!(status, 200);

    // A tampered blob: the page says why, with the Fix, and shows nothing of the registry.
    let (blob, _) = flip_a_blob(&registry);
    let (status, _, page) = get(&url, "text/html");
    assert_eq!(status, 200, "the cached page, until the timestamp changes");
    assert!(page.contains("id=\"modules\""));
    // (the page is cached by timestamp: a publish re-verifies; restart to see the damage)
    drop(serve);
    let serve = serve_page(&registry, &trust);
    let (status, _, page) = get(&serve.url(), "text/html");
    assert_eq!(status, 503, "{page}");
    assert!(page.contains("does not verify"), "{page}");
    assert!(page.contains("Fix: "), "{page}");
    assert!(!page.contains("id=\"modules\""), "{page}");
    assert!(
        page.contains(&blob.file_name().unwrap().to_string_lossy()[..12]),
        "the refusal names the blob: {page}"
    );

    // A --trust that is no trust root: refused before anything is served.
    let bad = Out::of(
        xtask()
            .args(["serve", "--addr", "127.0.0.1:0", "--root"])
            .arg(&registry)
            .arg("--trust")
            .arg(ws.path("src/alpha.cu")),
    )
    .failed();
    assert!(
        bad.stderr.contains("--trust") && bad.fix().starts_with("pass the signed trust root"),
        "{}",
        bad.stderr
    );

    // No --trust: no page, and it says how to get one.
    let plain = Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[&registry]);
    let (status, _, page) = get(&plain.url(), "text/html");
    assert_eq!(status, 404);
    assert!(page.contains("--trust FILE"), "{page}");
}

#[test]
fn issue_46_headless_chromium_renders_the_page_with_verify_jsons_table() {
    let (ws, registry, trust) = released();
    let serve = serve_page(&registry, &trust);
    // Debian 12's headless Chromium (pinned, fetched on first use): the DOM it built from
    // the page, and a screenshot.
    let png = ws.path("page.png");
    let out = Out::of(
        xtask()
            .args(["servers", "chromium", "--dump-dom", "--url"])
            .arg(serve.url())
            .arg("--screenshot")
            .arg(&png),
    )
    .ok();
    let dom = out.stdout;
    assert!(dom.contains("<table id=\"modules\">"), "{dom}");
    assert_eq!(page_rows(&dom), verify_rows(&registry, &trust), "{dom}");
    // The parsed page holds the template name as text, and no script element.
    assert!(dom.contains("<code>k&lt;script&gt;</code>"), "{dom}");
    assert!(!dom.to_lowercase().contains("<script"), "{dom}");
    let shot = std::fs::read(&png).unwrap();
    assert!(shot.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(shot.len() > 20_000, "{} bytes: a blank page?", shot.len());
}
