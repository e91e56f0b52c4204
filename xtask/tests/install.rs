//! Issue 43 (items 1-3, 5-7): the C library installs like one. `xtask install-capi` (its dev
//! build, `--debug`) into a temporary prefix and once staged by `DESTDIR`: the versioned soname (`readelf -d`) and its links, the headers, the
//! pkg-config file and the CMake package. Then the commands of docs/capi.md, "Installing",
//! run as written against that prefix (only `$HOME/.local` and the build folders replaced):
//! `examples/c/verify.c` through `pkg-config --cflags --libs`, and `examples/cmake/` through
//! config-mode `find_package` and through `pkg_check_modules`, each run on a real signed
//! registry of the testkit and printing what it verified. CMake, Ninja and pkg-config are
//! the pinned wheels of `manifests/test-tools.toml` (`common/tools.rs`), never the host's.
//! Last, bad prefixes are refused with their `Fix:` and change nothing.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::capi::{Installed, Registry, dynamic_section, install};
use common::{Out, repo, tools};

/// Every entry below `dir`: folders, links with their targets, files with their blake3.
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .map(|e| {
            let e = e.unwrap();
            let what = if e.file_type().is_dir() {
                "folder".to_string()
            } else if e.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(e.path()).unwrap().display())
            } else {
                blake3::hash(&std::fs::read(e.path()).unwrap()).to_string()
            };
            (e.path().strip_prefix(dir).unwrap().to_path_buf(), what)
        })
        .collect()
}

/// The C ABI package's version, from `capi/Cargo.toml`.
fn capi_version() -> String {
    let text = std::fs::read_to_string(repo().join("capi/Cargo.toml")).unwrap();
    let manifest: toml::Table = toml::from_str(&text).unwrap();
    manifest["package"]["version"].as_str().unwrap().to_string()
}

/// The soname capi/build.rs gives a version: `.so.0.MINOR` before 1.0, `.so.MAJOR` after.
fn soname_of(version: &str) -> String {
    let parts: Vec<&str> = version.split('.').collect();
    let abi = if parts[0] == "0" {
        format!("0.{}", parts[1])
    } else {
        parts[0].to_string()
    };
    format!("libcuda_aot_capi.so.{abi}")
}

/// Checks the layout of an install whose files are below `root` and name `prefix`.
fn check_layout(root: &Path, prefix: &Path) {
    let version = capi_version();
    let lib = root.join("lib");
    let real = format!("libcuda_aot_capi.so.{version}");
    let soname = soname_of(&version);
    // The shared library: a regular file with the versioned soname.
    assert!(lib.join(&real).symlink_metadata().unwrap().is_file());
    let dynamic = dynamic_section(&lib.join(&real));
    assert!(
        dynamic.contains(&format!("Library soname: [{soname}]")),
        "{dynamic}"
    );
    // The soname link and the development link name the real file, in the same folder.
    for link in [soname.as_str(), "libcuda_aot_capi.so"] {
        assert_eq!(
            std::fs::read_link(lib.join(link)).unwrap(),
            Path::new(&real),
            "{link}"
        );
    }
    assert!(lib.join("libcuda_aot_capi.a").is_file());
    for h in ["cuda_aot.h", "cuda_aot.hpp"] {
        assert_eq!(
            std::fs::read(root.join("include").join(h)).unwrap(),
            std::fs::read(repo().join("capi/include").join(h)).unwrap(),
            "{h}"
        );
    }
    let pc = std::fs::read_to_string(lib.join("pkgconfig/cuda-aot.pc")).unwrap();
    for line in [
        format!("prefix={}", prefix.display()),
        format!("Version: {version}"),
        "Libs: -L${libdir} -lcuda_aot_capi".to_string(),
    ] {
        assert!(pc.lines().any(|l| l == line), "no `{line}` in\n{pc}");
    }
    // Libs.private: what rustc listed for the static library; the C runtime among it.
    let private = pc
        .lines()
        .find_map(|l| l.strip_prefix("Libs.private: "))
        .unwrap_or_else(|| panic!("no Libs.private in\n{pc}"));
    assert!(
        private.contains("-lpthread") && private.contains("-ldl"),
        "{private}"
    );
    let cmake = root.join("lib/cmake/cuda-aot");
    let config = std::fs::read_to_string(cmake.join("cuda-aotConfig.cmake")).unwrap();
    assert!(
        config.contains("add_library(cuda-aot::cuda_aot SHARED IMPORTED)")
            && config.contains(&format!("IMPORTED_SONAME \"{soname}\"")),
        "{config}"
    );
    let version_file = std::fs::read_to_string(cmake.join("cuda-aotConfigVersion.cmake")).unwrap();
    assert!(
        version_file.contains(&format!("set(PACKAGE_VERSION \"{version}\")")),
        "{version_file}"
    );
}

