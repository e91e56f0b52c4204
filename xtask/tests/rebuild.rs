//! Independent rebuilds (issue 21 item 3): a release published with one builder into a
//! candidate registry (`publish --awaiting-rebuild`) is refused by `verify` while the trust
//! root wants two builders; `cargo xtask rebuild`, run elsewhere (another folder, another
//! key), fetches the spec and sources the statement names from the registry alone, really
//! compiles, and co-signs; the co-signed output published over it verifies. A tampered
//! registry, a hostile source name and a builder that signed bytes its recorded inputs do
//! not give are refused before anything is signed.

mod common;

use std::path::{Path, PathBuf};

use common::{Out, Ws, keygen, xtask};

/// Two listed builders (the root wants both), the other roles, and an unlisted builder key.
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

    fn key(&self, name: &str) -> PathBuf {
        match name {
            "builder-a" => self.keys.builder(1),
            "builder-b" => self.keys.builder(2),
            other => self.keys.key(other),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn sign(&self, out: &Path) {
        Out::of(
            xtask()
                .arg("sign")
                .arg(out)
                .arg("--builder-key")
                .arg(self.key("builder-a")),
        )
        .ok();
    }

    /// `publish` of `out` into the registry `reg` (below the keys' folder).
    fn publish(&self, reg: &str, out: &Path, awaiting: bool) -> Out {
        let mut c = xtask();
        c.args(["publish", "--registry"])
            .arg(self.path(reg))
            .arg("--trust")
            .arg(self.keys.root())
            .arg("--publisher-key")
            .arg(self.key("publisher"))
            .arg(out);
        if awaiting {
            c.arg("--awaiting-rebuild");
        }
        Out::of(&mut c)
    }

    fn verify(&self, reg: &str) -> Out {
        Out::of(
            xtask()
                .args(["verify", "--json", "--registry"])
                .arg(self.path(reg))
                .arg("--trust")
                .arg(self.keys.root()),
        )
    }

    /// `rebuild` of registry `reg` with `key`, run from `machine` (its current folder),
    /// into `machine/rebuild`.
    fn rebuild(&self, reg: &str, key: &str, machine: &Path) -> Out {
        Out::of(
            xtask()
                .current_dir(machine)
                .args(["rebuild", "--registry"])
                .arg(self.path(reg))
                .arg("--trust")
                .arg(self.keys.root())
                .arg("--builder-key")
                .arg(self.key(key))
                .arg("--out")
                .arg(machine.join("rebuild"))
                .args(["-j", "2"]),
        )
    }
}

/// `Runtime::open` of the candidate registry as a development prover, with a state file
/// of its own.
fn open_runtime(keys: &Keys) -> Result<cuda_aot::Runtime, cuda_aot::Error> {
    let mut policy = cuda_aot::Policy::development();
    policy.rollback = cuda_aot::runtime::RollbackState::File(keys.path("prover-state.json"));
    let root = std::fs::read(keys.keys.root()).unwrap();
    cuda_aot::Runtime::open(keys.path("candidate"), &root, policy)
}

/// A built output signed by builder-a and published awaiting its rebuild into `reg`.
fn candidate(keys: &Keys, reg: &str) -> Ws {
    let ws = Ws::new();
    let built = ws.build(&[]);
    assert!(built.ok, "{}", built.stderr);
    keys.sign(&ws.path("out"));
    let p = keys.publish(reg, &ws.path("out"), true).ok();
    assert!(p.stderr.contains("awaiting rebuild"), "{}", p.stderr);
    ws
}

/// The nvcc runs a rebuild reports.
fn nvcc_runs(o: &Out) -> u64 {
    let line = o
        .stderr
        .lines()
        .find(|l| l.starts_with("rebuilt "))
        .unwrap_or_else(|| panic!("no rebuilt line in\n{}", o.stderr));
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words.iter().position(|w| *w == "nvcc").unwrap();
    words[i - 1].parse().unwrap()
}

#[test]
fn a_release_awaiting_its_rebuild_is_co_signed_by_an_independent_rebuild() {
    let keys = Keys::new();
    let first = candidate(&keys, "candidate");

    // Clients refuse it, and say how it gets its second builder.
    let refused = keys.verify("candidate").failed();
    assert!(
        refused.stderr.contains("1 of the 2 required builder"),
        "{}",
        refused.stderr
    );
    assert!(
        refused.fix().contains("cargo xtask rebuild"),
        "{}",
        refused.fix()
    );
    // So does a prover's Runtime::open (before it probes the driver).
    let err = open_runtime(&keys)
        .err()
        .expect("a candidate is not loadable");
    assert!(
        matches!(
            &err,
            cuda_aot::Error::Threshold {
                valid: 1,
                threshold: 2,
                ..
            }
        ),
        "{err}"
    );

    // Keys whose signature would not count are refused before anything is fetched or built.
    let machine = tempfile::tempdir().unwrap();
    let o = keys
        .rebuild("candidate", "unlisted", machine.path())
        .failed();
    assert!(o.stderr.contains("is not a builder key"), "{}", o.stderr);
    let o = keys
        .rebuild("candidate", "builder-a", machine.path())
        .failed();
    assert!(o.stderr.contains("already signed"), "{}", o.stderr);
    assert!(!machine.path().join("rebuild/tree").exists());

    // The second builder, elsewhere, with nothing but the registry: it compiles every job
    // and co-signs.
    let o = keys.rebuild("candidate", "builder-b", machine.path()).ok();
    assert!(o.stderr.contains("bit-identical rebuild"), "{}", o.stderr);
    assert_eq!(nvcc_runs(&o), 6, "every job compiles: {}", o.stderr);
    let tree = machine.path().join("rebuild/tree");
    assert!(tree.join("spec/release.toml").is_file());
    assert_ne!(tree, first.dir.path());
    assert!(
        o.stderr.contains("next: cargo xtask publish --registry"),
        "{}",
        o.stderr
    );

    // Published: the same blobs and manifests, a new index naming the co-signed statement.
    let p = keys
        .publish("candidate", &machine.path().join("rebuild/build"), false)
        .ok();
    assert!(
        p.stderr.contains("published index v2") && p.stderr.contains("0 blob(s) written"),
        "{}",
        p.stderr
    );
    let verified = keys.verify("candidate").ok();
    let finished = verified.messages().pop().unwrap();
    for m in finished["modules"].as_array().unwrap() {
        assert_eq!(m["builders"].as_array().unwrap().len(), 2, "{m}");
    }

    // Runtime::open now gets past verification: it loads on a GPU host, and without a
    // driver the driver is what it names.
    match open_runtime(&keys) {
        Ok(rt) => assert_eq!(rt.counters().modules_verified, 3),
        Err(cuda_aot::Error::Cuda(e)) => assert!(
            e.is_driver_missing() || cuda_aot::cuda::driver_present(),
            "{e}"
        ),
        Err(e) => panic!("the co-signed release does not open: {e}"),
    }

    // A second rebuild by the same key is refused: it already signed.
    let o = keys
        .rebuild("candidate", "builder-b", machine.path())
        .failed();
    assert!(o.stderr.contains("already signed"), "{}", o.stderr);
}

#[test]
fn a_rebuild_refuses_a_tampered_registry_a_hostile_name_and_a_lying_builder() {
    let keys = Keys::new();
    let first = candidate(&keys, "candidate");
    let machine = tempfile::tempdir().unwrap();
    let reg = keys.path("candidate");

    // One byte of a recorded source in the registry: refused before building.
    let source = std::fs::read_dir(reg.join("sources/blake3"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let good = std::fs::read(&source).unwrap();
    let mut bad = good.clone();
    bad[0] ^= 1;
    std::fs::write(&source, &bad).unwrap();
    let o = keys
        .rebuild("candidate", "builder-b", machine.path())
        .failed();
    assert!(o.stderr.contains("source "), "{}", o.stderr);
    assert!(
        !machine.path().join("rebuild/build").exists(),
        "nothing built"
    );
    std::fs::write(&source, &good).unwrap();

    // One byte of a blob: the registry does not verify, nothing is fetched.
    let (blob, good) = common::flip_a_blob(&reg);
    let o = keys
        .rebuild("candidate", "builder-b", machine.path())
        .failed();
    assert!(o.stderr.contains("blob"), "{}", o.stderr);
    assert!(
        !machine.path().join("rebuild/tree").exists(),
        "nothing fetched"
    );
    std::fs::write(&blob, &good).unwrap();

    // A statement (validly signed by a listed builder) whose provenance names a source
    // outside the tree: refused, nothing written outside.
    let evil = copy_output(&first, "evil");
    let prov = evil.join("build.provenance.json");
    let text = std::fs::read_to_string(&prov).unwrap();
    assert!(text.contains("\"src/common.cuh\""));
    std::fs::write(
        &prov,
        text.replace("\"src/common.cuh\"", "\"../../common.cuh\""),
    )
    .unwrap();
    keys.sign(&evil);
    keys.publish("evil-registry", &evil, true).ok();
    let o = keys
        .rebuild("evil-registry", "builder-b", machine.path())
        .failed();
    assert!(
        o.stderr.contains("not a plain relative path"),
        "{}",
        o.stderr
    );
    assert!(!machine.path().join("common.cuh").exists());

    // A builder that signed a cubin its recorded inputs do not give (built with a flag the
    // spec does not name): the rebuild signs nothing and names the blob and its first
    // differing section.
    let flagged = Ws::new();
    flagged.edit_spec(|s| s.replace("\"--std=c++17\"", "\"--std=c++17\", \"-lineinfo\""));
    let b = flagged.build(&["--module", "alpha", "--target", "sm_90"]);
    assert!(b.ok, "{}", b.stderr);
    let lying = copy_output(&first, "lying");
    let cubin = std::fs::read(flagged.path("out/alpha/sm_90.cubin")).unwrap();
    std::fs::write(lying.join("alpha/sm_90.cubin"), &cubin).unwrap();
    let manifest = lying.join("alpha/sm_90.cubin.manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    m["module_digest"] = format!("blake3:{}", blake3::hash(&cubin).to_hex()).into();
    m["size"] = cubin.len().into();
    std::fs::write(&manifest, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    keys.sign(&lying);
    keys.publish("lying-registry", &lying, true).ok();
    let o = keys
        .rebuild("lying-registry", "builder-b", machine.path())
        .failed();
    assert!(
        o.stderr.contains("not a bit-identical rebuild"),
        "{}",
        o.stderr
    );
    // -lineinfo adds line tables: the section is named.
    let section = o
        .stderr
        .lines()
        .find(|l| l.starts_with("  alpha/sm_90.cubin: ") && l.contains("section .debug"))
        .unwrap_or_else(|| panic!("no differing section named in\n{}", o.stderr));
    assert!(section.contains("signed"), "{section}");
    assert!(
        !o.stderr.contains("beta/"),
        "only alpha differs: {}",
        o.stderr
    );
    assert!(
        !machine
            .path()
            .join("rebuild/build/build.statement.json")
            .exists()
    );
}

/// A copy of `ws`'s build output in `ws/<name>`.
fn copy_output(ws: &Ws, name: &str) -> PathBuf {
    let to = ws.path(name);
    for e in walkdir::WalkDir::new(ws.path("out")) {
        let e = e.unwrap();
        let dest = to.join(e.path().strip_prefix(ws.path("out")).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
    to
}
