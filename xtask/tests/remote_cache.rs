//! Issue 20: the shared build cache (`--remote-cache file:///...`). One checkout builds into
//! it (read-write, entries signed by a builder key of a generated trust root); another
//! checkout, at another path with an empty local cache, takes every job from it and runs
//! no nvcc, with the same bytes. Forged, altered, replayed, unsigned and truncated entries
//! are refused, named in the summary and the JSON report, and compiled instead; a reader
//! never writes to the shared cache; bad settings are refused before anything is built.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::s3::S3;
use common::{Keys, Out, Run, Ws, snapshot, xtask};
use cuda_aot::metadata::{Root, Time};

fn url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// The shared-cache arguments for the shared cache at `url`: read-write signing with `key`
/// when given, else read-only; entries checked against `keys`' root.
fn shared_args(url: &str, keys: &Keys, key: Option<&Path>) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--remote-cache".into(),
        url.into(),
        "--remote-cache-trust".into(),
        keys.root().display().to_string(),
    ];
    match key {
        Some(k) => args.extend([
            "--remote-cache-mode".into(),
            "read-write".into(),
            "--remote-cache-key".into(),
            k.display().to_string(),
        ]),
        None => args.extend(["--remote-cache-mode".into(), "read".into()]),
    }
    args
}

/// A build of `ws` with the shared cache folder `dir` and `extra`.
fn build_with(ws: &Ws, dir: &Path, keys: &Keys, key: Option<&Path>, extra: &[&str]) -> Run {
    build_at(ws, &url(dir), keys, key, extra, |_| {})
}

/// A build of `ws` with the shared cache at `url` ([`shared_args`]) and `extra`, its
/// command adjusted by `f` (the environment of an S3 store, a wrapper).
fn build_at(
    ws: &Ws,
    url: &str,
    keys: &Keys,
    key: Option<&Path>,
    extra: &[&str],
    f: impl FnOnce(&mut std::process::Command),
) -> Run {
    let args = shared_args(url, keys, key);
    let mut refs: Vec<&str> = args.iter().map(String::as_str).collect();
    refs.extend(extra);
    ws.build_with(&refs, f)
}

/// A build of `ws` with the shared cache at `url` on the S3 test server `s3` and `extra`.
fn build_on_s3(
    ws: &Ws,
    s3: &S3,
    url: &str,
    keys: &Keys,
    key: Option<&Path>,
    extra: &[&str],
) -> Run {
    build_at(ws, url, keys, key, extra, |c| {
        s3.env(c);
    })
}

/// [`build_with`] and nothing else.
fn build(ws: &Ws, dir: &Path, keys: &Keys, key: Option<&Path>) -> Run {
    build_with(ws, dir, keys, key, &[])
}

fn shared(run: &Run) -> &serde_json::Value {
    &run.report.as_ref().expect("a report")["shared_cache"]
}

/// `module target` -> identity digest hex, from a build's report.
fn identities(run: &Run) -> BTreeMap<String, String> {
    run.report.as_ref().unwrap()["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                format!(
                    "{} {}",
                    m["module"].as_str().unwrap(),
                    m["target"].as_str().unwrap()
                ),
                m["identity_digest"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches("blake3:")
                    .to_string(),
            )
        })
        .collect()
}

