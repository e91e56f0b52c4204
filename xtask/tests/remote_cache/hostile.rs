//! A hostile shared store (issue 43, item 1): records that name a FIFO, a 1 GiB file, a
//! path outside the checkout, records altered without a builder key, and a folder link
//! planted in a `file://` store. Every build finishes, names each refusal, writes nothing
//! through the link, and leaves nothing unsigned from the store in the local cache.

use std::path::{Path, PathBuf};

use crate::common::{Keys, Run, Ws};
use crate::{build, build_with, refusals};

/// The dependency records files of the store (`v1/deps/<key>.json`).
fn deps(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("v1/deps"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.to_string_lossy().ends_with(".sig.json"))
        .collect();
    v.sort();
    v
}

/// Adds `name` (with a made-up digest) to every record of the records file `path`;
/// signs the result with `key` when given (a builder's forgery), else leaves the old
/// signature (a store writer's).
fn plant(path: &Path, name: &str, key: Option<&Path>) {
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    for r in doc["records"].as_array_mut().unwrap() {
        r["files"].as_array_mut().unwrap().push(serde_json::json!({
            "name": name,
            "digest": format!("blake3:{}", "0".repeat(64)),
        }));
    }
    let bytes = serde_json::to_vec_pretty(&doc).unwrap();
    std::fs::write(path, &bytes).unwrap();
    if let Some(key) = key {
        let hex = path.file_stem().unwrap().to_string_lossy().to_string();
        let job: cuda_aot::Digest = format!("blake3:{hex}").parse().unwrap();
        let secret = cuda_aot_builder::devkeys::read_key(key).unwrap();
        let env = cuda_aot::metadata::sign_doc(
            &cuda_aot::metadata::CacheRecords::over(job, &bytes),
            &[&secret],
        );
        std::fs::write(path.with_extension("sig.json"), env.to_bytes()).unwrap();
    }
}

/// Every name the local cache's records and sets mention.
fn local_names(ws: &Ws) -> String {
    walkdir::WalkDir::new(ws.path("cache"))
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "json"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect()
}

fn assert_refused(run: &Run, what: &str) {
    let r = refusals(run);
    assert!(
        r.iter().any(|x| x.contains(what)),
        "{what}: {r:?}\n{}",
        run.stderr
    );
}

#[test]
fn issue_43_a_hostile_shared_store_cannot_steer_hang_or_outlive_a_build() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = Keys::new(&tmp.path().join("keys"), "dev");
    let builder = keys.key("builder");

    // A store writer without a builder key: the records name a FIFO and a 1 GiB file
    // beside the sources, under the old signature.
    let dir = tmp.path().join("unsigned");
    build(&Ws::new(), &dir, &keys, Some(&builder)).ok();
    let big = tmp.path().join("big.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    for d in deps(&dir) {
        plant(&d, &format!("{}", big.display()), None);
    }
    let ws = Ws::new();
    let run = build(&ws, &dir, &keys, None).ok();
    assert_refused(&run, "the records file is not the signed one");
    assert_eq!(
        run.nvcc_runs(),
        6,
        "nothing taken on the strength of altered records"
    );
    assert!(
        !local_names(&ws).contains("big.bin"),
        "nothing unsigned in the local cache"
    );

    // Records with no signature at all (a store filled by hand).
    for d in deps(&dir) {
        std::fs::remove_file(d.with_extension("sig.json")).unwrap();
    }
    let run = build(&Ws::new(), &dir, &keys, None).ok();
    assert_refused(&run, "unsigned");

    // A builder's own forgery (signed): a path outside the checkout is refused unread; a
    // FIFO and a 1 GiB file inside the sources folder are read as inputs only (no
    // blocking, no 1 GiB in memory), never match, and the jobs compile.
    let dir = tmp.path().join("signed");
    build(&Ws::new(), &dir, &keys, Some(&builder)).ok();
    for d in deps(&dir) {
        plant(&d, "/etc/hostname", Some(&builder));
    }
    let ws = Ws::new();
    let run = build(&ws, &dir, &keys, None).ok();
    assert_refused(&run, "\"/etc/hostname\", outside the sources");
    assert!(!local_names(&ws).contains("/etc/hostname"));

    let dir = tmp.path().join("inputs");
    build(&Ws::new(), &dir, &keys, Some(&builder)).ok();
    let ws = Ws::new();
    let fifo = ws.path("src/pipe.cuh");
    cuda_aot_testkit::mkfifo(&fifo);
    std::os::unix::fs::symlink(&big, ws.path("src/big.cuh")).unwrap();
    std::fs::File::create(ws.path("src/huge.cuh"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    for d in deps(&dir) {
        plant(&d, "src:pipe.cuh", Some(&builder));
        plant(&d, "src:big.cuh", Some(&builder));
        plant(&d, "src:huge.cuh", Some(&builder));
    }
    let run = build_with(&ws, &dir, &keys, None, &["--explain"]).ok();
    assert_eq!(run.nvcc_runs(), 6, "{}", run.stdout);

    // A folder link planted in a file:// store: a read-write build writes nothing
    // through it.
    let dir = tmp.path().join("linked");
    std::fs::create_dir_all(dir.join("v1")).unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join("v1/entries")).unwrap();
    let run = build(&Ws::new(), &dir, &keys, Some(&builder)).ok();
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing written through the link: {}",
        run.stderr
    );
}
