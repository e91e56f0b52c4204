//! Running nvcc: the host compiler it gets (`-ccbin`, found the way cargo builds find it),
//! the exact command line, its make-style dependency output, and the entry points of PTX.

use anyhow::{Context, Result, anyhow, bail};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use super::{Advise, fail};
use crate::executor::{Action, Executor};
use crate::process::{self, which};
use crate::{files, paths};

/// The host C++ compiler nvcc runs (`-ccbin`), and its identity.
#[derive(Debug, Clone)]
pub struct HostCompiler {
    /// Absolute path passed to `-ccbin`.
    pub path: PathBuf,
    /// The first line of `<compiler> --version`: recorded as `host_toolchain`.
    pub version: String,
}

/// The host compiler's system include folders, as `<host> -E -v` lists them for C++
/// (normalised; empty when it cannot say): where a shared cache's records may name
/// headers besides the project and the toolkit (`shared_cache::merge_records`).
pub fn host_include_dirs(host: &Path) -> Vec<PathBuf> {
    let Ok(out) = std::process::Command::new(host)
        .args(["-x", "c++", "-E", "-v", "-"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
    else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&out.stderr);
    text.lines()
        .skip_while(|l| !l.starts_with("#include <...> search starts here:"))
        .skip(1)
        .take_while(|l| !l.starts_with("End of search list."))
        .map(|l| super::inputs::normalise(Path::new(l.trim())))
        .filter(|p| p.is_absolute())
        .collect()
}

/// What [`host_compiler`] found last time for the same environment, and the compiler
/// binary it resolved to (so a replaced compiler or a switched alternative is noticed).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostMemo {
    path: PathBuf,
    version: String,
    real: PathBuf,
    size: u64,
    mtime_ns: u64,
}

impl HostMemo {
    fn of(hc: &HostCompiler) -> Option<HostMemo> {
        let real = hc.path.canonicalize().ok()?;
        let (size, mtime_ns) = stat(&real)?;
        Some(HostMemo {
            path: hc.path.clone(),
            version: hc.version.clone(),
            real,
            size,
            mtime_ns,
        })
    }
}

fn stat(p: &Path) -> Option<(u64, u64)> {
    let m = std::fs::metadata(p).ok()?;
    let t = m
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some((m.len(), t.as_nanos() as u64))
}

/// The host compiler, memoised in `.cuda-aot/host-compiler/<environment key>.json`: the
/// discovery below spawns the compiler three times, which would dominate a no-op rebuild.
/// The memo is keyed by every environment variable the `cc` crate consults (and PATH), and
/// used only while the compiler binary it resolved to is unchanged.
pub fn host_compiler() -> Result<HostCompiler> {
    let mut h = blake3::Hasher::new();
    h.update(b"cuda-aot host compiler v1\n");
    h.update(std::env::consts::ARCH.as_bytes());
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .filter(|(k, _)| {
            k == "PATH" || k == "CROSS_COMPILE" || k.contains("CXX") || k.contains("CC")
        })
        .collect();
    vars.sort();
    for (k, v) in vars {
        h.update(format!("\n{k}={v}").as_bytes());
    }
    let memo_path = paths::work_dir()
        .join("host-compiler")
        .join(format!("{}.json", &h.finalize().to_hex()[..16]));
    if let Some(m) = std::fs::read(&memo_path)
        .ok()
        .and_then(|b| cuda_aot::json::parse::<HostMemo>(&b, 1 << 16, "host compiler memo").ok())
    {
        let same = m.path.canonicalize().is_ok_and(|r| r == m.real)
            && stat(&m.real) == Some((m.size, m.mtime_ns));
        if same {
            return Ok(HostCompiler {
                path: m.path,
                version: m.version,
            });
        }
    }
    let hc = discover_host_compiler()?;
    if let Some(m) = HostMemo::of(&hc) {
        // Best effort: without the memo the next build just discovers again.
        let _ = files::write(&memo_path, &cuda_aot::json::to_vec(&m));
    }
    Ok(hc)
}

