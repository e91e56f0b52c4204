//! `verify --production` on a release that was never promoted names each missing promotion.

use cuda_aot::Digest;

use crate::common;
use crate::{ok, refused, research_spec};

#[test]
fn issue_7_verify_production_on_a_fresh_dev_release_names_the_missing_promotions() {
    common::toolkit_root();
    let dir = tempfile::tempdir().unwrap();
    let p = |r: &str| dir.path().join(r);
    common::Keys::new(dir.path(), "dev");
    ok(common::xtask()
        .args([
            "build",
            "--module",
            "ntt_fused",
            "--target",
            "sm_90",
            "--target",
            "sm_90a",
        ])
        .arg("--spec")
        .arg(research_spec())
        .arg("--out")
        .arg(p("build"))
        .arg("--cache-dir")
        .arg(p("cache"))
        .output()
        .unwrap());
    ok(common::xtask()
        .arg("sign")
        .arg(p("build"))
        .arg("--builder-key")
        .arg(p("builder.key"))
        .output()
        .unwrap());
    ok(common::xtask()
        .args(["publish", "--registry"])
        .arg(p("registry"))
        .arg("--trust")
        .arg(p("root.json"))
        .arg("--publisher-key")
        .arg(p("publisher.key"))
        .arg(p("build"))
        .output()
        .unwrap());
    let verify = |production: bool| {
        let mut c = common::xtask();
        c.args(["verify", "--registry"])
            .arg(p("registry"))
            .arg("--trust")
            .arg(p("root.json"))
            .arg("--state")
            .arg(p("state.json"));
        if production {
            c.arg("--production");
        }
        c.output().unwrap()
    };
    ok(verify(false));
    let out = refused(verify(true));
    assert!(
        out.contains("channel \"dev\" where \"production\" is required"),
        "{out}"
    );
    assert!(
        out.contains("2 manifest(s) lack the promotion a production verifier requires"),
        "{out}"
    );
    for sm in ["sm_90", "sm_90a"] {
        let d = Digest::of(
            &std::fs::read(p(&format!("build/ntt_fused/{sm}.cubin.manifest.json"))).unwrap(),
        );
        assert!(out.contains(&format!("manifest {d}")), "{sm} {d}: {out}");
    }
    assert!(out.contains("no promotion record for this module"), "{out}");
    assert!(
        out.contains("Fix: promote each module") && out.contains("cargo xtask promote ntt_fused"),
        "{out}"
    );
}
