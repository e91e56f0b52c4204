//! Building the C library for an install: `cargo rustc -p cuda-aot-capi --lib` in the
//! checkout (which also has rustc print the system libraries the static library needs),
//! the artefacts found in cargo's target directory (`cargo metadata`), and the soname read
//! back from the built shared library, where `capi/build.rs` put it.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result, bail};
use object::read::elf::{Dyn, FileHeader};

use crate::advice::fail;
use crate::{paths, process};

/// The C ABI's package.
const PACKAGE: &str = "cuda-aot-capi";
/// Its shared library's file name in cargo's folder, and the stem of every installed name.
pub const SHARED: &str = "libcuda_aot_capi.so";
/// Its static library's file name.
pub const STATIC: &str = "libcuda_aot_capi.a";

/// What one build of the C library gave.
pub struct Built {
    /// The package version (`0.1.0`).
    pub version: String,
    /// The package description.
    pub description: String,
    /// `release` or `debug`: cargo's folder below the target directory.
    pub profile: &'static str,
    /// That folder.
    pub dir: PathBuf,
    /// The shared library's bytes.
    pub shared: Vec<u8>,
    /// Its soname (`libcuda_aot_capi.so.0.1`).
    pub soname: String,
    /// The static library's bytes.
    pub static_lib: Vec<u8>,
    /// What the static library needs from the system, as rustc prints it (`-lgcc_s`, ...).
    pub static_deps: Vec<String>,
}

impl Built {
    /// The ABI version of the soname (`0.1`): what a compatible release keeps.
    pub fn abi(&self) -> &str {
        &self.soname[SHARED.len() + 1..]
    }

    /// The shared library's installed file name (`libcuda_aot_capi.so.0.1.0`).
    pub fn real_name(&self) -> String {
        format!("{SHARED}.{}", self.version)
    }
}

/// Builds the C library in the checkout `source` (release or dev profile) and reads it.
pub fn build(source: &Path, release: bool) -> Result<Built> {
    let meta = process::cargo_metadata(source).map_err(|e| {
        crate::advice::refix(
            e,
            "run in a cuda-aot checkout, or pass --source DIR (a clone of cuda-aot)",
        )
    })?;
    let package = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == PACKAGE)
        .ok_or_else(|| {
            fail(
                format!(
                    "{} is not a cuda-aot checkout: its workspace has no package {PACKAGE}",
                    paths::shown(source)
                ),
                "run in a cuda-aot checkout, or pass --source DIR (a clone of cuda-aot)",
            )
        })?;
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let (version, description) = (text(&package["version"]), text(&package["description"]));
    let profile = if release { "release" } else { "debug" };
    let dir = PathBuf::from(text(&meta["target_directory"])).join(profile);
    let static_deps = cargo_rustc(source, release)?;
    let read = |name: &str| {
        std::fs::read(dir.join(name)).with_context(|| {
            format!(
                "reading {} (cargo built it just now)",
                dir.join(name).display()
            )
        })
    };
    let shared = read(SHARED)?;
    let soname = soname(&shared).with_context(|| format!("{}", dir.join(SHARED).display()))?;
    let abi = soname.strip_prefix(&format!("{SHARED}.")).unwrap_or("");
    if abi.is_empty() || !format!("{version}.").starts_with(&format!("{abi}.")) {
        bail!(
            "{}: soname {soname} is not libcuda_aot_capi.so.<ABI> with <ABI> leading the version {version} (capi/build.rs sets it)",
            dir.join(SHARED).display()
        );
    }
    Ok(Built {
        version,
        description,
        profile,
        shared,
        soname,
        static_lib: read(STATIC)?,
        static_deps,
        dir,
    })
}

/// `cargo rustc -p cuda-aot-capi --lib [--release] -- --print native-static-libs`: one
/// build of the shared and static library (and the rlib); returns the system libraries
/// rustc lists for the static library (cargo replays the note when nothing is rebuilt).
/// Cargo's progress goes to the user's stderr; rustc's messages come as JSON and are shown.
/// The extra rustc flag is part of cargo's fingerprint: after this, a plain `cargo build -p
/// cuda-aot-capi` compiles that one crate again (not its dependencies), and the other way
/// round.
fn cargo_rustc(source: &Path, release: bool) -> Result<Vec<String>> {
    let mut cmd = process::cargo();
    cmd.args(["rustc", "-p", PACKAGE, "--lib", "--message-format", "json"]);
    if release {
        cmd.arg("--release");
    }
    cmd.args(["--", "--print", "native-static-libs"])
        .current_dir(source)
        .stdin(Stdio::null());
    let shown = process::show_command(&cmd);
    eprintln!("install-capi: {shown}");
    let out = process::stdout_of(&mut cmd).with_context(|| format!("running {shown}"))?;
    let mut deps = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(m) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if m["reason"] != "compiler-message" {
            continue;
        }
        let message = m["message"]["message"].as_str().unwrap_or_default();
        if let Some(libs) = message.strip_prefix("native-static-libs: ") {
            deps = Some(libs.split_whitespace().map(String::from).collect());
        } else if !message.starts_with("link against the following native artifacts") {
            eprint!("{}", m["message"]["rendered"].as_str().unwrap_or_default());
        }
    }
    if !out.status.success() {
        return Err(fail(
            format!("{shown}: {}", process::describe_status(&out.status)),
            "fix the build error cargo printed above, then install again",
        ));
    }
    deps.with_context(|| format!("{shown} printed no native-static-libs note"))
}

/// The `DT_SONAME` of an ELF shared library.
fn soname(data: &[u8]) -> Result<String> {
    let header = object::elf::FileHeader64::<object::Endianness>::parse(data)
        .context("not a 64-bit ELF file")?;
    let endian = header.endian().context("reading its ELF header")?;
    let sections = header
        .sections(endian, data)
        .context("reading its sections")?;
    let (dynamic, link) = sections
        .dynamic(endian, data)
        .context("reading its dynamic section")?
        .context("no dynamic section: not a shared library")?;
    let strings = sections
        .strings(endian, data, link)
        .context("reading its dynamic strings")?;
    for d in dynamic {
        if d.tag32(endian) == Some(object::elf::DT_SONAME) {
            let name = d.string(endian, strings).context("reading DT_SONAME")?;
            return Ok(String::from_utf8_lossy(name).into_owned());
        }
    }
    bail!("no DT_SONAME: the library was linked without capi/build.rs's -soname")
}