/// Finds the host C++ compiler with the `cc` crate, exactly as a cargo build script would:
/// `CXX_<target>`, `TARGET_CXX`/`HOST_CXX`, `CXX`, then the platform default (`c++`).
fn discover_host_compiler() -> Result<HostCompiler> {
    if std::env::consts::OS != "linux" {
        bail!(
            "the pinned CUDA toolkit is x86_64 Linux only; this is {}",
            std::env::consts::OS
        );
    }
    // Outside a build script cc cannot read TARGET/HOST/OPT_LEVEL, so they are explicit.
    let triple = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let tool = cc::Build::new()
        .cpp(true)
        .target(&triple)
        .host(&triple)
        .opt_level(3)
        .cargo_metadata(false)
        .emit_rerun_if_env_changed(false)
        .warnings(false)
        .try_get_compiler()
        .map_err(|e| anyhow!("{e}"))
        .advise(
            || "finding the host C++ compiler".into(),
            || "install a C++ compiler nvcc supports (g++ or clang++), or set CXX to one".into(),
        )?;
    let path = which(&tool.path().to_string_lossy()).advise(
        || {
            format!(
                "the host C++ compiler `{}` (from CXX or the default)",
                tool.path().display()
            )
        },
        || "install g++ (e.g. apt-get install g++), or set CXX to an installed C++ compiler".into(),
    )?;
    let out = process::output(
        Command::new(&path)
            .arg("--version")
            .env("LC_ALL", "C")
            .stdin(Stdio::null()),
    )
    .with_context(|| format!("running {} --version", path.display()))?;
    let version = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
        .filter(|_| out.status.success())
        .ok_or_else(|| {
            fail(
                format!("{} --version printed no version", path.display()),
                "set CXX to a working C++ compiler",
            )
        })?;
    Ok(HostCompiler { path, version })
}

/// One nvcc invocation.
pub struct Invocation<'a> {
    /// `<toolkit>/bin/nvcc`.
    pub nvcc: &'a Path,
    /// The toolkit's root (what the action may read besides its sources).
    pub toolkit: &'a Path,
    /// The identity flags (kind, arch, spec flags, geometry defines).
    pub flags: &'a [String],
    /// Host compiler for `-ccbin`.
    pub ccbin: &'a Path,
    /// The source, relative to `cwd` (the sources folder).
    pub source: &'a Path,
    /// Include folders, in order: passed as `-I <path relative to cwd>` (not identity flags:
    /// the identity records them relative to the spec file).
    pub includes: &'a [super::spec::IncludeDir],
    /// Working folder (the sources folder).
    pub cwd: &'a Path,
    /// Where the blob goes.
    pub output: &'a Path,
    /// Where the make-style dependency list goes.
    pub depfile: &'a Path,
}

impl Failure {
    /// `command: ...` and what `tool` printed, indented, for an error message.
    pub fn detail(&self, tool: &str) -> String {
        format!(
            "command: {}\n{tool} output:\n{}",
            self.command,
            indent(&self.output)
        )
    }
}

/// Tool output for an error message: each line indented by four spaces.
pub fn indent(text: &str) -> String {
    text.trim_end()
        .lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A failed nvcc run: what ran and what it said.
#[derive(Debug)]
pub struct Failure {
    /// The command line, shell-quoted.
    pub command: String,
    /// Exit status text.
    pub status: String,
    /// nvcc's stderr (and stdout).
    pub output: String,
    /// Set when nvcc, or a tool it ran (cicc, ptxas, the host compiler), was killed by a
    /// signal: what was killed and by which signal. Such a failure says nothing about the
    /// sources.
    pub killed: Option<String>,
    /// Set when the executor could not run the tool at all (not found, a remote server
    /// that refused or failed the action): its name. Says nothing about the sources either.
    pub not_run: Option<String>,
}

impl Invocation<'_> {
    /// The action: nvcc with the identity flags, `-ccbin`, the include folders, a
    /// dependency list and the output, in the sources folder.
    pub fn action(&self) -> Action {
        let mut args: Vec<OsString> = self.flags.iter().map(OsString::from).collect();
        args.push("-ccbin".into());
        args.push(self.ccbin.into());
        for d in self.includes {
            args.push("-I".into());
            args.push(crate::paths::relative_to(self.cwd, &d.abs).into());
        }
        args.extend(["-MD".into(), "-MF".into(), self.depfile.into()]);
        args.extend(["-o".into(), self.output.into(), self.source.into()]);
        let mut inputs = vec![self.cwd.to_path_buf(), self.toolkit.to_path_buf()];
        inputs.extend(self.includes.iter().map(|d| d.abs.clone()));
        Action {
            program: self.nvcc.to_path_buf(),
            args,
            cwd: self.cwd.to_path_buf(),
            inputs,
            outputs: vec![self.output.to_path_buf(), self.depfile.to_path_buf()],
            depfiles: vec![self.depfile.to_path_buf()],
        }
    }

    /// Runs nvcc through `executor`; `Ok` carries what it printed (its warnings, and those
    /// of the tools it ran), `Err` the command line and nvcc's output.
    pub fn run(&self, executor: &dyn Executor) -> Result<String, Failure> {
        run(executor, &self.action())
    }
}

