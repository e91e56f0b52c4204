//! `cargo xtask doctor` (issue 22, item 3): for every module of a real signed registry
//! (a dev release of a small spec, built by the real nvcc), which blob would load on a
//! described device and driver, or why none would, with the runtime's reasons: the exact
//! cubin; no exact target (listing what exists); PTX only in the compatibility mode; a
//! family cubin on a device of its family; a driver below the floor; PTX of an ISA newer
//! than the driver; a tampered blob; a policy whose channel the registry is not signed
//! for; a device named by a variant; a production registry serving a module without its
//! promotion; a registry refused as a whole for an expired, frozen (past the freeze bound)
//! or rolled-back timestamp.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::{Keys, Out, Ws, xtask};
use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::metadata::{Promotion, sign_doc};
use cuda_aot::source::layout;
use cuda_aot::{Digest, SecretKey};

struct Fixture {
    ws: Ws,
}

impl Fixture {
    /// alpha: sm_80, sm_90; beta: sm_80, sm_90, sm_100f and compute_80 PTX; gamma: sm_90.
    fn new() -> Fixture {
        let ws = Ws::new();
        ws.edit_spec(|s| {
            s.replace(
                "name = \"beta\"\nsource = \"beta.cu\"",
                "name = \"beta\"\nsource = \"beta.cu\"\ntargets = [\"sm_80\", \"sm_90\", \"sm_100f\"]\nptx = [\"compute_80\"]",
            )
            .replace(
                "name = \"gamma\"\nsource = \"gamma.cu\"",
                "name = \"gamma\"\nsource = \"gamma.cu\"\ntargets = [\"sm_90\"]",
            )
        });
        ws.release();
        Fixture { ws }
    }

    fn registry(&self) -> PathBuf {
        self.ws.path("spec/.cuda-aot/registry")
    }

    fn trust(&self) -> PathBuf {
        self.ws.path("spec/.cuda-aot/dev-keys/root.json")
    }

    fn doctor(&self, args: &[&str]) -> Out {
        doctor(&self.registry(), &self.trust(), args)
    }

