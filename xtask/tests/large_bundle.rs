//! A large bundle (issue 12): `sign`, `publish` and `verify` hash a registry of many entries
//! on several threads, and a damaged blob is still reported for the first entry that uses
//! it in index order, with its module, target and file — as the one-thread path reports it.

mod common;

use common::{Keys, Out, Ws, xtask};
use std::path::Path;

const ALL: [&str; 3] = ["alpha", "beta", "gamma"];
/// Copies of each module: 6 built entries become 6 * (1 + VARIANTS), above the size at
/// which verification spreads over threads (cuda_aot::parallel::MIN_ITEMS).
const VARIANTS: usize = 8;

/// Copies `out/<m>/` to `out/<m>_vK/` with the module renamed in each manifest: the same
/// blobs (content-addressed in the registry), other entries.
fn add_variants(out: &Path) {
    for k in 0..VARIANTS {
        for m in ALL {
            let to = out.join(format!("{m}_v{k}"));
            std::fs::create_dir_all(&to).unwrap();
            for f in std::fs::read_dir(out.join(m)).unwrap() {
                let f = f.unwrap();
                let name = f.file_name().into_string().unwrap();
                if name.ends_with(".manifest.json") {
                    let mut v: serde_json::Value =
                        serde_json::from_slice(&std::fs::read(f.path()).unwrap()).unwrap();
                    v["identity"]["module"] = format!("{m}_v{k}").into();
                    std::fs::write(to.join(&name), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
                } else if name.ends_with(".cubin") {
                    std::fs::copy(f.path(), to.join(&name)).unwrap();
                }
            }
        }
    }
}

fn verify(ws: &Ws, keys: &Keys, state: &str) -> Out {
    Out::of(
        xtask()
            .args(["verify", "--json", "--registry"])
            .arg(ws.path("registry"))
            .arg("--trust")
            .arg(keys.root())
            .arg("--state")
            .arg(ws.path(state)),
    )
}

#[test]
fn issue_12_a_large_registry_is_hashed_in_parallel_and_a_damaged_blob_is_named() {
    let ws = Ws::new();
    ws.build(&[]).ok();
    add_variants(&ws.path("out"));
    let keys = Keys::new(&ws.path("keys"), "dev");
    let signed = Out::of(
        xtask()
            .arg("sign")
            .arg(ws.path("out"))
            .arg("--builder-key")
            .arg(keys.key("builder")),
    );
    assert_eq!(signed.code, Some(0), "{}", signed.stderr);
    let entries = 6 * (1 + VARIANTS);
    assert!(
        signed
            .stderr
            .contains(&format!("over {entries} manifest(s)")),
        "{}",
        signed.stderr
    );
    let published = Out::of(
        xtask()
            .args(["publish", "--registry"])
            .arg(ws.path("registry"))
            .arg("--trust")
            .arg(keys.root())
            .arg("--publisher-key")
            .arg(keys.key("publisher"))
            .arg(ws.path("out")),
    );
    assert_eq!(published.code, Some(0), "{}", published.stderr);
    assert!(
        published.stderr.contains(&format!("{entries} entries")),
        "{}",
        published.stderr
    );

    let ok = verify(&ws, &keys, "state-ok.json");
    assert_eq!(ok.code, Some(0), "{}", ok.stderr);
    let msg: serde_json::Value = ok
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["reason"] == "verify-finished")
        .expect("verify-finished");
    let modules = msg["modules"].as_array().unwrap();
    assert_eq!(modules.len(), entries);
    // Root, timestamp, index and one build statement: not one per entry.
    assert_eq!(msg["signature_checks"], 4);

    // Damage the blob of beta sm_90, which 1 + VARIANTS entries share: the error names the
    // first of them in index order, and the blob file.
    let digest = modules
        .iter()
        .find(|m| m["module"] == "beta" && m["target"] == "sm_90")
        .unwrap()["module_digest"]
        .as_str()
        .unwrap()
        .to_string();
    let first = modules
        .iter()
        .find(|m| m["module_digest"] == digest.as_str())
        .unwrap();
    let blob = Path::new(first["blob"].as_str().unwrap()).to_path_buf();
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&blob, bytes).unwrap();
    for attempt in 0..3 {
        let bad = verify(&ws, &keys, &format!("state-bad-{attempt}.json"));
        assert_eq!(bad.code, Some(1), "{}", bad.stderr);
        let err: serde_json::Value = bad
            .stdout
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|v| v["reason"] == "error")
            .expect("an error message");
        assert_eq!(err["module"], first["module"], "{err}");
        assert_eq!(err["target"], first["target"], "{err}");
        assert_eq!(err["file"], blob.display().to_string(), "{err}");
        assert!(bad.stderr.contains("blake3"), "{}", bad.stderr);
    }
}