fn blobs(run: &Run) -> BTreeMap<String, String> {
    run.report.as_ref().unwrap()["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                format!(
                    "{} {}",
                    m["module"].as_str().unwrap(),
                    m["target"].as_str().unwrap()
                ),
                m["module_digest"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn entry(dir: &Path, id: &str) -> PathBuf {
    dir.join("v1/entries").join(id)
}

fn copy_tree(from: &Path, to: &Path) {
    for (rel, bytes) in snapshot(from) {
        let p = to.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

#[test]
fn issue_20_a_second_checkout_takes_every_job_from_the_shared_cache_and_refuses_bad_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let remote = tmp.path().join("shared");

    // Checkout A builds everything and adds it, signed.
    let a = Ws::new();
    let first = build(&a, &remote, &keys, Some(&keys.key("builder"))).ok();
    assert_eq!(first.nvcc_runs(), 6, "{}", first.stderr);
    assert_eq!(shared(&first)["added"], 6, "{}", first.stderr);
    assert_eq!(shared(&first)["taken"], 0);
    // A whole read-write build also leaves the compile times that shard builds split by.
    let timings: serde_json::Value =
        serde_json::from_slice(&std::fs::read(remote.join("v1/timings.json")).unwrap()).unwrap();
    assert_eq!(timings["jobs"].as_object().unwrap().len(), 6, "{timings}");
    let ids = identities(&first);
    for id in ids.values() {
        for f in ["entry.json", "manifest.json", "blob"] {
            assert!(entry(&remote, id).join(f).is_file(), "{id}/{f}");
        }
    }

    // Checkout B, elsewhere, empty local cache, read-only: no nvcc, the same bytes, and the
    // shared cache untouched.
    let before = snapshot(&remote);
    let b = Ws::new();
    let second = build(&b, &remote, &keys, None).ok();
    assert_shared(&second, 0, 6, &first);
    assert_eq!(shared(&second)["added"], 0);
    let said = format!("{}{}", second.stdout, second.stderr);
    assert!(
        said.contains("shared cache: 6 taken, 0 refused, 0 added"),
        "{said}"
    );
    assert_eq!(
        snapshot(&remote),
        before,
        "a read-only build wrote to the shared cache"
    );
    // Now its own cache has them: a rebuild takes nothing from the shared one.
    let again = build(&b, &remote, &keys, None).ok();
    assert_eq!(
        (again.nvcc_runs(), shared(&again)["taken"].as_u64()),
        (0, Some(0))
    );

    // Another builder, under another trust root, fills a cache of its own: its entries are
    // well formed, for the same identities, but signed by a key this root does not list.
    let other_keys = Keys::new(&tmp.path().join("other-keys"), "dev");
    let other = tmp.path().join("other-shared");
    build(
        &Ws::new(),
        &other,
        &other_keys,
        Some(&other_keys.key("builder")),
    )
    .ok();

    // Five of the six entries attacked, one way each; the sixth stays intact.
    let attacked = tmp.path().join("attacked");
    attack_five(&remote, &other, &ids, &attacked);
    let c = Ws::new();
    let third = build_with(&c, &attacked, &keys, None, &["--explain"]).ok();
    println!("{}", third.stderr);
    assert_shared(&third, 5, 1, &first);
    // --explain says why each of the five compiled, first of all (and the JSON report too).
    let explained: Vec<&str> = third
        .stdout
        .lines()
        .filter(|l| l.starts_with("explain: "))
        .collect();
    assert_eq!(explained.len(), 5, "{}", third.stdout);
    assert!(
        explained
            .iter()
            .all(|l| l.contains("): the shared cache's entry was refused: ")),
        "{explained:?}"
    );
    for m in third.report.as_ref().unwrap()["modules"]
        .as_array()
        .unwrap()
    {
        let first_change = &m["changed"][0];
        match m["cached"].as_bool().unwrap() {
            true => assert!(first_change.is_null(), "{m}"),
            false => assert_eq!(first_change["input"], "shared_cache", "{m}"),
        }
    }
    assert_five_refused(&third);
}

/// A copy of the shared cache `remote` at `attacked` with five of its six entries attacked,
/// one way each (an entry of `other`, a cache signed under another root, for the forgery).
fn attack_five(remote: &Path, other: &Path, ids: &BTreeMap<String, String>, attacked: &Path) {
    copy_tree(remote, attacked);
    let id = |k: &str| ids[k].clone();
    // Forged: signed by an unknown key.
    std::fs::copy(
        entry(other, &id("alpha sm_80")).join("entry.json"),
        entry(attacked, &id("alpha sm_80")).join("entry.json"),
    )
    .unwrap();
    // Altered: one byte of the blob.
    let blob = entry(attacked, &id("alpha sm_90")).join("blob");
    let mut bytes = std::fs::read(&blob).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&blob, bytes).unwrap();
    // Replayed: beta sm_80's folder holds gamma sm_90's whole, validly signed entry.
    for f in ["entry.json", "manifest.json", "blob"] {
        std::fs::copy(
            entry(attacked, &id("gamma sm_90")).join(f),
            entry(attacked, &id("beta sm_80")).join(f),
        )
        .unwrap();
    }
    // Unsigned: the signature removed.
    std::fs::remove_file(entry(attacked, &id("beta sm_90")).join("entry.json")).unwrap();
    // Truncated: the manifest cut short.
    let manifest = entry(attacked, &id("gamma sm_80")).join("manifest.json");
    let text = std::fs::read(&manifest).unwrap();
    std::fs::write(&manifest, &text[..text.len() / 2]).unwrap();
}

/// The five attacked entries were refused, each for its own reason, and compiled.
fn assert_five_refused(third: &Run) {
    let refused: BTreeMap<String, String> = shared(third)["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["what"].as_str().unwrap().to_string(),
                r["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(refused.len(), 5, "{refused:?}");
    let reason = |module: &str, target: &str| -> &str {
        refused
            .iter()
            .find(|(w, _)| w.contains(&format!("`{module}` target {target}")))
            .map(|(_, r)| r.as_str())
            .unwrap_or_else(|| panic!("{module} {target} not refused: {refused:?}"))
    };
    assert!(
        reason("alpha", "sm_80").starts_with("signature:"),
        "{refused:?}"
    );
    assert!(
        reason("alpha", "sm_90").contains("blob is not the signed one"),
        "{refused:?}"
    );
    assert!(
        reason("beta", "sm_80").contains("replayed under another identity"),
        "{refused:?}"
    );
    assert!(
        reason("beta", "sm_90").starts_with("unsigned"),
        "{refused:?}"
    );
    assert!(
        reason("gamma", "sm_80").contains("manifest.json is not the signed one"),
        "{refused:?}"
    );
    assert!(
        third
            .stderr
            .contains("refused the entry for module `alpha` target sm_90")
            && third.stderr.contains("compiled it instead"),
        "{}",
        third.stderr
    );
}

#[test]
fn issue_20_bad_shared_cache_settings_are_refused_before_anything_is_built() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let other = Keys::new(&tmp.path().join("other"), "dev");
    let ws = Ws::new();
    let remote = tmp.path().join("shared");
    // A builder key the trust root does not list.
    let run = build(&ws, &remote, &keys, Some(&other.key("builder"))).failed();
    assert!(
        run.stderr
            .contains("is not a builder key of the trust root"),
        "{}",
        run.stderr
    );
    // Read-write with a generated root and no key.
    let run = ws
        .build(&[
            "--remote-cache",
            &url(&remote),
            "--remote-cache-trust",
            &keys.root().display().to_string(),
            "--remote-cache-mode",
            "read-write",
        ])
        .failed();
    assert!(
        run.stderr.contains("no builder key was given"),
        "{}",
        run.stderr
    );
    // A URL of a kind not supported, an OCI tag where a repository is meant, and a bucket
    // name S3 would refuse: each refused, saying what to give.
    for (url, said) in [
        (
            "https://cache.example/team",
            &[
                "not a shared cache this tool can use",
                "Fix: give file:///",
                "s3://BUCKET/PREFIX",
                "oci://HOST/REPOSITORY",
            ][..],
        ),
        (
            "oci://registry.example/team/cache:v1",
            &["without a :TAG or @DIGEST"],
        ),
        ("s3://Not_A_Bucket/prefix", &["bucket name must be 3 to 63"]),
    ] {
        let out = Out::of(
            xtask()
                .args(["build", "--spec"])
                .arg(ws.spec_path())
                .args(["--remote-cache", url]),
        )
        .failed();
        for s in said {
            assert!(out.stderr.contains(s), "{url}: {}", out.stderr);
        }
    }
    assert!(!remote.exists(), "nothing was written");
    assert!(snapshot(&ws.path("cache")).is_empty(), "nothing was built");
}

/// Entries are trusted through the trust root's builder keys, so not through a root that
/// has expired: the build refuses the shared cache before it builds or reads anything,
/// naming the root and saying how to renew it.
#[test]
fn an_expired_trust_root_is_refused_for_the_shared_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    // The same root, expired in 2001 and signed again with its own (generated) root key.
    let bytes = std::fs::read(keys.root()).unwrap();
    let (_, mut root) = cuda_aot::trust::decode_envelope::<Root>(&bytes, 1 << 20, "root").unwrap();
    root.expires = Time::from_unix(1_000_000_000);
    let text = std::fs::read_to_string(keys.key("root")).unwrap();
    let seed = text.lines().find_map(|l| l.strip_prefix("seed: ")).unwrap();
    let mut s = [0u8; 32];
    hex::decode_to_slice(seed, &mut s).unwrap();
    let root_key = cuda_aot::SecretKey::from_seed(s);
    let expired = tmp.path().join("expired.json");
    std::fs::write(
        &expired,
        cuda_aot::metadata::sign_doc(&root, &[&root_key]).to_bytes(),
    )
    .unwrap();

    let ws = Ws::new();
    let remote = tmp.path().join("shared");
    std::fs::create_dir_all(&remote).unwrap();
    let run = ws
        .build(&[
            "--remote-cache",
            &url(&remote),
            "--remote-cache-trust",
            &expired.display().to_string(),
        ])
        .failed();
    for said in [
        "the shared build cache's trust root",
        "trust root v1",
        "2001-09-09",
        "Fix: renew the trust root",
    ] {
        assert!(run.stderr.contains(said), "{said}: {}", run.stderr);
    }
    assert!(snapshot(&ws.path("cache")).is_empty(), "nothing was built");
    assert!(snapshot(&remote).is_empty(), "nothing was read or written");
}

/// Issue 20, item 3: two shard builds on two checkouts split the release's six jobs
/// between them (no job twice, none left out) into the shared cache; a release on a third
/// checkout then finds every job there, runs no nvcc, and signs and publishes the whole set.
#[test]
fn issue_20_two_shards_fill_the_shared_cache_and_a_final_release_runs_no_nvcc() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let remote = tmp.path().join("shared");
    let shard = |k: usize| {
        let part = format!("{k}/2");
        let run = build_with(
            &Ws::new(),
            &remote,
            &keys,
            Some(&keys.key("builder")),
            &["--shard", &part],
        )
        .ok();
        (run.compiled(), run.nvcc_runs())
    };
    let (one, n1) = shard(1);
    let (two, n2) = shard(2);
    assert_eq!((one.len(), two.len()), (3, 3), "{one:?} {two:?}");
    assert!(one.is_disjoint(&two), "{one:?} {two:?}");
    assert_eq!(one.union(&two).count(), 6);
    assert_eq!(n1 + n2, 6);

    let last = Ws::new();
    let out = Out::of(
        xtask()
            .env("CUDA_AOT_BUILD_CACHE", last.path("cache"))
            .args(["release", "--spec"])
            .arg(last.spec_path())
            .args(["--remote-cache", &url(&remote), "--remote-cache-trust"])
            .arg(keys.root())
            .arg("--json"),
    )
    .ok();
    let build = out
        .messages()
        .into_iter()
        .find(|m| m["reason"] == "release-finished")
        .map(|m| m["build"].clone())
        .unwrap_or_else(|| panic!("no release-finished message:\n{}", out.stdout));
    assert_eq!(build["nvcc_runs"], 0, "{build}");
    assert_eq!(build["shared_cache"]["taken"], 6, "{build}");
    assert!(
        last.path("spec/.cuda-aot/registry/timestamp.json")
            .is_file()
    );

    // A shard with nowhere to put its part is refused before anything is built.
    let ws = Ws::new();
    let run = ws.build(&["--shard", "1/2"]).failed();
    assert!(
        run.stderr
            .contains("nothing would carry it to the final build"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("--remote-cache-mode read-write"),
        "{}",
        run.stderr
    );
}

/// The object paths of the entry `id` in a shared cache.
fn entry_key(id: &str, file: &str) -> String {
    format!("v1/entries/{id}/{file}")
}

/// Issue 20, items 1 and 2 on object storage: the shared cache in a bucket of the S3 test
/// server (`s3://`). A checkout fills it (read-write); another, empty, takes every job and
/// runs no nvcc; entries forged, altered, replayed, truncated and deleted half-way inside the
/// bucket are refused and compiled instead, with the same bytes as the shared ones.
#[test]
fn issue_20_a_shared_cache_in_an_s3_bucket_round_trips_and_refuses_poisoned_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let s3 = S3::start(&["cache"], &[]);
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let url = "s3://cache/team/ci";
    let build = |ws: &Ws, url: &str, keys: &Keys, key: Option<&Path>| {
        build_on_s3(ws, &s3, url, keys, key, &[])
    };

    let first = build(&Ws::new(), url, &keys, Some(&keys.key("builder"))).ok();
    assert_eq!(first.nvcc_runs(), 6, "{}", first.stderr);
    assert_eq!(shared(&first)["added"], 6, "{}", first.stderr);
    let ids = identities(&first);
    let bucket = s3.client(url);
    for id in ids.values() {
        for f in ["entry.json", "manifest.json", "blob"] {
            assert!(
                bucket.get(&entry_key(id, f), 16 << 20).unwrap().is_some(),
                "{id}/{f}"
            );
        }
    }
    let second = build(&Ws::new(), url, &keys, None).ok();
    assert_shared(&second, 0, 6, &first);

    // Another trust root's builder fills another prefix: well-formed entries for the same
    // identities, signed by a key this root does not list.
    let other_keys = Keys::new(&tmp.path().join("other-keys"), "dev");
    let other_url = "s3://cache/other";
    build(
        &Ws::new(),
        other_url,
        &other_keys,
        Some(&other_keys.key("builder")),
    )
    .ok();
    let other = s3.client(other_url);
    let get = |c: &cuda_aot_registry::s3::S3Client, id: &str, f: &str| {
        c.get(&entry_key(id, f), 16 << 20).unwrap().unwrap()
    };
    let id = |k: &str| ids[k].clone();
    // Forged, altered, replayed, truncated, deleted half-way: five entries attacked in the
    // bucket.
    bucket
        .put(
            &entry_key(&id("alpha sm_80"), "entry.json"),
            &get(&other, &id("alpha sm_80"), "entry.json"),
        )
        .unwrap();
    let mut blob = get(&bucket, &id("alpha sm_90"), "blob");
    let mid = blob.len() / 2;
    blob[mid] ^= 1;
    bucket
        .put(&entry_key(&id("alpha sm_90"), "blob"), &blob)
        .unwrap();
    for f in ["entry.json", "manifest.json", "blob"] {
        let bytes = get(&bucket, &id("gamma sm_90"), f);
        bucket
            .put(&entry_key(&id("beta sm_80"), f), &bytes)
            .unwrap();
    }
    // Deleted between two reads: beta sm_90's signed entry is there, its blob is gone.
    bucket
        .delete(&entry_key(&id("beta sm_90"), "blob"))
        .unwrap();
    let manifest = get(&bucket, &id("gamma sm_80"), "manifest.json");
    bucket
        .put(
            &entry_key(&id("gamma sm_80"), "manifest.json"),
            &manifest[..manifest.len() / 2],
        )
        .unwrap();

    let third = build(&Ws::new(), url, &keys, None).ok();
    assert_shared(&third, 5, 1, &first);
    assert_refused(
        &third,
        &[
            ("alpha", "sm_80", "signature:"),
            ("beta", "sm_90", "the signed entry has no blob"),
            ("alpha", "sm_90", "blob is not the signed one"),
            ("beta", "sm_80", "replayed under another identity"),
            ("gamma", "sm_80", "manifest.json is not the signed one"),
        ],
    );
}

/// Asserts that `run` ran `nvcc` jobs and took `taken` from the shared cache, and that its
/// blobs are those of `first` (what compiled equals what was shared).
fn assert_shared(run: &Run, nvcc: u64, taken: u64, first: &Run) {
    assert_eq!(run.nvcc_runs(), nvcc, "{}", run.stderr);
    assert_eq!(shared(run)["taken"], taken, "{}", run.stderr);
    assert_eq!(
        blobs(run),
        blobs(first),
        "what compiled equals what was shared"
    );
}

/// `what: reason` of each entry `run` refused, from its report.
fn refusals(run: &Run) -> Vec<String> {
    shared(run)["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}: {}",
                r["what"].as_str().unwrap(),
                r["reason"].as_str().unwrap()
            )
        })
        .collect()
}

