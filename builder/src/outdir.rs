//! The build output folder, written by `build` and read by `sign` and `publish`. Each
//! module's `<out>/<module>/<target>.<kind>` (the blob) and
//! `<out>/<module>/<target>.<kind>.manifest.json` (its unsigned manifest) are laid out and
//! read by `cuda_aot::output`, which the parity runner on the GPU host uses too. The rest of
//! the layout is defined here: `<out>/build.statement.json` (the builder's signed statement
//! over all of them), `<out>/build.provenance.json` and `<out>/build.sources/<blake3 hex>`
//! (what the build read, for the statement's provenance), and `<out>/promotions/<module>.json`
//! (reviewer-signed promotion records, published with the build). Files are replaced
//! atomically, identical ones are left alone, and files of earlier builds that a build did
//! not produce are removed.

use anyhow::{Context, Result};
use cuda_aot::{Kind, Manifest, ModuleName, Target};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::advice::fail;
use crate::files;

pub use cuda_aot::output::{blob_path, manifest_path};

/// `<out>/build.statement.json`: where `cargo xtask sign` puts the builder's signed
/// statement over every manifest of the build.
pub fn statement_path(out: &Path) -> PathBuf {
    out.join("build.statement.json")
}

/// `<out>/build.provenance.json`: the build's SLSA provenance (unsigned), which `cargo
/// xtask sign` wraps with the subjects into the build statement.
pub fn provenance_path(out: &Path) -> PathBuf {
    out.join("build.provenance.json")
}

/// `<out>/build.sources/`: every source file (and the spec) the provenance names, by
/// blake3, for `publish` to put in the registry beside the release.
pub fn sources_dir(out: &Path) -> PathBuf {
    out.join("build.sources")
}

/// `<out>/build.sources/<blake3 hex>`.
pub fn source_path(out: &Path, d: &cuda_aot::Digest) -> PathBuf {
    sources_dir(out).join(d.hex())
}

/// `<out>/promotions/<module>.json`: where `cargo xtask promote` writes a module's
/// promotion record and `publish` finds it.
pub fn promotion_path(out: &Path, m: &ModuleName) -> PathBuf {
    out.join("promotions").join(format!("{}.json", m.as_str()))
}

/// The promotion record files of a build output (`<out>/promotions/*.json`), sorted.
pub fn promotion_files(out: &Path) -> Result<Vec<PathBuf>> {
    let dir = out.join("promotions");
    let mut v = Vec::new();
    match std::fs::read_dir(&dir) {
        Ok(rd) => {
            for e in rd {
                let p = e
                    .with_context(|| format!("reading {}", dir.display()))?
                    .path();
                if p.extension().is_some_and(|x| x == "json") {
                    v.push(p);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    }
    v.sort();
    Ok(v)
}

/// Writes one module's blob, then its manifest (a reader that finds the manifest finds the
/// blob it names). Returns the blob and manifest paths, and whether either changed.
pub fn write_module(out: &Path, m: &Manifest, blob: &[u8]) -> Result<([PathBuf; 2], bool)> {
    let (b, j) = (blob_path(out, m), manifest_path(out, m));
    let blob_changed =
        files::write_if_changed(&b, blob).with_context(|| format!("writing {}", b.display()))?;
    let manifest_changed = files::write_if_changed(&j, &cuda_aot::json::to_vec(m))
        .with_context(|| format!("writing {}", j.display()))?;
    Ok(([b, j], blob_changed || manifest_changed))
}

/// Removes the provenance of `out` (a build that cannot record one); returns whether there
/// was one.
pub fn remove_provenance(out: &Path) -> Result<bool> {
    let p = provenance_path(out);
    match std::fs::remove_file(&p) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("removing {}", p.display())),
    }
}

/// Removes the build statement of `out`: it no longer covers what the folder holds.
pub fn remove_statement(out: &Path) -> Result<()> {
    let s = statement_path(out);
    match std::fs::remove_file(&s) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing the stale statement {}", s.display())),
    }
}

