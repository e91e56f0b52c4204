//! Issue 11, item 4: `--json` / `--message-format json` output that CI can read (schema
//! `cuda-aot/xtask/v1`, docs/json.md): summaries carry module, target and digests; errors
//! carry the message, the subject (module, target, file) and the `Fix:` advice.

mod common;
#[path = "common/doc_json.rs"]
mod doc_json;

use common::{Out, Ws, xtask};
use serde_json::json;
use std::path::Path;

#[test]
fn a_renamed_field_or_a_changed_type_is_a_different_shape() {
    use doc_json::{render, shape};
    let a = json!({"schema":"s","reason":"r","n":1,"xs":[{"k":"v"},{"k":"w"}]});
    let same = json!({"schema":"s","reason":"r","n":7,"xs":[{"k":"z"}]});
    assert_eq!(shape(&a), shape(&same));
    for other in [
        json!({"schema":"s","reason":"r","m":1,"xs":[{"k":"v"}]}),
        json!({"schema":"s","reason":"r","n":"1","xs":[{"k":"v"}]}),
        json!({"schema":"s","reason":"q","n":1,"xs":[{"k":"v"}]}),
        json!({"schema":"s","reason":"r","n":1,"xs":[{"k":null}]}),
    ] {
        assert_ne!(shape(&a), shape(&other), "{other}");
    }
    let r = render(&json!({"p":"/tmp/x/a","xs":[1,2]}), Path::new("/tmp/x"));
    assert_eq!(r, json!({"p":"/w/a","xs":[1]}));
}

fn one(out: &Out, reason: &str) -> serde_json::Value {
    let msgs = out.messages();
    assert!(
        msgs.iter().all(|m| m["schema"] == "cuda-aot/xtask/v1"),
        "{}",
        out.stdout
    );
    let found: Vec<_> = msgs.into_iter().filter(|m| m["reason"] == reason).collect();
    assert_eq!(found.len(), 1, "one {reason} message in:\n{}", out.stdout);
    found[0].clone()
}

#[test]
fn release_publish_and_verify_speak_json_and_verify_names_the_tampered_file() {
    let ws = Ws::new();
    let spec = ws.path("spec/release.toml");
    let work = ws.path("spec/.cuda-aot");
    let registry = work.join("registry");
    let trust = work.join("dev-keys/root.json");
    // release honours CUDA_AOT_BUILD_CACHE, as build does.
    let cache = ws.path("ci-cache");
    let release = || {
        Out::of(
            xtask()
                .env("CUDA_AOT_BUILD_CACHE", &cache)
                .args(["release", "--module", "gamma", "--target", "sm_80"])
                .args(["--message-format", "json", "--spec"])
                .arg(&spec),
        )
        .ok()
    };
    let r = one(&release(), "release-finished");
    doc_json::check("release-finished", &r, ws.dir.path());
    assert!(cache.join("objects").is_dir() && !work.join("cache").exists());
    assert_eq!(r["unchanged"], false);
    assert_eq!(r["publish"]["entries"], 1);
    let m = &r["build"]["modules"][0];
    let digest = m["module_digest"].as_str().unwrap().to_string();
    assert_eq!(
        (m["module"].as_str(), m["target"].as_str()),
        (Some("gamma"), Some("sm_80"))
    );
    assert!(digest.starts_with("blake3:") && m["identity_digest"].is_string());

    // The same release again publishes nothing, and says so.
    let again = one(&release(), "release-finished");
    assert_eq!(
        (again["unchanged"].as_bool(), again["index_version"].clone()),
        (Some(true), r["index_version"].clone())
    );

    let verify = |state: &str| {
        Out::of(
            xtask()
                .args(["verify", "--json", "--registry"])
                .arg(&registry)
                .arg("--trust")
                .arg(&trust)
                .arg("--state")
                .arg(ws.path(state)),
        )
    };
    let v = one(&verify("state-a.json").ok(), "verify-finished");
    doc_json::check("verify-finished", &v, ws.dir.path());
    assert_eq!(v["ok"], true);
    let vm = &v["modules"][0];
    assert_eq!(vm["module_digest"].as_str(), Some(digest.as_str()));
    assert_eq!(vm["channel"], "dev");
    let blob = std::path::PathBuf::from(vm["blob"].as_str().unwrap());
    assert!(blob.starts_with(&registry) && blob.is_file(), "{blob:?}");

    // Tamper with the blob: the error message names the file, module and target, with Fix.
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[100] ^= 0x01;
    std::fs::write(&blob, bytes).unwrap();
    let out = verify("state-b.json").failed();
    let e = one(&out, "error");
    doc_json::check("error", &e, ws.dir.path());
    assert_eq!(
        e["file"].as_str(),
        Some(blob.display().to_string().as_str()),
        "{e}"
    );
    assert_eq!(
        (e["module"].as_str(), e["target"].as_str()),
        (Some("gamma"), Some("sm_80"))
    );
    assert!(e["message"].as_str().unwrap().contains("blake3"), "{e}");
    assert!(e["fix"].as_str().unwrap().contains("altered"), "{e}");
    assert_eq!(e["exit_code"], 1);
    // People still get the error on stderr, with its Fix: line.
    assert!(
        out.stderr.contains("error: gamma sm_80 blob") && out.fix().contains("altered"),
        "{}",
        out.stderr
    );
}