/// Asserts that `run` refused exactly `cases` (module, target, a part of the reason), each
/// named in the report's `shared_cache.refused`.
fn assert_refused(run: &Run, cases: &[(&str, &str, &str)]) {
    let refused = refusals(run);
    assert_eq!(refused.len(), cases.len(), "{refused:?}");
    for (module, target, reason) in cases {
        assert!(
            refused
                .iter()
                .any(|r| r.contains(&format!("`{module}` target {target}")) && r.contains(reason)),
            "{module} {target}: {refused:?}"
        );
    }
}

/// Issue 20, items 1 and 2 in an OCI registry (`oci://HOST/REPOSITORY`, the pinned
/// distribution registry of `cargo xtask servers oci` on loopback): a checkout fills the
/// repository (read-write), another, empty, takes every job and runs no nvcc while leaving
/// the registry's storage as it was; entries signed by another root, altered, swapped under
/// another tag, truncated and with a tag deleted half-way are refused and compiled instead.
#[test]
fn issue_20_a_shared_cache_in_an_oci_repository_round_trips_and_refuses_poisoned_entries() {
    use cuda_aot_registry::oci_cache::{OciCache, tag_of};
    let tmp = tempfile::tempdir().unwrap();
    let oci = common::server::oci_server(tmp.path());
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let url = format!("oci://{}/team/cache", oci.addr);
    let build = |ws: &Ws, url: &str, keys: &Keys, key: Option<&Path>| {
        build_at(ws, url, keys, key, &[], |c| {
            c.env_remove("CUDA_AOT_OCI_USERNAME");
        })
    };
    let first = build(&Ws::new(), &url, &keys, Some(&keys.key("builder"))).ok();
    assert_eq!(first.nvcc_runs(), 6, "{}", first.stderr);
    assert_eq!(shared(&first)["added"], 6, "{}", first.stderr);
    let ids = identities(&first);
    let repo = OciCache::open(&url, Default::default()).unwrap();
    let get = |c: &OciCache, id: &str, f: &str| c.get(&entry_key(id, f), 16 << 20).unwrap();
    for id in ids.values() {
        for f in ["entry.json", "manifest.json", "blob"] {
            assert!(get(&repo, id, f).is_some(), "{id}/{f}");
        }
    }

    let storage = tmp.path().join("oci-storage");
    let before = snapshot(&storage);
    let second = build(&Ws::new(), &url, &keys, None).ok();
    assert_shared(&second, 0, 6, &first);
    assert!(
        snapshot(&storage) == before,
        "a read-only build changed the registry's storage"
    );

    // Another trust root's builder fills another repository of the same registry.
    let other_keys = Keys::new(&tmp.path().join("other-keys"), "dev");
    let other_url = format!("oci://{}/other/cache", oci.addr);
    build(
        &Ws::new(),
        &other_url,
        &other_keys,
        Some(&other_keys.key("builder")),
    )
    .ok();
    let other = OciCache::open(&other_url, Default::default()).unwrap();
    let id = |k: &str| ids[k].clone();
    let put = |id: &str, f: &str, bytes: &[u8]| repo.put(&entry_key(id, f), bytes).unwrap();
    put(
        &id("alpha sm_80"),
        "entry.json",
        &get(&other, &id("alpha sm_80"), "entry.json").unwrap(),
    );
    let mut blob = get(&repo, &id("alpha sm_90"), "blob").unwrap();
    let mid = blob.len() / 2;
    blob[mid] ^= 1;
    put(&id("alpha sm_90"), "blob", &blob);
    let manifest = get(&repo, &id("gamma sm_80"), "manifest.json").unwrap();
    put(
        &id("gamma sm_80"),
        "manifest.json",
        &manifest[..manifest.len() / 2],
    );
    // In the registry's storage, as one with write access to it could: beta sm_80's
    // entry.json tag made to point at gamma sm_90's entry.json artifact (a valid object
    // under another name), and beta sm_90's blob tag removed.
    let tags = storage.join("docker/registry/v2/repositories/team/cache/_manifests/tags");
    let link = |id: &str, f: &str| {
        tags.join(tag_of(&entry_key(id, f)).unwrap())
            .join("current/link")
    };
    std::fs::copy(
        link(&id("gamma sm_90"), "entry.json"),
        link(&id("beta sm_80"), "entry.json"),
    )
    .unwrap();
    std::fs::remove_dir_all(tags.join(tag_of(&entry_key(&id("beta sm_90"), "blob")).unwrap()))
        .unwrap();

    let third = build(&Ws::new(), &url, &keys, None).ok();
    assert_shared(&third, 5, 1, &first);
    assert_refused(
        &third,
        &[
            ("alpha", "sm_80", "signature:"),
            ("beta", "sm_90", "the signed entry has no blob"),
            ("alpha", "sm_90", "blob is not the signed one"),
            ("beta", "sm_80", "the tag holds another object"),
            ("gamma", "sm_80", "manifest.json is not the signed one"),
        ],
    );

    // The registry gone: a read-write build still completes with the same bytes, and says
    // that the shared cache could not be read or added to.
    let mut oci = oci;
    oci.stop();
    let gone = build(&Ws::new(), &url, &keys, Some(&keys.key("builder"))).ok();
    assert_eq!(gone.nvcc_runs(), 6, "{}", gone.stderr);
    assert_eq!(blobs(&gone), blobs(&first));
    let said = shared(&gone)["read_failed"].as_str().unwrap_or_default();
    assert!(
        said.contains("v1/") && said.contains("attempt"),
        "{}",
        gone.stderr
    );
    assert!(
        shared(&gone)["add_failed"].as_str().is_some(),
        "{}",
        gone.stderr
    );
}

