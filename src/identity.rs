//! Module identity: every input that determines a built module's bytes, the digest that keys
//! the build cache, the registry and the process-wide module cache, and the module manifest.

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

    /// Whether `query` names this kernel: its exact symbol, its demangled name without
    /// parameters, or its full demangled signature (with or without a leading return type),
    /// as `cpp_demangle` or c++filt spell them ([`canonical_cpp`]: `a<4, true>` =
    /// `a<4,true>`, `stage<(unsigned int)10>` = `stage<10u>`).
    pub fn matches(&self, query: &str) -> bool {
        query == self.symbol.as_str() || self.matches_canonical(&canonical_cpp(query))
    }

    /// [`Function::matches`] for a query already in canonical form ([`canonical_cpp`]),
    /// without the symbol: what a resolver calls for every kernel, canonicalising once.
    fn matches_canonical(&self, q: &str) -> bool {
        if q == canonical_cpp(self.name.as_str()) {
            return true;
        }
        let Some(sig) = &self.signature else {
            return false;
        };
        let sig = canonical_cpp(sig.as_str());
        q == sig || q.split_once(' ').is_some_and(|(_ret, rest)| rest == sig)
    }
}

/// Resolves `query` to exactly one of `functions` ([`Function::matches`]); an exact symbol
/// wins outright. `Err(candidates)`: every kernel that matched (empty when none did).
pub fn resolve_function<'a>(
    functions: &'a [Function],
    query: &str,
) -> Result<&'a Function, Vec<&'a Function>> {
    resolve(
        functions,
        query,
        |f| f.symbol.as_str(),
        Function::matches_canonical,
    )
}

/// Resolves `query` to exactly one of `globals` ([`Global::matches`]), by the same rule as
/// kernels ([`resolve_function`]): an exact symbol wins outright; `Err(candidates)` holds
/// every global that matched (empty when none did).
pub fn resolve_global<'a>(
    globals: &'a [Global],
    query: &str,
) -> Result<&'a Global, Vec<&'a Global>> {
    resolve(
        globals,
        query,
        |g| g.symbol.as_str(),
        Global::matches_canonical,
    )
}

/// The one name-resolution rule of kernels and globals: the exact symbol, else exactly one
/// item whose names match the query in canonical form (computed once, here).
fn resolve<'a, T>(
    items: &'a [T],
    query: &str,
    symbol: impl Fn(&T) -> &str,
    matches_canonical: impl Fn(&T, &str) -> bool,
) -> Result<&'a T, Vec<&'a T>> {
    if let Some(item) = items.iter().find(|i| symbol(i) == query) {
        return Ok(item);
    }
    let q = canonical_cpp(query);
    let hits: Vec<&T> = items.iter().filter(|i| matches_canonical(i, &q)).collect();
    match hits.as_slice() {
        [one] => Ok(one),
        _ => Err(hits),
    }
}

