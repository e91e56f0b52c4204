//! The release spec (`manifests/release.toml`): which modules are built from which sources,
//! for which targets, with which flags, geometry, protocol and schedule version; and the
//! list of (module, target) jobs it expands to.

use anyhow::{Context, Result, bail};
use cuda_aot::{KernelName, Kind, ModuleName, Target};
use cuda_aot_spec::{SourceList, SpecError, SpecFile};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Advise, fail};
use crate::paths::is_relative_plain;

/// An include folder (`-I`) of a module: as written in the spec (relative to the spec
/// file; this is what the identity records) and where it is on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncludeDir {
    /// The path as written, relative to the spec file, normalised (`../inc`).
    pub rel: String,
    /// The folder on this machine (absolute, canonical): what nvcc gets.
    pub abs: PathBuf,
}

/// A parsed and validated release spec.
#[derive(Debug, Clone)]
pub struct ReleaseSpec {
    /// The spec file.
    pub path: PathBuf,
    /// The folder holding the module sources (absolute, canonical).
    pub sources: PathBuf,
    /// `build.sources` as the spec writes it, normalised (`src`, `../kernels/cuda`): how
    /// line tables name the sources folder (relative to the spec file), wherever it is.
    pub sources_rel: String,
    /// Default real targets of every module.
    pub targets: Vec<Target>,
    /// nvcc flags of every module.
    pub flags: Vec<String>,
    /// The modules, in spec order.
    pub modules: Vec<ModuleSpec>,
}

/// One module of the spec.
#[derive(Debug, Clone)]
pub struct ModuleSpec {
    /// Module name.
    pub name: ModuleName,
    /// Source files, relative to the sources folder, in link order. One file is compiled
    /// whole (`nvcc -cubin`); several are compiled as relocatable device code, each on its
    /// own, and device-linked into one cubin per target (`docs/build.md`, "Modules of
    /// several files").
    pub sources: Vec<String>,
    /// Declared kernel entry points, each a symbol, a demangled C++ name without
    /// parameters (`ntt::bit_rev<gl64_t>`) or a full demangled signature: each must name
    /// exactly one kernel of every built blob, and every kernel must be named.
    pub entry_points: Vec<String>,
    /// Proof-protocol / ABI version string.
    pub protocol: String,
    /// Schedule version.
    pub schedule_version: u32,
    /// Geometry: key `k` becomes `-DCUDA_AOT_<K>=v`.
    pub geometry: BTreeMap<String, u64>,
    /// Extra nvcc flags of this module.
    pub flags: Vec<String>,
    /// Real targets (cubins).
    pub targets: Vec<Target>,
    /// Virtual architectures to emit PTX for: the explicit, labelled compatibility opt-in.
    pub ptx: Vec<Target>,
    /// Include folders: the build-wide ones, then the module's own, in order.
    pub include_dirs: Vec<IncludeDir>,
    /// nvcc front-end warnings (by number) that fail this module's build: the build's and
    /// the module's, sorted, each once (passed as `--diag-error=N,...`, an identity flag).
    pub warnings_as_errors: Vec<u32>,
    /// The parity spec (`[module.parity]`), if the module has one: what `cargo xtask
    /// promote` requires.
    pub parity: Option<toml::Value>,
    /// Link-time optimisation (`link_time_optimisation = true`, a module of several
    /// sources only): each file becomes a fatbin of LTO IR (`-fatbin -dlto`), and nvlink
    /// optimises and compiles them together (`-dlto`, with the toolkit's libnvvm).
    pub lto: bool,
}

/// One nvcc run: a module for a target.
#[derive(Debug, Clone)]
pub struct Job {
    /// Index into [`ReleaseSpec::modules`].
    pub module: usize,
    /// The target (`sm_90`, `sm_90a`, or `compute_90` for PTX).
    pub target: Target,
    /// cubin for `sm_*`, ptx for `compute_*`.
    pub kind: Kind,
    /// The exact nvcc flags (recorded in the identity), in order. For a module of several
    /// sources: the flags every file is compiled with, less the pair that names the file
    /// ([`Job::unit_flags`] adds it).
    pub flags: Vec<String>,
    /// The device-link flags of a module of several sources (nvlink's: `--arch=sm_XX`,
    /// recorded in the identity); empty for a module of one source.
    pub link: Vec<String>,
}