/// Issue 20, item 6: a slow store (every request waits 100 ms, one at a time) answering
/// every third object request with 503 Slow Down. The shared cache's writes and reads are
/// retried through it: a second checkout still takes every job and runs no nvcc, with the
/// same bytes.
#[test]
fn issue_20_a_slow_store_in_a_5xx_storm_is_retried_through() {
    let tmp = tempfile::tempdir().unwrap();
    let s3 = S3::start(&["cache"], &["--fail-every", "3", "--delay-ms", "100"]);
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let url = "s3://cache/storm";
    assert!(s3.fails_requests(url), "the storm is on");
    let build = |key: Option<&Path>| build_on_s3(&Ws::new(), &s3, url, &keys, key, &[]);
    let first = build(Some(&keys.key("builder"))).ok();
    assert_eq!(shared(&first)["added"], 6, "{}", first.stderr);
    let second = build(None).ok();
    assert_shared(&second, 0, 6, &first);
    assert_eq!(shared(&second)["refused"].as_array().map(Vec::len), Some(0));
}

/// Issue 20, item 6: a store that fails every request (503 on each, after the client's
/// retries), then one that is gone (killed). The build's reads are refused with the reason
/// and compiled; its adds stop with a warning and the reason in the report; the build
/// itself succeeds with every job, and its output is what a build without a shared cache
/// makes.
#[test]
fn issue_20_a_failing_or_dead_s3_store_never_breaks_the_build() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let plain = Ws::new().build(&[]).ok();
    let url = "s3://cache/down";
    let run = |s3: &S3, key: Option<&Path>| build_on_s3(&Ws::new(), s3, url, &keys, key, &[]);

    let failing = S3::start(&["cache"], &["--fail-every", "1"]);
    assert!(failing.fails_requests(url));
    let b = run(&failing, Some(&keys.key("builder"))).ok();
    assert_eq!(b.nvcc_runs(), 6, "{}", b.stderr);
    assert_eq!(blobs(&b), blobs(&plain));
    assert_eq!(shared(&b)["added"], 0);
    let why = shared(&b)["add_failed"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(why.contains("failed"), "{why}");
    assert!(
        b.stderr
            .contains("output and local cache are complete and verified")
            && b.stderr.contains("Fix: check the store"),
        "{}",
        b.stderr
    );
    drop(failing);

    let dead = S3::start(&["cache"], &[]);
    let addr = dead.addr;
    drop(dead);
    let c = build_at(&Ws::new(), url, &keys, None, &[], |c| {
        common::s3::point_at(c, &format!("http://{addr}"));
    })
    .ok();
    assert_shared(&c, 6, 0, &plain);
    // Neither store gave anything, and both builds said why.
    for run in [&b, &c] {
        let said = shared(run)["read_failed"].as_str().unwrap_or_default();
        assert!(said.contains("v1/"), "{}", run.stderr);
        assert!(
            run.stderr.contains("could not be read") && run.stderr.contains("compiled instead"),
            "{}",
            run.stderr
        );
    }
}

