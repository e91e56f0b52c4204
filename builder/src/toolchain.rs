//! The CUDA toolkit that compiles, and its identity. By default the
//! wheels pinned in the project's `manifests/toolchain.toml`, or the pins built into the
//! tool (sha256-checked on every use, kept in the per-user cache, unpacked once into
//! `.cuda-aot/toolkit/<key>/`); `--toolkit system` explicitly takes `CUDA_HOME` or the `nvcc`
//! on PATH instead, and says so in its identity.

mod pinned;
mod stamp;
mod system;

use anyhow::{Context, Result};
use cuda_aot::{DriverVersion, Kind, Target, Toolkit};
use std::path::PathBuf;

use crate::paths;

/// `Toolkit::source` of the pinned wheels.
pub const SOURCE_PINNED: &str = "pinned-wheels";
/// `Toolkit::source` of a system toolkit.
pub const SOURCE_SYSTEM: &str = "system";
/// Environment variables through which nvcc would take flags or a host compiler that are
/// not on its command line; every nvcc this tool runs has them removed.
pub const NVCC_ENV_SCRUB: &[&str] = &["NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN"];

/// The pin file this tool was released with: used by a project that has no
/// `manifests/toolchain.toml` of its own (a spec kept in another repository).
pub const BUILTIN_PINS: &str = include_str!("../../manifests/toolchain.toml");

/// Which CUDA toolkit compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ToolkitChoice {
    /// The wheels pinned in manifests/toolchain.toml: hermetic and reproducible.
    #[default]
    Pinned,
    /// `$CUDA_HOME/bin/nvcc`, else the `nvcc` on PATH. Manifests record `source = "system"`.
    System,
}

/// Where the wheel pins come from.
#[derive(Debug, Clone)]
pub enum Pins {
    /// A pin file (`manifests/toolchain.toml` of a checkout).
    File(PathBuf),
    /// [`BUILTIN_PINS`].
    Builtin,
}

impl Pins {
    /// The pins of the current project: its `manifests/toolchain.toml`, else the built-in
    /// ones.
    pub fn of_project() -> Pins {
        let p = paths::repo_root().join("manifests/toolchain.toml");
        if paths::project().checkout && p.is_file() {
            Pins::File(p)
        } else {
            Pins::Builtin
        }
    }

    /// For messages: the file, or `the toolkit pins built into cuda-aot's xtask`.
    pub fn describe(&self) -> String {
        match self {
            Pins::File(p) => p.display().to_string(),
            Pins::Builtin => format!(
                "the toolkit pins built into this tool (xtask {})",
                env!("CARGO_PKG_VERSION")
            ),
        }
    }
}

/// One pinned toolkit wheel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wheel {
    /// The PyPI project (`nvidia-cuda-nvcc`).
    pub name: String,
    /// Its exact version.
    pub version: String,
    /// The sha256 of the wheel file (hex).
    pub sha256: String,
}

/// The wheels `pins` names: what a pinned toolkit was unpacked from.
pub fn pinned_wheels(pins: &Pins) -> Result<Vec<Wheel>> {
    pinned::wheels(pins)
}

/// Where a toolkit comes from and where it goes.
#[derive(Debug, Clone)]
pub struct ToolchainOptions {
    /// Pinned or system.
    pub choice: ToolkitChoice,
    /// The wheel pins.
    pub pins: Pins,
    /// Where pinned toolkits are unpacked (`.cuda-aot/toolkit`).
    pub toolkit_dir: PathBuf,
    /// The per-user wheel cache (`<user cache>/wheels`), files named `<sha256>.whl`.
    pub wheel_cache: PathBuf,
}

impl ToolchainOptions {
    /// The defaults for `choice`: the project's pins, `.cuda-aot/toolkit` and the
    /// per-user cache.
    pub fn new(choice: ToolkitChoice) -> Self {
        ToolchainOptions {
            choice,
            pins: Pins::of_project(),
            toolkit_dir: paths::work_dir().join("toolkit"),
            wheel_cache: paths::user_cache_dir().join("wheels"),
        }
    }
}

