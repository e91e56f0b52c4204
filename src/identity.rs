//! Module identity: every input that determines a built module's bytes, the digest that keys
//! the build cache, the registry and the process-wide module cache; and what a manifest says
//! of a module's kernels (their launch ABI) and globals, and what the cubin and PTX readers
//! report of a global ([`GlobalInfo`], with the one rule for which names count). The
//! manifest document itself is `manifest.rs`, looking kernels and globals up by name
//! `lookup.rs`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::digest::Digest;
use crate::error::Error;
use crate::name::{FunctionName, GlobalName, KernelName, ModuleName, Target};

/// What kind of blob a module is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Machine code for exactly one SM: production.
    Cubin,
    /// PTX for the driver's JIT: the labelled compatibility mode.
    Ptx,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Cubin => "cubin",
            Kind::Ptx => "ptx",
        })
    }
}

/// Which trust channel a document belongs to. Development releases are signed with keys
/// generated on first use and are refused by production trust roots and policies. Research
/// modules (NVRTC builds, feature `research`) are never signed or published: a trust root
/// of the research channel is refused, and the production and development policies refuse
/// research modules ([`crate::Policy::admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    /// Signed with generated development keys.
    Dev,
    /// Signed with managed release keys.
    Production,
    /// Compiled at run time with NVRTC for iterating on a research kernel: never in a
    /// registry, loaded only under [`crate::Policy::research`].
    Research,
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Channel::Dev => "dev",
            Channel::Production => "production",
            Channel::Research => "research",
        })
    }
}

/// The toolkit that compiled a module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Toolkit {
    /// nvcc's release version, e.g. `13.0.88`.
    pub nvcc: String,
    /// blake3 over the toolkit's executables (nvcc, cicc, ptxas, ...), in a fixed order.
    pub digest: Digest,
    /// Where the toolkit came from: `pinned-wheels` or `system`.
    pub source: String,
}

/// A CUDA driver API version such as 13.0 (`cuDriverGetVersion` returns 13000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DriverVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl DriverVersion {
    /// From `cuDriverGetVersion`'s encoding (`1000 * major + 10 * minor`).
    pub fn from_cuda(v: i32) -> Self {
        let v = v.max(0) as u32;
        DriverVersion {
            major: v / 1000,
            minor: (v % 1000) / 10,
        }
    }
}

impl fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for DriverVersion {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::InvalidName {
            kind: "driver version",
            value: s.escape_debug().to_string(),
            reason: "expected MAJOR.MINOR, e.g. 13.0",
        };
        let (a, b) = s.split_once('.').ok_or_else(bad)?;
        Ok(DriverVersion {
            major: a.parse().map_err(|_| bad())?,
            minor: b.parse().map_err(|_| bad())?,
        })
    }
}

impl Serialize for DriverVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
impl<'de> Deserialize<'de> for DriverVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Every input that determines a module's bytes. Its canonical JSON, hashed, is the
/// identity digest: the key of the build cache and of the runtime's module cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// Module name (from kernels/).
    pub module: ModuleName,
    /// Exact target: `sm_90`, `sm_90a`, or `compute_90` for PTX.
    pub sm: Target,
    /// cubin or ptx.
    pub kind: Kind,
    /// nvcc version and toolkit digest.
    pub toolkit: Toolkit,
    /// Minimum driver CUDA version (cubin: toolkit major.0; PTX: toolkit major.minor).
    pub driver_floor: DriverVersion,
    /// Host compiler used by nvcc (`-ccbin`), with its version line.
    pub host_toolchain: String,
    /// The exact nvcc flags, in order.
    pub flags: Vec<String>,
    /// Include folders (`-I`), in search order, as written in the spec: relative to the spec
    /// file, never an absolute path of the build machine.
    pub include_dirs: Vec<String>,
    /// blake3 over the normalised source and every header it includes (a module of several
    /// sources: over every file each of them read).
    pub source_digest: Digest,
    /// A module of several sources: the files, relative to the sources folder, in link
    /// order (each compiled with [`Identity::flags`] as relocatable device code); empty for
    /// a module of one source, which names its file in `flags`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// A module of several sources: the device link's flags (nvlink's, `--arch=sm_90`);
    /// empty for a module of one source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub link_flags: Vec<String>,
    /// Proof-protocol / ABI version the kernels implement.
    pub protocol: String,
    /// Compile-time launch geometry and tuning constants.
    pub geometry: BTreeMap<String, u64>,
    /// Version of the kernel schedule; bumped when the launch contract changes.
    pub schedule_version: u32,
}

impl Identity {
    /// blake3 of the canonical (compact, fixed field order) JSON of the identity.
    pub fn digest(&self) -> Digest {
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"cuda-aot identity v1\n");
        hasher.update(&crate::json::to_canonical(self));
        Digest(*hasher.finalize().as_bytes())
    }
}

