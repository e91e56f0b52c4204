//! Attestations where OCI tools look (issue 46): `publish --registry oci://…` attaches the
//! release's build statement as an OCI 1.1 referrer of the release artifact (`subject`,
//! `artifactType application/vnd.in-toto+json`). The pinned `docker-registry` 2.8.2 has no
//! referrers API (404), so the publisher keeps the referrers tag schema's index; a third
//! party following that schema over plain HTTP gets the statement, byte for byte the one
//! the registry's index lists; `sync` reads it back and checks it; a forged referrer added
//! beside it stops the sync with nothing made visible. On a registry with the referrers
//! API (`servers oci-referrers`: ferro-oci-server 1.0.0) the API lists it, with no tag.

mod common;

use std::path::{Path, PathBuf};

use common::oci::{INDEX, MANIFEST, put, sha256, through_api, through_tag_schema};
use common::server::{Server, oci_server};
use common::{Out, Ws, xtask};

/// A workspace released (small corpus, dev keys of its spec): its registry, signed build
/// output and keys folder.
fn released() -> (Ws, PathBuf, PathBuf, PathBuf) {
    let ws = Ws::new();
    let (registry, out) = (ws.path("registry"), ws.path("out"));
    Out::of(
        xtask()
            .env("CUDA_AOT_BUILD_CACHE", ws.path("cache"))
            .args(["release", "--spec"])
            .arg(ws.spec_path())
            .arg("--registry")
            .arg(&registry)
            .arg("--out")
            .arg(&out),
    )
    .ok();
    let keys = ws.path("spec/.cuda-aot/dev-keys");
    (ws, registry, out, keys)
}

/// `publish --registry reference` of `out` under the workspace's keys; its stderr.
fn publish(reference: &str, out: &Path, keys: &Path) -> String {
    Out::of(
        xtask()
            .args(["publish", "--registry", reference, "--trust"])
            .arg(keys.join("root.json"))
            .arg("--publisher-key")
            .arg(keys.join("publisher.key"))
            .arg(out),
    )
    .ok()
    .stderr
}

fn sync(reference: &str, to: &Path, trust: &Path) -> Out {
    Out::of(
        xtask()
            .args(["sync", "--from", reference, "--trust"])
            .arg(trust)
            .arg("--to")
            .arg(to)
            .arg("--state")
            .arg(to.with_extension("state.json")),
    )
}

/// Syncs `reference` into `tmp/pulled` and checks that the sync read its one attestation
/// back through `how` and checked it.
fn synced_through(reference: &str, tmp: &Path, keys: &Path, how: &str) {
    let synced = sync(reference, &tmp.join("pulled"), &keys.join("root.json")).ok();
    let want = format!(
        "1 attestation(s) attached as OCI referrers ({how}), each a verified document of the index"
    );
    assert!(synced.stdout.contains(&want), "{}", synced.stdout);
}