/// A toolkit ready to compile, and the identity manifests record for it.
#[derive(Debug, Clone)]
pub struct ToolkitInfo {
    /// The toolkit root (holds `bin/nvcc`, `nvvm/bin/cicc`, `include/`).
    pub root: PathBuf,
    /// `root/bin/nvcc`.
    pub nvcc: PathBuf,
    /// nvcc version, digest over the executables, and source (`pinned-wheels` / `system`).
    pub identity: Toolkit,
    /// Real targets nvcc accepts (`sm_80`, ...); `a` variants exist from sm_90 on.
    pub real_targets: Vec<String>,
    /// Virtual architectures nvcc accepts for PTX (`compute_80`, ...).
    pub virtual_targets: Vec<String>,
    /// Whether this call unpacked (or, for a system toolkit, hashed) it; false when its
    /// stamp was still valid.
    pub fresh: bool,
}

impl ToolkitInfo {
    /// Whether this nvcc can compile for `t` (`sm_90a` needs `sm_90` listed and SM >= 90;
    /// the family variant `sm_100f` needs `sm_100` listed and nvcc 12.9 or newer).
    pub fn supports(&self, t: &Target) -> bool {
        let base = t.base().to_string();
        let nvcc: Vec<u32> = self
            .identity
            .nvcc
            .split('.')
            .take(2)
            .filter_map(|p| p.parse().ok())
            .collect();
        let family_ok = nvcc.as_slice() >= [12, 9].as_slice();
        let list = if t.virtual_arch {
            &self.virtual_targets
        } else {
            &self.real_targets
        };
        list.contains(&base)
            && (!t.arch_specific || t.number() >= 90)
            && (!t.family_specific || family_ok)
    }

    /// The minimum driver version for a blob of `kind` built by this toolkit: cubin needs
    /// the toolkit's major.0, PTX its major.minor.
    pub fn driver_floor(&self, kind: Kind) -> Result<DriverVersion> {
        let mut parts = self.identity.nvcc.split('.');
        let mut num = || -> Result<u32> {
            parts.next().and_then(|p| p.parse().ok()).with_context(|| {
                format!(
                    "nvcc version `{}` is not MAJOR.MINOR.PATCH",
                    self.identity.nvcc
                )
            })
        };
        let (major, minor) = (num()?, num()?);
        Ok(match kind {
            Kind::Cubin => DriverVersion { major, minor: 0 },
            Kind::Ptx => DriverVersion { major, minor },
        })
    }
}

/// Ensures the toolkit `opts` selects and returns its identity.
pub fn ensure_with(opts: &ToolchainOptions) -> Result<ToolkitInfo> {
    paths::prepare(&opts.toolkit_dir)?;
    match opts.choice {
        ToolkitChoice::Pinned => pinned::ensure(opts),
        ToolkitChoice::System => system::ensure(opts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuda_aot::Digest;

    #[test]
    fn a_variants_need_sm_90_or_later() {
        let tk = ToolkitInfo {
            root: PathBuf::new(),
            nvcc: PathBuf::new(),
            identity: Toolkit {
                nvcc: "13.0.88".into(),
                digest: Digest::of(b""),
                source: SOURCE_PINNED.into(),
            },
            real_targets: vec!["sm_80".into(), "sm_89".into(), "sm_90".into()],
            virtual_targets: vec!["compute_90".into()],
            fresh: false,
        };
        let ok = |s: &str| tk.supports(&s.parse().unwrap());
        assert!(
            ok("sm_80") && ok("sm_90") && ok("sm_90a") && ok("compute_90") && ok("compute_90a")
        );
        assert!(!ok("sm_89a") && !ok("sm_91") && !ok("compute_80") && !ok("sm_100"));
        assert_eq!(tk.driver_floor(Kind::Cubin).unwrap().to_string(), "13.0");
        assert_eq!(tk.driver_floor(Kind::Ptx).unwrap().to_string(), "13.0");
    }
}