/// Every cubin job's ptxas reports register spills (`ptxas warning : Registers are spilled
/// to local memory in function ...`), which the build lists per kernel.
pub const WARN_ON_SPILLS: &str = "-Xptxas=--warn-on-spills";

/// The flags that ask for line info: the build then compiles to PTX, makes the PTX's file
/// paths portable and assembles it (`Job::line_info`), so the cubin stays reproducible.
const LINE_INFO: [&str; 2] = ["-lineinfo", "--generate-line-info"];

impl Job {
    /// Whether the job's flags ask for line info (`-lineinfo`, `--generate-line-info`).
    pub fn line_info(&self) -> bool {
        self.flags.iter().any(|f| LINE_INFO.contains(&f.as_str()))
    }

    /// The flags nvcc compiles `file`, one source of a module of several, with: the job's
    /// flags with `-Xcicc --orig_src_path_name -Xcicc <file>` after the architecture.
    pub fn unit_flags(&self, file: &str) -> Vec<String> {
        let at = self
            .flags
            .iter()
            .position(|f| f.starts_with("-arch="))
            .map_or(self.flags.len(), |i| i + 1);
        let mut flags = self.flags[..at].to_vec();
        flags.extend(source_path_name(file));
        flags.extend(self.flags[at..].iter().cloned());
        flags
    }
}

/// `-Xcicc --orig_src_path_name -Xcicc <file>`: cicc names internal-linkage symbols after
/// the source's path, which would otherwise be this checkout's absolute path.
fn source_path_name(file: &str) -> [String; 4] {
    [
        "-Xcicc".to_string(),
        "--orig_src_path_name".to_string(),
        "-Xcicc".to_string(),
        file.to_string(),
    ]
}

impl ModuleSpec {
    /// Whether the module has several sources: compiled as relocatable device code and
    /// device-linked.
    pub fn is_linked(&self) -> bool {
        self.sources.len() > 1
    }

