//! A release's build statement checked by verifiers we did not write (issue 21 item 2):
//! docs/trust.md's commands, run as printed, install securesystemslib (pinned by sha256 in
//! `docs/attestation/requirements.txt`) into a throwaway venv and verify a fresh release
//! with the builder key `keygen --export-public` exported; one byte of a subject, of the
//! payload or another key makes it fail. OpenSSL checks the release's signature with the
//! PEM export. The same statement fetched from OCI registries, through the referrers tag
//! schema and through the referrers API (issue 46), verifies the same way. Needs the
//! network (PyPI) and `python3` with `venv`, as the toolkit does.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use common::{Out, Ws, repo, xtask};

/// The `sh` block under `<!-- run: xtask/tests/attestation.rs -->` in docs/trust.md.
fn doc_block() -> String {
    let doc = std::fs::read_to_string(repo().join("docs/trust.md")).unwrap();
    let (_, after) = doc
        .split_once("<!-- run: xtask/tests/attestation.rs -->\n```sh\n")
        .expect("docs/trust.md has the block this test runs");
    after.split_once("\n```").unwrap().0.to_string()
}

/// The doc block's lines, with `cargo xtask` the binary under test, the venv in `venv` and
/// `docs/` the repository's.
fn doc_commands(venv: &Path) -> Vec<String> {
    let block = doc_block();
    let lines: Vec<String> = block
        .lines()
        .map(|l| {
            l.replace("cargo xtask", env!("CARGO_BIN_EXE_xtask"))
                .replace("/tmp/attestation-venv", &venv.display().to_string())
                .replace(
                    " docs/attestation/",
                    &format!(" {}/docs/attestation/", repo().display()),
                )
        })
        .collect();
    assert_eq!(lines.len(), 4, "the block changed shape:\n{block}");
    lines
}

fn sh(dir: &Path, line: &str) -> Out {
    Out::of(
        Command::new("bash")
            .args(["-euo", "pipefail", "-c", line])
            .current_dir(dir),
    )
}

/// The verify line with one argument swapped.
fn with(line: &str, from: &str, to: &str) -> String {
    assert!(line.contains(from), "{line} has no {from}");
    line.replace(from, to)
}

/// Flips one byte of `path` in the middle, runs `f`, puts the byte back.
fn with_flipped_byte<T>(path: &Path, f: impl FnOnce() -> T) -> T {
    let bytes = std::fs::read(path).unwrap();
    let mut bad = bytes.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x01;
    std::fs::write(path, &bad).unwrap();
    let r = f();
    std::fs::write(path, &bytes).unwrap();
    r
}

fn first_file_ending(dir: &Path, suffix: &str) -> PathBuf {
    let mut found: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap().into_path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    found.sort();
    found.into_iter().next().unwrap_or_else(|| {
        panic!("no *{suffix} under {}", dir.display());
    })
}

#[test]
fn a_release_statement_verifies_with_securesystemslib_and_fails_after_one_byte_changes() {
    let ws = Ws::new();
    ws.release();
    let project = ws.path("spec");
    let out = project.join(".cuda-aot/build");
    let registry = project.join(".cuda-aot/registry");
    let venv = ws.path("venv");

    // The documented commands, as printed.
    let [export, make_venv, install, verify]: [String; 4] = doc_commands(&venv).try_into().unwrap();
    for line in [&export, &make_venv, &install] {
        sh(&project, line).ok();
    }
    let ok = sh(&project, &verify).ok();
    let manifests = walkdir::WalkDir::new(&out)
        .into_iter()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".manifest.json")
        })
        .count();
    assert!(manifests >= 6, "the fixture builds 3 modules for 2 targets");
    assert!(
        ok.stdout
            .starts_with(&format!("ok: {} subjects match", 2 * manifests)),
        "{}",
        ok.stdout
    );

    // One byte of a blob subject in the build output.
    let cubin = first_file_ending(&out, ".cubin");
    let name = cubin.strip_prefix(&out).unwrap().display().to_string();
    let bad = with_flipped_byte(&cubin, || sh(&project, &verify)).failed();
    assert!(
        bad.stderr.contains(&format!("'{name}': sha256")),
        "names {name}: {}",
        bad.stderr
    );
    // One byte of a manifest subject in the registry.
    let envelope = first_file_ending(&registry.join("statements"), ".json");
    let in_registry = with(
        &with(
            &verify,
            ".cuda-aot/build/build.statement.json",
            &envelope.display().to_string(),
        ),
        "--subjects .cuda-aot/build",
        "--registry .cuda-aot/registry",
    );
    sh(&project, &in_registry).ok();
    let manifest = first_file_ending(&registry.join("manifests"), ".json");
    let bad = with_flipped_byte(&manifest, || sh(&project, &in_registry)).failed();
    assert!(
        bad.stderr.contains("manifest.json': sha256"),
        "{}",
        bad.stderr
    );
    sh(&project, &in_registry).ok();

    // The statement as OCI tools find it (issue 46).
    through_oci_registries(
        &ws,
        &project,
        &out,
        &with(&in_registry, &envelope.display().to_string(), "STATEMENT"),
    );

    // One byte of the signed payload (the statement says another digest), or a key that
    // did not sign: the signature check fails.
    let statement = out.join("build.statement.json");
    let original = std::fs::read(&statement).unwrap();
    let mut env: serde_json::Value = serde_json::from_slice(&original).unwrap();
    let mut payload = B64.decode(env["payload"].as_str().unwrap()).unwrap();
    let at = payload.len() / 2;
    payload[at] ^= 0x01;
    env["payload"] = B64.encode(&payload).into();
    std::fs::write(&statement, serde_json::to_vec(&env).unwrap()).unwrap();
    let bad = sh(&project, &verify).failed();
    assert!(bad.stderr.contains("signatures:"), "{}", bad.stderr);
    std::fs::write(&statement, &original).unwrap();

    let other = ws.path("other.key");
    common::keygen("builder", &other);
    let other_pub = ws.path("other.pub.json");
    let o = xtask()
        .args(["keygen", "--export-public"])
        .arg(&other)
        .args(["--format", "sslib"])
        .output()
        .unwrap();
    assert!(o.status.success());
    std::fs::write(&other_pub, &o.stdout).unwrap();
    let bad = sh(
        &project,
        &with(
            &verify,
            "builder.pub.json",
            &other_pub.display().to_string(),
        ),
    )
    .failed();
    assert!(bad.stderr.contains("signatures:"), "{}", bad.stderr);
    // Both keys, threshold 2: one signature is not two.
    let both = with(
        &verify,
        "--key builder.pub.json",
        &format!(
            "--key builder.pub.json --key {} --threshold 2",
            other_pub.display()
        ),
    );
    let bad = sh(&project, &both).failed();
    assert!(bad.stderr.contains("signatures:"), "{}", bad.stderr);

    // OpenSSL checks the release's signature with the PEM export.
    let pem = pem(&project
        .join(".cuda-aot/dev-keys/builder.key")
        .display()
        .to_string());
    openssl_checks(ws.dir.path(), &pem, &statement);
}