/// A run of a toolkit tool on files the build made, in the job's staging folder: the
/// device link of a module of several sources (`nvlink --arch=sm_XX` over the files'
/// relocatable cubins: it resolves every `extern` device symbol or fails), or nvcc
/// assembling a `-lineinfo` build's PTX into its cubin.
///
/// The link runs nvlink itself, not `nvcc -dlink`: nvcc would pass nvlink `-L` folders of
/// the toolkit, and nvlink writes its command line into the cubin (`.note.nv.tkinfo`), so
/// the linked bytes would depend on where the toolkit is unpacked. Without `-lcudadevrt`,
/// a module that needs the device runtime (dynamic parallelism) fails to link, naming
/// the symbol.
pub struct Stage<'a> {
    /// `<toolkit>/bin/nvcc` or `<toolkit>/bin/nvlink`.
    pub tool: &'a Path,
    /// The toolkit's root (what the action may read besides its inputs).
    pub toolkit: &'a Path,
    /// The flags (recorded in the identity).
    pub flags: &'a [String],
    /// Host compiler for nvcc's `-ccbin`; `None` for nvlink.
    pub ccbin: Option<&'a Path>,
    /// The inputs, in order, relative to `cwd`.
    pub inputs: &'a [PathBuf],
    /// Working folder (the job's staging folder: the run reads nothing else of the build).
    pub cwd: &'a Path,
    /// Where the cubin goes.
    pub output: &'a Path,
}

impl Stage<'_> {
    /// The action: the tool with its flags, `-ccbin` for nvcc, the output and the inputs,
    /// in the staging folder.
    pub fn action(&self) -> Action {
        let mut args: Vec<OsString> = self.flags.iter().map(OsString::from).collect();
        if let Some(ccbin) = self.ccbin {
            args.push("-ccbin".into());
            args.push(ccbin.into());
        }
        args.extend(["-o".into(), self.output.into()]);
        args.extend(self.inputs.iter().map(OsString::from));
        Action {
            program: self.tool.to_path_buf(),
            args,
            cwd: self.cwd.to_path_buf(),
            inputs: vec![self.cwd.to_path_buf(), self.toolkit.to_path_buf()],
            outputs: vec![self.output.to_path_buf()],
            depfiles: vec![],
        }
    }

    /// Runs it, as [`Invocation::run`] runs a compile.
    pub fn run(&self, executor: &dyn Executor) -> Result<String, Failure> {
        run(executor, &self.action())
    }
}

/// Runs an action that must write its outputs.
fn run(executor: &dyn Executor, action: &Action) -> Result<String, Failure> {
    let command = action.shown();
    match executor.execute(action) {
        Ok(out) if out.status.success() && action.outputs_written() => {
            let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stdout));
            Ok(text)
        }
        Ok(out) => {
            let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !stdout.trim().is_empty() {
                text.push_str(&stdout);
            }
            let status = if out.status.success() {
                "exit status 0 but no output file".to_string()
            } else {
                process::describe_status(&out.status)
            };
            let killed = match process::killing_signal(&out.status) {
                Some(_) => Some(format!("nvcc was {status}")),
                None => killed_tool(&text),
            };
            Err(Failure {
                command,
                status,
                output: text,
                killed,
                not_run: None,
            })
        }
        Err(e) => Err(Failure {
            command,
            status: format!("could not start ({}): {e}", executor.name()),
            output: String::new(),
            killed: None,
            not_run: Some(executor.name()),
        }),
    }
}