#[test]
fn publish_speaks_json_and_a_failed_build_reports_module_and_target() {
    let ws = Ws::new();
    let plan = Out::of(
        xtask()
            .args(["build", "--dry-run", "--json", "--spec"])
            .arg(ws.path("spec/release.toml")),
    )
    .ok();
    let p = one(&plan, "build-plan");
    doc_json::check("build-plan", &p, ws.dir.path());
    let jobs = p["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 6, "3 modules x 2 targets: {p}");
    assert_eq!(jobs[0]["flags"][1], "-arch=sm_80");
    assert!(
        !ws.path("spec/.cuda-aot/build").exists(),
        "a dry run builds nothing"
    );
    let out = Out::of(
        xtask()
            .args(["build", "--json", "--target", "sm_80", "--spec"])
            .arg(ws.path("spec/release.toml"))
            .arg("--out")
            .arg(ws.path("out")),
    )
    .ok();
    let b = one(&out, "build-finished");
    doc_json::check("build-finished", &b, ws.dir.path());
    assert_eq!(b["modules"].as_array().unwrap().len(), 3);
    Out::of(
        xtask()
            .arg("sign")
            .arg(ws.path("out"))
            .current_dir(ws.path("spec")),
    )
    .ok();
    let publish = || {
        Out::of(
            xtask()
                .current_dir(ws.path("spec"))
                .args(["publish", "--json", "--registry"])
                .arg(ws.path("registry"))
                .arg(ws.path("out")),
        )
        .ok()
    };
    let p = one(&publish(), "publish-finished");
    doc_json::check("publish-finished", &p, ws.dir.path());
    assert_eq!(
        (p["unchanged"].as_bool(), p["entries"].as_u64()),
        (Some(false), Some(3))
    );
    assert_eq!(p["registry"], ws.path("registry").display().to_string());
    let p2 = one(&publish(), "publish-finished");
    assert_eq!(
        (p2["unchanged"].as_bool(), p2["index_version"].clone()),
        (Some(true), p["index_version"].clone())
    );

    // A kernel that does not compile: the error names its module and target.
    ws.write(
        "src/gamma.cu",
        "extern \"C\" __global__ void gamma_twice() { int x = ; }\n",
    );
    let out = Out::of(
        xtask()
            .args(["build", "--json", "--target", "sm_80", "--spec"])
            .arg(ws.path("spec/release.toml"))
            .arg("--out")
            .arg(ws.path("out")),
    )
    .failed();
    let e = one(&out, "error");
    assert_eq!(
        (e["module"].as_str(), e["target"].as_str()),
        (Some("gamma"), Some("sm_80")),
        "{e}"
    );
    assert!(e["file"].as_str().unwrap().ends_with("src/gamma.cu"), "{e}");
    assert!(
        e["message"].as_str().unwrap().starts_with("build failed"),
        "{e}"
    );
    assert!(
        e["causes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_str().unwrap().contains("nvcc failed")),
        "{e}"
    );
    assert!(e["fix"].as_str().unwrap().contains("gamma.cu"), "{e}");
}