/// The release in `out` published to the pinned OCI registry, its statement fetched through
/// the referrers tag schema, and to a registry with the referrers API (`servers
/// oci-referrers`), fetched through the API; each copy checked by `verify` (the doc's
/// verify line with `STATEMENT` where the statement's path goes).
fn through_oci_registries(ws: &Ws, project: &Path, out: &Path, verify: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let keys = project.join(".cuda-aot/dev-keys");
    let publish_to = |addr: std::net::SocketAddr| {
        Out::of(
            xtask()
                .args(["publish", "--registry"])
                .arg(format!("oci://{addr}/cuda-aot/att:v1"))
                .arg("--trust")
                .arg(keys.join("root.json"))
                .arg("--publisher-key")
                .arg(keys.join("publisher.key"))
                .arg(out),
        )
        .ok();
        format!("http://{addr}/v2/cuda-aot/att")
    };
    let oci = common::server::oci_server(tmp.path());
    let storage = tmp.path().join("referrers-api");
    let api = common::server::Server::start(
        &[
            "servers",
            "oci-referrers",
            "--storage",
            storage.to_str().unwrap(),
        ],
        &[],
    );
    for (how, found) in [
        (
            "tag-schema",
            common::oci::through_tag_schema(&publish_to(oci.addr), "v1"),
        ),
        ("api", common::oci::through_api(&publish_to(api.addr), "v1")),
    ] {
        let fetched = ws.path(&format!("referrer-{how}.statement.json"));
        std::fs::write(&fetched, &found.bytes).unwrap();
        let through_oci = with(verify, "STATEMENT", &fetched.display().to_string());
        let ok = sh(project, &through_oci).ok();
        assert!(ok.stdout.starts_with("ok: "), "{how}: {}", ok.stdout);
    }
}

/// OpenSSL verifies `envelope`'s (first) signature over DSSE's PAE with `pem`, and refuses
/// it over a PAE one byte off.
fn openssl_checks(dir: &Path, pem: &str, envelope: &Path) {
    let env: cuda_aot::envelope::Envelope =
        serde_json::from_slice(&std::fs::read(envelope).unwrap()).unwrap();
    let payload = env.payload_bytes("statement").unwrap();
    let pae = cuda_aot::envelope::pae(&env.payload_type, &payload);
    std::fs::write(dir.join("builder.pem"), pem).unwrap();
    std::fs::write(dir.join("pae.bin"), &pae).unwrap();
    std::fs::write(
        dir.join("sig.bin"),
        B64.decode(&env.signatures[0].sig).unwrap(),
    )
    .unwrap();
    let mut off = pae.clone();
    off[pae.len() - 3] ^= 0x01;
    std::fs::write(dir.join("off.bin"), &off).unwrap();
    let openssl = |pae_file: &str| {
        Command::new("openssl")
            .args(["pkeyutl", "-verify", "-pubin", "-inkey", "builder.pem"])
            .args(["-rawin", "-in", pae_file, "-sigfile", "sig.bin"])
            .current_dir(dir)
            .output()
            .expect("openssl runs")
    };
    let good = openssl("pae.bin");
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
    assert!(!openssl("off.bin").status.success());
}

/// `keygen --export-public KEY --format pem`.
fn pem(key: &str) -> String {
    let o = xtask()
        .args(["keygen", "--export-public", key, "--format", "pem"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// The key file and the trust root's line export the same key; bad input is named.
#[test]
fn a_key_file_and_its_public_line_export_the_same_pem_and_bad_keys_are_named() {
    let ws = Ws::new();
    let key = ws.path("builder.key");
    let public = common::keygen("builder", &key);
    assert_eq!(pem(&key.display().to_string()), pem(&public));

    let o = Out::of(xtask().args(["keygen", "--export-public", "no-such.key"])).failed();
    assert!(o.fix().contains("ed25519:<64 hex>"), "{}", o.stderr);
    let o = Out::of(xtask().args(["keygen", "--export-public", "ed25519:00"])).failed();
    assert!(o.stderr.contains("ed25519:<64 hex>"), "{}", o.stderr);
}
