//! The REAPI server of the tests (`xtask servers reapi`: BuildGrid from pinned wheels, its
//! scheduler on a private PostgreSQL) on loopback, with its work folder (CAS, database,
//! logs) in a temporary folder; stopped on drop, PostgreSQL with it.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{repo, xtask};

/// `xtask servers reapi`, until SIGTERM (then SIGKILL) on drop.
pub struct Reapi {
    child: Child,
    /// Where it listens (gRPC, no TLS, instance "").
    pub addr: SocketAddr,
    /// The work folder: `cas/`, `pgdata/`, `buildgrid.yml`, `postgres.log`.
    pub work: tempfile::TempDir,
}

impl Reapi {
    /// A server whose silent workers lose their lease after `keepalive_secs`, with `extra`
    /// arguments; waits (3 minutes at most: the first start installs it) until it listens.
    pub fn start(keepalive_secs: u64, extra: &[&str]) -> Reapi {
        let work = tempfile::tempdir().unwrap();
        let mut child = xtask()
            .args(["servers", "reapi", "--keepalive-secs"])
            .arg(keepalive_secs.to_string())
            .arg("--work")
            .arg(work.path())
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("a first line").unwrap();
        let v: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert_eq!(v["server"], "reapi", "{v}");
        let addr: SocketAddr = v["addr"].as_str().unwrap().parse().unwrap();
        // BuildGrid's own output: drained so the pipe never fills.
        std::thread::spawn(move || for _ in lines {});
        let t = Instant::now();
        while TcpStream::connect(addr).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("servers reapi exited ({status}) before listening");
            }
            assert!(
                t.elapsed() < Duration::from_secs(180),
                "reapi not listening"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Reapi { child, addr, work }
    }

    /// The pid of the PostgreSQL it started (from its lock file).
    pub fn postgres_pid(&self) -> u32 {
        let text = std::fs::read_to_string(self.work.path().join("pgdata/postmaster.pid")).unwrap();
        text.lines().next().unwrap().trim().parse().unwrap()
    }

    /// Sends `signal` (`-TERM`, `-KILL`) and waits (10 s at most, then SIGKILL) for the exit
    /// status.
    pub fn stop_with(&mut self, signal: &str) -> ExitStatus {
        let _ = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status();
        let t = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if t.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Reapi {
    fn drop(&mut self) {
        if self.child.try_wait().unwrap().is_none() {
            self.stop_with("-TERM");
        }
    }
}

/// The venv `servers reapi` installed (the project's .cuda-aot/servers/buildgrid-<pins>/):
/// its Python has grpcio and BuildGrid's generated protos.
pub fn venv_python() -> PathBuf {
    let dir = repo().join(".cuda-aot/servers");
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("buildgrid-"))
                && p.join(".installed").is_file()
        })
        .expect("servers reapi installed its venv")
        .join("venv/bin/python")
}

/// Whether process `pid` is gone (or a zombie no one reaped: it runs nothing).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // `PID (COMM) STATE ...`: the state follows the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// Waits up to `timeout` for [`process_gone`].
pub fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let t = Instant::now();
    while !process_gone(pid) {
        if t.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// The number of files under `dir`, recursively.
pub fn files_under(dir: &Path) -> usize {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .count()
}
