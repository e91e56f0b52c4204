//! Shared-cache settings refused before anything is built: keys the trust root does not
//! list, missing keys, URLs of unsupported kinds, and an expired trust root.

use crate::common::{Keys, Out, Ws, snapshot, xtask};
use crate::{build, url};
use cuda_aot::metadata::{Root, Time};

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
    // No trust root for the shared cache at all: the advice names build's flag for it
    // (issue 44, item 5), not `--trust`, which build does not have.
    let out = Out::of(
        xtask()
            .args(["build", "--spec"])
            .arg(ws.spec_path())
            .args(["--remote-cache", &url(&remote)]),
    )
    .failed();
    assert!(
        out.stderr.contains("no trust root")
            && out.stderr.contains("Fix: pass --remote-cache-trust FILE")
            && !out.stderr.contains("--trust FILE"),
        "{}",
        out.stderr
    );
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

/// Issue 43, item 3: the shared cache walks the root chain its store holds
/// (`v1/root/<N>.root.json`, put there by read-write builders): a reader that still starts
/// from root v1 finds v2, which rotated the builder key out, and refuses the entries that
/// key signed (compiling them instead); a root file in the store that is no rotation of the
/// one before is refused, naming it, before anything is built.
#[test]
fn issue_43_a_builder_key_the_stores_newest_root_rotated_out_signs_nothing_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let remote = tmp.path().join("shared");
    let first = build(&Ws::new(), &remote, &keys, Some(&keys.key("builder"))).ok();
    assert!(
        remote.join("v1/root/1.root.json").is_file(),
        "the writer's root is kept"
    );
    let second = build(&Ws::new(), &remote, &keys, None).ok();
    assert_eq!(
        second.nvcc_runs(),
        0,
        "v1's builder key is trusted: {}",
        second.stderr
    );

    // Root v2: every role key replaced, signed by v1's root key and its own.
    let new = |role: &str| crate::common::keygen(role, &tmp.path().join(format!("{role}-2.key")));
    let v2 = tmp.path().join("root-2.json");
    let out = xtask()
        .args(["trust-root", "--channel", "dev", "--previous"])
        .arg(keys.root())
        .arg("--out")
        .arg(&v2)
        .args(["--root", &new("root"), "--builder", &new("builder")])
        .args([
            "--reviewer",
            &new("reviewer"),
            "--publisher",
            &new("publisher"),
        ])
        .arg("--sign-with")
        .arg(keys.key("root"))
        .arg("--sign-with")
        .arg(tmp.path().join("root-2.key"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::copy(&v2, remote.join("v1/root/2.root.json")).unwrap();
    let third = build(&Ws::new(), &remote, &keys, None).ok();
    assert_eq!(third.nvcc_runs(), first.nvcc_runs(), "{}", third.stderr);
    assert!(
        crate::refusals(&third)
            .iter()
            .any(|r| r.contains("signature")),
        "{:?}",
        crate::refusals(&third)
    );

    // A file in the chain that is no rotation of v2.
    std::fs::write(remote.join("v1/root/3.root.json"), b"{}").unwrap();
    let out = Out::of(
        xtask()
            .args(["build", "--spec"])
            .arg(Ws::new().spec_path())
            .args(["--remote-cache", &url(&remote), "--remote-cache-trust"])
            .arg(keys.root()),
    )
    .failed();
    assert!(
        out.stderr.contains("its trust root chain") && out.stderr.contains("3.root.json"),
        "{}",
        out.stderr
    );
}
