//! The release spec (`manifests/release.toml`): which modules are built from which sources,
//! for which targets, with which flags, geometry, protocol and schedule version; and the
//! list of (module, target) jobs it expands to.

use anyhow::Result;
use cuda_aot::{Kind, ModuleName, Target};
use cuda_aot_spec::SpecError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod check;

use super::fail;

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

/// Every whole-program job (a module of one source) makes nvcc's #20044-D an error: an
/// `extern` device variable no file defines, which nvcc would otherwise compile as a private
/// zero-filled copy. Passed last, it wins over every flag that hides the warning (`-w`,
/// `--disable-warnings`, `-diag-suppress=20044`, `-Xcudafe --diag_suppress=20044`); a
/// source's own `#pragma nv_diag_suppress 20044` is refused by the build instead
/// (`nvcc::extern_check_pragma`).
pub const EXTERN_CHECK: &str = "-Xcudafe=--diag_error=20044";

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
    check::validate(path, file, sources)
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
                if !m.is_linked() {
                    // After every flag of the spec, so that none of them can turn it off.
                    flags.push(EXTERN_CHECK.to_string());
                }
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
                "-DCUDA_AOT_TILE_ROWS=4",
                // After every flag of the spec: nothing hides #20044-D.
                "-Xcudafe=--diag_error=20044",
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