/// How a kernel is listed in messages: `name` for C kernels, `signature` for C++ ones.
pub fn describe_functions<'a>(functions: impl IntoIterator<Item = &'a Function>) -> String {
    let v: Vec<&str> = functions
        .into_iter()
        .map(|f| f.signature.as_ref().unwrap_or(&f.name).as_str())
        .collect();
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

/// A C++ name as c++filt (binutils) and Nsight spell it, from the spelling `cpp_demangle`
/// gives (which the manifest records); a c++filt spelling is returned unchanged. The two
/// demanglers differ in template arguments:
/// - integer literals: `(unsigned int)10`, `(long)-3`, `(unsigned long long)5` are `10u`,
///   `-3l`, `5ull` (`int` literals are bare in both; `(char)97`, `(short)2` in both);
/// - pointers to member functions: `&S::f(int) const` is `&(S::f(int) const)`, and a
///   non-const one, `&S::g()`, is `&S::g`.
pub fn cxxfilt_spelling(name: &str) -> String {
    let b = name.as_bytes();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < b.len() {
        let at_arg = i > 0 && matches!(b[i - 1], b'<' | b',' | b' ') && arg_start(b, i);
        let rewritten = match b[i] {
            b'(' if at_arg => integer_literal(name, i),
            b'&' if at_arg && b.get(i + 1) != Some(&b'(') => member_function(name, i),
            _ => None,
        };
        if let Some((text, next)) = rewritten {
            out.push_str(&text);
            i = next;
            continue;
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// Whether `i` starts a template argument: after `<`, `,` or `, `.
fn arg_start(b: &[u8], i: usize) -> bool {
    match b[i - 1] {
        b'<' | b',' => true,
        b' ' => i >= 2 && b[i - 2] == b',',
        _ => false,
    }
}

/// The end of the template argument starting at `from`: the index of the `,` or `>` that
/// closes it (brackets balanced), if any.
fn arg_end(b: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (j, &c) in b.iter().enumerate().skip(from) {
        match c {
            b'<' | b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b'>' if depth == 0 => return Some(j),
            b'>' => depth -= 1,
            b',' if depth == 0 => return Some(j),
            _ => {}
        }
    }
    None
}

/// `(unsigned int)10` at `i` (a whole template argument): `10u` and where it ends.
fn integer_literal(name: &str, i: usize) -> Option<(String, usize)> {
    const SUFFIX: [(&str, &str); 5] = [
        ("unsigned int", "u"),
        ("unsigned long", "ul"),
        ("long", "l"),
        ("unsigned long long", "ull"),
        ("long long", "ll"),
    ];
    let close = i + name[i..].find(')')?;
    let ty = name[i + 1..close].trim();
    let suffix = SUFFIX.iter().find(|(t, _)| *t == ty)?.1;
    let end = arg_end(name.as_bytes(), close + 1)?;
    let value = name[close + 1..end].trim();
    let digits = value.strip_prefix('-').unwrap_or(value);
    (!digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()))
        .then(|| (format!("{value}{suffix}"), end))
}

/// `&S::f(int) const` or `&S::g()` at `i` (a whole template argument): c++filt's
/// `&(S::f(int) const)` or `&S::g`, and where it ends.
fn member_function(name: &str, i: usize) -> Option<(String, usize)> {
    let b = name.as_bytes();
    let end = arg_end(b, i + 1)?;
    let arg = name[i + 1..end].trim_end();
    // The parameter list: the last top-level `(...)`.
    let mut depth = 0i32;
    let mut open = None;
    for (j, c) in arg.bytes().enumerate() {
        match c {
            b'<' => depth += 1,
            b'>' => depth -= 1,
            b'(' if depth == 0 && open.is_none() => open = Some(j),
            _ => {}
        }
    }
    let open = open?;
    let close = open + arg[open..].rfind(')')?;
    let qualifier = arg[close + 1..].trim();
    let target = &arg[..open];
    if !target.contains("::") {
        return None;
    }
    match qualifier {
        "" => Some((format!("&{target}"), end)),
        "const" => Some((format!("&({})", arg), end)),
        _ => None,
    }
}

/// The form names are compared in: whitespace normalised ([`normalise_cpp`]) and spelled
/// as c++filt does ([`cxxfilt_spelling`]), so a name copied from either demangler (or from
/// Nsight, which prints c++filt's) finds the kernel.
pub fn canonical_cpp(s: &str) -> String {
    normalise_cpp(&cxxfilt_spelling(&normalise_cpp(s)))
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

impl Global {
    /// Whether `query` names this global: its exact symbol or its demangled name, in either
    /// demangler's spelling (as for kernels, [`Function::matches`]).
    pub fn matches(&self, query: &str) -> bool {
        query == self.symbol.as_str() || self.matches_canonical(&canonical_cpp(query))
    }

    /// [`Global::matches`] for a query already in canonical form, without the symbol.
    fn matches_canonical(&self, q: &str) -> bool {
        q == canonical_cpp(self.name.as_str())
    }
}

/// How globals are listed in messages: `name (size bytes, space)`, `(none)` when empty.
pub fn describe_globals<'a>(globals: impl IntoIterator<Item = &'a Global>) -> String {
    let v: Vec<String> = globals
        .into_iter()
        .map(|g| format!("{} ({} bytes, {})", g.name, g.size, g.space))
        .collect();
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

/// C++ names with whitespace normalised: a space is kept only between two identifier
/// characters (`unsigned int`), so `ns::k<4, true>` and `ns::k<4,true>` compare equal.
pub fn normalise_cpp(s: &str) -> String {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(s.len());
    let mut pending_space = false;
    for c in s.trim().chars() {
        if c.is_whitespace() {
            pending_space = true;
            continue;
        }
        if pending_space && ident(c) && out.chars().last().is_some_and(ident) {
            out.push(' ');
        }
        pending_space = false;
        out.push(c);
    }
    out
}

/// The payload of a signed module manifest: the identity plus what the build produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`Manifest::SCHEMA`].
    pub schema: String,
    /// The build inputs (nested: serde cannot deny unknown fields through `flatten`).
    pub identity: Identity,
    /// blake3 of the blob bytes.
    pub module_digest: Digest,
    /// Blob size in bytes.
    pub size: u64,
    /// Kernel entry points, read from the cubin's symbol table.
    pub functions: Vec<Function>,
    /// Device globals the module defines ([`Global`]): required in schema v2 (possibly
    /// empty), absent in v1 manifests, which predate signed globals and still verify as
    /// before (their globals are not checked, and [`crate::Module::global`] refuses them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub globals: Option<Vec<Global>>,
    /// The trust channel this manifest was built for.
    pub channel: Channel,
}

impl Manifest {
    /// The schema tag of the manifest format the builder writes (with `globals`).
    pub const SCHEMA: &'static str = "cuda-aot/manifest/v2";
    /// The first manifest format, without `globals`: still read and verified.
    pub const SCHEMA_V1: &'static str = "cuda-aot/manifest/v1";

    /// The one schema rule of manifests, applied by the verifier and the publisher: v2 with
    /// a `globals` list, or v1 without one. `Err`: what is wrong, for the caller's error.
    pub fn check_schema(&self) -> std::result::Result<(), String> {
        let schema = crate::error::escape_untrusted(&self.schema);
        match (self.schema.as_str(), self.globals.is_some()) {
            (Self::SCHEMA, true) | (Self::SCHEMA_V1, false) => Ok(()),
            (Self::SCHEMA, false) => Err(format!("schema {schema:?} requires a `globals` list")),
            (Self::SCHEMA_V1, true) => Err(format!(
                "schema {schema:?} has no `globals` field (signed globals are schema {:?})",
                Self::SCHEMA
            )),
            _ => Err(format!(
                "schema {schema:?}, expected {:?} (or {:?})",
                Self::SCHEMA,
                Self::SCHEMA_V1
            )),
        }
    }

    /// `module sm (kind)`, the label used in errors and tables.
    pub fn label(&self) -> String {
        let id = &self.identity;
        match id.kind {
            Kind::Cubin => format!("{} {}", id.module, id.sm),
            Kind::Ptx => format!("{} {} (ptx, compatibility mode)", id.module, id.sm),
        }
    }
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
    fn manifest_round_trips_and_refuses_unknown_fields() {
        let m = Manifest {
            schema: Manifest::SCHEMA.into(),
            identity: sample_identity(),
            module_digest: Digest::of(b"blob"),
            size: 4,
            functions: vec![Function {
                symbol: FunctionName::new("ntt_butterfly").unwrap(),
                name: KernelName::new("ntt_butterfly").unwrap(),
                signature: None,
                abi: LaunchAbi {
                    params: vec![Param { offset: 0, size: 8 }, Param { offset: 8, size: 8 }],
                    param_bytes: 16,
                    registers: Some(24),
                    ..Default::default()
                },
            }],
            globals: Some(Vec::new()),
            channel: Channel::Dev,
        };
        let bytes = crate::json::to_vec(&m);
        let back: Manifest = crate::json::parse(&bytes, 1 << 20, "m").unwrap();
        assert_eq!(back, m);
        let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        v["extra"] = 1.into();
        let err = crate::json::parse::<Manifest>(&serde_json::to_vec(&v).unwrap(), 1 << 20, "m")
            .unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        assert_eq!(DriverVersion::from_cuda(13000).to_string(), "13.0");
        assert_eq!(DriverVersion::from_cuda(12080).to_string(), "12.8");
    }

    fn cpp(symbol: &str, name: &str, signature: &str) -> Function {
        Function {
            symbol: FunctionName::new(symbol).unwrap(),
            name: KernelName::new(name).unwrap(),
            signature: Some(KernelName::new(signature).unwrap()),
            abi: LaunchAbi::default(),
        }
    }

    #[test]
    fn kernels_resolve_by_symbol_name_or_signature() {
        let fs = [
            cpp(
                "_ZN3ntt1kILi4ELb1EEEvPmi",
                "ntt::k<4, true>",
                "ntt::k<4, true>(unsigned long*, int)",
            ),
            cpp(
                "_ZN3ntt1kILi8ELb1EEEvPmi",
                "ntt::k<8, true>",
                "ntt::k<8, true>(unsigned long*, int)",
            ),
            cpp("_Z3sumPi", "sum", "sum(int*)"),
            cpp("_Z3sumPf", "sum", "sum(float*)"),
        ];
        let sym = |q: &str| {
            resolve_function(&fs, q)
                .map(|f| f.symbol.as_str())
                .map_err(|c| c.len())
        };
        assert_eq!(sym("ntt::k<4, true>"), Ok("_ZN3ntt1kILi4ELb1EEEvPmi"));
        assert_eq!(sym("ntt::k<4,true>"), Ok("_ZN3ntt1kILi4ELb1EEEvPmi"));
        assert_eq!(sym(" ntt::k< 8 , true >"), Ok("_ZN3ntt1kILi8ELb1EEEvPmi"));
        assert_eq!(
            sym("void ntt::k<8, true>(unsigned long*, int)"),
            Ok("_ZN3ntt1kILi8ELb1EEEvPmi")
        );
        assert_eq!(sym("_Z3sumPf"), Ok("_Z3sumPf"));
        assert_eq!(sym("sum(int*)"), Ok("_Z3sumPi"));
        // Overloads share a name: ambiguous, both candidates returned.
        assert_eq!(sym("sum"), Err(2));
        assert_eq!(sym("ntt::k"), Err(0));
        // `unsigned long` keeps its space; `unsignedlong` is another name.
        assert_eq!(sym("ntt::k<4, true>(unsignedlong*, int)"), Err(0));
        assert_eq!(describe_functions(&fs[2..]), "sum(int*), sum(float*)");
    }

    /// What cpp_demangle 0.5.1 and c++filt (binutils 2.40) print for kernels nvcc 13.0
    /// mangled (`_ZN3ntt5stageILj10ELb1EEEvPm`, `_Z4litsIL...`, `_Z5memfnIXadL_ZNK1S1fEiEEEvPS0_`,
    /// `_Z6memfn2IXadL_ZN1S1gEvEEEvPS0_`): both spellings find the kernel.
    #[test]
    fn names_resolve_as_cpp_demangle_and_cxxfilt_spell_them() {
        let cases = [
            (
                "ntt::stage<(unsigned int)10, true>(unsigned long*)",
                "void ntt::stage<10u, true>(unsigned long*)",
            ),
            (
                "lit<(unsigned int)7, -3, (unsigned long)9, (long)-11, (unsigned long long)5, (long long)-6, (short)2, (unsigned short)3, (unsigned char)4, (signed char)-5, (char)122, false>(int*)",
                "void lit<7u, -3, 9ul, -11l, 5ull, -6ll, (short)2, (unsigned short)3, (unsigned char)4, (signed char)-5, (char)122, false>(int*)",
            ),
            (
                "memfn<&S::f(int) const>(S*)",
                "void memfn<&(S::f(int) const)>(S*)",
            ),
            ("memfn2<&S::g()>(S*)", "void memfn2<&S::g>(S*)"),
            (
                "mul_by<(bls12_381::fp2_t::mem_t const*)0>(unsigned int*)",
                "void mul_by<(bls12_381::fp2_t::mem_t const*)0>(unsigned int*)",
            ),
        ];
        for (ours, theirs) in cases {
            // The listing's c++filt spelling is exactly what c++filt printed.
            assert_eq!(format!("void {}", cxxfilt_spelling(ours)), theirs, "{ours}");
            let f = cpp("_Zsym", &ours[..ours.rfind('(').unwrap()], ours);
            assert!(f.matches(theirs), "{theirs} should find {ours}");
            assert!(f.matches(ours));
            // And the name without parameters, in c++filt's spelling.
            let bare = &theirs["void ".len()..theirs.rfind('(').unwrap()];
            assert!(f.matches(bare), "{bare}");
        }
        // Another value or another type is another kernel.
        let f = cpp(
            "_Zs",
            "ntt::stage<(unsigned int)10, true>",
            "ntt::stage<(unsigned int)10, true>(unsigned long*)",
        );
        assert!(!f.matches("ntt::stage<11u, true>"));
        assert!(!f.matches("ntt::stage<10ul, true>"));
        assert!(!f.matches("ntt::stage<10, true>"));
        // Idempotent on c++filt's own spelling; casts it does not use are left alone.
        assert_eq!(cxxfilt_spelling("k<10u, (char)97>"), "k<10u, (char)97>");
        assert_eq!(cxxfilt_spelling("f(unsigned int)"), "f(unsigned int)");
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

    /// Issue 19, item 4: v1 manifests (no `globals`) still parse, and serialise back to the
    /// same bytes (they are signed); v2 requires the list; the one schema rule refuses a
    /// v1 manifest with globals and a v2 manifest without them.
    #[test]
    fn issue_19_v1_manifests_parse_unchanged_and_v2_requires_globals() {
        let mut m = Manifest {
            schema: Manifest::SCHEMA_V1.into(),
            identity: sample_identity(),
            module_digest: Digest::of(b"blob"),
            size: 4,
            functions: vec![],
            globals: None,
            channel: Channel::Dev,
        };
        let v1 = crate::json::to_vec(&m);
        assert!(!String::from_utf8_lossy(&v1).contains("globals"));
        let back: Manifest = crate::json::parse(&v1, 1 << 20, "m").unwrap();
        assert_eq!((back.globals.as_ref(), back.check_schema()), (None, Ok(())));
        assert_eq!(crate::json::to_vec(&back), v1);
        m.schema = Manifest::SCHEMA.into();
        assert!(
            m.check_schema()
                .unwrap_err()
                .contains("requires a `globals` list")
        );
        m.globals = Some(vec![global(
            "_ZN8poseidon3MDSE",
            "poseidon::MDS",
            64,
            GlobalSpace::Constant,
        )]);
        assert_eq!(m.check_schema(), Ok(()));
        let v2 = crate::json::to_vec(&m);
        let value: serde_json::Value = serde_json::from_slice(&v2).unwrap();
        assert_eq!(
            value["globals"],
            serde_json::json!([{"symbol": "_ZN8poseidon3MDSE", "name": "poseidon::MDS",
                "size": 64, "space": "constant", "initialised": false}])
        );
        assert_eq!(
            crate::json::parse::<Manifest>(&v2, 1 << 20, "m").unwrap(),
            m
        );
        m.schema = Manifest::SCHEMA_V1.into();
        assert!(
            m.check_schema()
                .unwrap_err()
                .contains("has no `globals` field")
        );
        m.schema = "cuda-aot/manifest/v9".into();
        assert!(m.check_schema().unwrap_err().contains("expected"));
    }

    #[test]
    fn globals_resolve_by_symbol_or_demangled_name() {
        let gs = [
            global(
                "_ZN8poseidon3MDSE",
                "poseidon::MDS",
                64,
                GlobalSpace::Constant,
            ),
            global("_ZZ4bumpiE1n", "bump::n", 4, GlobalSpace::Device),
            global("_ZZ4bumpfE1n", "bump::n", 4, GlobalSpace::Device),
            global("counter", "counter", 8, GlobalSpace::Device),
        ];
        let sym = |q: &str| {
            resolve_global(&gs, q)
                .map(|g| g.symbol.as_str())
                .map_err(|c| c.len())
        };
        assert_eq!(sym("poseidon::MDS"), Ok("_ZN8poseidon3MDSE"));
        assert_eq!(sym(" poseidon :: MDS "), Ok("_ZN8poseidon3MDSE"));
        assert_eq!(sym("_ZN8poseidon3MDSE"), Ok("_ZN8poseidon3MDSE"));
        assert_eq!(sym("counter"), Ok("counter"));
        assert_eq!(sym("bump::n"), Err(2));
        assert_eq!(sym("_ZZ4bumpfE1n"), Ok("_ZZ4bumpfE1n"));
        assert_eq!(sym("MDS"), Err(0));
        assert_eq!(
            describe_globals(&gs[..1]),
            "poseidon::MDS (64 bytes, constant)"
        );
        assert_eq!(describe_globals([]), "(none)");
    }
}
