//! Servers the tests start through `xtask` (`serve`, `servers nginx`, `servers oci`) on
//! loopback: started, waited for, stopped with SIGTERM on drop.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::xtask;

/// A server process started through xtask; SIGTERM and reaped on drop.
pub struct Server {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Server {
    /// Runs `xtask <args>` and waits for its first JSON line naming `addr`, then for the
    /// port to accept connections.
    pub fn start(args: &[&str], extra: &[&Path]) -> Server {
        Self::start_logging(args, extra, Stdio::inherit())
    }

    /// [`Server::start`] with the server's stderr (its log) going to `log`.
    pub fn start_logging(args: &[&str], extra: &[&Path], log: impl Into<Stdio>) -> Server {
        let mut cmd = xtask();
        cmd.args(args)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(log);
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("a first line").unwrap();
        let v: serde_json::Value = serde_json::from_str(&first).unwrap();
        let addr: SocketAddr = v["addr"].as_str().unwrap().parse().unwrap();
        // Keep draining the rest (serve's access log) so the pipe never fills.
        std::thread::spawn(move || for _ in lines {});
        let t = Instant::now();
        while TcpStream::connect(addr).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{args:?} not listening"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Server { child, addr }
    }

    /// `http://ADDR/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Server {
    /// Sends SIGTERM and waits (10 s at most, then SIGKILL) for the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        signal_and_wait(&mut self.child, "-TERM")
    }
}

/// Sends `signal` (`-TERM`, `-KILL`) to `child` and waits (10 s at most, then SIGKILL) for
/// its exit status: how the tests stop the servers they start.
pub fn signal_and_wait(child: &mut Child, signal: &str) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
    let t = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The Python of the venv `cargo xtask servers` installed for a server (the project's
/// `.cuda-aot/servers/<prefix><pins>/`, e.g. `buildgrid-`, `moto-s3-`).
pub fn venv_python(prefix: &str) -> std::path::PathBuf {
    let dir = super::repo().join(".cuda-aot/servers");
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
                && p.join(".installed").is_file()
        })
        .unwrap_or_else(|| panic!("no installed venv {prefix}* in {}", dir.display()))
        .join("venv/bin/python")
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().unwrap().is_none() {
            self.stop();
        }
    }
}

/// `servers oci` with its storage and work folders in `dir`, its log (every 404 a line at
/// error level) in `dir/oci.log`.
pub fn oci_server(dir: &Path) -> Server {
    let log = std::fs::File::create(dir.join("oci.log")).unwrap();
    Server::start_logging(
        &["servers", "oci", "--storage"],
        &[
            &dir.join("oci-storage"),
            Path::new("--work"),
            &dir.join("oci-work"),
        ],
        log,
    )
}

/// `GET url` with `accept`, over plain HTTP as any client would: status, content type and
/// body.
pub fn http_get(url: &str, accept: &str) -> (u16, String, Vec<u8>) {
    cuda_aot_registry::remote::install_tls_provider();
    let r = reqwest::blocking::Client::new()
        .get(url)
        .header("Accept", accept)
        .send()
        .unwrap();
    let status = r.status().as_u16();
    let ctype = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, ctype, r.bytes().unwrap().to_vec())
}

/// `serve` of the folder `served` (created) with publishing on: a bearer token written to
/// `dir/token` (mode 0600, as `serve` requires) and `trust` as its trust root. The server
/// and the token file.
pub fn publishing(dir: &Path, served: &Path, trust: &Path) -> (Server, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let token = dir.join("token");
    std::fs::write(&token, "test-publishing-token-0123456789\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir_all(served).unwrap();
    let server = Server::start(
        &["serve", "--addr", "127.0.0.1:0", "--root"],
        &[
            served,
            Path::new("--publish-token-file"),
            &token,
            Path::new("--trust"),
            trust,
        ],
    );
    (server, token)
}
