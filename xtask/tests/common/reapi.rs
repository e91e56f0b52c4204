//! The REAPI server of the tests (`xtask servers reapi`: BuildGrid from pinned wheels, its
//! scheduler on a private PostgreSQL) on loopback, with its work folder (CAS, database,
//! logs) in a temporary folder; stopped on drop, PostgreSQL with it. Its workers
//! (`xtask servers reapi-worker`), their events collected, their process groups killed on
//! drop.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::xtask;

/// `xtask servers reapi`, until SIGTERM (then SIGKILL) on drop.
pub struct Reapi {
    child: Child,
    /// Where it listens (gRPC, no TLS, instance "").
    pub addr: SocketAddr,
    /// The work folder: `cas/`, `pgdata/`, `buildgrid.yml`, `postgres.log`.
    pub work: tempfile::TempDir,
    /// With `--tls-port`: where it also listens with TLS, and the CA file to trust.
    pub tls: Option<(SocketAddr, PathBuf)>,
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
        let tls = v["tls_addr"].as_str().map(|a| {
            let ca = PathBuf::from(v["ca"].as_str().unwrap());
            (a.parse::<SocketAddr>().unwrap(), ca)
        });
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
        if let Some((a, _)) = tls {
            while TcpStream::connect(a).is_err() {
                assert!(t.elapsed() < Duration::from_secs(180), "TLS not listening");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Reapi {
            child,
            addr,
            work,
            tls,
        }
    }

    /// The pid of the PostgreSQL it started (from its lock file).
    pub fn postgres_pid(&self) -> u32 {
        let text = std::fs::read_to_string(self.work.path().join("pgdata/postmaster.pid")).unwrap();
        text.lines().next().unwrap().trim().parse().unwrap()
    }

    /// Sends `signal` (`-TERM`, `-KILL`) and waits (10 s at most, then SIGKILL) for the exit
    /// status.
    pub fn stop_with(&mut self, signal: &str) -> ExitStatus {
        super::server::signal_and_wait(&mut self.child, signal)
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
    super::server::venv_python("buildgrid-")
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

/// `xtask servers reapi-worker` taking a server's work, in a process group of its own (a
/// test kills the group as a machine's death would), its events (JSON lines on stdout)
/// collected; its group killed on drop.
pub struct Worker {
    child: Child,
    /// Its bot name.
    pub name: String,
    events: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Worker {
    /// A worker named `name` with its folder `root`, taking `server`'s work; waits (60 s at
    /// most) until it has reached the server.
    pub fn start(server: &Reapi, root: &Path, name: &str) -> Worker {
        Self::start_with(server, root, name, &[])
    }

    /// [`Worker::start`] with `extra` arguments.
    pub fn start_with(server: &Reapi, root: &Path, name: &str, extra: &[&str]) -> Worker {
        let mut child = xtask()
            .args(["servers", "reapi-worker", "--server"])
            .arg(format!("grpc://{}", server.addr))
            .arg("--root")
            .arg(root)
            .args(["--name", name])
            .args(extra)
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("a first line").unwrap();
        let v: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert_eq!(v["server"], "reapi-worker", "{v}");
        assert_eq!(v["name"], name, "{v}");
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let v = serde_json::from_str(&line).unwrap_or(serde_json::json!({ "line": line }));
                sink.lock().unwrap().push(v);
            }
        });
        let worker = Worker {
            child,
            name: name.to_string(),
            events,
        };
        worker.wait_for("connected", Duration::from_secs(60));
        worker
    }

    /// Its events named `kind` so far.
    pub fn events(&self, kind: &str) -> Vec<serde_json::Value> {
        let all = self.events.lock().unwrap();
        all.iter().filter(|e| e["event"] == kind).cloned().collect()
    }

    /// All its events so far, in order.
    pub fn all_events(&self) -> Vec<serde_json::Value> {
        self.events.lock().unwrap().clone()
    }

    /// Its first event named `kind`, waited for up to `timeout`.
    pub fn wait_for(&self, kind: &str, timeout: Duration) -> serde_json::Value {
        let t = Instant::now();
        loop {
            if let Some(e) = self.events(kind).into_iter().next() {
                return e;
            }
            assert!(
                t.elapsed() < timeout,
                "worker {}: no {kind} event in {timeout:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL to its whole process group, then its exit status.
    pub fn kill_group(&mut self) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        self.child.wait().unwrap()
    }

    /// Sends SIGTERM and waits (20 s at most, then SIGKILL) for the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if t.elapsed() > Duration::from_secs(20) {
                return self.kill_group();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if self.child.try_wait().unwrap().is_none() {
            self.kill_group();
        }
    }
}
