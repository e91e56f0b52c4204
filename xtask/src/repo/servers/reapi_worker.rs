//! The REAPI worker of the remote-execution tests (`cargo xtask servers reapi-worker`,
//! issue 45): a bot of the Remote Workers API (Bots, `google.devtools.remoteworkers.v1test2`)
//! that takes the actions a REAPI server leases it — `servers reapi`'s BuildGrid, which has
//! no worker of its own — and runs them on this machine.
//!
//! The worker is `reapi_worker.py` and `reapi_worker_cas.py` beside this file, run with the
//! BuildGrid venv's Python (grpcio and BuildGrid's generated protos; nothing is generated
//! here). Per lease it fetches the Action, its Command and its input tree from the CAS,
//! lays the inputs out in a fresh folder under `--root` hard-linked from a local cache
//! (`ROOT/cas/`: the CUDA toolkit every nvcc action takes is downloaded once, never
//! copied), runs the command with exactly its environment in a process group of its own
//! (killed past the action's timeout), uploads the outputs, stdout and stderr, reports the
//! ActionResult and deletes the folder; the script's docstring has the steps. This side
//! checks the arguments, writes the scripts into the root and becomes the worker (exec)
//! after one JSON line, like the servers.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::venv;
use crate::advice::fail;

/// The worker, and the storage half it imports from beside it.
const SCRIPTS: [(&str, &str); 2] = [
    ("reapi_worker.py", include_str!("reapi_worker.py")),
    ("reapi_worker_cas.py", include_str!("reapi_worker_cas.py")),
];

/// What `servers reapi-worker` was asked to run, checked.
pub struct Worker {
    /// `HOST:PORT` of the server (from `grpc://HOST:PORT`).
    pub addr: String,
    /// The worker's folder (absolute): the cache, the actions' folders, the scripts.
    pub root: PathBuf,
    /// The bot's id at the server.
    pub name: String,
    /// The server's instance name (`""`: BuildGrid's default).
    pub instance: String,
    /// Actions run at once.
    pub capacity: u32,
    /// Cut every output to half before uploading it (fault injection for the tests).
    pub damage_outputs: bool,
    /// The user (uid, gid) the commands run as; the worker's own when `None`.
    pub run_as: Option<(u32, u32)>,
    /// Days the commands' wall clock is off (datefudge); the machine's when `None`.
    pub clock_offset_days: Option<i32>,
}

impl Worker {
    /// Checks the arguments and takes the root (made if missing; refused when another
    /// worker holds it).
    pub fn new(
        server: &str,
        root: &Path,
        name: Option<String>,
        instance: String,
        capacity: u32,
    ) -> Result<Worker> {
        let addr = server_addr(server)?;
        let name = match name {
            Some(n) => n,
            None => default_name(),
        };
        check_name(&name)?;
        if !instance.is_empty()
            && instance
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
        {
            return Err(fail(
                format!("--instance {instance:?} is not an instance name"),
                "pass the server's instance name (`servers reapi` has only \"\", the default)",
            ));
        }
        std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
        let root = std::path::absolute(root)?;
        check_root_free(&root)?;
        Ok(Worker {
            addr,
            root,
            name,
            instance,
            capacity,
            damage_outputs: false,
            run_as: None,
            clock_offset_days: None,
        })
    }

