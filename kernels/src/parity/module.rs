//! A module's section of a spec file (`manifests/release.toml`, `research/research.toml`)
//! as the parity runner needs it: source, geometry, flags, include folders and the parity
//! spec, read without the build system (the runner runs on the GPU host).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::spec::ParitySpec;

#[derive(Deserialize)]
struct File {
    build: Build,
    module: Vec<toml::Value>,
}

#[derive(Deserialize)]
struct Build {
    sources: String,
    #[serde(default)]
    nvcc_flags: Vec<String>,
    #[serde(default)]
    include_dirs: Vec<String>,
}

#[derive(Deserialize)]
struct ModuleFields {
    source: String,
    protocol: String,
    schedule_version: u32,
    #[serde(default)]
    geometry: BTreeMap<String, u64>,
    #[serde(default)]
    nvcc_flags: Vec<String>,
    #[serde(default)]
    include_dirs: Vec<String>,
}

/// One module of a spec file, with its parity spec.
#[derive(Debug, Clone)]
pub struct ParityModule {
    /// Module name.
    pub name: String,
    /// The source file.
    pub source: PathBuf,
    /// The source's path as the spec writes it (the NVRTC program name).
    pub source_name: String,
    /// Protocol.
    pub protocol: String,
    /// Schedule version.
    pub schedule_version: u32,
    /// Geometry.
    pub geometry: BTreeMap<String, u64>,
    /// nvcc flags: the build's, then the module's.
    pub flags: Vec<String>,
    /// Include folders (absolute): the sources folder, the build's, the module's.
    pub include_dirs: Vec<PathBuf>,
    /// The parity spec.
    pub parity: ParitySpec,
}

impl ParityModule {
    /// Reads module `name` of the spec file `spec` (paths relative to the spec file).
    pub fn load(spec: &Path, name: &str) -> Result<ParityModule, String> {
        let text = std::fs::read_to_string(spec)
            .map_err(|e| format!("reading {}: {e}", spec.display()))?;
        let file: File =
            toml::from_str(&text).map_err(|e| format!("parsing {}: {e}", spec.display()))?;
        let dir = spec.parent().unwrap_or(Path::new("."));
        let module = file
            .module
            .iter()
            .find(|m| m.get("name").and_then(|n| n.as_str()) == Some(name))
            .ok_or_else(|| {
                let names: Vec<&str> = file
                    .module
                    .iter()
                    .filter_map(|m| m.get("name").and_then(|n| n.as_str()))
                    .collect();
                format!(
                    "{}: no module `{name}` (modules: {})",
                    spec.display(),
                    names.join(", ")
                )
            })?;
        let fields: ModuleFields = module
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| format!("{}: module `{name}`: {e}", spec.display()))?;
        let parity = module.get("parity").ok_or_else(|| {
            format!(
                "{}: module `{name}` has no [module.parity] section: write its parity spec (kernels/src/parity/spec.rs)",
                spec.display()
            )
        })?;
        let parity = ParitySpec::from_toml(parity)
            .map_err(|e| format!("{}: module `{name}`: parity: {e}", spec.display()))?;
        let sources = dir.join(&file.build.sources);
        let mut include_dirs = vec![sources.clone()];
        include_dirs.extend(file.build.include_dirs.iter().map(|d| dir.join(d)));
        include_dirs.extend(fields.include_dirs.iter().map(|d| dir.join(d)));
        let mut flags = file.build.nvcc_flags.clone();
        flags.extend(fields.nvcc_flags.iter().cloned());
        Ok(ParityModule {
            name: name.to_string(),
            source: sources.join(&fields.source),
            source_name: fields.source,
            protocol: fields.protocol,
            schedule_version: fields.schedule_version,
            geometry: fields.geometry,
            flags,
            include_dirs,
            parity,
        })
    }

    /// NVRTC options equivalent to the module's nvcc build: include folders, geometry
    /// defines, and the flags both compilers accept (defines, language standard, math
    /// modes, register cap); what only nvcc understands is dropped.
    pub fn research_options(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .include_dirs
            .iter()
            .map(|d| format!("--include-path={}", d.display()))
            .collect();
        out.extend(research_flags(&self.flags));
        out.extend(
            self.geometry
                .iter()
                .map(|(k, v)| format!("-DCUDA_AOT_{}={v}", k.to_ascii_uppercase())),
        );
        out
    }

    /// blake3 of what parity runs: the parity spec and the geometry ([`spec_digest`]).
    pub fn spec_digest(&self) -> cuda_aot::Digest {
        spec_digest(&self.parity, &self.geometry)
    }
}

/// blake3 of what parity runs: the parity spec and the geometry, as compact JSON in field
/// order (the report carries it; `promote` recomputes it from the spec it builds).
pub fn spec_digest(parity: &ParitySpec, geometry: &BTreeMap<String, u64>) -> cuda_aot::Digest {
    cuda_aot::Digest::of(&serde_json::to_vec(&(parity, geometry)).expect("serialisable"))
}

/// The nvcc flags NVRTC accepts with the same meaning (defines, language standard, math
/// modes, register cap), in order; what only nvcc understands is dropped, `-Xcicc` with
/// its value. The one translation from an AOT build's flags to a research build's.
pub fn research_flags(flags: &[String]) -> Vec<String> {
    const KEEP: [&str; 12] = [
        "-D",
        "-U",
        "--std=",
        "-std=",
        "--use_fast_math",
        "-use_fast_math",
        "-ftz=",
        "-prec-div=",
        "-prec-sqrt=",
        "-fmad=",
        "-maxrregcount=",
        "--maxrregcount=",
    ];
    let mut out = Vec::new();
    let mut it = flags.iter();
    while let Some(f) = it.next() {
        if f == "-Xcicc" {
            it.next();
        } else if KEEP.iter().any(|k| f.starts_with(k)) {
            out.push(f.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_research_spec_reads_with_its_parity_section() {
        let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("research/research.toml");
        let m = ParityModule::load(&spec, "ntt_fused").unwrap();
        assert!(m.source.exists(), "{}", m.source.display());
        assert_eq!(m.geometry["tile_log"], 10);
        let opts = m.research_options();
        assert!(
            opts.contains(&"-DCUDA_AOT_TILE_LOG=10".to_string()),
            "{opts:?}"
        );
        assert!(opts.contains(&"--std=c++17".to_string()), "{opts:?}");
        assert!(!opts.iter().any(|o| o == "-O3"), "{opts:?}");
        assert!(opts.iter().any(|o| o.ends_with("/cuda")), "{opts:?}");
        let progs = m.parity.programs(&m.geometry).unwrap();
        assert_eq!(progs.len(), 5);
        // 2^20 with tiles of 2^10: the bit reversal and two fused launches.
        let p = progs.iter().find(|p| p.vars["log_n"] == 20).unwrap();
        assert_eq!(p.launches.len(), 3);
        assert_eq!(m.spec_digest(), m.spec_digest());
        let err = ParityModule::load(&spec, "nope").unwrap_err();
        assert!(err.contains("modules: ntt_fused"), "{err}");
    }
}
