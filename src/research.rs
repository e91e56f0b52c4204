//! Research modules: a kernel compiled at run time with NVRTC straight to a cubin for one
//! device (`nvrtcGetCUBIN`), described by a manifest of the `research` channel. Compiled
//! only with the cargo feature `research`.
//!
//! A research module is never signed, published or cached: it exists in the process that
//! compiled it, for iterating on a kernel and for parity runs against its AOT build. Its
//! manifest says so everywhere it is shown (channel `research`, toolkit `NVRTC x.y`), and
//! only [`crate::Policy::research`] loads it ([`crate::Runtime::load_research`]); the
//! production and development policies refuse it ([`crate::Error::ResearchRefused`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cuda::research::{self as nvrtc, Output};
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::identity::{Channel, DriverVersion, Function, Global, Identity, Kind, Toolkit};
use crate::manifest::Manifest;
use crate::name::{FunctionName, GlobalName, KernelName, ModuleName, Target};

/// What to compile: the inputs that make up a research module's identity.
#[derive(Debug, Clone)]
pub struct ResearchSource<'a> {
    /// Module name.
    pub module: &'a ModuleName,
    /// The CUDA C++ source text.
    pub source: &'a str,
    /// Program name in diagnostics (the file name).
    pub file: &'a str,
    /// Exact target (`sm_90`, `sm_90a`): the device's.
    pub target: Target,
    /// NVRTC options (defines, standard, `--include-path=...`).
    pub options: &'a [String],
    /// Protocol string, as the module's spec writes it.
    pub protocol: &'a str,
    /// Geometry (already among the options as `-DCUDA_AOT_*` defines).
    pub geometry: &'a BTreeMap<String, u64>,
    /// Schedule version.
    pub schedule_version: u32,
}

/// An NVRTC-built cubin and its `research`-channel manifest.
#[derive(Debug, Clone)]
pub struct ResearchModule {
    manifest: Manifest,
    bytes: Arc<[u8]>,
}

impl ResearchModule {
    /// Compiles `src` with NVRTC to a cubin for `src.target` and describes it: kernels and
    /// their launch ABI read from the cubin (as for AOT builds), toolkit `NVRTC x.y`,
    /// channel `research`.
    pub fn compile(src: &ResearchSource<'_>) -> Result<ResearchModule> {
        let (major, minor) = nvrtc::version()?;
        let options: Vec<&str> = src.options.iter().map(String::as_str).collect();
        let arch = src.target.to_string();
        let cubin = nvrtc::compile(src.source, src.file, &arch, Output::Cubin, &options)?;
        let info = crate::elf::inspect(&cubin).map_err(|reason| Error::NotCubin {
            what: format!("{} {} (NVRTC output)", src.module, src.target),
            reason,
        })?;
        let functions = info
            .kernels
            .into_iter()
            .map(|k| {
                Ok(Function {
                    symbol: FunctionName::new(&k.symbol)?,
                    name: KernelName::new(&k.symbol)?,
                    signature: None,
                    abi: k.abi,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // Globals by symbol (no demangler in the runtime, as for kernels); a __managed__
        // variable is refused as in AOT builds.
        let what = || format!("{} {} (NVRTC output)", src.module, src.target);
        let globals = info
            .globals
            .into_iter()
            .map(|g| {
                if g.managed {
                    return Err(Error::ManagedGlobal {
                        what: what(),
                        symbol: g.symbol,
                    });
                }
                Ok(Global {
                    symbol: GlobalName::new(&g.symbol)?,
                    name: KernelName::new(&g.symbol)?,
                    size: g.size,
                    space: g.space,
                    initialised: g.initialised,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let version = format!("NVRTC {major}.{minor}");
        let manifest = Manifest {
            schema: Manifest::SCHEMA.into(),
            identity: Identity {
                module: src.module.clone(),
                sm: src.target,
                kind: Kind::Cubin,
                toolkit: Toolkit {
                    digest: Digest::of(version.as_bytes()),
                    nvcc: version,
                    source: "nvrtc".into(),
                },
                driver_floor: DriverVersion {
                    major: major.max(0) as u32,
                    minor: 0,
                },
                host_toolchain: "none (NVRTC: device code only)".into(),
                flags: src.options.to_vec(),
                include_dirs: Vec::new(),
                source_digest: Digest::of(src.source.as_bytes()),
                sources: Vec::new(),
                link_flags: Vec::new(),
                protocol: src.protocol.into(),
                geometry: src.geometry.clone(),
                schedule_version: src.schedule_version,
            },
            module_digest: Digest::of(&cubin),
            size: cubin.len() as u64,
            functions,
            globals: Some(globals),
            channel: Channel::Research,
        };
        Ok(ResearchModule {
            manifest,
            bytes: cubin.into(),
        })
    }

    /// The research-channel manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The cubin.
    pub fn bytes(&self) -> &Arc<[u8]> {
        &self.bytes
    }
}
