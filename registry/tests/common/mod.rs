//! Shared fixtures of the registry's integration tests: the real `cuda-aot-registry serve`
//! process, a fault-injecting TCP proxy that sits between a client and a real server, and
//! raw HTTP requests. Keys, trust roots, real cubins (and the large PTX module of
//! mid-transfer faults) and registries published with the real publisher come from
//! `cuda-aot-testkit`.

#![allow(dead_code)] // each test file uses a subset

pub use cuda_aot_testkit::*;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The real `cuda-aot-registry serve` process.
pub struct ServeProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl ServeProcess {
    /// Starts it on `addr` (port 0: a free one) serving `root`, with `extra` arguments, and
    /// waits for its `listening` line.
    pub fn start(root: &Path, addr: &str, extra: &[&str]) -> ServeProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cuda-aot-registry"))
            .arg("serve")
            .arg("--root")
            .arg(root)
            .args(["--addr", addr])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start cuda-aot-registry serve");
        let stdout = child.stdout.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: serde_json::Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("log line is not JSON ({e}): {line}"));
                if v["event"] == "listening" {
                    let _ = tx.send(v["addr"].as_str().unwrap().to_string());
                }
                log2.lock().unwrap().push(v);
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("serve printed its listening line")
            .parse()
            .unwrap();
        ServeProcess { child, addr, log }
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Sends SIGTERM.
    pub fn term(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -TERM");
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The request log lines (those with a `status`).
    pub fn requests(&self) -> Vec<serde_json::Value> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|v| v.get("status").is_some())
            .cloned()
            .collect()
    }

    /// Waits until a log line satisfies `f`.
    pub fn wait_log(&self, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let t = Instant::now();
        loop {
            if let Some(v) = self.log.lock().unwrap().iter().find(|v| f(v)) {
                return v.clone();
            }
            assert!(t.elapsed() < Duration::from_secs(20), "no such log line");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How a [`FaultProxy`] passes the server's bytes on to the client.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// As fast as they come.
    Pass,
    /// At most this many bytes per second.
    Throttle(u64),
    /// One byte, then this pause, forever: a server that trickles.
    Trickle(Duration),
}

/// A TCP proxy in front of a real server that can slow its answers down; counts the
/// bytes it passed to clients. Connections to a dead upstream are closed at once.
pub struct FaultProxy {
    pub addr: SocketAddr,
    pub forwarded: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    clients: Arc<Mutex<Vec<TcpStream>>>,
}

impl FaultProxy {
    pub fn start(upstream: SocketAddr, mode: Mode) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let forwarded = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let clients = Arc::new(Mutex::new(Vec::new()));
        let (fw, st, cl) = (forwarded.clone(), stop.clone(), clients.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = client else { continue };
                cl.lock().unwrap().push(client.try_clone().unwrap());
                let fw = fw.clone();
                std::thread::spawn(move || {
                    let Ok(server) = TcpStream::connect(upstream) else {
                        let _ = client.shutdown(Shutdown::Both);
                        return;
                    };
                    let (mut c_read, mut s_write) =
                        (client.try_clone().unwrap(), server.try_clone().unwrap());
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut c_read, &mut s_write);
                        let _ = s_write.shutdown(Shutdown::Write);
                    });
                    pump(server, client, mode, &fw);
                });
            }
        });
        FaultProxy {
            addr,
            forwarded,
            stop,
            clients,
        }
    }

    /// Drops every client connection at once, as when the server's host goes away: bytes
    /// still buffered between the server and the proxy are not delivered.
    pub fn cut(&self) {
        for c in self.clients.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    pub fn forwarded(&self) -> u64 {
        self.forwarded.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, mode: Mode, count: &AtomicU64) {
    let mut buf = vec![0u8; 16 * 1024];
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        let chunk = match mode {
            Mode::Trickle(_) => 1,
            Mode::Throttle(rate) => ((rate / 20).max(1) as usize).min(buf.len()),
            Mode::Pass => buf.len(),
        };
        let n = match from.read(&mut buf[..chunk]) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        sent += n as u64;
        count.fetch_add(n as u64, Ordering::Relaxed);
        match mode {
            Mode::Trickle(pause) => std::thread::sleep(pause),
            Mode::Throttle(rate) => {
                let due = Duration::from_secs_f64(sent as f64 / rate as f64);
                if let Some(wait) = due.checked_sub(start.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
            Mode::Pass => {}
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// A raw HTTP/1.1 GET: the status line, the headers (lower-case names) and the body.
pub fn http_get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    raw_request(addr, "GET", path, headers)
}

/// A raw HTTP/1.1 request with `Connection: close`.
pub fn raw_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let body = raw[split + 4..].to_vec();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Response {
        status,
        headers,
        body,
    }
}

/// A response read by [`raw_request`].
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}