/// One kernel parameter as the launch ABI lays it out: its byte offset in the parameter
/// buffer and its size (8 for a pointer, 4 for an `unsigned int`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Param {
    /// Byte offset in the parameter buffer.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
}

/// A kernel's launch ABI, read from the built blob and signed with the manifest: the
/// parameter layout and (for cubins) the resources the kernel uses.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchAbi {
    /// Parameters in declaration order (cubin: `EIATTR_KPARAM_INFO`; PTX: `.param` lines).
    pub params: Vec<Param>,
    /// Total bytes of the parameter buffer (cubin: `EIATTR_PARAM_CBANK`).
    pub param_bytes: u32,
    /// Registers per thread (cubin: `EIATTR_REGCOUNT`); unknown for PTX.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registers: Option<u32>,
    /// Static shared memory per block in bytes: the size of the cubin's
    /// `.nv.shared.<kernel>` section (from sm_90 on it includes the 1 KiB the toolkit
    /// reserves per block); unknown for PTX.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_bytes: Option<u32>,
    /// Local memory (stack frame) per thread in bytes (cubin: `EIATTR_FRAME_SIZE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_bytes: Option<u32>,
    /// The whole stack per thread in bytes: the kernel's own frame plus the deepest chain of
    /// device functions it calls (cubin: `EIATTR_MIN_STACK_SIZE`, computed by ptxas or, for
    /// a device-linked module, by nvlink over the call graph; cuobjdump's `STACK`). Equal
    /// to `local_bytes` for a kernel that calls no function with a frame of its own. `None`
    /// for PTX, for cubins without the attribute, and where recursion or an indirect call
    /// leaves it unknown (the launch then depends on `CU_LIMIT_STACK_SIZE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_bytes: Option<u32>,
    /// Largest block the kernel was compiled for (`__launch_bounds__`, cubin
    /// `EIATTR_MAX_THREADS`, PTX `.maxntid`); `None` when the source sets no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_threads: Option<u32>,
}

impl LaunchAbi {
    /// `(offset, size)` pairs, e.g. for messages: `0:8 8:8 16:4`.
    pub fn describe_params(&self) -> String {
        let v: Vec<String> = self
            .params
            .iter()
            .map(|p| format!("{}:{}", p.offset, p.size))
            .collect();
        v.join(" ")
    }
}

/// One kernel entry point of a module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Function {
    /// The symbol the driver looks up: `_ZN3ntt7bit_revI6gl64_tEEvPT_j` for a C++ kernel,
    /// the plain name for an `extern "C"` one.
    pub symbol: FunctionName,
    /// The C++ name without parameters or return type (`ntt::bit_rev<gl64_t>`); the symbol
    /// itself for `extern "C"` kernels.
    pub name: KernelName,
    /// The full demangled signature without the return type
    /// (`ntt::bit_rev<gl64_t>(gl64_t*, unsigned int)`), for C++ kernels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<KernelName>,
    /// The signed launch ABI: parameter layout and resource use.
    pub abi: LaunchAbi,
}

impl Function {
    /// The name to show: the demangled name (the symbol for `extern "C"` kernels).
    pub fn display_name(&self) -> &str {
        self.name.as_str()
    }
}

/// Where a device global lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GlobalSpace {
    /// `__constant__`: the user constant bank (cubin section `.nv.constant3`, PTX `.const`).
    Constant,
    /// `__device__`: global memory (cubin `.nv.global` when zero-initialised,
    /// `.nv.global.init` when initialised; PTX `.global`).
    Device,
}

impl fmt::Display for GlobalSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GlobalSpace::Constant => "constant",
            GlobalSpace::Device => "device",
        })
    }
}

/// One device global a module defines (a `__constant__` or `__device__` variable), read
/// from the built blob and signed with the manifest (schema v2): what
/// [`crate::Module::global`] resolves and checks every copy against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Global {
    /// The symbol the driver looks up: `_ZN8poseidon15ROUND_CONSTANTSE` for a C++ name,
    /// the plain name for one at global scope.
    pub symbol: GlobalName,
    /// The demangled name (`poseidon::ROUND_CONSTANTS`); the symbol itself for unmangled
    /// names.
    pub name: KernelName,
    /// Size in bytes (the symbol's `st_size`; PTX: element size times count).
    pub size: u64,
    /// `__constant__` or `__device__`.
    pub space: GlobalSpace,
    /// Whether the module's image gives it a non-zero initial value (a static initialiser
    /// nvcc kept: zero-initialised variables, `= 0` included, read as not initialised).
    pub initialised: bool,
}