/// Issue 20, item 6: the store's connection cut half-way through a blob's upload and
/// through a blob's download (the store serving on), then the store killed mid-upload and,
/// filled, killed mid-download. Each build completes with the bytes a build without a shared
/// cache makes, never takes or leaves half an entry, and says what failed; the cuts are
/// retried through, and the shared cache then holds every entry whole.
#[test]
fn issue_20_a_store_cut_or_killed_mid_transfer_leaves_correct_output_and_no_half_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let plain = Ws::new().build(&[]).ok();
    let url = "s3://cache/cut";
    let run = |ws: &Ws, s3: &S3, key: Option<&Path>| build_on_s3(ws, s3, url, &keys, key, &[]).ok();
    let builder = keys.key("builder");

    // Cut once mid-upload and once mid-download: the client (object_store) retries both.
    let cut = S3::start(
        &["cache"],
        &["--cut-on", "PUT:/blob", "--cut-on", "GET:/blob"],
    );
    let filled = run(&Ws::new(), &cut, Some(&builder));
    assert_shared(&filled, 6, 0, &plain);
    assert_eq!(shared(&filled)["added"], 6, "{}", filled.stderr);
    // The cut download was retried too: every entry is whole in the shared cache.
    let read = run(&Ws::new(), &cut, None);
    assert_shared(&read, 0, 6, &plain);
    drop(cut);

    // Killed mid-upload: the build completes, its local cache whole, and says what failed.
    let killed = S3::start(&["cache"], &["--die-on", "PUT:/blob"]);
    let ws = Ws::new();
    let b = run(&ws, &killed, Some(&builder));
    assert_shared(&b, 6, 0, &plain);
    let why = shared(&b)["add_failed"].as_str().unwrap_or_default();
    assert!(why.contains("v1/entries/"), "{}", b.stderr);
    assert!(
        b.stderr.contains("nothing half-added is taken"),
        "{}",
        b.stderr
    );
    let local = ws.build(&[]).ok();
    assert_eq!(
        local.nvcc_runs(),
        0,
        "the local cache is whole: {}",
        local.stderr
    );
    drop(killed);

    // Filled, then killed mid-download of the first blob: the build compiles what it could
    // not take, and says the store failed.
    let dying = S3::start(&["cache"], &["--die-on", "GET:/blob"]);
    run(&Ws::new(), &dying, Some(&builder));
    let d = run(&Ws::new(), &dying, None);
    assert_eq!(blobs(&d), blobs(&plain));
    assert_eq!(shared(&d)["taken"], 0, "{}", d.stderr);
    assert_eq!(d.nvcc_runs(), 6, "{}", d.stderr);
    let refused = refusals(&d);
    assert!(
        !refused.is_empty() && refused.iter().all(|r| r.contains("cannot be read")),
        "{}",
        d.stderr
    );
}

