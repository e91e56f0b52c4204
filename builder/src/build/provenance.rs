//! What a build records for its build statement's provenance: `<out>/build.provenance.json`
//! (the SLSA provenance v1 predicate, unsigned: spec, selection, toolkit wheels, host
//! compiler, every project file the build read, when it ran) and `<out>/build.sources/`
//! (those files by blake3), which `sign` wraps with the subjects and `publish` puts in the
//! registry, so a rebuilder needs nothing but the registry.
//!
//! Files are named relative to the build's source root: the deepest folder holding the spec,
//! every file nvcc read from the project (sources folder, include folders) and the toolkit
//! pin file. A rebuilder lays them out below a folder of its own and builds the spec there.

use anyhow::{Context, Result};
use cuda_aot::Digest;
use cuda_aot::metadata::Time;
use cuda_aot::provenance::{
    BUILD_TYPE, BUILDER_ID, BuildDefinition, BuildMetadata, Builder, Dependency, DigestSet,
    ExternalParameters, Hex32, InternalParameters, Provenance, RunDetails,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::{BuildOptions, Plan};
use crate::advice::fail;
use crate::toolchain::Pins;
use crate::toolchain::ToolkitChoice;
use crate::{files, outdir};

/// Byte caps of what a build records: one file, and all of them together.
const FILE_LIMIT: u64 = 64 << 20;
const TOTAL_LIMIT: u64 = 512 << 20;

/// The name of the host compiler among the resolved dependencies.
pub const HOST_COMPILER: &str = "host-compiler";

/// The tool, as the provenance names it.
pub fn tool() -> String {
    format!("cuda-aot xtask {}", env!("CARGO_PKG_VERSION"))
}

/// Writes the provenance of a finished build into `opts.out`: `read` holds each project
/// file a job read (its absolute path and the blake3 the build recorded). A provenance
/// already there with the same build definition is left alone (the output is that build's);
/// returns whether it was replaced (then a statement signed over the old one no longer
/// describes this build).
pub fn write(
    opts: &BuildOptions,
    plan: &Plan,
    read: &BTreeMap<PathBuf, Digest>,
    started: Time,
) -> Result<bool> {
    let spec_path = canonical(&plan.spec.path)?;
    let mut paths: BTreeMap<PathBuf, Option<Digest>> = BTreeMap::new();
    paths.insert(spec_path.clone(), None);
    for (p, d) in read {
        paths.insert(canonical(p)?, Some(*d));
    }
    if let (ToolkitChoice::Pinned, Pins::File(p)) = (&opts.toolkit.choice, &opts.toolkit.pins) {
        paths.insert(canonical(p)?, None);
    }
    let root = common_folder(paths.keys()).context("the build's files share no folder")?;

    // Every file as it is now; a file that changed since nvcc read it is not recorded.
    let mut total = 0u64;
    let mut sources = Vec::with_capacity(paths.len());
    let mut spec = None;
    for (path, recorded) in &paths {
        let bytes = cuda_aot::fs::read_capped(path, FILE_LIMIT, "source file")
            .with_context(|| format!("reading {} for the build's provenance", path.display()))?;
        total += bytes.len() as u64;
        if total > TOTAL_LIMIT {
            return Err(fail(
                format!(
                    "the build read more than {} MiB of project files; the provenance records at most that",
                    TOTAL_LIMIT >> 20
                ),
                "keep large data out of the sources and include folders",
            ));
        }
        if let Some(d) = recorded
            && Digest::of(&bytes) != *d
        {
            return Err(fail(
                format!("{} changed while the build was running", path.display()),
                "run the build again once the sources are saved",
            ));
        }
        let name = path
            .strip_prefix(&root)
            .expect("under the common folder")
            .to_str()
            .with_context(|| format!("{}: a path that is not UTF-8", path.display()))?
            .replace('\\', "/");
        let dep = Dependency::source(&name, &bytes);
        if *path == spec_path {
            spec = Some(dep.clone());
        }
        sources.push((dep, bytes));
    }
    let spec = spec.expect("the spec is among the files");

    // The bytes, for publish; files of earlier builds that this one did not read go.
    let dir = outdir::sources_dir(&opts.out);
    let keep: BTreeSet<String> = sources.iter().map(|(d, _)| hex_of(d)).collect();
    for (d, bytes) in &sources {
        files::write_if_changed(&dir.join(hex_of(d)), bytes)?;
    }
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let stale = e.file_name().to_str().is_some_and(|n| !keep.contains(n));
            if stale && e.file_type().is_ok_and(|t| t.is_file()) {
                std::fs::remove_file(e.path())
                    .with_context(|| format!("removing {}", e.path().display()))?;
            }
        }
    }

    let mut deps: Vec<Dependency> = sources.into_iter().map(|(d, _)| d).collect();
    if opts.toolkit.choice == ToolkitChoice::Pinned {
        for w in crate::toolchain::pinned_wheels(&opts.toolkit.pins)? {
            deps.push(Dependency {
                name: format!("{}-{}", w.name, w.version),
                uri: Some(format!("pkg:pypi/{}@{}", w.name, w.version)),
                digest: DigestSet {
                    sha256: Some(parse_sha256(&w.sha256)?),
                    blake3: None,
                },
                download_location: None,
                annotations: BTreeMap::new(),
            });
        }
    }
    // `/usr/bin/c++` is usually a chain of links to the compiler itself.
    let compiler = std::fs::read(canonical(&plan.host.path)?)
        .with_context(|| format!("reading the host compiler {}", plan.host.path.display()))?;
    deps.push(Dependency {
        name: HOST_COMPILER.into(),
        uri: None,
        digest: DigestSet::of(&compiler),
        download_location: None,
        annotations: BTreeMap::from([("version".into(), plan.host.version.clone())]),
    });

    let path = outdir::provenance_path(&opts.out);
    let old: Option<Provenance> = std::fs::read(&path)
        .ok()
        .and_then(|b| cuda_aot::json::parse(&b, TOTAL_LIMIT, "provenance").ok());
    let provenance = Provenance {
        build_definition: BuildDefinition {
            build_type: BUILD_TYPE.into(),
            external_parameters: ExternalParameters {
                spec,
                channel: opts.channel,
                modules: opts.modules.clone(),
                targets: opts.targets.clone(),
            },
            internal_parameters: InternalParameters {
                tool: tool(),
                toolkit: plan.toolkit.identity.clone(),
                host_compiler: plan.host.version.clone(),
            },
            resolved_dependencies: deps,
        },
        run_details: RunDetails {
            builder: Builder {
                id: BUILDER_ID.into(),
                version: BTreeMap::from([("cuda-aot".into(), env!("CARGO_PKG_VERSION").into())]),
            },
            metadata: BuildMetadata {
                invocation_id: invocation_id()?,
                started_on: started,
                finished_on: Time::now(),
            },
        },
    };
    // The same inputs as the build that wrote the output: its record stands (a no-op
    // rebuild leaves the output folder as it was, times included).
    if old.is_some_and(|o| o.build_definition == provenance.build_definition) {
        return Ok(false);
    }
    files::write(&path, &cuda_aot::json::to_vec(&provenance))?;
    Ok(true)
}

