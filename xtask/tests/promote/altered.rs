//! The altered research kernel (issue 17 item 8), a committed fixture: `ntt_fused` with one
//! line changed, which builds and differs from `ntt_fused`.

use std::path::Path;

use cuda_aot_kernels::parity::module::ParityModule;

use crate::common;
use crate::{ok, research_spec};

/// The line of `kernels/research/ntt_fused.cu` that the altered kernel breaks, and what it
/// becomes there (`kernels/research/altered/`: the GPU review shows parity stopping at
/// its first differing output and `promote` refusing its report).
const UNALTERED_LINE: &str = "const unsigned long long kg = ((unsigned long long)k << s0) + l;";
const ALTERED_LINE: &str = "const unsigned long long kg = ((unsigned long long)k << s0); // ALTERED: forgets the low bits l";

/// `altered` is a header of `comment` lines ending with a blank line, then `original` with
/// some lines changed, none added or removed: the changed lines, as (line number in
/// `original`, its text there, its text in `altered`).
fn changed_lines(original: &str, altered: &str, comment: &str) -> Vec<(usize, String, String)> {
    let (o, a): (Vec<&str>, Vec<&str>) = (original.lines().collect(), altered.lines().collect());
    let blank = a.iter().position(|l| l.is_empty());
    let header = &a[..blank.unwrap_or(a.len())];
    assert!(
        blank.is_some() && !header.is_empty() && header.iter().all(|l| l.starts_with(comment)),
        "the altered copy should open with `{comment}` comment lines and a blank line: {header:#?}"
    );
    let body = &a[header.len() + 1..];
    assert_eq!(
        body.len(),
        o.len(),
        "the altered copy has {} lines below its header, the original {}: copy the original \
         again and alter it",
        body.len(),
        o.len()
    );
    o.iter()
        .zip(body)
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| (i + 1, x.to_string(), y.to_string()))
        .collect()
}

/// Issue 17 item 8: the altered kernel is a committed fixture, not made by `sed` on the GPU
/// review's build host; this keeps it from drifting from the research kernel. Its `.cu`
/// is `ntt_fused.cu` with the one line changed, its spec `research.toml` with the include
/// folders re-rooted to its own folder (both under a header comment), and the parity
/// runner reads the same module from it: same flags, geometry, parity spec and include
/// folders, the altered source.
#[test]
fn issue_17_the_altered_kernel_is_ntt_fused_with_one_line_changed() {
    let dir = common::repo().join("kernels/research");
    let read = |rel: &str| std::fs::read_to_string(dir.join(rel)).unwrap();
    let cu = read("ntt_fused.cu");
    assert_eq!(
        cu.matches(UNALTERED_LINE).count(),
        1,
        "ntt_fused.cu should hold `{UNALTERED_LINE}` once: the altered kernel breaks that line"
    );
    let (i, line) = (cu.lines().enumerate())
        .find(|(_, l)| l.contains(UNALTERED_LINE))
        .unwrap();
    let n = i + 1;
    assert_eq!(
        changed_lines(&cu, &read("altered/ntt_fused.cu"), "//"),
        [(
            n,
            line.to_string(),
            line.replace(UNALTERED_LINE, ALTERED_LINE)
        )],
        "altered/ntt_fused.cu should be ../ntt_fused.cu with only its line {n} altered"
    );
    let spec = changed_lines(&read("research.toml"), &read("altered/research.toml"), "#");
    assert!(
        !spec.is_empty(),
        "altered/research.toml should re-root include_dirs to its folder; it equals ../research.toml"
    );
    assert!(
        spec.iter().all(|(_, o, a)| {
            o.starts_with("include_dirs = ") && a.starts_with("include_dirs = ")
        }),
        "altered/research.toml should be ../research.toml with only its include_dirs \
         lines changed: {spec:#?}"
    );

    // The module the parity runner reads: the same but for the source and its folder.
    let canon = |p: &Path| {
        p.canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let original = ParityModule::load(&dir.join("research.toml"), "ntt_fused").unwrap();
    let altered = ParityModule::load(&dir.join("altered/research.toml"), "ntt_fused").unwrap();
    assert_eq!(
        canon(&altered.source),
        canon(&dir.join("altered/ntt_fused.cu"))
    );
    assert_eq!(canon(&altered.include_dirs[0]), canon(&dir.join("altered")));
    let includes = |m: &ParityModule| {
        m.include_dirs[1..]
            .iter()
            .map(|d| canon(d))
            .collect::<Vec<_>>()
    };
    assert_eq!(includes(&altered), includes(&original));
    assert_eq!(
        (
            &altered.source_name,
            &altered.protocol,
            altered.schedule_version,
            &altered.geometry,
            &altered.flags,
            altered.spec_digest()
        ),
        (
            &original.source_name,
            &original.protocol,
            original.schedule_version,
            &original.geometry,
            &original.flags,
            original.spec_digest()
        )
    );
}

/// Issue 17 item 8: the altered kernel builds with the real nvcc, as
/// `cargo xtask gpu-bundle --review` builds it (production channel), and its cubin is not
/// `ntt_fused`'s (the altered line reaches the code).
#[test]
fn issue_17_the_altered_kernel_builds_and_differs_from_ntt_fused() {
    common::toolkit_root();
    let dir = tempfile::tempdir().unwrap();
    let build = |spec: &Path, name: &str| -> String {
        let report = dir.path().join(format!("{name}.json"));
        ok(common::xtask()
            .args(["build", "--module", "ntt_fused", "--target", "sm_90"])
            .args(["--channel", "production", "--spec"])
            .arg(spec)
            .arg("--out")
            .arg(dir.path().join(name))
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .arg("--report-json")
            .arg(&report)
            .output()
            .unwrap());
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let m = r["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["module"] == "ntt_fused" && m["target"] == "sm_90")
            .unwrap_or_else(|| panic!("no ntt_fused sm_90 in {r}"));
        m["module_digest"].as_str().unwrap().to_string()
    };
    let altered = build(
        &common::repo().join("kernels/research/altered/research.toml"),
        "altered",
    );
    assert!(
        dir.path()
            .join("altered/ntt_fused/sm_90.cubin.manifest.json")
            .is_file()
    );
    assert_ne!(altered, build(&research_spec(), "original"));
}
