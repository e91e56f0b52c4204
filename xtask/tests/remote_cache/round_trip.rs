//! Round trips through each kind of store (a folder, an S3 bucket, an OCI repository): a
//! second checkout takes every job and runs no nvcc; poisoned entries are refused and
//! compiled instead.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common;
use crate::common::s3::S3;
use crate::common::{Keys, Run, Ws, snapshot};
use crate::{
    assert_shared, build, build_at, build_on_s3, build_with, entry, identities, refusals, shared,
};

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
    assert_eq!(gone.digests(), first.digests());
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

/// Issue 43, item 4: a device-linked module (the six-file `foreign_sponge`) built into the
/// shared cache is taken whole by a second checkout: its dependency record lists every
/// file of the module, the identity follows, and the signed entry gives the linked cubin
/// with no nvcc and no nvlink run.
#[test]
fn issue_43_a_second_machine_takes_a_linked_module_from_the_shared_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shared");
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let args = ["--module", "foreign_sponge", "--target", "sm_90"];
    let first = crate::build_with(
        &Ws::foreign("a"),
        &dir,
        &keys,
        Some(&keys.key("builder")),
        &args,
    )
    .ok();
    assert_eq!(first.nvcc_runs(), 6 + 1, "{}", first.stderr);
    let second = crate::build_with(&Ws::foreign("b/deeper"), &dir, &keys, None, &args).ok();
    assert_shared(&second, 0, 1, &first);
    // A third checkout changed one of the six files: the module's entry does not match,
    // and the five other files come from the shared cache as signed units, so it compiles
    // that one file and links.
    let third = Ws::foreign("c");
    let mix = "c/foreign/src/sponge/mix.cu";
    third.write(
        mix,
        &(third.read(mix) + "\n__device__ unsigned mix_version() { return 2u; }\n"),
    );
    let run = crate::build_with(&third, &dir, &keys, None, &args).ok();
    assert_eq!(
        run.nvcc_runs(),
        1 + 1,
        "one file and the link: {}",
        run.stderr
    );
    assert!(
        crate::refusals(&run).is_empty(),
        "{:?}",
        crate::refusals(&run)
    );
    // The units taken are in its local cache: a rebuild there runs nothing.
    let again = crate::build_with(&third, &dir, &keys, None, &args).ok();
    assert_eq!(again.nvcc_runs(), 0);
}