/// Removes build outputs in `out` that are not in `keep`, and module folders left empty.
/// Only files named like outputs (`<module>/<target>.{cubin,ptx}[.manifest[.dsse].json]`,
/// with a valid module name and target) are ever removed; anything else is left alone.
pub fn remove_stale(out: &Path, keep: &BTreeSet<PathBuf>) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let Ok(dirs) = std::fs::read_dir(out) else {
        return Ok(removed);
    };
    for d in dirs.flatten() {
        let name = d.file_name();
        let is_module = name.to_str().is_some_and(|n| ModuleName::new(n).is_ok());
        if !is_module || !d.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        for f in std::fs::read_dir(d.path())?.flatten() {
            let p = f.path();
            let looks_like_output = f.file_name().to_str().is_some_and(is_output_name);
            if looks_like_output && !keep.contains(&p) && f.file_type().is_ok_and(|t| t.is_file()) {
                std::fs::remove_file(&p)
                    .with_context(|| format!("removing the stale output {}", p.display()))?;
                removed.push(p);
            }
        }
        let _ = std::fs::remove_dir(d.path()); // only succeeds when empty
    }
    Ok(removed)
}

/// Files `<out>/<module>/<name>` whose names end with `suffix`, sorted.
pub fn files_ending(out: &Path, suffix: &str) -> Result<Vec<PathBuf>> {
    if !out.is_dir() {
        return Err(fail(
            format!("build output {} does not exist", out.display()),
            "run `cargo xtask build` first, or pass the build output folder",
        ));
    }
    // The one walk (no link followed; a link is not a regular file and is left out).
    let mut v: Vec<PathBuf> = files::files_under(out)?
        .into_iter()
        .filter(|f| f.regular && f.rel.split('/').count() == 2 && f.rel.ends_with(suffix))
        .map(|f| f.path)
        .collect();
    v.sort();
    Ok(v)
}

/// One module of a build output: its manifest, the manifest file's bytes, the blob.
pub type OutputModule = (Manifest, Vec<u8>, Vec<u8>);

/// Every manifest of `out` with its file bytes and blob, each blob checked against its
/// manifest (size, blake3).
pub fn read_output(out: &Path) -> Result<Vec<OutputModule>> {
    let limits = crate::limits::limits();
    let files = files_ending(out, cuda_aot::output::MANIFEST_SUFFIX)?;
    if files.is_empty() {
        return Err(fail(
            format!("{}: no *.manifest.json files", out.display()),
            "run `cargo xtask build` first, or pass the build output folder",
        ));
    }
    let mut v = Vec::with_capacity(files.len());
    for path in &files {
        let b = cuda_aot::output::read_built(path, &limits).map_err(|e| {
            fail(
                format!("{}: {e}", path.display()),
                "rebuild with `cargo xtask build` (the output holds what it wrote, unchanged)",
            )
        })?;
        v.push((b.manifest, b.manifest_file, b.blob));
    }
    Ok(v)
}

/// `<target>.<kind>`, `<target>.<kind>.manifest.json` or a signature of an earlier format
/// (`<target>.<kind>.manifest.dsse.json`), kind matching the target.
fn is_output_name(n: &str) -> bool {
    let n = n
        .strip_suffix(".manifest.json")
        .or_else(|| n.strip_suffix(".manifest.dsse.json"))
        .unwrap_or(n);
    let Some((t, kind)) = n.rsplit_once('.') else {
        return false;
    };
    match t.parse::<Target>() {
        Ok(t) => {
            kind == Kind::Cubin.to_string() && !t.virtual_arch
                || kind == Kind::Ptx.to_string() && t.virtual_arch
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_output_shaped_files_are_stale() {
        for ok in [
            "sm_90.cubin",
            "sm_90a.cubin.manifest.json",
            "compute_90.ptx",
            "compute_90.ptx.manifest.json",
        ] {
            assert!(is_output_name(ok), "{ok}");
        }
        for no in [
            "notes.txt",
            "sm_90.ptx",
            "compute_90.cubin",
            "sm_9.cubin",
            "sm_90.cubin.bak",
            ".tmp-x",
        ] {
            assert!(!is_output_name(no), "{no}");
        }
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("ntt");
        std::fs::create_dir_all(&m).unwrap();
        for f in ["sm_80.cubin", "sm_80.cubin.manifest.json", "README"] {
            std::fs::write(m.join(f), "x").unwrap();
        }
        std::fs::create_dir_all(dir.path().join("Not-A-Module")).unwrap();
        std::fs::write(dir.path().join("Not-A-Module/sm_80.cubin"), "x").unwrap();
        let gone = remove_stale(dir.path(), &BTreeSet::from([m.join("sm_80.cubin")])).unwrap();
        assert_eq!(gone, [m.join("sm_80.cubin.manifest.json")]);
        assert!(m.join("README").exists() && dir.path().join("Not-A-Module/sm_80.cubin").exists());
    }
}