    /// The sources as the dependency key and the last-build note name them:
    /// `src:<file>` for each, comma-separated (a source name has no comma).
    pub fn source_key(&self) -> String {
        self.sources
            .iter()
            .map(|s| format!("src:{s}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The sources for people: `ntt.cu`, or `ntt.cu + tables.cu`.
    pub fn shown_sources(&self) -> String {
        self.sources.join(" + ")
    }
}

/// Flags the build sets itself (or refuses) and a spec must not.
const OWNED_FLAGS: &[(&str, &str)] = &[
    ("-o", "the build chooses output paths"),
    ("--output-file", "the build chooses output paths"),
    ("-odir", "the build chooses output paths"),
    ("--output-directory", "the build chooses output paths"),
    ("-arch", "targets come from `targets` / `ptx`"),
    ("--gpu-architecture", "targets come from `targets` / `ptx`"),
    ("-code", "targets come from `targets` / `ptx`"),
    ("--gpu-code", "targets come from `targets` / `ptx`"),
    ("-gencode", "targets come from `targets` / `ptx`"),
    ("--generate-code", "targets come from `targets` / `ptx`"),
    ("-cubin", "the kind follows the target"),
    ("--cubin", "the kind follows the target"),
    ("-ptx", "the kind follows the target"),
    ("--ptx", "the kind follows the target"),
    ("-fatbin", "one blob per target: cubin or PTX"),
    ("--fatbin", "one blob per target: cubin or PTX"),
    ("-c", "one blob per target: cubin or PTX"),
    (
        "-ccbin",
        "the host compiler is found like cargo finds it (CXX) and recorded",
    ),
    (
        "--compiler-bindir",
        "the host compiler is found like cargo finds it (CXX) and recorded",
    ),
    ("-M", "the build runs dependency generation itself"),
    ("-MD", "the build runs dependency generation itself"),
    ("-MMD", "the build runs dependency generation itself"),
    ("-MF", "the build runs dependency generation itself"),
    ("-MT", "the build runs dependency generation itself"),
    ("-E", "the build compiles"),
    ("-G", "device debug builds are not release builds"),
    (
        "--device-debug",
        "device debug builds are not release builds",
    ),
    ("-keep", "intermediate files are not outputs"),
    ("--keep", "intermediate files are not outputs"),
    ("-save-temps", "intermediate files are not outputs"),
];

/// Loads and validates a spec; `sources` overrides the spec's `build.sources` folder.
pub fn load(path: &Path, sources: Option<&Path>) -> Result<ReleaseSpec> {
    let file = match cuda_aot_spec::read(path) {
        Ok(file) => file,
        Err(e @ SpecError::Read { .. }) => {
            return Err(fail(
                e,
                "pass --spec FILE, or run from a checkout with manifests/release.toml",
            ));
        }
        Err(e @ SpecError::Parse { .. }) => {
            return Err(fail(e, "fix the spec; docs/build.md describes every field"));
        }
    };
    validate(path, file, sources)
}

fn validate(path: &Path, file: SpecFile, sources: Option<&Path>) -> Result<ReleaseSpec> {
    let fix = |s: &str| format!("{s} in {}", path.display());
    let sources_dir = match sources {
        Some(s) => s.to_path_buf(),
        None => path
            .parent()
            .unwrap_or(Path::new("."))
            .join(&file.build.sources),
    };
    let sources_dir = sources_dir.canonicalize().advise(
        || format!("the sources folder {}", sources_dir.display()),
        || fix("set build.sources (relative to the spec file) to the folder of the .cu files"),
    )?;
    let targets = parse_targets(&file.build.targets, false).advise(
        || format!("{}: build.targets", path.display()),
        || fix("list real targets such as \"sm_90\" or \"sm_90a\" in build.targets"),
    )?;
    for f in &file.build.nvcc_flags {
        check_flag(f).with_context(|| format!("{}: build.nvcc_flags", path.display()))?;
    }
    let spec_dir = path.parent().unwrap_or(Path::new("."));
    let build_includes = include_dirs(spec_dir, &file.build.include_dirs).advise(
        || format!("{}: build.include_dirs", path.display()),
        || fix("list existing folders, relative to the spec file, in build.include_dirs"),
    )?;
    let mut modules: Vec<ModuleSpec> = Vec::new();
    for m in file.modules {
        let name = ModuleName::new(&m.name)
            .map_err(anyhow::Error::new)
            .with_context(|| format!("{}: module name", path.display()))?;
        let here = |what: &str| format!("{}: module `{name}`: {what}", path.display());
        if modules.iter().any(|x| x.name == name) {
            return Err(fail(
                here("defined twice"),
                fix("give each [[module]] its own name"),
            ));
        }
        let sources = match m.source {
            SourceList::One(s) => vec![s],
            SourceList::Many(v) => v,
        };
        if sources.is_empty() {
            return Err(fail(
                here("`source` lists no file"),
                fix("write `source = \"file.cu\"`, or a list of the module's files"),
            ));
        }
        for (i, source) in sources.iter().enumerate() {
            if !is_relative_plain(Path::new(source)) || source.contains([',', ' ']) {
                return Err(fail(
                    here(&format!(
                        "source `{source}` must be a path inside the sources folder, without spaces or commas"
                    )),
                    fix("write `source` relative to build.sources, without `..`"),
                ));
            }
            if sources[..i].contains(source) {
                return Err(fail(
                    here(&format!("source `{source}` is listed twice")),
                    fix("list each file of the module once"),
                ));
            }
            let abs = sources_dir.join(source);
            if !abs.is_file() {
                return Err(fail(
                    here(&format!("source file {} does not exist", abs.display())),
                    fix("create the file or correct the module's `source`"),
                ));
            }
        }
        if m.entry_points.is_empty() {
            return Err(fail(
                here("declares no entry_points"),
                fix(
                    "list the module's __global__ kernels in entry_points (extern \"C\" symbol, C++ name or mangled symbol)",
                ),
            ));
        }
        for e in &m.entry_points {
            if e.trim().is_empty() || KernelName::new(e).is_err() {
                return Err(fail(
                    here(&format!("entry point {e:?} is not a kernel name")),
                    fix(
                        "write each entry point as its symbol, its C++ name (ns::kernel<float>) or its full signature, in printable ASCII",
                    ),
                ));
            }
        }
        let entry_points = m.entry_points.clone();
        let mut includes = build_includes.clone();
        includes.extend(include_dirs(spec_dir, &m.include_dirs).advise(
            || here("include_dirs"),
            || fix("list existing folders, relative to the spec file, in the module's include_dirs"),
        )?);
        if m.protocol.is_empty()
            || m.protocol.len() > 128
            || !m.protocol.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(fail(
                here("protocol must be 1-128 printable ASCII characters without spaces"),
                fix("set protocol, e.g. \"goldilocks-v1\""),
            ));
        }
        for k in m.geometry.keys() {
            let ok = k.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
                && k.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !ok {
                return Err(fail(
                    here(&format!("geometry key `{k}` must be lower_snake_case")),
                    fix("name geometry keys like `block`; each becomes -DCUDA_AOT_<KEY>=value"),
                ));
            }
        }
        for f in &m.nvcc_flags {
            check_flag(f).with_context(|| here("nvcc_flags"))?;
        }
        let mod_targets = match &m.targets {
            Some(t) => parse_targets(t, false).with_context(|| here("targets"))?,
            None => targets.clone(),
        };
        let ptx = parse_targets(&m.ptx, true).with_context(|| here("ptx"))?;
        if sources.len() > 1 && !ptx.is_empty() {
            return Err(fail(
                here(&format!(
                    "lists {} sources and PTX targets ({}): PTX is one translation unit's output, \
                     and nvcc cannot device-link several into one PTX module (the driver would \
                     have to link them at load time, which a signed module does not do)",
                    sources.len(),
                    m.ptx.join(", ")
                )),
                fix("remove `ptx` from this module: it is built as cubins for its exact SMs only"),
            ));
        }
        if m.link_time_optimisation {
            if sources.len() < 2 {
                return Err(fail(
                    here("sets link_time_optimisation with one source"),
                    fix(
                        "remove it: a module of one file is compiled whole, which optimises across all of it already",
                    ),
                ));
            }
            let line_info = file
                .build
                .nvcc_flags
                .iter()
                .chain(&m.nvcc_flags)
                .any(|f| LINE_INFO.contains(&f.as_str()));
            if line_info {
                return Err(fail(
                    here("sets link_time_optimisation and asks for line info (-lineinfo)"),
                    fix(
                        "drop one of them: with link-time optimisation ptxas runs inside nvlink, where the build cannot make the line table's paths portable, so the cubin would not be reproducible",
                    ),
                ));
            }
        }
        modules.push(ModuleSpec {
            name,
            lto: m.link_time_optimisation,
            sources,
            entry_points,
            protocol: m.protocol,
            schedule_version: m.schedule_version,
            geometry: m.geometry,
            flags: m.nvcc_flags,
            targets: mod_targets,
            ptx,
            include_dirs: includes,
            warnings_as_errors: {
                let mut w: Vec<u32> = file
                    .build
                    .warnings_as_errors
                    .iter()
                    .chain(&m.warnings_as_errors)
                    .copied()
                    .collect();
                w.sort_unstable();
                w.dedup();
                w
            },
            parity: m.parity,
        });
    }
    if modules.is_empty() {
        return Err(fail(
            format!("{}: no [[module]] entries", path.display()),
            fix("add a [[module]]"),
        ));
    }
    Ok(ReleaseSpec {
        path: path.to_path_buf(),
        sources: sources_dir,
        sources_rel: super::inputs::normalise(Path::new(&file.build.sources))
            .to_string_lossy()
            .replace('\\', "/"),
        targets,
        flags: file.build.nvcc_flags,
        modules,
    })
}

/// Resolves include folders written relative to the spec file: each must be relative (an
/// absolute path of this machine would land in the identity) and an existing folder. Checked
/// when the spec is loaded, before any nvcc run.
fn include_dirs(spec_dir: &Path, list: &[String]) -> Result<Vec<IncludeDir>> {
    let mut out: Vec<IncludeDir> = Vec::new();
    for d in list {
        let p = Path::new(d);
        if d.is_empty() || p.is_absolute() || d.contains(['\\', '\n', '\0']) {
            bail!(
                "`{d}` must be a folder relative to the spec file: an absolute path is specific to \
                 this machine and would land in every module's identity"
            );
        }
        let rel = super::inputs::normalise(p)
            .to_string_lossy()
            .replace('\\', "/");
        let abs = spec_dir.join(p);
        let abs = abs
            .canonicalize()
            .map_err(|e| anyhow::anyhow!("include folder `{d}` ({}): {e}", abs.display()))?;
        if !abs.is_dir() {
            bail!("include folder `{d}` ({}) is not a folder", abs.display());
        }
        if out.iter().any(|x| x.rel == rel) {
            bail!("include folder `{d}` is listed twice");
        }
        out.push(IncludeDir { rel, abs });
    }
    Ok(out)
}

/// Parses target names; `virtual_` selects `compute_*` (PTX) versus `sm_*` (cubin).
fn parse_targets(list: &[String], virtual_: bool) -> Result<Vec<Target>> {
    let mut out: Vec<Target> = Vec::new();
    for s in list {
        let t: Target = s.parse().map_err(anyhow::Error::new)?;
        if t.virtual_arch != virtual_ {
            if virtual_ {
                bail!("`{s}` is not a virtual architecture: PTX targets are written compute_XX");
            }
            bail!(
                "`{s}` is a virtual architecture: PTX is opted into per module with `ptx = [\"{s}\"]`"
            );
        }
        if out.contains(&t) {
            bail!("`{s}` is listed twice");
        }
        out.push(t);
    }
    Ok(out)
}

/// Refuses flags that the build sets itself, that would make output non-reproducible, or
/// that would collide with geometry defines.
fn check_flag(flag: &str) -> Result<()> {
    let name = flag.split('=').next().unwrap_or(flag);
    if LINE_INFO.contains(&name) && name != flag {
        return Err(fail(
            format!("flag `{flag}`: line info is turned on by the bare flag"),
            "write `-lineinfo` or `--generate-line-info`, or leave it out",
        ));
    }
    if let Some((f, why)) = OWNED_FLAGS.iter().find(|(f, _)| *f == name) {
        return Err(fail(
            format!("flag `{flag}` is not allowed: {why}"),
            format!("remove `{f}` from nvcc_flags"),
        ));
    }
    if ["-arch", "-code", "-gencode", "-MF", "-MT"]
        .iter()
        .any(|p| name.starts_with(p) && name.len() > p.len())
    {
        return Err(fail(
            format!("flag `{flag}` is not allowed: targets and outputs are set by the build"),
            format!("remove `{flag}` from nvcc_flags"),
        ));
    }
    if ["-I", "--include-path", "-isystem", "-idirafter", "-iquote"]
        .iter()
        .any(|p| name.starts_with(p))
    {
        return Err(fail(
            format!(
                "flag `{flag}` is not allowed: include folders are listed in `include_dirs` \
                 (relative to the spec file, checked to exist, recorded in the identity without \
                 this machine's paths)"
            ),
            format!("move the folder of `{flag}` to include_dirs"),
        ));
    }
    if flag.starts_with("-DCUDA_AOT_")
        || flag.starts_with("-UCUDA_AOT_")
        || flag.contains(" CUDA_AOT_")
    {
        return Err(fail(
            format!("flag `{flag}` is not allowed: CUDA_AOT_* defines come from `geometry`"),
            "set the value in the module's geometry table instead",
        ));
    }
    Ok(())
}

impl ReleaseSpec {
    /// Expands the spec into jobs: every selected module for its targets (or `targets`,
    /// when given, for every selected module: a module of several sources takes only the
    /// real ones), cubins first, then its PTX opt-ins.
    pub fn jobs(&self, modules: &[ModuleName], targets: &[Target]) -> Result<Vec<Job>> {
        for m in modules {
            if !self.modules.iter().any(|x| &x.name == m) {
                let known: Vec<String> = self.modules.iter().map(|x| x.name.to_string()).collect();
                return Err(fail(
                    format!(
                        "unknown module `{m}`: {} defines {}",
                        self.path.display(),
                        known.join(", ")
                    ),
                    "pass one of those names to --module",
                ));
            }
        }
        let mut jobs = Vec::new();
        for (i, m) in self.modules.iter().enumerate() {
            if !modules.is_empty() && !modules.contains(&m.name) {
                continue;
            }
            let list: Vec<Target> = if targets.is_empty() {
                m.targets.iter().chain(&m.ptx).copied().collect()
            } else {
                targets.to_vec()
            };
            for t in list {
                let kind = if t.virtual_arch {
                    Kind::Ptx
                } else {
                    Kind::Cubin
                };
                if kind == Kind::Ptx && m.is_linked() {
                    if !modules.contains(&m.name) {
                        // `--target compute_90` for the whole spec: the PTX of the modules
                        // that have one.
                        continue;
                    }
                    return Err(fail(
                        format!(
                            "module `{}` lists {} sources: it is device-linked from relocatable \
                             code and has no PTX form, so target {t} cannot be built",
                            m.name,
                            m.sources.len()
                        ),
                        "select real targets (sm_XX) for this module, or leave --target out",
                    ));
                }
                let mut flags = vec![match kind {
                    _ if m.lto => "-fatbin".to_string(),
                    Kind::Cubin => "-cubin".to_string(),
                    Kind::Ptx => "-ptx".to_string(),
                }];
                if m.is_linked() {
                    flags.push("-rdc=true".to_string());
                }
                if m.lto {
                    flags.push("-dlto".to_string());
                }
                flags.push(format!("-arch={t}"));
                // With link-time optimisation ptxas runs inside nvlink: the link flags ask.
                if kind == Kind::Cubin && !m.lto {
                    // ptxas says which kernels spill registers to local memory: reported
                    // per kernel (`nvcc::spills`). Changes no byte of the cubin.
                    flags.push(WARN_ON_SPILLS.to_string());
                }
                if !m.is_linked() {
                    // cicc names internal-linkage symbols (`static __constant__` tables)
                    // after a hash of the source's absolute path; naming the source by its
                    // path inside the sources folder keeps the bytes independent of the
                    // checkout. (A linked module gets the pair per file: `Job::unit_flags`.)
                    flags.extend(source_path_name(&m.sources[0]));
                }
                flags.extend(self.flags.iter().cloned());
                flags.extend(m.flags.iter().cloned());
                if !m.warnings_as_errors.is_empty() {
                    let list: Vec<String> =
                        m.warnings_as_errors.iter().map(u32::to_string).collect();
                    flags.push(format!("--diag-error={}", list.join(",")));
                }
                flags.extend(
                    m.geometry
                        .iter()
                        .map(|(k, v)| format!("-DCUDA_AOT_{}={v}", k.to_ascii_uppercase())),
                );
                let link = match (m.is_linked(), m.lto) {
                    (false, _) => Vec::new(),
                    (true, false) => vec![format!("--arch={t}")],
                    // `-nvvmpath nvvm`: the staging folder's link to the toolkit's libnvvm
                    // (a relative path: nothing of this machine in the command nvlink
                    // writes into the cubin).
                    (true, true) => vec![
                        format!("--arch={t}"),
                        "-dlto".to_string(),
                        "-nvvmpath".to_string(),
                        "nvvm".to_string(),
                        WARN_ON_SPILLS.to_string(),
                    ],
                };
                jobs.push(Job {
                    module: i,
                    target: t,
                    kind,
                    flags,
                    link,
                });
            }
        }
        Ok(jobs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths;

    fn spec_in(dir: &Path, body: &str) -> Result<ReleaseSpec> {
        std::fs::write(dir.join("k.cu"), "").unwrap();
        let p = dir.join("release.toml");
        std::fs::write(&p, body).unwrap();
        load(&p, None)
    }

    const GOOD: &str = r#"
        [build]
        sources = "."
        targets = ["sm_80", "sm_90a"]
        nvcc_flags = ["-O3"]
        [[module]]
        name = "k"
        source = "k.cu"
        entry_points = ["f"]
        protocol = "p-v1"
        schedule_version = 2
        geometry = { block = 128, tile_rows = 4 }
        ptx = ["compute_90"]
    "#;

    #[test]
    fn a_module_of_several_sources_is_compiled_per_file_and_linked_without_ptx() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t.cu"), "").unwrap();
        let linked = GOOD.replace("source = \"k.cu\"", "source = [\"k.cu\", \"t.cu\"]");
        // PTX is one file's output: refused for a linked module, with the reason.
        let e = format!("{:#}", spec_in(dir.path(), &linked).unwrap_err());
        assert!(
            e.contains("lists 2 sources and PTX targets (compute_90)"),
            "{e}"
        );
        let spec = spec_in(dir.path(), &linked.replace("ptx = [\"compute_90\"]", "")).unwrap();
        let m = &spec.modules[0];
        assert!(m.is_linked());
        assert_eq!(m.source_key(), "src:k.cu,src:t.cu");
        let jobs = spec.jobs(&[], &[]).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(
            jobs[0].flags,
            [
                "-cubin",
                "-rdc=true",
                "-arch=sm_80",
                "-Xptxas=--warn-on-spills",
                "-O3",
                "-DCUDA_AOT_BLOCK=128",
                "-DCUDA_AOT_TILE_ROWS=4"
            ]
        );
        assert_eq!(jobs[0].link, ["--arch=sm_80"]);
        assert_eq!(
            jobs[0].unit_flags("t.cu")[..7],
            [
                "-cubin",
                "-rdc=true",
                "-arch=sm_80",
                "-Xcicc",
                "--orig_src_path_name",
                "-Xcicc",
                "t.cu"
            ]
        );
        // --target compute_90 for the whole spec skips it; naming the module is an error.
        let ptx: Target = "compute_90".parse().unwrap();
        assert!(spec.jobs(&[], &[ptx]).unwrap().is_empty());
        let e = format!(
            "{:#}",
            spec.jobs(std::slice::from_ref(&m.name), &[ptx])
                .unwrap_err()
        );
        assert!(e.contains("has no PTX form"), "{e}");
        // Listed twice, or an empty list: refused.
        let twice = GOOD.replace("source = \"k.cu\"", "source = [\"k.cu\", \"k.cu\"]");
        let e = format!("{:#}", spec_in(dir.path(), &twice).unwrap_err());
        assert!(e.contains("source `k.cu` is listed twice"), "{e}");
        let none = GOOD.replace("source = \"k.cu\"", "source = []");
        let e = format!("{:#}", spec_in(dir.path(), &none).unwrap_err());
        assert!(e.contains("`source` lists no file"), "{e}");
        // Single-file modules keep the flags they always had.
        assert!(
            spec_in(dir.path(), GOOD).unwrap().jobs(&[], &[]).unwrap()[0]
                .link
                .is_empty()
        );
    }

    #[test]
    fn jobs_carry_exact_flags_and_geometry_defines() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec_in(dir.path(), GOOD).unwrap();
        let jobs = spec.jobs(&[], &[]).unwrap();
        let names: Vec<String> = jobs.iter().map(|j| j.target.to_string()).collect();
        assert_eq!(names, ["sm_80", "sm_90a", "compute_90"]);
        assert_eq!(
            jobs[1].flags,
            [
                "-cubin",
                "-arch=sm_90a",
                "-Xptxas=--warn-on-spills",
                "-Xcicc",
                "--orig_src_path_name",
                "-Xcicc",
                "k.cu",
                "-O3",
                "-DCUDA_AOT_BLOCK=128",
                "-DCUDA_AOT_TILE_ROWS=4"
            ]
        );
        assert_eq!(jobs[2].kind, Kind::Ptx);
        assert_eq!(jobs[2].flags[0], "-ptx");
        let only = spec.jobs(&[], &["sm_86".parse().unwrap()]).unwrap();
        assert_eq!(only.len(), 1);
        let err = spec
            .jobs(&[ModuleName::new("nope").unwrap()], &[])
            .unwrap_err();
        assert!(
            format!("{err:#}").contains("unknown module `nope`"),
            "{err:#}"
        );
    }

    #[test]
    fn bad_specs_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                GOOD.replace("\"-O3\"", "\"-lineinfo=false\""),
                "write `-lineinfo` or `--generate-line-info`",
            ),
            (
                GOOD.replace("\"-O3\"", "\"-DCUDA_AOT_BLOCK=1\""),
                "geometry",
            ),
            (GOOD.replace("\"-O3\"", "\"-arch=sm_90\""), "not allowed"),
            (GOOD.replace("k.cu", "../k.cu"), "inside the sources folder"),
            (GOOD.replace("\"k.cu\"", "\"missing.cu\""), "does not exist"),
            (GOOD.replace("[\"f\"]", "[]"), "no entry_points"),
            (
                GOOD.replace("compute_90", "sm_90"),
                "not a virtual architecture",
            ),
            (
                GOOD.replace("\"sm_80\"", "\"compute_80\""),
                "virtual architecture",
            ),
            (GOOD.replace("sm_80", "sm_8x"), "expected 2 or 3 digits"),
            (GOOD.replace("block", "Block"), "lower_snake_case"),
            (GOOD.replace("protocol", "protocoll"), "unknown field"),
            (
                GOOD.replace("\"-O3\"", "\"-I/usr/include/x\""),
                "include_dirs",
            ),
            (
                GOOD.replace("\"-O3\"", "\"--include-path=inc\""),
                "include_dirs",
            ),
            (
                GOOD.replace("nvcc_flags = [\"-O3\"]", "include_dirs = [\"missing\"]"),
                "include folder `missing`",
            ),
            (
                GOOD.replace(
                    "nvcc_flags = [\"-O3\"]",
                    "include_dirs = [\"/usr/include\"]",
                ),
                "relative to the spec file",
            ),
            (
                GOOD.replace("ptx = [", "include_dirs = [\"nope\"]\nptx = ["),
                "module `k`: include_dirs",
            ),
        ];
        for (body, want) in cases {
            let err = format!("{:#}", spec_in(dir.path(), &body).unwrap_err());
            assert!(err.contains(want), "want {want:?} in {err}");
        }
    }

    #[test]
    fn include_dirs_resolve_against_the_spec_file_build_wide_first() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("specs")).unwrap();
        std::fs::create_dir_all(dir.path().join("third/inc")).unwrap();
        std::fs::create_dir_all(dir.path().join("specs/local")).unwrap();
        std::fs::write(dir.path().join("k.cu"), "").unwrap();
        let body = GOOD
            .replace(
                "sources = \".\"",
                "sources = \"..\"\ninclude_dirs = [\"../third/./inc\"]",
            )
            .replace("ptx = [", "include_dirs = [\"local\"]\nptx = [");
        let p = dir.path().join("specs/release.toml");
        std::fs::write(&p, body).unwrap();
        let spec = load(&p, None).unwrap();
        let inc = &spec.modules[0].include_dirs;
        let rel: Vec<&str> = inc.iter().map(|d| d.rel.as_str()).collect();
        assert_eq!(rel, ["../third/inc", "local"]);
        assert_eq!(
            inc[0].abs,
            dir.path().join("third/inc").canonicalize().unwrap()
        );
    }

    #[test]
    fn repository_release_spec_has_3_modules_for_7_targets() {
        let p = paths::repo_root().join("manifests/release.toml");
        let spec = load(&p, None).unwrap();
        let jobs = spec.jobs(&[], &[]).unwrap();
        let cubins = jobs.iter().filter(|j| j.kind == Kind::Cubin).count();
        assert!(
            spec.modules.len() >= 3 && spec.targets.len() >= 7,
            "{spec:?}"
        );
        assert_eq!(cubins, spec.modules.len() * spec.targets.len());
    }
}