/// Issue 20, item 6: a store that hangs (the first blob read held for an hour, and every
/// request after it, as the one-at-a-time server queues them). With
/// `--remote-cache-timeout-secs 2` the request fails, the build asks the store nothing more
/// (only the reads already waiting fail; no other job's entry is asked for), compiles every
/// job with the bytes a plain build makes, and says so.
#[test]
fn issue_20_a_store_that_hangs_costs_one_timeout_and_the_build_compiles_instead() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let plain = Ws::new().build(&[]).ok();
    let url = "s3://cache/hang";
    let hangs = S3::start(&["cache"], &["--stall-on", "GET:/blob"]);
    let timeout = ["--remote-cache-timeout-secs", "2"];
    let run = |key: Option<&Path>| build_on_s3(&Ws::new(), &hangs, url, &keys, key, &timeout).ok();
    // Filling it reads no blob (there is none yet).
    assert_shared(&run(Some(&keys.key("builder"))), 6, 0, &plain);
    let b = run(None);
    assert_shared(&b, 6, 0, &plain);
    let refused = refusals(&b);
    assert!(
        (1..=2).contains(&refused.len()) && refused.iter().all(|r| r.contains("cannot be read")),
        "the first blob read, and at most the other job's request (the tests build with -j 2) already waiting behind it: {refused:?}"
    );
    assert!(
        b.stderr.contains("asked nothing more in this build")
            && b.stderr.contains("--remote-cache-timeout-secs"),
        "{}",
        b.stderr
    );
}

