//! The JSON examples of docs/json.md, generated from the real messages the tests see: each
//! example sits after a `<!-- example: NAME -->` line, and `check` compares its shape
//! (every key, every value's JSON type, the `schema` and `reason` values) with a message
//! of a real run. With `CUDA_AOT_BLESS_DOCS=1` it writes the real message there instead
//! (rust-analyzer's generated-file pattern: `--check` is the default, the write is asked for).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

fn doc_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/json.md")
}

/// `msg` as the docs show it: arrays cut to their first element, and the test's
/// temporary folder written as `/w`.
pub fn render(msg: &Value, tmp: &Path) -> Value {
    let roots: Vec<String> = [Some(tmp.to_path_buf()), tmp.canonicalize().ok()]
        .into_iter()
        .flatten()
        .map(|p| p.display().to_string())
        .collect();
    fn go(v: &Value, roots: &[String]) -> Value {
        match v {
            Value::String(s) => {
                let mut s = s.clone();
                for r in roots {
                    s = s.replace(r.as_str(), "/w");
                }
                Value::String(s)
            }
            Value::Array(a) => Value::Array(a.iter().take(1).map(|x| go(x, roots)).collect()),
            Value::Object(o) => {
                Value::Object(o.iter().map(|(k, x)| (k.clone(), go(x, roots))).collect())
            }
            other => other.clone(),
        }
    }
    go(msg, &roots)
}

/// What an example promises: keys, JSON types, and the values of `schema` and `reason`.
pub fn shape(v: &Value) -> Value {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Array(a) => Value::Array(a.iter().take(1).map(shape).collect()),
        Value::Object(o) => {
            let mut m = Map::new();
            for (k, x) in o {
                let s = match (k.as_str(), x) {
                    ("schema" | "reason", Value::String(s)) => Value::String(s.clone()),
                    _ => shape(x),
                };
                m.insert(k.clone(), s);
            }
            Value::Object(m)
        }
    }
}

/// The `json` block after `<!-- example: NAME -->` in `text`: its byte range and content.
fn block(text: &str, name: &str) -> Option<(std::ops::Range<usize>, String)> {
    let marker = format!("<!-- example: {name} -->\n```json\n");
    let start = text.find(&marker)? + marker.len();
    let len = text[start..].find("```")?;
    Some((start..start + len, text[start..start + len].to_string()))
}

/// Checks (or, with `CUDA_AOT_BLESS_DOCS=1`, writes) example `name` of docs/json.md
/// against `msg`, a message of a real run in the temporary folder `tmp`.
pub fn check(name: &str, msg: &Value, tmp: &Path) {
    let real = render(msg, tmp);
    let path = doc_path();
    if std::env::var_os("CUDA_AOT_BLESS_DOCS").is_some_and(|v| v == "1") {
        // Tests run in parallel: one writer at a time.
        let lock =
            std::fs::File::create(std::env::temp_dir().join("cuda-aot-bless-docs.lock")).unwrap();
        lock.lock().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let (range, _) = block(&text, name).unwrap_or_else(|| {
            panic!("docs/json.md has no `<!-- example: {name} -->` line before a json block")
        });
        let mut new = text.clone();
        new.replace_range(
            range,
            &(serde_json::to_string_pretty(&real).unwrap() + "\n"),
        );
        if new != text {
            std::fs::write(&path, new).unwrap();
        }
        drop(lock);
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let (_, doc) = block(&text, name).unwrap_or_else(|| {
        panic!("docs/json.md has no `<!-- example: {name} -->` line before a json block")
    });
    let doc: Value = serde_json::from_str(&doc)
        .unwrap_or_else(|e| panic!("docs/json.md example {name} is not JSON: {e}"));
    assert!(
        shape(&doc) == shape(&real),
        "docs/json.md example `{name}` no longer matches what the tool prints.\n\
         documented shape: {}\nreal shape:       {}\nreal message:\n{}\n\
         Fix: CUDA_AOT_BLESS_DOCS=1 cargo test -p xtask --test <this test>, then review the diff of docs/json.md",
        shape(&doc),
        shape(&real),
        serde_json::to_string_pretty(&real).unwrap()
    );
}
