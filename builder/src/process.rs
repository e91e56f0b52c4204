//! Child processes and interrupts. Every child this tool waits on (nvcc, pip, a compiler's
//! `--version`) runs in its own process group, registered here while it runs. The first
//! Ctrl-C (SIGINT) or SIGTERM kills those groups at once — nvcc with its cicc, ptxas and host
//! compiler — and marks the run interrupted: the task keeps what finished, removes its
//! temporary folders, and the CLI prints `interrupted` and exits 130 (143 for SIGTERM). A
//! second signal exits at once. Also: `cargo` as a child, the way a user's shell runs it.

use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

/// The signal that interrupted this run (0: none yet).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Process groups of the running children (each child leads its own group).
static GROUPS: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// The run was interrupted by a signal; the task stopped early on purpose.
#[derive(Debug, Clone, Copy)]
pub struct Interrupted {
    /// The signal number (SIGINT 2, SIGTERM 15).
    pub signal: i32,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted ({})", signal_name(self.signal))
    }
}

impl std::error::Error for Interrupted {}

impl Interrupted {
    /// The exit code a shell reports for this signal: 128 + its number (130 for SIGINT).
    pub fn exit_code(self) -> i32 {
        128 + self.signal
    }
}

/// Installs the SIGINT/SIGTERM handler (a thread that waits for the signals).
pub fn install_interrupt_handler() -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("installing the Ctrl-C handler")?;
    std::thread::Builder::new()
        .name("interrupts".into())
        .spawn(move || {
            for sig in signals.forever() {
                if SIGNAL.swap(sig, Ordering::SeqCst) != 0 {
                    eprintln!("interrupted again: exiting at once");
                    std::process::exit(128 + sig);
                }
                kill_children();
            }
        })
        .context("starting the Ctrl-C handler thread")?;
    Ok(())
}

/// The interrupt, if one arrived.
pub fn interrupted() -> Option<Interrupted> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(Interrupted { signal }),
    }
}

/// `Err(Interrupted)` once an interrupt arrived: long tasks call this between steps.
pub fn check_interrupt() -> Result<()> {
    match interrupted() {
        Some(i) => Err(i.into()),
        None => Ok(()),
    }
}

fn kill_children() {
    let groups = GROUPS.lock().unwrap_or_else(|p| p.into_inner());
    for &g in groups.iter() {
        if let Some(pid) = rustix::process::Pid::from_raw(g as i32) {
            // Best effort: the group may have exited on its own meanwhile.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

/// A spawned child, registered until it is dropped.
struct Tracked {
    child: Option<Child>,
    id: u32,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        GROUPS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

fn spawn(cmd: &mut Command) -> std::io::Result<Tracked> {
    cmd.process_group(0);
    let mut groups = GROUPS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = interrupted() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Interrupted,
            i.to_string(),
        ));
    }
    let child = cmd.spawn()?;
    let id = child.id();
    groups.insert(id);
    Ok(Tracked {
        child: Some(child),
        id,
    })
}

/// Runs `cmd` to completion in its own process group and captures stdout and stderr (like
/// [`Command::output`]); an interrupt kills the whole group.
pub fn output(cmd: &mut Command) -> std::io::Result<Output> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut t = spawn(cmd)?;
    t.child.take().expect("spawned").wait_with_output()
}

/// [`output`] capturing stdout only: stderr goes where `cmd` says (the user's terminal by
/// default), so a long child's progress stays visible.
pub fn stdout_of(cmd: &mut Command) -> std::io::Result<Output> {
    cmd.stdout(Stdio::piped());
    let mut t = spawn(cmd)?;
    t.child.take().expect("spawned").wait_with_output()
}

/// Runs `cmd` to completion in its own process group with the stdio it was given (like
/// [`Command::status`]); an interrupt kills the whole group.
pub fn status(cmd: &mut Command) -> std::io::Result<ExitStatus> {
    let mut t = spawn(cmd)?;
    t.child.as_mut().expect("spawned").wait()
}

/// How a child ended, in words: `exit status: 1`, or `killed by signal 9 (SIGKILL)`.
pub fn describe_status(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(s) => format!("killed by signal {s} ({})", signal_name(s)),
        None => status.to_string(),
    }
}

/// The signal that killed a child, if one did.
pub fn killing_signal(status: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

/// `SIGKILL` for 9, and so on for the signals a build meets.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// `cargo`, as a user's shell would run it: this process runs under `cargo run`, which sets
/// variables for the crate it runs (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`, ...). A child
/// cargo that inherited them would rebuild dependencies whose build scripts watch them
/// (ring does), so they are removed; `CARGO` names the cargo to run.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if CRATE_VARS.contains(&name)
            || name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
        {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// `cargo metadata --no-deps` of the workspace at `root` (its packages, their versions,
/// the target directory), cargo's progress and errors on the user's stderr.
pub fn cargo_metadata(root: &Path) -> Result<serde_json::Value> {
    let out = stdout_of(
        cargo()
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .current_dir(root)
            .stdin(Stdio::null()),
    )
    .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata in {}: {} (cargo's messages above)",
            root.display(),
            describe_status(&out.status)
        );
    }
    serde_json::from_slice(&out.stdout).context("reading cargo metadata's output")
}

/// cargo's target directory for the checkout at `root` (`cargo metadata`'s
/// `target_directory`: `CARGO_TARGET_DIR`, `build.target-dir` or `<root>/target`).
pub fn cargo_target_dir(root: &Path) -> Result<PathBuf> {
    cargo_metadata(root)?["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .context("cargo metadata named no target_directory")
}

/// What cargo sets for the crate it runs or builds, besides `CARGO_PKG_*` and
/// `CARGO_BIN_EXE_*` (cargo's "environment variables Cargo sets for crates").
const CRATE_VARS: &[&str] = &[
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_RUSTC_CURRENT_DIR",
];

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

/// A command line as a shell would take it (for error messages).
pub fn show_command(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `s` as one shell word: as is when it holds only plain characters, else in single quotes.
pub fn shell_quote(s: &str) -> String {
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

    #[test]
    fn shell_quoting_is_copy_pasteable() {
        assert_eq!(shell_quote("-DCUDA_AOT_BLOCK=256"), "-DCUDA_AOT_BLOCK=256");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn children_run_in_their_own_group_and_signals_are_reported_as_kills() {
        let out = output(Command::new("sh").args(["-c", "echo $$; cat /proc/$$/stat"])).unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let (pid, stat) = text.split_once('\n').unwrap();
        // /proc/PID/stat: `pid (comm) state ppid pgrp ...`
        let pgrp = stat.rsplit_once(") ").unwrap().1.split(' ').nth(2).unwrap();
        assert_eq!(pgrp, pid.trim(), "the child leads its own process group");
        assert!(GROUPS.lock().unwrap().is_empty(), "unregistered after exit");
        let st = status(Command::new("sh").args(["-c", "kill -9 $$"])).unwrap();
        assert_eq!(killing_signal(&st), Some(9));
        assert_eq!(describe_status(&st), "killed by signal 9 (SIGKILL)");
    }
}