/// Issue 20: `repro --remote-cache` audits the shared cache. A clean cache: every entry
/// equals what two fresh rebuilds make. Then a builder key signs, under alpha sm_80's
/// identity, a well-formed entry of other bytes (the same kernel built with another block
/// size): a build would take it, every check passes, and only a rebuild can tell; repro
/// names it and fails.
#[test]
fn issue_20_repro_finds_a_validly_signed_shared_entry_that_the_sources_do_not_build() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let remote = tmp.path().join("shared");
    let a = Ws::new();
    let first = build(&a, &remote, &keys, Some(&keys.key("builder"))).ok();
    let repro = || {
        Out::of(
            xtask()
                .args(["repro", "--spec"])
                .arg(a.spec_path())
                .args(["--remote-cache", &url(&remote), "--remote-cache-trust"])
                .arg(keys.root()),
        )
    };
    let clean = repro().ok();
    assert!(
        clean
            .stdout
            .contains("6 entries equal to the rebuilds, 0 differ"),
        "{}",
        clean.stdout
    );

    let other = Ws::new();
    other.edit_spec(|s| s.replace("geometry = { block = 128 }", "geometry = { block = 64 }"));
    other.build(&[]).ok();
    let blob = std::fs::read(other.path("out/alpha/sm_80.cubin")).unwrap();
    let mut manifest: cuda_aot::Manifest = serde_json::from_slice(
        &std::fs::read(other.path("out/alpha/sm_80.cubin.manifest.json")).unwrap(),
    )
    .unwrap();
    let ours: cuda_aot::Manifest = serde_json::from_slice(
        &std::fs::read(a.path("out/alpha/sm_80.cubin.manifest.json")).unwrap(),
    )
    .unwrap();
    assert_ne!(manifest.module_digest, ours.module_digest, "other bytes");
    manifest.identity = ours.identity.clone();
    let file = cuda_aot::json::to_vec(&manifest);
    let forged = cuda_aot::metadata::CacheEntry::over(&manifest, &file, &blob);
    let signed = cuda_aot::metadata::sign_doc(&forged, &[&common::read_key(&keys.key("builder"))]);
    let dir = entry(&remote, &identities(&first)["alpha sm_80"]);
    std::fs::write(dir.join("blob"), &blob).unwrap();
    std::fs::write(dir.join("manifest.json"), &file).unwrap();
    std::fs::write(dir.join("entry.json"), signed.to_bytes()).unwrap();

    // A build would take it (it passes every check)...
    let taken = build(&Ws::new(), &remote, &keys, None).ok();
    assert_eq!(taken.nvcc_runs(), 0, "{}", taken.stderr);
    // ...and repro does not.
    let caught = repro().failed();
    assert!(
        caught
            .stdout
            .contains("shared cache: alpha sm_80: entry blob")
            && caught.stdout.contains("NOT what these sources build")
            && caught
                .stdout
                .contains("5 entries equal to the rebuilds, 1 differ"),
        "{}",
        caught.stdout
    );
    assert!(
        caught
            .stderr
            .contains("Fix: a builder key the trust root lists signed them"),
        "{}",
        caught.stderr
    );
}

