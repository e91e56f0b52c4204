//! Issue 11, item 1, with the real `xtask` binary: the registry holds exactly what the
//! release says. A target dropped from (a copy of) the spec leaves the next index; two
//! releases with nothing changed leave the index version where it was; a registry deleted
//! and released again continues its versions, so this checkout's verifier accepts it.

mod common;

use common::{Out, Ws, xtask};

fn finished(out: &Out) -> serde_json::Value {
    out.messages()
        .into_iter()
        .find(|m| m["reason"] == "release-finished")
        .unwrap_or_else(|| panic!("no release-finished message:\n{}", out.stdout))
}

/// `release --module gamma --json` of the workspace's spec: its `release-finished` message.
fn release_gamma(spec: &std::path::Path) -> serde_json::Value {
    release_gamma_with(spec, common::state_dir())
}

/// [`release_gamma`] with the rollback state in `state`.
fn release_gamma_with(spec: &std::path::Path, state: &std::path::Path) -> serde_json::Value {
    finished(
        &Out::of(
            xtask()
                .env("CUDA_AOT_STATE_DIR", state)
                .args(["release", "--module", "gamma", "--json", "--spec"])
                .arg(spec),
        )
        .ok(),
    )
}

#[test]
fn issue_11_a_target_removed_from_the_spec_is_gone_from_the_next_index() {
    let ws = Ws::new();
    let spec = ws.path("spec/release.toml");
    let registry = ws.path("spec/.cuda-aot/registry");
    let trust = ws.path("spec/.cuda-aot/dev-keys/root.json");
    let release = || release_gamma(&spec);
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

#[test]
fn issue_11_a_registry_deleted_and_released_again_continues_above_the_versions_seen() {
    let ws = Ws::new();
    let spec = ws.path("spec/release.toml");
    let registry = ws.path("spec/.cuda-aot/registry");
    let release = || release_gamma(&spec);
    let first = release();
    assert_eq!(first["index_version"], 1, "{first}");
    // A refreshed timestamp (v2), verified here: this checkout has seen index v1, timestamp v2.
    Out::of(
        xtask()
            .current_dir(ws.path("spec"))
            .args(["publish", "--refresh-timestamp"]),
    )
    .ok();
    Out::of(xtask().current_dir(ws.path("spec")).arg("verify")).ok();

    // The build engineer deletes the registry and releases again: the new registry's
    // versions start above the ones seen (index v2, timestamp v3), so the release's own
    // verify step, and any verifier that saw the old line, accepts it.
    std::fs::remove_dir_all(&registry).unwrap();
    let again = release();
    assert_eq!(
        (
            &again["index_version"],
            &again["publish"]["timestamp_version"],
            &again["publish"]["continued_after"]
        ),
        (
            &serde_json::json!(2),
            &serde_json::json!(3),
            &serde_json::json!(1)
        ),
        "{again}"
    );
    // An unchanged registry reports no continuation.
    let third = release();
    assert_eq!(third["unchanged"], true, "{third}");
    assert_eq!(third["publish"]["continued_after"], serde_json::Value::Null);
}

/// A local trust state inflated to u64::MAX (edited, or saved from a registry a stolen key
/// filled) cannot seed an emptied registry: the release says which state file and what to
/// do, writes no index, and works once that file is gone.
#[test]
fn an_inflated_local_state_is_named_with_its_fix_when_a_registry_is_emptied() {
    let ws = Ws::new();
    let spec = ws.path("spec/release.toml");
    let registry = ws.path("spec/.cuda-aot/registry");
    let state_dir = ws.path("state");
    release_gamma_with(&spec, &state_dir);
    // The release saved the state where the runtime reads it: one file for this registry.
    let states: Vec<_> = std::fs::read_dir(&state_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(states.len(), 1, "{states:?}");
    let state = &states[0];
    let mut s: serde_json::Value = serde_json::from_slice(&std::fs::read(state).unwrap()).unwrap();
    s["index"] = u64::MAX.into();
    s["timestamp"] = u64::MAX.into();
    std::fs::write(state, serde_json::to_vec(&s).unwrap()).unwrap();

    std::fs::remove_dir_all(&registry).unwrap();
    let out = Out::of(
        xtask()
            .env("CUDA_AOT_STATE_DIR", &state_dir)
            .args(["release", "--module", "gamma", "--spec"])
            .arg(&spec),
    )
    .failed();
    assert!(
        out.stderr
            .contains(&format!("trust state {}", state.display()))
            && out.stderr.contains("cannot be incremented")
            && out.fix().contains("delete that state file"),
        "{}",
        out.stderr
    );
    assert!(!out.fix().contains("rotate"), "{}", out.fix());
    assert!(
        !registry.join("timestamp.json").exists() && !registry.join("index").exists(),
        "no index or timestamp written"
    );

    std::fs::remove_file(state).unwrap();
    let again = release_gamma_with(&spec, &state_dir);
    assert_eq!(again["index_version"], 1, "{again}");
}
