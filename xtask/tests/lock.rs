//! `cargo xtask lock` (issue 36, item 1): a project pins the release it builds from in
//! `cuda-aot.lock`; a registry that later serves something else is refused with the
//! difference; `--update` moves the lock; a damaged lock names its file and line.

mod common;

use common::{Out, Ws, xtask};

/// A release of `ws`'s spec, and the lock command against it from `project`.
fn lock(ws: &Ws, project: &std::path::Path, extra: &[&str]) -> Out {
    Out::of(
        xtask()
            .current_dir(project)
            .args(["lock", "--registry"])
            .arg(ws.path("spec/.cuda-aot/registry"))
            .arg("--trust")
            .arg(ws.path("spec/.cuda-aot/dev-keys/root.json"))
            .args(extra),
    )
}

#[test]
fn issue_36_a_lock_pins_a_release_and_refuses_a_registry_that_changed() {
    let ws = Ws::new();
    ws.release();
    let project = tempfile::tempdir().unwrap();
    let out = lock(&ws, project.path(), &["--targets", "sm_80,sm_90"]).ok();
    assert!(
        out.stdout.contains("module binaries pinned"),
        "{}",
        out.stdout
    );
    let text = std::fs::read_to_string(project.path().join("cuda-aot.lock")).unwrap();
    let parsed = cuda_aot_registry::lock::Lock::parse(&text, std::path::Path::new("l")).unwrap();
    assert_eq!(
        parsed.modules.len(),
        6,
        "three modules, two targets:\n{text}"
    );
    assert!(
        parsed
            .modules
            .iter()
            .all(|m| m.kind == cuda_aot::Kind::Cubin)
    );

    // Unchanged registry: the lock stays.
    let out = lock(&ws, project.path(), &["--targets", "sm_80,sm_90"]).ok();
    assert!(
        out.stdout
            .contains("up to date (index v1, 6 module binaries pinned)"),
        "{}",
        out.stdout
    );

    // The registry released again without `gamma`: refused with the difference, the lock
    // untouched; --update moves it and says what changed.
    ws.edit_spec(|s| {
        let at = s
            .find("[[module]]\nname = \"gamma\"")
            .expect("gamma in the spec");
        s[..at].to_string()
    });
    ws.release();
    let out = lock(&ws, project.path(), &["--targets", "sm_80,sm_90"]).failed();
    assert!(
        out.stderr
            .contains("serves other kernels than cuda-aot.lock pins")
            && out.stderr.contains("- gamma sm_80 (cubin) (removed)")
            && out.stderr.contains("Fix: ")
            && out.stderr.contains("--update"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("cuda-aot.lock")).unwrap(),
        text
    );
    let out = lock(
        &ws,
        project.path(),
        &["--targets", "sm_80,sm_90", "--update"],
    )
    .ok();
    assert!(
        out.stdout.contains("- gamma sm_90 (cubin) (removed)") && out.stdout.contains("(updated)"),
        "{}",
        out.stdout
    );

    // A lock with a field this tool does not know: refused naming the file and line.
    let path = project.path().join("cuda-aot.lock");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replacen("[registry]\n", "[registry]\nmirror = 1\n", 1),
    )
    .unwrap();
    let line = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .position(|l| l.starts_with("mirror"))
        .unwrap()
        + 1;
    let out = lock(&ws, project.path(), &["--targets", "sm_80,sm_90"]).failed();
    assert!(
        out.stderr.contains(&format!("cuda-aot.lock:{line}: ")) && out.stderr.contains("mirror"),
        "{}",
        out.stderr
    );
}

/// The lock of a registry served over HTTP: fetched and verified into the per-user cache
/// (here a folder of the test), then pinned with its URL.
#[test]
fn issue_36_a_registry_served_over_http_is_locked_by_its_url() {
    let ws = Ws::new();
    ws.release();
    let reg = ws.path("spec/.cuda-aot/registry");
    let serve =
        common::server::Server::start(&["serve", "--addr", "127.0.0.1:0", "--root"], &[&reg]);
    let project = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let out = Out::of(
        xtask()
            .current_dir(project.path())
            .env("CUDA_AOT_CACHE_DIR", cache.path())
            .args(["lock", "--registry", &serve.url(), "--trust"])
            .arg(ws.path("spec/.cuda-aot/dev-keys/root.json")),
    )
    .ok();
    assert!(
        out.stdout.contains("module binaries pinned"),
        "{}",
        out.stdout
    );
    let text = std::fs::read_to_string(project.path().join("cuda-aot.lock")).unwrap();
    assert!(
        text.contains(&format!("url = \"{}\"", serve.url())),
        "{text}"
    );
    assert!(
        cache.path().join("registries").is_dir(),
        "fetched into the per-user cache"
    );
}