/// Issue 20, item 6: a build taking from the shared cache is killed part-way through a
/// write (a file-size limit of 4 KiB: the first larger write, the toolkit's header set it
/// imports from the shared cache, gets SIGXFSZ, as a writer stops at a full disk). What it
/// left is only temporary files, never taken: the next build of the same checkout runs no
/// nvcc and has exactly the shared cache's bytes.
#[test]
fn issue_20_a_build_killed_while_storing_shared_entries_leaves_nothing_half_written() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let remote = tmp.path().join("shared");
    let first = build(&Ws::new(), &remote, &keys, Some(&keys.key("builder"))).ok();
    let b = Ws::new();
    let killed = build_at(&b, &url(&remote), &keys, None, &[], |c| {
        // `ulimit -f` is in 1024-byte blocks; the shell then becomes the tool.
        let program = c.get_program().to_owned();
        let args: Vec<_> = c.get_args().map(|a| a.to_owned()).collect();
        let mut sh = std::process::Command::new("bash");
        sh.arg("-c")
            .arg("ulimit -f 4; exec \"$0\" \"$@\"")
            .arg(program)
            .args(args);
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        *c = sh;
    });
    assert!(!killed.ok, "the limit stopped the build: {}", killed.stderr);
    let left: Vec<PathBuf> = snapshot(&b.path("cache")).into_keys().collect();
    assert!(!left.is_empty(), "killed part-way through a write");
    assert!(
        left.iter().all(|p| p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(".tmp."))),
        "only temporary files: {left:?}"
    );
    let again = build(&b, &remote, &keys, None).ok();
    assert_eq!(again.nvcc_runs(), 0, "{}", again.stderr);
    assert_eq!(blobs(&again), blobs(&first));
}