    /// The worker's process: the venv's Python running the script written into the root.
    pub fn command(&self) -> Result<Command> {
        let dir = super::reapi::ensure()?;
        for (file, text) in SCRIPTS {
            let path = self.root.join(file);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        let mut cmd = Command::new(venv::python(&dir));
        cmd.arg(self.root.join(SCRIPTS[0].0))
            .arg("--server")
            .arg(&self.addr)
            .arg("--root")
            .arg(&self.root)
            .arg("--name")
            .arg(&self.name)
            .arg(format!("--instance={}", self.instance))
            .arg(format!("--capacity={}", self.capacity))
            .arg(format!("--isa={}", isa()))
            .args(self.damage_outputs.then_some("--damage-outputs"))
            .args(self.run_as.map(|(u, g)| format!("--run-as={u}:{g}")));
        if let Some(days) = self.clock_offset_days {
            let fudge = super::ensure("datefudge")?;
            cmd.arg(format!("--clock-offset-days={days}"))
                .arg("--datefudge")
                .arg(fudge);
        }
        cmd
            // Python's own buffering would hold the event lines back.
            .env("PYTHONUNBUFFERED", "1")
            // The command is started by fork and exec (its preexec_fn sets the death
            // signal); gRPC's fork handlers would run in that child and can abort it
            // ("epoll_wait error: Bad file descriptor", exit 134) before the exec.
            .env("GRPC_ENABLE_FORK_SUPPORT", "false")
            .stdin(Stdio::null());
        Ok(cmd)
    }

    /// The announced line: the server it takes work from (`addr`), its root and name.
    pub fn line(&self) -> serde_json::Value {
        serde_json::json!({
            "event": "starting",
            "server": "reapi-worker",
            "addr": self.addr,
            "work": self.root.display().to_string(),
            "name": self.name,
            "capacity": self.capacity,
            "run_as": self.run_as.map(|(u, g)| format!("{u}:{g}")),
            "clock_offset_days": self.clock_offset_days,
        })
    }
}

/// `--run-as UID:GID`, checked: numbers, and this process root (only root may start a
/// command as another user).
pub fn run_as(text: &str) -> Result<(u32, u32)> {
    let parsed = text
        .split_once(':')
        .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)));
    let Some(ids) = parsed else {
        return Err(fail(
            format!("--run-as {text:?} is not UID:GID"),
            "give the numeric user and group the commands run as, e.g. --run-as 65534:65534 (nobody)",
        ));
    };
    if !super::apt::running_as_root() {
        return Err(fail(
            format!(
                "--run-as {text}: this worker does not run as root, so it cannot start commands as another user"
            ),
            "run the worker as root, or leave --run-as out (its commands then run as the worker's user)",
        ));
    }
    Ok(ids)
}

/// `HOST:PORT` of `grpc://HOST:PORT`; anything else (TLS, another scheme, a path) is
/// refused with advice.
pub fn server_addr(url: &str) -> Result<String> {
    let refuse = || {
        fail(
            format!("--server {url}: not grpc://HOST:PORT"),
            "pass the address `cargo xtask servers reapi` announced as grpc://127.0.0.1:PORT (the worker speaks gRPC without TLS: no grpcs://)",
        )
    };
    let rest = url.strip_prefix("grpc://").ok_or_else(refuse)?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(refuse)?;
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-[]:".contains(&b));
    if !host_ok || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(refuse());
    }
    Ok(rest.to_string())
}

/// `HOST-PID`: unique among the workers of one machine (the pid is the worker's, which
/// replaces this process).
fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
        .collect();
    let host = if host.is_empty() {
        "worker".into()
    } else {
        host
    };
    format!("{host}-{}", std::process::id())
}

/// A bot name: 1 to 64 letters, digits, `.`, `_` or `-`.
fn check_name(name: &str) -> Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(fail(
            format!("--name {name:?} is not a bot name"),
            "use 1 to 64 letters, digits, `.`, `_` or `-`, unique among the server's workers",
        ))
    }
}

/// Fails with advice when a worker holds `ROOT/worker.lock` (the script takes it for as
/// long as it runs; at start it deletes the actions' folders a killed one left).
fn check_root_free(root: &Path) -> Result<()> {
    let path = root.join("worker.lock");
    let file = cuda_aot::fs::open_lock_file(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => Err(fail(
            format!(
                "another worker uses {} (its worker.lock is held)",
                root.display()
            ),
            "give each worker its own --root",
        )),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

/// The platform property `ISA` the bot offers, in the Remote Execution API's lexicon.
fn isa() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x86-64",
        "x86" => "x86-32",
        "aarch64" => "arm-a64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_grpc_addresses_are_taken() {
        assert_eq!(
            server_addr("grpc://127.0.0.1:8980").unwrap(),
            "127.0.0.1:8980"
        );
        assert_eq!(server_addr("grpc://[::1]:80").unwrap(), "[::1]:80");
        for bad in [
            "127.0.0.1:8980",
            "grpcs://127.0.0.1:8980",
            "http://127.0.0.1:8980",
            "grpc://127.0.0.1",
            "grpc://127.0.0.1:0",
            "grpc://:8980",
            "grpc://host/x:8980",
        ] {
            let e = server_addr(bad).unwrap_err().to_string();
            assert!(e.contains("not grpc://HOST:PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn names_are_plain() {
        assert!(check_name("worker-a.1_x").is_ok());
        assert!(check_name(&default_name()).is_ok());
        for bad in ["", "a b", "a/b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
