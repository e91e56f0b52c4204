//! A trust root that wants two builders (issue 21 item 3): a release signed by one builder
//! is refused (publish checks it as clients do); a second builder that rebuilt the release in
//! another checkout (another path, another key) co-signs the identical statement with
//! `sign --co-sign`, and the republished release verifies. A co-signature by a key the
//! root does not list, or by the same key again, does not count; a rebuild with a changed
//! header or flag signs nothing and names what differs.

mod common;

use std::path::{Path, PathBuf};

use common::{Out, Ws, keygen, xtask};

/// Root, two builders (the root wants both), reviewer and publisher keys, and a builder key
/// the root does not list, in a folder of their own.
struct Keys {
    dir: tempfile::TempDir,
    keys: common::Keys,
}

impl Keys {
    fn new() -> Keys {
        let dir = tempfile::tempdir().unwrap();
        let keys = common::Keys::with_builders(dir.path(), "dev", 2, 2);
        keygen("builder", &keys.key("unlisted"));
        Keys { dir, keys }
    }
    /// `builder-a`, `builder-b` (the two the root lists) or another key by name.
    fn key(&self, name: &str) -> PathBuf {
        match name {
            "builder-a" => self.keys.builder(1),
            "builder-b" => self.keys.builder(2),
            other => self.keys.key(other),
        }
    }
    fn root(&self) -> PathBuf {
        self.keys.root()
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn sign(&self, out: &Path, key: &str, co_sign: bool) -> Out {
        let mut c = xtask();
        c.arg("sign")
            .arg(out)
            .arg("--builder-key")
            .arg(self.key(key));
        if co_sign {
            c.arg("--co-sign");
        }
        Out::of(&mut c)
    }

    fn publish(&self, out: &Path) -> Out {
        Out::of(
            xtask()
                .args(["publish", "--registry"])
                .arg(self.path("registry"))
                .arg("--trust")
                .arg(self.root())
                .arg("--publisher-key")
                .arg(self.key("publisher"))
                .arg(out),
        )
    }

    fn verify_json(&self) -> Out {
        Out::of(
            xtask()
                .args(["verify", "--json", "--registry"])
                .arg(self.path("registry"))
                .arg("--trust")
                .arg(self.root())
                .arg("--state")
                .arg(self.path("state.json")),
        )
    }
}

fn statement(ws: &Ws) -> PathBuf {
    ws.path("out/build.statement.json")
}

#[test]
fn a_builder_threshold_of_two_needs_a_co_signed_bit_identical_rebuild() {
    let keys = Keys::new();
    let first = Ws::new();
    assert!(first.build(&[]).ok);
    keys.sign(&first.path("out"), "builder-a", false).ok();
    // Publish checks the statement as clients will: one builder of two is refused, and
    // nothing is published.
    let refused = keys.publish(&first.path("out")).failed();
    assert!(
        refused.stderr.contains("1 of the 2 required builder"),
        "{}",
        refused.stderr
    );
    assert!(!keys.path("registry/timestamp.json").exists());

    // The rebuilder: the same sources in another folder (another path), its own cache and
    // key, and the first builder's statement beside its output.
    let second = Ws::new();
    assert_ne!(first.dir.path(), second.dir.path());
    let rebuilt = second.build(&[]);
    assert!(rebuilt.ok, "{}", rebuilt.stderr);
    assert!(rebuilt.nvcc_runs() > 0, "the rebuild really compiles");
    let signed = std::fs::read(statement(&first)).unwrap();
    std::fs::write(statement(&second), &signed).unwrap();

    // The same key twice does not count: refused when co-signing, and a hand-doubled
    // signature is one signer to the verifier.
    let again = keys.sign(&second.path("out"), "builder-a", true).failed();
    assert!(again.stderr.contains("already signed"), "{}", again.stderr);
    assert_eq!(std::fs::read(statement(&second)).unwrap(), signed);
    let mut env: serde_json::Value = serde_json::from_slice(&signed).unwrap();
    let sig = env["signatures"][0].clone();
    env["signatures"].as_array_mut().unwrap().push(sig);
    std::fs::write(statement(&second), serde_json::to_vec(&env).unwrap()).unwrap();
    expect_refused(&keys, &second, "1 of the 2 required builder");

    // A key the root does not list does not count either.
    std::fs::write(statement(&second), &signed).unwrap();
    keys.sign(&second.path("out"), "unlisted", true).ok();
    expect_refused(&keys, &second, "1 of the 2 required builder");

    // The second listed builder co-signs the identical statement: accepted.
    std::fs::write(statement(&second), &signed).unwrap();
    let co = keys.sign(&second.path("out"), "builder-b", true).ok();
    assert!(co.stderr.contains("2 signatures now"), "{}", co.stderr);
    let env: serde_json::Value =
        serde_json::from_slice(&std::fs::read(statement(&second)).unwrap()).unwrap();
    let first_env: serde_json::Value = serde_json::from_slice(&signed).unwrap();
    assert_eq!(
        env["payload"], first_env["payload"],
        "the payload is unchanged"
    );
    keys.publish(&second.path("out")).ok();
    let verified = keys.verify_json().ok();
    let finished = verified.messages().pop().unwrap();
    let short = |name: &str| key_id(&keys.key(name));
    let want = serde_json::json!([short("builder-a"), short("builder-b")]);
    for m in finished["modules"].as_array().unwrap() {
        let mut builders = m["builders"].clone();
        builders
            .as_array_mut()
            .unwrap()
            .sort_by_key(|v| v.to_string());
        let mut want = want.clone();
        want.as_array_mut().unwrap().sort_by_key(|v| v.to_string());
        assert_eq!(builders, want, "{m}");
    }
}

/// Expects publish to refuse `ws`'s output with `needle`, publishing nothing.
fn expect_refused(keys: &Keys, ws: &Ws, needle: &str) {
    let refused = keys.publish(&ws.path("out")).failed();
    assert!(refused.stderr.contains(needle), "{}", refused.stderr);
    assert!(!keys.path("registry/timestamp.json").exists());
}

#[test]
fn a_rebuild_with_a_changed_header_or_flag_signs_nothing_and_names_what_differs() {
    let keys = Keys::new();
    let first = Ws::new();
    assert!(first.build(&[]).ok);
    keys.sign(&first.path("out"), "builder-a", false).ok();
    let signed = std::fs::read(statement(&first)).unwrap();

    // A header changed (a comment only: the cubins may even be equal, the manifests that
    // record the source digests are not).
    let header = Ws::new();
    header.write(
        "src/common.cuh",
        &format!("{}\n// changed\n", header.read("src/common.cuh")),
    );
    assert!(header.build(&[]).ok);
    std::fs::write(statement(&header), &signed).unwrap();
    let refused = keys.sign(&header.path("out"), "builder-b", true).failed();
    assert!(
        refused.stderr.contains("not a bit-identical rebuild")
            && refused.stderr.contains("alpha/sm_")
            && refused.stderr.contains(".manifest.json: differs"),
        "{}",
        refused.stderr
    );
    assert!(
        !refused.stderr.contains("gamma/"),
        "gamma does not include common.cuh: {}",
        refused.stderr
    );
    assert_eq!(std::fs::read(statement(&header)).unwrap(), signed);

    // A flag changed: the blobs differ and are named.
    let flag = Ws::new();
    flag.edit_spec(|s| s.replace("\"--std=c++17\"", "\"--std=c++17\", \"-lineinfo\""));
    let built = flag.build(&[]);
    assert!(built.ok, "{}", built.stderr);
    std::fs::write(statement(&flag), &signed).unwrap();
    let refused = keys.sign(&flag.path("out"), "builder-b", true).failed();
    assert!(
        refused.stderr.contains(".cubin: differs"),
        "{}",
        refused.stderr
    );
    assert_eq!(std::fs::read(statement(&flag)).unwrap(), signed);
}

/// The 12-hex key id prefix of a key file, as `verify --json` names builders.
fn key_id(key: &Path) -> String {
    let o = xtask()
        .args(["keygen", "--export-public"])
        .arg(key)
        .args(["--format", "sslib"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    doc["keyid"].as_str().unwrap()[..12].to_string()
}