    /// `publish --refresh-timestamp` with the dev publisher key: a new timestamp for the
    /// current index, valid for `days`; returns its expiry as publish prints it.
    fn refresh_timestamp(&self, days: u32) -> String {
        let out = Out::of(
            xtask()
                .args(["publish", "--refresh-timestamp", "--registry"])
                .arg(self.registry())
                .arg("--trust")
                .arg(self.trust())
                .arg("--publisher-key")
                .arg(self.ws.path("spec/.cuda-aot/dev-keys/publisher.key"))
                .args(["--timestamp-days", &days.to_string()]),
        )
        .ok();
        out.stderr
            .lines()
            .find_map(|l| {
                l.split_once(", expires ")
                    .map(|(_, t)| t.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no expiry in\n{}", out.stderr))
    }
}

/// `xtask doctor --registry REGISTRY --trust TRUST ARGS`.
fn doctor(registry: &Path, trust: &Path, args: &[&str]) -> Out {
    Out::of(
        xtask()
            .args(["doctor", "--registry"])
            .arg(registry)
            .arg("--trust")
            .arg(trust)
            .args(args),
    )
}

/// The `doctor` message of a `--json` run.
fn doctor_json(out: &Out) -> serde_json::Value {
    out.messages()
        .into_iter()
        .find(|v| v["reason"] == "doctor")
        .unwrap_or_else(|| panic!("no doctor message in\n{}", out.stdout))
}

/// The JSON entry of `module` on the first device of a `doctor` message.
fn json_module<'a>(doc: &'a serde_json::Value, module: &str) -> &'a serde_json::Value {
    doc["devices"][0]["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["module"] == module)
        .unwrap_or_else(|| panic!("no {module} in {doc}"))
}

/// The `error` message of a failed `--json` run.
fn json_error(out: &Out) -> serde_json::Value {
    out.messages()
        .into_iter()
        .find(|v| v["reason"] == "error")
        .unwrap_or_else(|| panic!("no error message in\n{}\n{}", out.stdout, out.stderr))
}

/// The row of `module` in doctor's table, and the line after it (its Fix, when refused).
fn row(out: &Out, module: &str) -> String {
    let lines: Vec<&str> = out.stdout.lines().collect();
    let i = lines
        .iter()
        .position(|l| l.split_whitespace().next() == Some(module))
        .unwrap_or_else(|| panic!("no row for {module}:\n{}", out.stdout));
    format!("{}\n{}", lines[i], lines.get(i + 1).unwrap_or(&""))
}

#[test]
fn issue_22_doctor_says_which_blob_loads_or_why_none_would() {
    let f = Fixture::new();

    // The device the registry was built for: every module loads its exact cubin.
    let out = f.doctor(&["--device", "sm_90", "--driver", "13.0"]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    for m in ["alpha", "beta", "gamma"] {
        assert!(row(&out, m).contains("sm_90 cubin"), "{}", out.stdout);
    }

    // An sm_89 device: no exact cubin; beta's PTX only in the compatibility mode.
    let out = f.doctor(&["--device", "sm_89", "--driver", "13.0"]);
    assert_eq!(out.code, Some(1));
    let alpha = row(&out, "alpha");
    assert!(
        alpha.contains("nothing")
            && alpha.contains("no cubin for this device's sm_89")
            && alpha.contains("the registry has sm_80 sm_90")
            && alpha.contains("Fix: add sm_89 to the module's targets"),
        "{alpha}"
    );
    assert!(
        row(&out, "beta").contains("PTX exists: only in compatibility mode"),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("3 module(s)") && out.stderr.contains("Fix:"),
        "{}",
        out.stderr
    );
    let out = f.doctor(&["--device", "sm_89", "--driver", "13.0", "--allow-ptx"]);
    assert!(
        row(&out, "beta").contains("compute_80 ptx (compatibility mode)"),
        "{}",
        out.stdout
    );
    assert!(row(&out, "alpha").contains("nothing"));

    // A device of sm_100f's family takes the family cubin; only beta has one.
    let out = f.doctor(&["--device", "sm_103", "--driver", "13.0"]);
    assert!(
        row(&out, "beta").contains("sm_100f cubin"),
        "{}",
        out.stdout
    );
    assert!(
        row(&out, "gamma").contains("the registry has sm_90"),
        "{}",
        out.stdout
    );

    // A driver below the floor: the module's floor and the driver, named.
    let out = f.doctor(&["--device", "sm_90", "--driver", "12.4"]);
    let gamma = row(&out, "gamma");
    assert!(
        gamma.contains("needs CUDA driver 13.0 or newer; this driver is 12.4")
            && gamma.contains("Fix: install an NVIDIA driver"),
        "{gamma}"
    );

    // The production policy: a dev registry is refused as a whole, as Runtime::open does.
    let out = f.doctor(&["--device", "sm_90", "--policy", "production"]);
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("refused as a whole")
            && out.stderr.contains("\"production\" is required")
            && out.stderr.contains("Fix:"),
        "{}",
        out.stderr
    );

    // A device is named by its plain SM.
    let out = f.doctor(&["--device", "sm_90a"]);
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("a device is named by its plain SM"),
        "{}",
        out.stderr
    );

    // JSON: the same per module.
    let out = f.doctor(&["--device", "sm_89", "--driver", "13.0", "--json"]);
    let doc = doctor_json(&out);
    let alpha = json_module(&doc, "alpha");
    assert!(
        alpha["loads"].is_null() && alpha["fix"].as_str().unwrap().contains("sm_89"),
        "{doc}"
    );
    assert_eq!(
        alpha["available"],
        serde_json::json!(["sm_80 cubin", "sm_90 cubin"])
    );

    // A tampered blob: that module's reason is the digest, the others still load.
    let blob = f.ws.path("spec/.cuda-aot/registry/blobs");
    let gamma_blob = walk_files(&blob)
        .into_iter()
        .find(|p| std::fs::read(p).is_ok_and(|b| b.windows(11).any(|w| w == b"gamma_twice")))
        .expect("gamma's blob");
    let mut bytes = std::fs::read(&gamma_blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&gamma_blob, &bytes).unwrap();
    let out = f.doctor(&["--device", "sm_90", "--driver", "13.0"]);
    assert_eq!(out.code, Some(1));
    assert!(row(&out, "gamma").contains("is signed"), "{}", out.stdout);
    assert!(row(&out, "alpha").contains("sm_90 cubin"), "{}", out.stdout);

    // Without --device, the host's devices are probed: here (no driver in CI) that says
    // how to describe one instead; on a GPU host it lists the real devices.
    let out = f.doctor(&[]);
    if out.stderr.contains("no CUDA device to probe") {
        assert!(
            out.stderr
                .contains("Fix: describe the device instead: --device sm_XX"),
            "{}",
            out.stderr
        );
    } else {
        assert!(
            out.stdout.starts_with("device ") && out.stdout.contains(": sm_"),
            "{}\n{}",
            out.stdout,
            out.stderr
        );
    }
}

/// Issue 22: PTX whose ISA is newer than the driver. On an sm_89 device beta has no cubin,
/// only compute_80 PTX; with `--allow-ptx` and a 12.4 driver, the PTX built by the pinned
/// nvcc 13.0 needs a 13.0 driver to JIT: the runtime's driver floor (for PTX the toolkit's
/// major.minor) refuses it, naming the toolkit whose PTX ISA it is and the driver.
#[test]
fn issue_22_doctor_names_the_ptx_isa_a_driver_is_too_old_for() {
    let f = Fixture::new();
    let manifest: cuda_aot::Manifest = serde_json::from_slice(
        &std::fs::read(f.ws.path("spec/.cuda-aot/build/beta/compute_80.ptx.manifest.json"))
            .expect("beta's PTX manifest"),
    )
    .unwrap();
    let nvcc = &manifest.identity.toolkit.nvcc;
    let floor = manifest.identity.driver_floor.to_string();
    assert_eq!(
        floor,
        nvcc.splitn(3, '.').take(2).collect::<Vec<_>>().join(".")
    );
    assert_eq!(
        floor, "13.0",
        "the pinned toolkit: a 12.4 driver is below its floor"
    );

    let out = f.doctor(&["--device", "sm_89", "--driver", "12.4", "--allow-ptx"]);
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    let reason = format!(
        "beta compute_80 (ptx, compatibility mode): needs CUDA driver {floor} or newer to JIT its PTX (the PTX ISA of nvcc {nvcc}); this driver is 12.4"
    );
    let beta = row(&out, "beta");
    assert!(
        beta.contains("nothing")
            && beta.contains(&reason)
            && beta.contains(&format!(
                "Fix: install an NVIDIA driver that supports CUDA {floor} or newer"
            )),
        "{beta}"
    );
    // alpha has no PTX: still no binary at all, whatever the driver.
    assert!(
        row(&out, "alpha").contains("no cubin for this device's sm_89"),
        "{}",
        out.stdout
    );
    // The same device with a driver at the floor JITs the PTX: the refusal was the ISA's.
    let out = f.doctor(&["--device", "sm_89", "--driver", &floor, "--allow-ptx"]);
    assert!(
        row(&out, "beta").contains("compute_80 ptx (compatibility mode)")
            && row(&out, "beta").contains(&format!("needs driver {floor} or newer")),
        "{}",
        out.stdout
    );

    // JSON: the same reason and Fix, nothing loads, the PTX listed as available.
    let out = f.doctor(&[
        "--device",
        "sm_89",
        "--driver",
        "12.4",
        "--allow-ptx",
        "--json",
    ]);
    assert_eq!(out.code, Some(1));
    let doc = doctor_json(&out);
    assert_eq!(doc["devices"][0]["driver"], "12.4", "{doc}");
    let beta = json_module(&doc, "beta");
    assert!(beta["loads"].is_null(), "{beta}");
    assert_eq!(beta["reason"], reason.as_str(), "{beta}");
    assert!(
        beta["fix"]
            .as_str()
            .unwrap()
            .contains(&format!("supports CUDA {floor} or newer")),
        "{beta}"
    );
    assert!(
        beta["available"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("compute_80 ptx")),
        "{beta}"
    );
}

/// Issue 22: a production registry (production trust root, builder, reviewer and publisher
/// keys made by `keygen` and `trust-root`, a real nvcc build signed and published with
/// reviewer-signed promotion records) loads every promoted module under the production
/// policy. Served again by the publisher key alone without gamma's promotion record (what
/// `publish` itself refuses to do: docs/security.md, a stolen publisher key), doctor names
/// gamma as not promoted, with the Fix, while alpha and beta still show their blob.
#[test]
fn issue_22_doctor_names_a_module_without_promotion_under_production() {
    let ws = Ws::new();
    let keys = Keys::new(&ws.path("keys"), "production");
    ws.build(&["--channel", "production"]).ok();
    Out::of(
        xtask()
            .arg("sign")
            .arg(ws.path("out"))
            .arg("--builder-key")
            .arg(keys.key("builder")),
    )
    .ok();
    let reviewer = common::read_key(&keys.key("reviewer"));
    let mut publish = xtask();
    publish
        .args(["publish", "--registry"])
        .arg(ws.path("registry"))
        .arg("--trust")
        .arg(keys.root())
        .arg("--publisher-key")
        .arg(keys.key("publisher"));
    for module in ["alpha", "beta", "gamma"] {
        let record = ws.path(&format!("promotions/{module}.json"));
        std::fs::create_dir_all(record.parent().unwrap()).unwrap();
        std::fs::write(&record, promotion(&ws.path("out"), module, &reviewer)).unwrap();
        publish.arg("--promotion").arg(record);
    }
    Out::of(publish.arg(ws.path("out"))).ok();
    let production = |extra: &[&str]| {
        let mut args = vec!["--device", "sm_90", "--driver", "13.0"];
        args.extend(["--policy", "production"]);
        args.extend(extra);
        doctor(&ws.path("registry"), &keys.root(), &args)
    };

    // Every module promoted: each loads its exact cubin under the production policy.
    let out = production(&[]).ok();
    for m in ["alpha", "beta", "gamma"] {
        assert!(row(&out, m).contains("sm_90 cubin"), "{m}: {}", out.stdout);
    }

    // gamma served without its promotion record.
    serve_without_promotion(
        &ws.path("registry"),
        &common::read_key(&keys.key("publisher")),
        "gamma",
    );
    let gamma_manifest = Digest::of(
        &std::fs::read(ws.path("out/gamma/sm_90.cubin.manifest.json")).expect("gamma's manifest"),
    );
    let reason = format!(
        "gamma sm_90: manifest {gamma_manifest} is not promoted for production: no promotion record for this module"
    );
    let out = production(&[]);
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    let gamma = row(&out, "gamma");
    assert!(
        gamma.contains("nothing")
            && gamma.contains(&reason)
            && gamma.contains("Fix: promote the module (cargo xtask promote gamma"),
        "{gamma}"
    );
    for m in ["alpha", "beta"] {
        assert!(row(&out, m).contains("sm_90 cubin"), "{m}: {}", out.stdout);
    }
    assert!(out.stderr.contains("1 module(s)"), "{}", out.stderr);
    // The development policy refuses the production registry as a whole (its channel),
    // not gamma alone: the promotion is production's requirement.
    let out = doctor(
        &ws.path("registry"),
        &keys.root(),
        &["--device", "sm_90", "--driver", "13.0"],
    );
    assert!(
        out.stderr.contains("refused as a whole") && out.stderr.contains("\"dev\" is required"),
        "{}",
        out.stderr
    );

    // JSON: gamma's reason and Fix; alpha's blob.
    let out = production(&["--json"]);
    assert_eq!(out.code, Some(1));
    let doc = doctor_json(&out);
    assert_eq!(doc["policy"], "production");
    let gamma = json_module(&doc, "gamma");
    assert!(gamma["loads"].is_null(), "{gamma}");
    assert_eq!(gamma["reason"], reason.as_str(), "{gamma}");
    assert!(
        gamma["fix"]
            .as_str()
            .unwrap()
            .contains("cargo xtask promote gamma"),
        "{gamma}"
    );
    let alpha = json_module(&doc, "alpha");
    assert_eq!(alpha["loads"]["target"], "sm_90", "{alpha}");
    assert_eq!(alpha["loads"]["kind"], "cubin", "{alpha}");
}

/// Issue 22: a registry whose timestamp is expired (as of `--at`, a minute after a
/// 0-day refresh: a clock option, not a sleep), frozen (valid for 40 days where the trust
/// root's freeze bound allows 31) or rolled back (older than the version this machine's
/// verify saw) is refused as a whole, as `Runtime::open` would refuse it, naming the
/// timestamp, its expiry or versions, and the Fix; in the table and in JSON.
#[test]
fn issue_22_doctor_refuses_an_expired_frozen_or_rolled_back_registry_as_a_whole() {
    let f = Fixture::new();
    let sm_90 = ["--device", "sm_90", "--driver", "13.0"];
    f.doctor(&sm_90).ok();
    let v1 = std::fs::read(f.registry().join(layout::TIMESTAMP)).unwrap();

    // Expired: timestamp v2 expires at once; a minute later it is refused.
    let expires = f.refresh_timestamp(0);
    let later =
        humantime::format_rfc3339_seconds(SystemTime::now() + Duration::from_secs(60)).to_string();
    let at = [&sm_90[..], &["--at", &later]].concat();
    let out = f.doctor(&at);
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    let expired =
        format!("timestamp v2: expired at {expires} (now {later}, clock skew allowance 0s)");
    assert!(
        out.stderr.contains("the registry is refused as a whole")
            && out.stderr.contains(&expired)
            && out
                .fix()
                .starts_with("publish again to refresh the timestamp (cargo xtask publish)"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stdout.contains("alpha"),
        "no module table: {}",
        out.stdout
    );
    let out = f.doctor(&[&at[..], &["--json"]].concat());
    assert_eq!(out.code, Some(1));
    let err = json_error(&out);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("the registry is refused as a whole"),
        "{err}"
    );
    assert!(
        err["causes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_str() == Some(expired.as_str())),
        "{err}"
    );
    assert!(
        err["fix"]
            .as_str()
            .unwrap()
            .contains("refresh the timestamp"),
        "{err}"
    );
    assert!(
        out.messages().iter().all(|m| m["reason"] != "doctor"),
        "{}",
        out.stdout
    );
    // --at never runs in the past, where the expired timestamp would pass.
    let out = f.doctor(&[&sm_90[..], &["--at", "2020-01-01T00:00:00Z"]].concat());
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("is before now"), "{}", out.stderr);

    // Frozen: timestamp v3 is valid for 40 days; the dev root's freeze bound is 31.
    let expires = f.refresh_timestamp(40);
    let out = f.doctor(&sm_90);
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    let frozen = format!(
        "timestamp v3: expires {expires}, later than trust root v1 allows (31 days from now"
    );
    assert!(
        out.stderr.contains("the registry is refused as a whole")
            && out.stderr.contains(&frozen)
            && out.fix().contains("cargo xtask publish --timestamp-days"),
        "{}",
        out.stderr
    );
    let err = json_error(&f.doctor(&[&sm_90[..], &["--json"]].concat()));
    assert!(
        err["causes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_str().is_some_and(|c| c.starts_with(&frozen))),
        "{err}"
    );
    assert!(
        err["fix"]
            .as_str()
            .unwrap()
            .contains("within the trust root's bound"),
        "{err}"
    );

    // Rolled back: verify sees timestamp v4 (and saves it); the registry then serves v1.
    f.refresh_timestamp(7);
    Out::of(
        xtask()
            .args(["verify", "--registry"])
            .arg(f.registry())
            .arg("--trust")
            .arg(f.trust()),
    )
    .ok();
    f.doctor(&sm_90).ok();
    std::fs::write(f.registry().join(layout::TIMESTAMP), &v1).unwrap();
    let out = f.doctor(&sm_90);
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    let rollback = "timestamp: version 1 is older than version 4 already seen (rollback refused)";
    assert!(
        out.stderr.contains("the registry is refused as a whole")
            && out.stderr.contains(rollback)
            && out.fix().contains("the registry is serving old metadata"),
        "{}",
        out.stderr
    );
    let err = json_error(&f.doctor(&[&sm_90[..], &["--json"]].concat()));
    assert!(
        err["causes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_str() == Some(rollback)),
        "{err}"
    );
}

/// A promotion record of `module` covering every manifest of the signed build output
/// `out`, signed by `reviewer` (the record `cargo xtask promote` writes after parity and
/// resource review, which need a GPU host; the parity report and review digests stand for
/// those documents).
fn promotion(out: &Path, module: &str, reviewer: &SecretKey) -> Vec<u8> {
    let mut manifests: Vec<Digest> = std::fs::read_dir(out.join(module))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".manifest.json"))
        .map(|p| Digest::of(&std::fs::read(p).unwrap()))
        .collect();
    manifests.sort();
    let p = Promotion {
        schema: Promotion::SCHEMA.into(),
        module: cuda_aot::ModuleName::new(module).unwrap(),
        schedule_version: 1,
        manifests,
        parity_report: Digest::of(format!("{module} parity report").as_bytes()),
        resource_review: Digest::of(format!("{module} resource review").as_bytes()),
        note: format!("{module}: parity and resources reviewed (test)"),
    };
    sign_doc(&p, &[reviewer]).to_bytes()
}

/// What only a publisher key can do and `publish` refuses to: serve the registry's current
/// release again (next index and timestamp versions) without `module`'s promotion record.
fn serve_without_promotion(registry: &Path, publisher: &SecretKey, module: &str) {
    let payload = |rel: &str, kind: PayloadType| -> Vec<u8> {
        let bytes = std::fs::read(registry.join(rel)).unwrap();
        Envelope::parse(&bytes, 1 << 20, kind, rel)
            .unwrap()
            .payload_bytes(rel)
            .unwrap()
    };
    common::forge::reissue(registry, publisher, |index| {
        let before = index.promotions.len();
        index.promotions.retain(|r| {
            let rel = layout::promotion(&r.digest);
            let p: Promotion =
                serde_json::from_slice(&payload(&rel, PayloadType::Promotion)).unwrap();
            p.module.as_str() != module
        });
        assert_eq!(index.promotions.len(), before - 1, "one record of {module}");
    });
}

fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}