#[test]
fn issue_43_install_capi_lays_out_the_prefix_with_soname_links_pkg_config_and_cmake() {
    let i = Installed::new();
    check_layout(&i.prefix(), &i.prefix());
    // Installing again replaces every file and link in place: the same layout, nothing else.
    let shape = |t: BTreeMap<PathBuf, String>| -> Vec<(PathBuf, bool)> {
        t.into_iter()
            .map(|(p, what)| (p, what.starts_with("->")))
            .collect()
    };
    let before = shape(tree(&i.prefix()));
    let out = install(&i.prefix(), None).ok();
    let (version, soname) = (capi_version(), soname_of(&capi_version()));
    let link_line = [
        format!("lib/{soname}"),
        "->".into(),
        format!("libcuda_aot_capi.so.{version}"),
    ];
    assert!(
        out.stdout.lines().any(|l| l
            .split_whitespace()
            .eq(link_line.iter().map(String::as_str))),
        "{}",
        out.stdout
    );
    check_layout(&i.prefix(), &i.prefix());
    assert_eq!(shape(tree(&i.prefix())), before);
}

#[test]
fn issue_43_destdir_stages_the_install_whose_files_name_the_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let stage = tmp.path().join("stage");
    let prefix = Path::new("/opt/cuda-aot-install-test");
    install(prefix, Some(&stage)).ok();
    check_layout(&stage.join("opt/cuda-aot-install-test"), prefix);
    assert!(!prefix.exists(), "{} was written", prefix.display());
}

/// The shell lines of the sh blocks of docs/capi.md's "Installing" section.
fn installing_commands() -> Vec<String> {
    let doc = std::fs::read_to_string(repo().join("docs/capi.md")).unwrap();
    let section = doc
        .split("\n## Installing\n")
        .nth(1)
        .expect("docs/capi.md has an Installing section");
    let section = section.split("\n## ").next().unwrap();
    let mut out = Vec::new();
    let mut in_sh = false;
    for line in section.lines() {
        match line.trim() {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            l if in_sh => out.push(l.to_string()),
            _ => {}
        }
    }
    out
}

/// The documented command that starts with `start` and contains `with`.
fn documented(start: &str, with: &str) -> String {
    installing_commands()
        .into_iter()
        .find(|l| l.starts_with(start) && l.contains(with))
        .unwrap_or_else(|| panic!("docs/capi.md, Installing: no `{start} ...{with}...` command"))
}