/// Reads `<out>/build.provenance.json`.
pub fn read(out: &Path) -> Result<Provenance> {
    let path = outdir::provenance_path(out);
    let bytes = match cuda_aot::fs::read_at_most(&path, TOTAL_LIMIT)? {
        Some(b) => b,
        None => {
            return Err(fail(
                format!("{}: no build provenance", path.display()),
                "build the output again with this version of the tool (`cargo xtask build`): \
                 it records what the build read, which the build statement names",
            ));
        }
    };
    Ok(cuda_aot::json::parse(
        &bytes,
        TOTAL_LIMIT,
        &path.display().to_string(),
    )?)
}

fn hex_of(d: &Dependency) -> String {
    d.digest
        .blake3()
        .expect("a source has a blake3 digest")
        .hex()
}

fn canonical(p: &Path) -> Result<PathBuf> {
    p.canonicalize()
        .with_context(|| format!("resolving {}", p.display()))
}

/// The deepest folder holding every one of `files`.
fn common_folder<'a>(files: impl Iterator<Item = &'a PathBuf>) -> Option<PathBuf> {
    let mut common: Option<PathBuf> = None;
    for f in files {
        let dir = f.parent()?;
        common = Some(match common {
            None => dir.to_path_buf(),
            Some(c) => c
                .components()
                .zip(dir.components())
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| a)
                .collect(),
        });
    }
    common
}

fn parse_sha256(hex: &str) -> Result<Hex32> {
    hex.parse()
        .map_err(|e| anyhow::anyhow!("toolkit pin sha256 {hex:?}: {e}"))
}

fn invocation_id() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("reading random bytes: {e}"))?;
    Ok(hex::encode(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_folder_is_the_deepest_one_holding_every_file() {
        let f = |v: &[&str]| {
            let v: Vec<PathBuf> = v.iter().map(PathBuf::from).collect();
            common_folder(v.iter())
        };
        assert_eq!(
            f(&["/a/manifests/release.toml", "/a/kernels/cuda/x.cu"]),
            Some(PathBuf::from("/a"))
        );
        assert_eq!(
            f(&["/a/b/spec.toml", "/a/b/src/x.cu", "/a/b/y.cuh"]),
            Some(PathBuf::from("/a/b"))
        );
        assert_eq!(f(&["/x/s.toml", "/y/x.cu"]), Some(PathBuf::from("/")));
    }
}
