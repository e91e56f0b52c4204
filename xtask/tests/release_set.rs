//! Issue 11, item 1, with the real `xtask` binary: the registry holds exactly what the
//! release says. A target dropped from (a copy of) the spec leaves the next index; two
//! releases with nothing changed leave the index version where it was.

mod common;

use common::{Out, Ws, xtask};

fn finished(out: &Out) -> serde_json::Value {
    out.messages()
        .into_iter()
        .find(|m| m["reason"] == "release-finished")
        .unwrap_or_else(|| panic!("no release-finished message:\n{}", out.stdout))
}

#[test]
fn issue_11_a_target_removed_from_the_spec_is_gone_from_the_next_index() {
    let ws = Ws::new();
    let spec = ws.path("spec/release.toml");
    let registry = ws.path("spec/.cuda-aot/registry");
    let trust = ws.path("spec/.cuda-aot/dev-keys/root.json");
    let release = || {
        finished(
            &Out::of(
                xtask()
                    .args(["release", "--module", "gamma", "--json", "--spec"])
                    .arg(&spec),
            )
            .ok(),
        )
    };
    let first = release();
    assert_eq!(first["publish"]["entries"], 2, "{first}");
    // Nothing changed: nothing published, the index version stays.
    let again = release();
    assert_eq!(again["unchanged"], true, "{again}");
    assert_eq!(again["index_version"], first["index_version"]);

    ws.edit_spec(|s| s.replace(r#"targets = ["sm_80", "sm_90"]"#, r#"targets = ["sm_80"]"#));
    let dropped = release();
    assert_eq!(
        (
            &dropped["publish"]["entries"],
            &dropped["publish"]["removed"]
        ),
        (&serde_json::json!(1), &serde_json::json!(1)),
        "{dropped}"
    );
    let verify = Out::of(
        xtask()
            .args(["verify", "--json", "--registry"])
            .arg(&registry)
            .arg("--trust")
            .arg(&trust)
            .arg("--state")
            .arg(ws.path("state.json")),
    )
    .ok();
    let v = verify
        .messages()
        .into_iter()
        .find(|m| m["reason"] == "verify-finished")
        .unwrap();
    let targets: Vec<&str> = v["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, ["sm_80"], "{v}");
}
