//! The executor seam: where a job's toolkit runs (nvcc compiles, nvlink device links, PTX
//! assembly) happen. The plan and the caches decide *what* runs and what its result means;
//! an [`Executor`] only runs one [`Action`] and hands back what it printed and the files it
//! wrote. [`Local`] runs it as a child process of this machine; a remote executor (REAPI)
//! ships the same action, command line and relative paths included, to a cluster.
//!
//! Whatever executes an action, its outputs are then checked by the build exactly as a
//! local one's are (ELF structure, SM, identity), so an executor is never trusted.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use crate::process;
use crate::toolchain::NVCC_ENV_SCRUB;

#[cfg(feature = "net")]
pub mod remote;

/// One run of a toolkit tool: its exact command line, where it runs, what it may read and
/// what it must write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// The program (`<toolkit>/bin/nvcc`, `<toolkit>/bin/nvlink`).
    pub program: PathBuf,
    /// Its arguments, paths relative to `cwd` where the build can make them so.
    pub args: Vec<OsString>,
    /// The working folder.
    pub cwd: PathBuf,
    /// What the action may read: the folders (and files) its command line reaches, the
    /// toolkit root included. A local run reads them in place; a remote one uploads them.
    pub inputs: Vec<PathBuf>,
    /// Files the action must write (absolute, or relative to `cwd`): it failed when one is
    /// missing, whatever its exit status.
    pub outputs: Vec<PathBuf>,
    /// Those of `outputs` that list paths the run read (make-style dependency files): a
    /// remote executor maps the paths its worker wrote in them back to this machine's.
    pub depfiles: Vec<PathBuf>,
}

impl Action {
    /// The command a local run starts: in `cwd`, in the C locale, without stdin, with
    /// nvcc's flag-injecting environment variables removed.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .current_dir(&self.cwd)
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        for v in NVCC_ENV_SCRUB {
            cmd.env_remove(v);
        }
        cmd
    }

    /// The command line, shell-quoted, for messages.
    pub fn shown(&self) -> String {
        process::show_command(&self.command())
    }

    /// Whether every output exists (relative ones under `cwd`) as a file.
    pub fn outputs_written(&self) -> bool {
        self.outputs.iter().all(|o| self.cwd.join(o).is_file())
    }
}

/// Whether the server's ActionCache is used (`--remote-exec-cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum RemoteExecCache {
    /// Every action runs (`skip_cache_lookup`), and its result is not cached.
    Off,
    /// A cached result is taken (then checked like a fresh one); an action run for this
    /// build is marked `do_not_cache`, so nothing is added.
    Read,
    /// Cached results are taken, and what runs is cached by the server.
    #[default]
    ReadWrite,
}

/// What `--remote-exec-fallback` does when the REAPI server cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum RemoteExecFallback {
    /// The build fails, naming the server and what to check.
    #[default]
    None,
    /// The build runs here instead, after saying why on stderr.
    Local,
}

/// Runs actions. Implementations must be usable from several build workers at once.
pub trait Executor: Send + Sync + std::fmt::Debug {
    /// A short name for messages and reports (`local`, `remote grpc://…`).
    fn name(&self) -> String;

    /// Runs `action` to completion: its exit status and what it printed. An `Err` means it
    /// could not be run at all (not found, not reachable); a run that failed is an `Ok`
    /// whose status says so. The outputs are in place when this returns.
    fn execute(&self, action: &Action) -> std::io::Result<Output>;

    /// One line on what it did, for the end of a build (`None`: nothing to say).
    fn summary(&self) -> Option<String> {
        None
    }

    /// Forgets which of this thread's actions were answered from a cache (a job starts).
    fn begin_job(&self) {}

    /// The host compiler this build's identities record (nvcc's `-ccbin` and the first
    /// line of its `--version`): an executor that runs elsewhere refuses to run anything
    /// where that path holds another compiler.
    fn expect_host_compiler(&self, path: &std::path::Path, version: &str) {
        let _ = (path, version);
    }

    /// The actions this thread ran since [`Executor::begin_job`] whose results came from a
    /// cache (the server's ActionCache), named; each is distrusted from now on (it runs
    /// again, its cached result never taken). A job whose outputs failed the build's checks
    /// calls it: when it names any, the job runs once more.
    fn refuse_cached(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Runs actions as child processes of this machine, each in its own process group, so an
/// interrupt (Ctrl-C) stops them with the build.
#[derive(Debug, Clone, Copy, Default)]
pub struct Local;

impl Executor for Local {
    fn name(&self) -> String {
        "local".into()
    }

    fn execute(&self, action: &Action) -> std::io::Result<Output> {
        process::output(&mut action.command())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_runs_in_cwd_captures_output_and_checks_outputs() {
        let dir = tempfile::tempdir().unwrap();
        let action = Action {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "pwd > out.txt; echo said >&2".into()],
            cwd: dir.path().to_path_buf(),
            inputs: vec![dir.path().to_path_buf()],
            outputs: vec!["out.txt".into()],
            depfiles: vec![],
        };
        let out = Local.execute(&action).unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stderr), "said\n");
        assert!(action.outputs_written());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
            format!("{}\n", dir.path().canonicalize().unwrap().display())
        );
        let missing = Action {
            outputs: vec!["never.txt".into()],
            ..action.clone()
        };
        assert!(!missing.outputs_written());
        assert!(action.shown().contains("/bin/sh"));
    }
}
