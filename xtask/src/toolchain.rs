//! `cargo xtask toolchain`: the CUDA toolkit that compiles, and its identity. By default the
//! wheels pinned in `manifests/toolchain.toml` (sha256-checked on every use, kept in the
//! per-user cache, unpacked once into `.cuda-aot/toolkit/<key>/`); `--toolkit system`
//! explicitly takes `CUDA_HOME` or the `nvcc` on PATH instead, and says so in its identity.

mod pinned;
mod stamp;
mod system;

use anyhow::{Context, Result, bail};
use cuda_aot::{DriverVersion, Kind, Target, Toolkit};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use crate::paths;

/// `Toolkit::source` of the pinned wheels.
pub const SOURCE_PINNED: &str = "pinned-wheels";
/// `Toolkit::source` of a system toolkit.
pub const SOURCE_SYSTEM: &str = "system";
/// Environment variables through which nvcc would take flags or a host compiler that are
/// not on its command line; every nvcc this tool runs has them removed.
pub const NVCC_ENV_SCRUB: &[&str] = &["NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN"];

/// Which CUDA toolkit compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ToolkitChoice {
    /// The wheels pinned in manifests/toolchain.toml: hermetic and reproducible (default).
    #[default]
    Pinned,
    /// `$CUDA_HOME/bin/nvcc`, else the `nvcc` on PATH. Manifests record `source = "system"`.
    System,
}

/// Toolkit selection shared by every task that compiles (`toolchain`, `build`, `repro`,
/// `bench`).
#[derive(Debug, Clone, clap::Args)]
pub struct ToolkitArgs {
    /// Which toolkit compiles: `pinned` (the sha256-pinned wheels of
    /// manifests/toolchain.toml, bootstrapped on first use) or `system` (CUDA_HOME, else
    /// nvcc on PATH; its identity differs, so its outputs never share cache entries with
    /// pinned builds).
    #[arg(long, value_enum, default_value_t = ToolkitChoice::Pinned)]
    pub toolkit: ToolkitChoice,
    /// Where pinned toolkits are unpacked (one folder per pinned wheel set).
    #[arg(long, value_name = "DIR", env = "CUDA_AOT_TOOLKIT_DIR")]
    pub toolkit_dir: Option<PathBuf>,
}

impl ToolkitArgs {
    /// The options these arguments select.
    pub fn options(&self) -> ToolchainOptions {
        let mut o = ToolchainOptions::new(self.toolkit);
        if let Some(d) = &self.toolkit_dir {
            o.toolkit_dir = d.clone();
        }
        o
    }
}

/// Fetch (pinned, sha256-checked) and unpack the CUDA toolkit wheels.
///
/// Fetches the five pinned NVIDIA wheels (nvcc, crt, nvvm, runtime headers, CCCL) with pip
/// into the per-user cache ($CUDA_AOT_CACHE_DIR, else ~/.cache/cuda-aot/wheels, keyed by
/// sha256), checks every sha256, and unpacks them into `.cuda-aot/toolkit/<key>/`. Reruns are
/// instant. Builds do this implicitly; run it to bootstrap ahead of time or to see the
/// toolkit identity that manifests will record.
#[derive(clap::Args)]
#[command(after_long_help = "\
The five pinned wheels (nvcc, crt, nvvm, runtime headers, CCCL; manifests/toolchain.toml) are
fetched with `python3 -m pip download --no-deps` into the per-user cache
($CUDA_AOT_CACHE_DIR, else ~/.cache/cuda-aot/wheels, one <sha256>.whl each), their sha256
checked on every use, and unpacked into .cuda-aot/toolkit/<key>/. Reruns are instant.
pip honours PIP_INDEX_URL and PIP_FIND_LINKS for mirrors and offline use.

The toolkit identity recorded in every manifest is nvcc's version plus a blake3 digest over
the toolkit's executables (bin/ and nvvm/bin/), and its source: pinned-wheels or system.")]
pub struct Args {
    #[command(flatten)]
    toolkit: ToolkitArgs,
}

impl Args {
    /// Runs the task: ensures the toolkit and prints what it is and where.
    pub fn run(self) -> Result<()> {
        let opts = self.toolkit.options();
        let t = std::time::Instant::now();
        let tk = ensure_with(&opts)?;
        if !tk.fresh {
            eprintln!(
                "toolchain: already in place, stamp and executables checked in {:.1} ms",
                t.elapsed().as_secs_f64() * 1000.0
            );
        }
        println!("toolkit  {}", tk.root.display());
        println!("nvcc     {} ({})", tk.identity.nvcc, tk.nvcc.display());
        println!("source   {}", tk.identity.source);
        println!("digest   {}", tk.identity.digest);
        println!("targets  {}", tk.real_targets.join(" "));
        println!("ptx      {}", tk.virtual_targets.join(" "));
        Ok(())
    }
}

/// Where a toolkit comes from and where it goes.
#[derive(Debug, Clone)]
pub struct ToolchainOptions {
    /// Pinned or system.
    pub choice: ToolkitChoice,
    /// The pin file (`manifests/toolchain.toml`).
    pub pin_file: PathBuf,
    /// Where pinned toolkits are unpacked (`.cuda-aot/toolkit`).
    pub toolkit_dir: PathBuf,
    /// The per-user wheel cache (`<user cache>/wheels`), files named `<sha256>.whl`.
    pub wheel_cache: PathBuf,
}

impl ToolchainOptions {
    /// The defaults for `choice`: the repository's pin file, `.cuda-aot/toolkit` and the
    /// per-user cache.
    pub fn new(choice: ToolkitChoice) -> Self {
        ToolchainOptions {
            choice,
            pin_file: paths::repo_root().join("manifests/toolchain.toml"),
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

/// Ensures the default toolkit of `choice` (pinned: bootstrapping it on first use).
#[allow(dead_code, reason = "API for the release task")]
pub fn ensure(choice: ToolkitChoice) -> Result<ToolkitInfo> {
    ensure_with(&ToolchainOptions::new(choice))
}

/// Ensures the toolkit `opts` selects and returns its identity.
pub fn ensure_with(opts: &ToolchainOptions) -> Result<ToolkitInfo> {
    match opts.choice {
        ToolkitChoice::Pinned => pinned::ensure(opts),
        ToolkitChoice::System => system::ensure(opts),
    }
}

/// The first executable named `name` on PATH (or `name` itself when it holds a `/`).
pub fn which(name: &str) -> Result<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return if p.is_file() {
            Ok(p)
        } else {
            bail!("{name} does not exist")
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("`{name}` is not on PATH"))
}

/// A relative path made only of normal components (no `..`, no root).
pub fn is_relative_plain(p: &Path) -> bool {
    !p.as_os_str().is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// A command line as a shell would take it (for error messages).
pub fn show_command(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./=+:,@%".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
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

    #[test]
    fn shell_quoting_is_copy_pasteable() {
        assert_eq!(shell_quote("-DCUDA_AOT_BLOCK=256"), "-DCUDA_AOT_BLOCK=256");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