/// One device global a cubin (or PTX text) defines: see [`crate::elf`]'s docs for which
/// symbols count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalInfo {
    /// The symbol (mangled for C++ names).
    pub symbol: String,
    /// Size in bytes.
    pub size: u64,
    /// `__constant__` or `__device__`.
    pub space: GlobalSpace,
    /// Has a non-zero initial value in the image.
    pub initialised: bool,
    /// A `__managed__` variable (unified memory): never signed.
    pub managed: bool,
}

/// Whether a data symbol's name is one a user's declaration produces: a C identifier (a
/// plain name or an Itanium-mangled one, letters, digits and `_`) that does not start with
/// `__`. The rule for cubins and PTX alike; what it leaves out is the compiler's:
///
/// - names with a character no declaration can produce: nvcc's string literals (`$str`,
///   `$str$1`) and the constant aggregates cicc makes under `-rdc=true` when an inline or
///   template `__device__` function assigns a `constexpr`-built struct
///   (`_ZN2hx4initEv$0`, `$1`, ... in source order: WEAK objects of `.nv.global.init`, in
///   section, binding, visibility and `st_other` exactly like a function-local `static` of
///   an inline function, so the name is the only mark they carry);
/// - names C and C++ reserve to the implementation (`__unnamed_N`, `__cudart_*` tables,
///   `__nv_static_*`).
pub fn is_user_global(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with("__")
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_identity() -> Identity {
        Identity {
            module: ModuleName::new("ntt").unwrap(),
            sm: "sm_90".parse().unwrap(),
            kind: Kind::Cubin,
            toolkit: Toolkit {
                nvcc: "13.0.88".into(),
                digest: Digest::of(b"tk"),
                source: "pinned-wheels".into(),
            },
            driver_floor: "13.0".parse().unwrap(),
            host_toolchain: "g++ 12.2.0".into(),
            flags: vec!["-cubin".into(), "-arch=sm_90".into()],
            include_dirs: vec!["../include".into()],
            source_digest: Digest::of(b"src"),
            sources: Vec::new(),
            link_flags: Vec::new(),
            protocol: "goldilocks-v1".into(),
            geometry: BTreeMap::from([("block".to_string(), 256)]),
            schedule_version: 1,
        }
    }

    #[test]
    fn identity_digest_changes_with_every_field() {
        let base = sample_identity();
        let d0 = base.digest();
        let mut variants = Vec::new();
        let mut v = base.clone();
        v.sm = "sm_90a".parse().unwrap();
        variants.push(v);
        let mut v = base.clone();
        v.flags.push("-lineinfo".into());
        variants.push(v);
        let mut v = base.clone();
        v.toolkit.digest = Digest::of(b"other");
        variants.push(v);
        let mut v = base.clone();
        v.include_dirs.push("../third_party".into());
        variants.push(v);
        let mut v = base.clone();
        v.host_toolchain = "g++ 13".into();
        variants.push(v);
        let mut v = base.clone();
        v.geometry.insert("block".into(), 128);
        variants.push(v);
        let mut v = base.clone();
        v.schedule_version = 2;
        variants.push(v);
        let mut v = base.clone();
        v.kind = Kind::Ptx;
        variants.push(v);
        let mut v = base.clone();
        v.sources = vec!["ntt.cu".into(), "tables.cu".into()];
        variants.push(v);
        let mut v = base.clone();
        v.link_flags = vec!["--arch=sm_90".into()];
        variants.push(v);
        for v in variants {
            assert_ne!(v.digest(), d0, "{v:?}");
        }
        assert_eq!(base.clone().digest(), d0);
    }

    #[test]
    fn driver_versions_print_as_major_minor() {
        assert_eq!(DriverVersion::from_cuda(13000).to_string(), "13.0");
        assert_eq!(DriverVersion::from_cuda(12080).to_string(), "12.8");
    }

    #[test]
    fn reserved_names_are_not_user_globals() {
        for name in [
            "$str",
            "$str$1",
            "__unnamed_1",
            "__cudart_i2opi_f",
            "__nv_static_1_x",
            "",
            // cicc's constant aggregates of inline functions under -rdc=true.
            "_ZN2hx4initEv$0",
            "_ZN2hx4initEv$1",
            "_ZN2fp4initIjEEvRNS_3mdsIT_EE$3",
        ] {
            assert!(!is_user_global(name), "{name}");
        }
        for name in [
            "counter",
            "_ZN6tables7counterE",
            "_counter",
            "x__y",
            // A function-local static of an inline function (WEAK, like cicc's objects).
            "_ZZ5tableiE1K",
        ] {
            assert!(is_user_global(name), "{name}");
        }
    }

    pub(crate) fn global(symbol: &str, name: &str, size: u64, space: GlobalSpace) -> Global {
        Global {
            symbol: GlobalName::new(symbol).unwrap(),
            name: KernelName::new(name).unwrap(),
            size,
            space,
            initialised: false,
        }
    }
}