/// Publishes `out` to `reference` (`oci://HOST/cuda-aot/rel:stable`) and checks what a
/// third party finds there: one in-toto referrer, listed through `how` (`referrers API`
/// or `referrers tag schema`), whose DSSE layer is byte for byte the statement the
/// registry's index lists.
fn check_published(
    reference: &str,
    out: &Path,
    keys: &Path,
    registry: &Path,
    how: &str,
) -> common::oci::Attested {
    let published = publish(reference, out, keys);
    assert!(
        published.contains("1 attestation(s) as OCI referrers") && published.contains(how),
        "{published}"
    );
    let host = reference
        .trim_start_matches("oci://")
        .split('/')
        .next()
        .unwrap();
    let base = format!("http://{host}/v2/cuda-aot/rel");
    let attested = match how {
        "referrers API" => through_api(&base, "stable"),
        _ => through_tag_schema(&base, "stable"),
    };
    let entries = attested.index["manifests"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{}", attested.index);
    assert_eq!(entries[0]["artifactType"], "application/vnd.in-toto+json");
    let layer = &attested.referrer["layers"][0];
    assert_eq!(layer["mediaType"], "application/vnd.dsse.envelope.v1+json");
    assert!(
        attested.title.starts_with("statements/blake3/"),
        "{}",
        attested.title
    );
    assert_eq!(
        attested.bytes,
        std::fs::read(registry.join(&attested.title)).unwrap(),
        "the referrer is the statement the registry's index lists"
    );
    attested
}

#[test]
fn issue_46_the_build_statement_is_an_oci_referrer_found_through_the_tag_schema() {
    let (_ws, registry, out, keys) = released();
    let tmp = tempfile::tempdir().unwrap();
    let oci = oci_server(tmp.path());
    let reference = format!("oci://{}/cuda-aot/rel:stable", oci.addr);
    // A third party, with nothing but the OCI distribution spec.
    let attested = check_published(&reference, &out, &keys, &registry, "referrers tag schema");
    let (subject, index, referrer) = (&attested.subject, &attested.index, &attested.referrer);
    let entries = index["manifests"].as_array().unwrap();
    let base = format!("http://{}/v2/cuda-aot/rel", oci.addr);
    let statement = &attested.bytes;
    let envelope: serde_json::Value = serde_json::from_slice(statement).unwrap();
    assert_eq!(envelope["payloadType"], "application/vnd.in-toto+json");

    // sync reads it back and checks it against the index it verified.
    synced_through(&reference, tmp.path(), &keys, "the referrers tag schema");

    // A forged attestation attached beside it (the statement with its payload changed,
    // pushed as a referrer and added to the tag's index, as anyone with push access
    // could): the sync refuses the release, nothing made visible.
    let mut forged = envelope.clone();
    forged["payload"] = serde_json::Value::String("e30=".into());
    let forged = serde_json::to_vec(&forged).unwrap();
    let forged_digest = format!("sha256:{}", sha256(&forged));
    push_blob(&base, &forged);
    let mut manifest = referrer.clone();
    manifest["layers"][0]["digest"] = forged_digest.clone().into();
    manifest["layers"][0]["size"] = forged.len().into();
    let manifest = serde_json::to_vec(&manifest).unwrap();
    let manifest_digest = format!("sha256:{}", sha256(&manifest));
    put(
        &format!("{base}/manifests/{manifest_digest}"),
        MANIFEST,
        manifest.clone(),
    );
    let mut index = index.clone();
    let mut entry = entries[0].clone();
    entry["digest"] = manifest_digest.into();
    entry["size"] = manifest.len().into();
    index["manifests"].as_array_mut().unwrap().push(entry);
    put(
        &format!("{base}/manifests/{}", subject.replace(':', "-")),
        INDEX,
        serde_json::to_vec(&index).unwrap(),
    );
    let fresh = tmp.path().join("fresh");
    let refused = sync(&reference, &fresh, &keys.join("root.json")).failed();
    assert!(
        refused
            .stderr
            .contains("is not a build statement or promotion record of the index it verified"),
        "{}",
        refused.stderr
    );
    assert!(
        !fresh.join("timestamp.json").exists(),
        "a refused sync made files visible"
    );
}

/// A monolithic blob upload (POST, then PUT with the digest).
fn push_blob(base: &str, bytes: &[u8]) {
    let c = reqwest::blocking::Client::new();
    let r = c.post(format!("{base}/blobs/uploads/")).send().unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let sep = if location.contains('?') { '&' } else { '?' };
    let url = match location.starts_with("http") {
        true => location.clone(),
        false => format!("{}{location}", &base[..base.find("/v2/").unwrap()]),
    };
    let r = c
        .put(format!("{url}{sep}digest=sha256:{}", sha256(bytes)))
        .body(bytes.to_vec())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{:?}", r.text());
}

#[test]
fn issue_46_a_registry_with_the_referrers_api_lists_the_statement() {
    let (_ws, registry, out, keys) = released();
    let tmp = tempfile::tempdir().unwrap();
    // ferro-oci-server 1.0.0, built once per machine (a few minutes the first time).
    let storage = tmp.path().join("storage");
    let server = Server::start(
        &[
            "servers",
            "oci-referrers",
            "--storage",
            storage.to_str().unwrap(),
        ],
        &[],
    );
    let reference = format!("oci://{}/cuda-aot/rel:stable", server.addr);
    // The API itself, as any OCI tool asks it; no tag was needed.
    check_published(&reference, &out, &keys, &registry, "referrers API");
    synced_through(&reference, tmp.path(), &keys, "the referrers API");
}
