//! `cargo xtask doctor` (issue 22, item 3): for every module of a real signed registry
//! (a dev release of a small spec, built by the real nvcc), which blob would load on a
//! described device and driver, or why none would, with the runtime's reasons: the exact
//! cubin; no exact target (listing what exists); PTX only in the compatibility mode; a
//! family cubin on a device of its family; a driver below the floor; a tampered blob; a
//! policy whose channel the registry is not signed for; a device named by a variant.

mod common;

use common::{Out, Ws, xtask};

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
        Out::of(
            xtask()
                .env("CUDA_AOT_BUILD_CACHE", ws.path("cache"))
                .args(["release", "--spec"])
                .arg(ws.path("spec/release.toml")),
        )
        .ok();
        Fixture { ws }
    }

    fn doctor(&self, args: &[&str]) -> Out {
        Out::of(
            xtask()
                .args(["doctor", "--registry"])
                .arg(self.ws.path("spec/.cuda-aot/registry"))
                .arg("--trust")
                .arg(self.ws.path("spec/.cuda-aot/dev-keys/root.json"))
                .args(args),
        )
    }
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
    let doc: serde_json::Value = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["reason"] == "doctor")
        .unwrap_or_else(|| panic!("{}", out.stdout));
    let modules = doc["devices"][0]["modules"].as_array().unwrap();
    let alpha = modules.iter().find(|m| m["module"] == "alpha").unwrap();
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
            out.stdout.contains("(device 0)"),
            "{}\n{}",
            out.stdout,
            out.stderr
        );
    }
}

fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
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
