//! A module's section of a spec file (`manifests/release.toml`, `research/research.toml`)
//! as the parity runner needs it: source, geometry, flags, include folders and the parity
//! spec. The file is read by the one spec reader (`cuda_aot_spec`) the build uses too, so
//! the runner on the GPU host refuses what the build refuses.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::spec::ParitySpec;

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
        let file = cuda_aot_spec::read(spec).map_err(|e| e.to_string())?;
        let dir = spec.parent().unwrap_or(Path::new("."));
        let module = file.module(name).ok_or_else(|| {
            format!(
                "{}: no module `{name}` (modules: {})",
                spec.display(),
                file.module_names().join(", ")
            )
        })?;
        let source = match module.source.files().as_slice() {
            [one] => one.to_string(),
            many => {
                return Err(format!(
                    "{}: module `{name}` has {} sources; the parity runner builds modules of one source file with NVRTC",
                    spec.display(),
                    many.len()
                ));
            }
        };
        let parity = module.parity.as_ref().ok_or_else(|| {
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
        include_dirs.extend(module.include_dirs.iter().map(|d| dir.join(d)));
        let mut flags = file.build.nvcc_flags.clone();
        flags.extend(module.nvcc_flags.iter().cloned());
        Ok(ParityModule {
            name: name.to_string(),
            source: sources.join(&source),
            source_name: source,
            protocol: module.protocol.clone(),
            schedule_version: module.schedule_version,
            geometry: module.geometry.clone(),
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

    /// The runner reads a spec as the build does: a misspelled field is refused with its
    /// name, not ignored (the runner once read specs leniently).
    #[test]
    fn a_spec_the_build_refuses_is_refused_here_too() {
        let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("research/research.toml");
        let text = std::fs::read_to_string(&spec).unwrap();
        let bad = text.replacen("schedule_version", "schedule_versoin", 1);
        assert_ne!(bad, text);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("research.toml");
        std::fs::write(&path, bad).unwrap();
        let err = ParityModule::load(&path, "ntt_fused").unwrap_err();
        assert!(err.contains("schedule_versoin"), "{err}");
        assert!(err.contains("parsing the release spec"), "{err}");
    }
}