/// PTX with every `.file N "path"` directive's path replaced by `portable(path)` and its
/// optional modification time and size dropped: what ptxas writes into a `-lineinfo`
/// cubin's line table then depends on neither the checkout's location nor file times.
pub fn portable_line_files(ptx: &str, portable: impl Fn(&str) -> String) -> String {
    let mut out = String::with_capacity(ptx.len());
    for line in ptx.split_inclusive('\n') {
        let body = line.trim_start();
        let parsed = body.strip_prefix(".file").and_then(|rest| {
            let rest = rest.trim_start();
            let (n, rest) = rest.split_once(|c: char| c.is_whitespace())?;
            n.parse::<u32>().ok()?;
            let path = rest.trim_start().strip_prefix('"')?;
            let (path, _times) = path.split_once('"')?;
            Some((n, path))
        });
        match parsed {
            Some((n, path)) => {
                let indent = &line[..line.len() - body.len()];
                out.push_str(&format!("{indent}.file\t{n} \"{}\"\n", portable(path)));
            }
            None => out.push_str(line),
        }
    }
    out
}

/// A function (a kernel or a device function it calls) ptxas reported spilling registers
/// to local memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Spill {
    /// The function's symbol, as ptxas names it.
    pub function: String,
    /// Whether it is one of the module's kernels (else a device function they call; ptxas
    /// reports both). [`spills`] leaves it false: the caller knows the kernels.
    pub kernel: bool,
    /// Bytes of spill stores.
    pub stores: u64,
    /// Bytes of spill loads.
    pub loads: u64,
}

/// The spills in nvcc's output (`ptxas warning : Registers are spilled to local memory in
/// function 'k', 8 bytes spill stores, 8 bytes spill loads`, from `--warn-on-spills`), in
/// the order reported, each function once.
pub fn spills(warnings: &[String]) -> Vec<Spill> {
    let mut out: Vec<Spill> = Vec::new();
    for line in warnings {
        let Some(rest) = line
            .split_once("Registers are spilled to local memory in function '")
            .map(|x| x.1)
        else {
            continue;
        };
        let Some((function, rest)) = rest.split_once('\'') else {
            continue;
        };
        let (mut stores, mut loads) = (None, None);
        for part in rest.split(',').map(str::trim) {
            if let Some(n) = part.strip_suffix(" bytes spill stores") {
                stores = n.parse().ok();
            } else if let Some(n) = part.strip_suffix(" bytes spill loads") {
                loads = n.parse().ok();
            }
        }
        if let (Some(stores), Some(loads)) = (stores, loads)
            && !out.iter().any(|s| s.function == function)
        {
            out.push(Spill {
                function: function.to_string(),
                kernel: false,
                stores,
                loads,
            });
        }
    }
    out
}

/// The symbols nvlink reports as undefined (`nvlink error   : Undefined reference to
/// 'twiddles' in '...'`), each once, in the order reported.
pub fn unresolved_at_link(output: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in output.lines() {
        let Some(rest) = line.split_once("Undefined reference to '").map(|x| x.1) else {
            continue;
        };
        if let Some((symbol, _)) = rest.split_once('\'')
            && !out.iter().any(|s| s == symbol)
        {
            out.push(symbol.to_string());
        }
    }
    out
}

/// The warnings in nvcc's output of a successful run, one per line as nvcc (and cicc,
/// ptxas, the host compiler) printed them: every non-empty line except nvcc's closing
/// remark on how to suppress warnings.
pub fn warnings(output: &str) -> Vec<String> {
    output
        .lines()
        .map(str::trim_end)
        .filter(|l| {
            !l.trim().is_empty() && !l.starts_with("Remark: The warnings can be suppressed")
        })
        .map(str::to_string)
        .collect()
}

