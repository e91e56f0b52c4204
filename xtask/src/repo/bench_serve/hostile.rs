//! The `get-hostile` workload of bench-serve (with the `net` feature): the honest GETs
//! against serve with slow readers, pipeliners and wrong-token publishers beside them, and
//! what those met.

use anyhow::Result;
use cuda_aot::Digest;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Args;
use super::clients::Samples;
use super::run::rand_u64;

/// What the hostile clients of one `get-hostile` run met.
#[derive(Default, Clone, Copy)]
pub(super) struct Hostile {
    /// Slow-reader and pipeliner connections the server cut (its send timeout).
    cut: usize,
    /// Connections the server refused or closed at once (its per-address cap).
    refused: usize,
    /// Wrong-token PUTs answered 401, and 429 (throttled).
    unauthorized: usize,
    throttled: usize,
    /// Wrong-token PUTs answered otherwise, or not at all (a timeout, a reset).
    other: usize,
}

impl std::fmt::Display for Hostile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "hostile: {} wrong-token PUTs answered 401, {} throttled (429), {} otherwise; {} stalled connections cut, {} refused",
            self.unauthorized, self.throttled, self.other, self.cut, self.refused
        )
    }
}

impl Args {
    /// [`Args::get_load`] against serve with `3 × --hostile` hostile clients running
    /// beside the honest ones: slow readers (GET the largest file, read nothing),
    /// pipeliners (write GETs of `timestamp.json` as fast as the socket takes them, read
    /// nothing) and wrong-token publishers (PUT `timestamp.json` in a loop). The hostile
    /// ones start first and stop when the honest ones are done.
    pub(super) fn get_load_under_attack(
        &self,
        url: &str,
        addr: SocketAddr,
        reference: &Arc<BTreeMap<String, (u64, Digest)>>,
    ) -> Result<(Samples, Hostile)> {
        use std::io::Write as _;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let stop = Arc::new(AtomicBool::new(false));
        let counts: Arc<[AtomicUsize; 5]> = Arc::new(Default::default());
        let largest = reference
            .iter()
            .max_by_key(|(_, (n, _))| *n)
            .map(|(p, _)| p.clone())
            .unwrap_or_else(|| "timestamp.json".into());
        let mut handles = Vec::new();
        for kind in 0..2 {
            for _ in 0..self.hostile {
                let (stop, counts, largest) = (stop.clone(), counts.clone(), largest.clone());
                handles.push(std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(mut c) = std::net::TcpStream::connect(addr) else {
                            counts[1].fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(100));
                            continue;
                        };
                        let _ = c.set_write_timeout(Some(Duration::from_millis(200)));
                        let _ = c.set_nodelay(true);
                        let one = match kind {
                            0 => format!("GET /{largest} HTTP/1.1\r\nHost: x\r\n\r\n"),
                            _ => "GET /timestamp.json HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
                        };
                        let repeat = if kind == 0 { 1 } else { 100_000 };
                        let mut written = 0;
                        for _ in 0..repeat {
                            if stop.load(Ordering::Relaxed) || c.write_all(one.as_bytes()).is_err()
                            {
                                break;
                            }
                            written += 1;
                        }
                        // Read nothing; wait until the server gives up on us (or the run
                        // ends): an empty line a second (allowed between requests) fails to
                        // send once the server has closed the connection.
                        let started = Instant::now();
                        while !stop.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(250));
                            match c.write(b"\r\n") {
                                // A full send buffer (the server stopped reading: it is
                                // blocked on answers nobody reads) is still a live connection.
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock
                                            | std::io::ErrorKind::TimedOut
                                    ) => {}
                                Err(_) => break,
                                Ok(_) => {}
                            }
                        }
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let slot = if written == 0 || started.elapsed() < Duration::from_millis(50)
                        {
                            1
                        } else {
                            0
                        };
                        counts[slot].fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
        }
        for _ in 0..self.hostile {
            let (stop, counts, url) = (stop.clone(), counts.clone(), url.to_string());
            handles.push(std::thread::spawn(move || {
                cuda_aot_registry::remote::install_tls_provider();
                let Ok(client) = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(5))
                    .build()
                else {
                    return;
                };
                while !stop.load(Ordering::Relaxed) {
                    let guess = format!("{:016x}{:016x}", rand_u64(), rand_u64());
                    match client
                        .put(format!("{url}timestamp.json"))
                        .bearer_auth(guess)
                        .body("{}")
                        .send()
                        .map(|r| r.status().as_u16())
                    {
                        Ok(401) => counts[2].fetch_add(1, Ordering::Relaxed),
                        Ok(429) => counts[3].fetch_add(1, Ordering::Relaxed),
                        _ => counts[4].fetch_add(1, Ordering::Relaxed),
                    };
                }
            }));
        }
        // Let the attack take hold before the honest clients start.
        std::thread::sleep(Duration::from_millis(500));
        let honest = self.get_load(url, reference);
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let _ = h.join();
        }
        let n = |i: usize| counts[i].load(Ordering::Relaxed);
        Ok((
            honest?,
            Hostile {
                cut: n(0),
                refused: n(1),
                unauthorized: n(2),
                throttled: n(3),
                other: n(4),
            },
        ))
    }
}
