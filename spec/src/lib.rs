//! The release spec file (`manifests/release.toml`, `kernels/research/research.toml` and
//! every spec a team writes): its schema and its one reader.
//!
//! Three programs read a spec: the build (`cargo xtask build`, which validates what it reads
//! further: targets, flags, paths), the parity runner on the GPU host, and the build script
//! of `cuda-aot-kernels`, which derives the release set's launch contract from it. They all
//! read it here, with the same schema: an unknown field is refused everywhere, not ignored
//! by one reader and refused by another.
//!
//! ```
//! let spec: cuda_aot_spec::SpecFile = toml::from_str(r#"
//!     [build]
//!     sources = "../kernels/cuda"
//!     targets = ["sm_90"]
//!
//!     [[module]]
//!     name = "ntt"
//!     source = ["ntt.cu", "twiddles.cu"]
//!     entry_points = ["ntt_butterfly"]
//!     protocol = "goldilocks-ntt"
//!     schedule_version = 1
//!     geometry = { block = 256 }
//! "#).unwrap();
//! let ntt = spec.module("ntt").unwrap();
//! assert_eq!(ntt.source.files(), ["ntt.cu", "twiddles.cu"]);
//! assert_eq!(ntt.geometry["block"], 256);
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// A whole spec file: the build section and its modules.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecFile {
    /// `[build]`: what every module shares.
    pub build: Build,
    /// `[[module]]` tables, in the file's order.
    #[serde(rename = "module")]
    pub modules: Vec<Module>,
}

/// The `[build]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Build {
    /// The folder of the sources, relative to the spec file.
    pub sources: String,
    /// The targets every module is built for (`sm_90`, `sm_90a`, ...), unless it names its own.
    pub targets: Vec<String>,
    /// nvcc flags of every module (before each module's own).
    #[serde(default)]
    pub nvcc_flags: Vec<String>,
    /// Include folders of every module, relative to the spec file.
    #[serde(default)]
    pub include_dirs: Vec<String>,
    /// nvcc front-end warnings (by number, e.g. 177) that fail every module's build.
    #[serde(default)]
    pub warnings_as_errors: Vec<u32>,
}

/// `source = "ntt.cu"` or `source = ["ntt.cu", "context.cu"]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SourceList {
    /// One source file.
    One(String),
    /// Several source files, linked as relocatable device code.
    Many(Vec<String>),
}

impl SourceList {
    /// The files, in the spec's order.
    pub fn files(&self) -> Vec<&str> {
        match self {
            SourceList::One(s) => vec![s.as_str()],
            SourceList::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// One `[[module]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Module {
    /// The module's name.
    pub name: String,
    /// Its source file or files, relative to `build.sources`.
    pub source: SourceList,
    /// Its kernels, by entry name.
    pub entry_points: Vec<String>,
    /// The protocol its kernels implement.
    pub protocol: String,
    /// The version of its launch schedule.
    pub schedule_version: u32,
    /// Compile-time geometry (`block`, `tile_log`, ...), each passed as `-DCUDA_AOT_<NAME>`.
    #[serde(default)]
    pub geometry: BTreeMap<String, u64>,
    /// More nvcc flags, after the build's.
    #[serde(default)]
    pub nvcc_flags: Vec<String>,
    /// Its own targets instead of the build's.
    #[serde(default)]
    pub targets: Option<Vec<String>>,
    /// Virtual targets (`compute_90`) to ship PTX for.
    #[serde(default)]
    pub ptx: Vec<String>,
    /// More include folders, relative to the spec file.
    #[serde(default)]
    pub include_dirs: Vec<String>,
    /// More warnings, by number, that fail this module's build.
    #[serde(default)]
    pub warnings_as_errors: Vec<u32>,
    /// A module of several sources: compile each to LTO IR and optimise across them at the
    /// device link (`-dlto`).
    #[serde(default)]
    pub link_time_optimisation: bool,
    /// The module's parity spec (`[module.parity]`), read by `promote` and the parity
    /// runner (`cuda_aot_kernels::parity::spec`); not a build input.
    #[serde(default)]
    pub parity: Option<toml::Value>,
}

impl SpecFile {
    /// The module called `name`.
    pub fn module(&self, name: &str) -> Option<&Module> {
        self.modules.iter().find(|m| m.name == name)
    }

    /// The modules' names, in the file's order (for "no module X (modules: ...)").
    pub fn module_names(&self) -> Vec<&str> {
        self.modules.iter().map(|m| m.name.as_str()).collect()
    }
}

/// Why a spec file could not be read.
#[derive(Debug)]
pub enum SpecError {
    /// The file could not be read.
    Read {
        /// The spec file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a spec: bad TOML, a missing or unknown field, a wrong type.
    Parse {
        /// The spec file.
        path: PathBuf,
        /// The parser's error, with the line and the field.
        source: toml::de::Error,
    },
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecError::Read { path, source } => {
                write!(f, "reading the release spec {}: {source}", path.display())
            }
            SpecError::Parse { path, source } => {
                write!(f, "parsing the release spec {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for SpecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SpecError::Read { source, .. } => Some(source),
            SpecError::Parse { source, .. } => Some(source),
        }
    }
}

/// Reads and parses the spec file at `path`. Paths inside it stay as written (relative to
/// the spec file's folder); checking them is the caller's part.
pub fn read(path: &Path) -> Result<SpecFile, SpecError> {
    let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| SpecError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("release.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn the_checkouts_specs_read() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let release = read(&root.join("manifests/release.toml")).unwrap();
        assert!(release.modules.len() >= 3, "{:?}", release.module_names());
        let research = read(&root.join("kernels/research/research.toml")).unwrap();
        let fused = research.module("ntt_fused").unwrap();
        assert!(fused.parity.is_some());
    }

    #[test]
    fn an_unknown_field_is_refused_with_its_name_and_file() {
        let (_d, path) = write(
            "[build]\nsources = \".\"\ntargets = [\"sm_90\"]\n[[module]]\nname = \"m\"\nsource = \"m.cu\"\nentry_points = [\"k\"]\nprotocoll = \"p\"\nschedule_version = 1\n",
        );
        let e = read(&path).unwrap_err();
        assert!(matches!(e, SpecError::Parse { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains("protocoll"), "{text}");
        assert!(text.contains(&path.display().to_string()), "{text}");
    }

    #[test]
    fn a_missing_file_is_a_read_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope.toml");
        let e = read(&path).unwrap_err();
        assert!(matches!(e, SpecError::Read { .. }), "{e}");
        assert!(e.to_string().contains("nope.toml"), "{e}");
    }
}