/// A tool that nvcc reports killed by a signal (`nvcc error : 'cicc' died due to signal 9
/// (Kill signal)`), in words.
pub fn killed_tool(output: &str) -> Option<String> {
    output.lines().find_map(|l| {
        let at = l.find("died due to signal")?;
        let tool = l[..at]
            .rsplit(':')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('\'');
        Some(format!(
            "{} {}",
            if tool.is_empty() {
                "a tool nvcc ran"
            } else {
                tool
            },
            l[at..].trim()
        ))
    })
}

/// The header nvcc (the host preprocessor) reports missing, if that is why it failed.
pub fn missing_header(output: &str) -> Option<(String, String)> {
    output.lines().find_map(|l| {
        let (at, rest) = l.split_once(": fatal error: ")?;
        let header = rest.strip_suffix(": No such file or directory")?;
        let file = at.split(':').next().unwrap_or(at);
        Some((header.to_string(), file.to_string()))
    })
}

/// The prerequisites of a make-style dependency file (`target: a b \` ...), in order.
pub fn parse_depfile(text: &str) -> Result<Vec<PathBuf>> {
    let joined = text.replace("\\\r\n", " ").replace("\\\n", " ");
    let mut out = Vec::new();
    for line in joined.lines().filter(|l| !l.trim().is_empty()) {
        // The target ends at the first unescaped ": ".
        let bytes = line.as_bytes();
        let colon = (0..bytes.len())
            .find(|&i| bytes[i] == b':' && bytes.get(i + 1).is_none_or(|b| b.is_ascii_whitespace()))
            .with_context(|| format!("dependency line without `target:`: {line}"))?;
        let mut word = String::new();
        let mut chars = line[colon + 1..].chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&' ') => {
                    word.push(' ');
                    chars.next();
                }
                c if c.is_whitespace() => {
                    if !word.is_empty() {
                        out.push(PathBuf::from(std::mem::take(&mut word)));
                    }
                }
                c => word.push(c),
            }
        }
        if !word.is_empty() {
            out.push(PathBuf::from(word));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The action an executor gets: nvcc's command line in the order the identity was
    /// recorded with (flags, -ccbin, -I relative to the sources folder, depfile, output,
    /// source), what it may read and what it must write.
    #[test]
    fn a_compile_is_one_action_with_its_inputs_and_outputs() {
        let includes = [crate::build::spec::IncludeDir {
            rel: "../inc".into(),
            abs: "/w/inc".into(),
        }];
        let flags = ["-cubin".to_string(), "-arch=sm_90".to_string()];
        let inv = Invocation {
            nvcc: Path::new("/tk/bin/nvcc"),
            toolkit: Path::new("/tk"),
            flags: &flags,
            ccbin: Path::new("/usr/bin/c++"),
            source: Path::new("ntt.cu"),
            includes: &includes,
            cwd: Path::new("/w/src"),
            output: Path::new("/s/sm_90.cubin"),
            depfile: Path::new("/s/sm_90.d"),
        };
        let a = inv.action();
        let args: Vec<String> = a.args.iter().map(|x| x.to_string_lossy().into()).collect();
        assert_eq!(
            args,
            [
                "-cubin",
                "-arch=sm_90",
                "-ccbin",
                "/usr/bin/c++",
                "-I",
                "../inc",
                "-MD",
                "-MF",
                "/s/sm_90.d",
                "-o",
                "/s/sm_90.cubin",
                "ntt.cu"
            ]
        );
        assert_eq!(a.program, Path::new("/tk/bin/nvcc"));
        assert_eq!(a.cwd, Path::new("/w/src"));
        let inputs: Vec<&Path> = a.inputs.iter().map(PathBuf::as_path).collect();
        assert_eq!(
            inputs,
            [Path::new("/w/src"), Path::new("/tk"), Path::new("/w/inc")]
        );
        let outputs: Vec<&Path> = a.outputs.iter().map(PathBuf::as_path).collect();
        assert_eq!(
            outputs,
            [Path::new("/s/sm_90.cubin"), Path::new("/s/sm_90.d")]
        );
    }

    #[test]
    fn depfiles_parse_with_continuations_and_escaped_spaces() {
        let text = "/t/out.cubin : /k/ntt.cu \\\n    /usr/include/stdc-predef.h \\\n    /tk/bin/..//include/cuda_runtime.h /my\\ dir/x.cuh\n";
        let deps = parse_depfile(text).unwrap();
        assert_eq!(
            deps,
            [
                "/k/ntt.cu",
                "/usr/include/stdc-predef.h",
                "/tk/bin/..//include/cuda_runtime.h",
                "/my dir/x.cuh"
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn relative_paths_between_folders() {
        let r = |a: &str, b: &str| crate::paths::relative_to(Path::new(a), Path::new(b));
        assert_eq!(r("/a/b/src", "/a/b/include"), Path::new("../include"));
        assert_eq!(r("/a/b/src", "/a/b/src/sub"), Path::new("sub"));
        assert_eq!(r("/a/b/src", "/x/y"), Path::new("../../../x/y"));
        assert_eq!(r("/a", "/a"), Path::new("."));
    }

    #[test]
    fn tools_killed_under_nvcc_are_recognised() {
        let out = "nvcc error   : 'cicc' died due to signal 9 (Kill signal)\n";
        assert_eq!(
            killed_tool(out).as_deref(),
            Some("cicc died due to signal 9 (Kill signal)")
        );
        assert_eq!(killed_tool("merkle.cu(3): error: expected a \";\""), None);
    }

    #[test]
    fn register_spills_are_read_per_function() {
        let said: Vec<String> = [
            "ptxas warning : Registers are spilled to local memory in function 'spill', 10800 bytes spill stores, 13304 bytes spill loads",
            "ptxas warning : Registers are spilled to local memory in function '_Z4hashPj', 8 bytes spill stores, 4 bytes spill loads",
            "k.cu(3): warning #177-D: variable \"x\" was declared but never referenced",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let s = spills(&said);
        assert_eq!(
            s,
            [
                Spill {
                    function: "spill".into(),
                    kernel: false,
                    stores: 10800,
                    loads: 13304
                },
                Spill {
                    function: "_Z4hashPj".into(),
                    kernel: false,
                    stores: 8,
                    loads: 4
                },
            ]
        );
        assert!(spills(&said[2..]).is_empty());
    }

    #[test]
    fn line_table_files_lose_their_folders_and_times() {
        let ptx = "\t.loc\t1 2 0\n\t.file\t1 \"/w/a/src/k.cu\", 1764644000, 216\n\t.file\t2 \"/tk/bin/..//include/x.hpp\"\n.file 3 \"/usr/include/stdio.h\"\n// .file is a word\n";
        let out = portable_line_files(ptx, |p| {
            p.replace("/w/a/src/", "")
                .replace("/tk/bin/..//", "cuda-toolkit/")
        });
        assert_eq!(
            out,
            "\t.loc\t1 2 0\n\t.file\t1 \"k.cu\"\n\t.file\t2 \"cuda-toolkit/include/x.hpp\"\n.file\t3 \"/usr/include/stdio.h\"\n// .file is a word\n"
        );
    }

    #[test]
    fn symbols_nvlink_could_not_resolve_are_recognised() {
        let said = "nvlink error   : Undefined reference to '_Z6mulmodjj' in '/tmp/tmpxft_0000_6_ntt.o'\n\
                    nvlink error   : Undefined reference to 'twiddles' in '/tmp/tmpxft_0000_6_ntt.o'\n\
                    nvlink error   : Undefined reference to 'twiddles' in '/tmp/tmpxft_0001_6_lde.o'\n";
        assert_eq!(unresolved_at_link(said), ["_Z6mulmodjj", "twiddles"]);
        assert!(
            unresolved_at_link("nvlink fatal   : elfLink linker library load error").is_empty()
        );
    }

    #[test]
    fn missing_headers_are_recognised() {
        let err = "miss.cu:1:10: fatal error: nope.cuh: No such file or directory\n    1 | #include \"nope.cuh\"\n";
        assert_eq!(
            missing_header(err),
            Some(("nope.cuh".into(), "miss.cu".into()))
        );
        assert_eq!(
            missing_header("bad.cu(1): error: expected an expression"),
            None
        );
    }
}