/// Runs `script` (documented commands) with `sh` in the checkout: `$HOME/.local` is the
/// installed prefix, the pinned build tools come first on PATH, CMake uses Ninja.
fn run_documented(script: &str, prefix: &Path) {
    let script = script.replace("$HOME/.local", &prefix.display().to_string());
    let path = format!(
        "{}:{}",
        tools::bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Out::of(
        Command::new("sh")
            .args(["-ec", &script])
            .current_dir(repo())
            .env("PATH", path)
            .env("CMAKE_GENERATOR", "Ninja")
            .env_remove("PKG_CONFIG_PATH")
            .env_remove("PKG_CONFIG_LIBDIR"),
    );
    assert_eq!(
        out.code,
        Some(0),
        "{script}\nfailed:\n{}\n{}",
        out.stdout,
        out.stderr
    );
}

#[test]
fn issue_43_the_c_example_builds_through_pkg_config_against_the_prefix_and_verifies() {
    let i = Installed::new();
    let exe = i.dir.path().join("verify");
    let cc = documented("cc ", "pkg-config --cflags --libs cuda-aot");
    let cc = cc.replace(" -o verify", &format!(" -o {}", exe.display()));
    let script = format!(
        "{}\n{cc}",
        documented("export PKG_CONFIG_PATH=", "/lib/pkgconfig")
    );
    run_documented(&script, &i.prefix());
    // Linked against the soname, found through the rpath in the prefix.
    let dynamic = dynamic_section(&exe);
    let soname = soname_of(&capi_version());
    assert!(
        dynamic.contains(&format!("Shared library: [{soname}]"))
            && dynamic.contains(&format!("{}/lib", i.prefix().display())),
        "{dynamic}"
    );
    let r = Registry::publish();
    let out = r.run(&exe).ok();
    assert!(
        out.stdout.starts_with("registry OK: index v1"),
        "{}",
        out.stdout
    );
    assert_eq!(out.stdout.lines().count(), 3, "{}", out.stdout);
}

#[test]
fn issue_43_the_cmake_example_builds_by_config_and_by_pkg_config_and_prints_verified() {
    let i = Installed::new();
    let r = Registry::publish();
    let build = i.dir.path().join("build");
    for (mode, configure) in [
        (
            "config",
            documented("cmake -S examples/cmake", "CMAKE_PREFIX_PATH"),
        ),
        (
            "pkg-config",
            documented("cmake -S examples/cmake", "=pkg-config"),
        ),
    ] {
        // The documented folder `.cuda-aot/cmake-<mode>`, moved into this test's folder.
        let folder = format!(".cuda-aot/cmake-{mode}");
        let dir = build.join(mode);
        let build_cmd = documented("cmake --build", &folder);
        let mut script = String::new();
        if mode == "pkg-config" {
            script += &documented("export PKG_CONFIG_PATH=", "/lib/pkgconfig");
            script += "\n";
        }
        script += &format!("{configure}\n{build_cmd}\n");
        let script = script.replace(&folder, &dir.display().to_string());
        run_documented(&script, &i.prefix());
        let exe = dir.join("verify_registry");
        let dynamic = dynamic_section(&exe);
        assert!(
            dynamic.contains(&format!("Shared library: [{}]", soname_of(&capi_version()))),
            "{mode}: {dynamic}"
        );
        let out = r.run(&exe).ok();
        assert!(
            out.stdout.starts_with(&format!(
                "verified (cuda-aot {}): registry OK: index v1",
                capi_version()
            )),
            "{mode}: {}",
            out.stdout
        );
        // A registry under another trust root is refused, with its Fix.
        let other = Registry::publish();
        let refused = Out::of(
            Command::new(&exe)
                .arg(r.path())
                .arg(other.trust_root())
                .env("CUDA_AOT_STATE_DIR", r.fixture.path("state")),
        )
        .failed();
        assert!(
            refused.stderr.contains("(CUDA_AOT_STATUS_UNTRUSTED_KEY)"),
            "{mode}: {}",
            refused.stderr
        );
    }
}

#[test]
fn issue_43_a_bad_prefix_is_refused_with_its_fix_and_nothing_changes() {
    let tmp = tempfile::tempdir().unwrap();
    // A file where the prefix's lib/ folder must be: refused before anything is built.
    let prefix = tmp.path().join("prefix");
    std::fs::create_dir(&prefix).unwrap();
    std::fs::write(prefix.join("lib"), b"not a folder").unwrap();
    let before = tree(tmp.path());
    let out = install(&prefix, None).failed();
    assert!(
        out.stderr.contains(&format!(
            "{} is a file where a folder (lib/) must be",
            prefix.join("lib").display()
        )),
        "{}",
        out.stderr
    );
    assert!(
        out.fix().starts_with("choose another --prefix, or move"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("cargo rustc"),
        "built anyway:\n{}",
        out.stderr
    );
    assert_eq!(tree(tmp.path()), before);

    // A folder where a file must be: refused after the build, before anything is written.
    std::fs::remove_file(prefix.join("lib")).unwrap();
    std::fs::create_dir_all(prefix.join("include/cuda_aot.h")).unwrap();
    let before = tree(tmp.path());
    let out = install(&prefix, None).failed();
    assert!(
        out.stderr
            .contains("is a folder where the file include/cuda_aot.h must be"),
        "{}",
        out.stderr
    );
    assert!(out.fix().contains("move"), "{}", out.stderr);
    assert_eq!(tree(tmp.path()), before);
    assert!(!prefix.join("lib").exists());

    // A prefix nobody may write, not even root (sysfs): refused with how to install anyway.
    let out = install(Path::new("/sys/cuda-aot-install-test"), None).failed();
    assert!(
        out.stderr
            .contains("cannot install into /sys/cuda-aot-install-test: /sys is not writable"),
        "{}",
        out.stderr
    );
    assert!(out.fix().contains("DESTDIR"), "{}", out.stderr);
    assert!(!Path::new("/sys/cuda-aot-install-test").exists());
}
