//! The checks a release spec passes when it is loaded, before any nvcc run: every field of
//! the build and of each module, with the file, the module and a `Fix:` line on refusal.

use anyhow::{Context, Result, bail};
use cuda_aot::{KernelName, ModuleName, Target};
use cuda_aot_spec::{Build, Module, SourceList, SpecFile};
use std::path::Path;

use super::{IncludeDir, LINE_INFO, ModuleSpec, ReleaseSpec};
use crate::advice::{Advise, fail};
use crate::paths::is_relative_plain;

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

/// What the build section gives every module: the spec file, the sources folder, the
/// targets and include folders.
struct BuildWide<'a> {
    path: &'a Path,
    spec_dir: &'a Path,
    sources_dir: &'a Path,
    targets: &'a [Target],
    includes: &'a [IncludeDir],
    build: &'a Build,
}

impl BuildWide<'_> {
    /// `Fix:` advice naming the spec file.
    fn fix(&self, s: &str) -> String {
        format!("{s} in {}", self.path.display())
    }
}

/// The spec `file` (read from `path`) checked and resolved, its sources in `sources` when
/// given, else where its `build.sources` says.
pub(super) fn validate(path: &Path, file: SpecFile, sources: Option<&Path>) -> Result<ReleaseSpec> {
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
    let wide = BuildWide {
        path,
        spec_dir,
        sources_dir: &sources_dir,
        targets: &targets,
        includes: &build_includes,
        build: &file.build,
    };
    let mut modules: Vec<ModuleSpec> = Vec::new();
    for m in file.modules {
        let m = module(&wide, m, &modules)?;
        modules.push(m);
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
        sources_rel: crate::build::inputs::normalise(Path::new(&file.build.sources))
            .to_string_lossy()
            .replace('\\', "/"),
        targets,
        flags: file.build.nvcc_flags,
        modules,
    })
}

/// One `[[module]]`, checked: its name (not one of `earlier`), sources, entry points,
/// include folders, protocol, geometry, flags and targets.
fn module(w: &BuildWide, m: Module, earlier: &[ModuleSpec]) -> Result<ModuleSpec> {
    let path = w.path;
    let fix = |s: &str| w.fix(s);
    let name = ModuleName::new(&m.name)
        .map_err(anyhow::Error::new)
        .with_context(|| format!("{}: module name", path.display()))?;
    let here = |what: &str| format!("{}: module `{name}`: {what}", path.display());
    if earlier.iter().any(|x| x.name == name) {
        return Err(fail(
            here("defined twice"),
            fix("give each [[module]] its own name"),
        ));
    }
    let sources = sources(w, &m.source, &here)?;
    entry_points(w, &m.entry_points, &here)?;
    let mut includes = w.includes.to_vec();
    includes.extend(include_dirs(w.spec_dir, &m.include_dirs).advise(
        || here("include_dirs"),
        || fix("list existing folders, relative to the spec file, in the module's include_dirs"),
    )?);
    protocol_and_geometry(w, &m, &here)?;
    for f in &m.nvcc_flags {
        check_flag(f).with_context(|| here("nvcc_flags"))?;
    }
    let mod_targets = match &m.targets {
        Some(t) => parse_targets(t, false).with_context(|| here("targets"))?,
        None => w.targets.to_vec(),
    };
    let ptx = parse_targets(&m.ptx, true).with_context(|| here("ptx"))?;
    linking(w, &m, sources.len(), &ptx, &here)?;
    let build = w.build;
    Ok(ModuleSpec {
        name,
        lto: m.link_time_optimisation,
        sources,
        entry_points: m.entry_points,
        protocol: m.protocol,
        schedule_version: m.schedule_version,
        geometry: m.geometry,
        flags: m.nvcc_flags,
        targets: mod_targets,
        ptx,
        include_dirs: includes,
        warnings_as_errors: {
            let mut codes: Vec<u32> = build
                .warnings_as_errors
                .iter()
                .chain(&m.warnings_as_errors)
                .copied()
                .collect();
            codes.sort_unstable();
            codes.dedup();
            codes
        },
        parity: m.parity,
    })
}

/// The module's `source` (one file or several): each a plain relative path inside the
/// sources folder, listed once, and an existing file.
fn sources(
    w: &BuildWide,
    source: &SourceList,
    here: &dyn Fn(&str) -> String,
) -> Result<Vec<String>> {
    let fix = |s: &str| w.fix(s);
    let sources_dir = w.sources_dir;
    let sources = match source {
        SourceList::One(s) => vec![s.clone()],
        SourceList::Many(v) => v.clone(),
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
    Ok(sources)
}

/// The module's `entry_points`: at least one, each a kernel name.
fn entry_points(
    w: &BuildWide,
    entry_points: &[String],
    here: &dyn Fn(&str) -> String,
) -> Result<()> {
    let fix = |s: &str| w.fix(s);
    if entry_points.is_empty() {
        return Err(fail(
            here("declares no entry_points"),
            fix(
                "list the module's __global__ kernels in entry_points (extern \"C\" symbol, C++ name or mangled symbol)",
            ),
        ));
    }
    for e in entry_points {
        if e.trim().is_empty() || KernelName::new(e).is_err() {
            return Err(fail(
                here(&format!("entry point {e:?} is not a kernel name")),
                fix(
                    "write each entry point as its symbol, its C++ name (ns::kernel<float>) or its full signature, in printable ASCII",
                ),
            ));
        }
    }
    Ok(())
}

/// The module's `protocol` (1-128 printable ASCII characters) and `geometry` keys
/// (lower_snake_case).
fn protocol_and_geometry(w: &BuildWide, m: &Module, here: &dyn Fn(&str) -> String) -> Result<()> {
    let fix = |s: &str| w.fix(s);
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
    Ok(())
}

/// How the module's sources become one module: no PTX from several sources, and
/// link-time optimisation only for several sources and without line info.
fn linking(
    w: &BuildWide,
    m: &Module,
    n_sources: usize,
    ptx: &[Target],
    here: &dyn Fn(&str) -> String,
) -> Result<()> {
    let fix = |s: &str| w.fix(s);
    let build = w.build;
    if n_sources > 1 && !ptx.is_empty() {
        return Err(fail(
            here(&format!(
                "lists {} sources and PTX targets ({}): PTX is one translation unit's output, \
                 and nvcc cannot device-link several into one PTX module (the driver would \
                 have to link them at load time, which a signed module does not do)",
                n_sources,
                m.ptx.join(", ")
            )),
            fix("remove `ptx` from this module: it is built as cubins for its exact SMs only"),
        ));
    }
    if m.link_time_optimisation {
        if n_sources < 2 {
            return Err(fail(
                here("sets link_time_optimisation with one source"),
                fix(
                    "remove it: a module of one file is compiled whole, which optimises across all of it already",
                ),
            ));
        }
        let line_info = build
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
    Ok(())
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
        let rel = crate::build::inputs::normalise(p)
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
