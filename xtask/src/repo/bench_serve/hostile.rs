//! The `get-hostile` workload of bench-serve (with the `net` feature): the honest GETs
//! against serve with slow readers, pipeliners, wrong-token publishers and stalled
//! connections beside them, and what those met.

use anyhow::Result;
use cuda_aot::Digest;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Args;
use super::clients::Samples;
use super::run::rand_u64;
use super::stalled::{self, Kind, Stalls};

/// What the hostile clients of one `get-hostile` run met.
#[derive(Default, Clone)]
pub(super) struct Hostile {
    /// Slow-reader and pipeliner connections the server cut (its stall bound, or the
    /// header timeout for a slow reader whose answer fit in the socket buffers).
    cut: usize,
    /// Connections the server refused or closed at once (its per-address cap).
    refused: usize,
    /// Wrong-token PUTs answered 401, and 429 (throttled).
    unauthorized: usize,
    throttled: usize,
    /// Wrong-token PUTs answered otherwise, or not at all (a timeout, a reset).
    other: usize,
    /// The stalled connections (`--stalled`), per kind.
    stalls: Vec<(Kind, Stalls)>,
    /// The stall bound serve ran with, in seconds.
    stall_bound: u64,
}

impl std::fmt::Display for Hostile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "hostile: {} wrong-token PUTs answered 401, {} throttled (429), {} otherwise; {} slow-reader and pipeliner connections cut, {} refused",
            self.unauthorized, self.throttled, self.other, self.cut, self.refused
        )?;
        if self.stalls.is_empty() {
            return Ok(());
        }
        let n: usize = self.stalls.iter().map(|(_, s)| s.held.len()).sum();
        let refused: usize = self.stalls.iter().map(|(_, s)| s.refused).sum();
        write!(
            f,
            "; stalled connections (stall bound {} s): ",
            self.stall_bound
        )?;
        for (kind, s) in &self.stalls {
            match s.held.len() {
                0 => write!(f, "{} not cut; ", kind.name())?,
                n => write!(
                    f,
                    "{} cut {n} times, after a median {:.1} s; ",
                    kind.name(),
                    s.median_held_secs()
                )?,
            }
        }
        write!(f, "{n} cut in all, {refused} refused")
    }
}

impl Args {
    /// [`Args::get_load`] again and again, the samples merged, until the stalled
    /// connections started at `started` have had time to be cut twice (2 stall bounds and
    /// a second), or once when there are none.
    fn honest_while_stalled(
        &self,
        url: &str,
        reference: &Arc<BTreeMap<String, (u64, Digest)>>,
        started: Instant,
    ) -> Result<Samples> {
        let hold = match self.stalled {
            0 => Duration::ZERO,
            _ => Duration::from_secs(2 * self.stall_timeout_secs + 1),
        };
        let mut all = self.get_load(url, reference)?;
        while started.elapsed() < hold {
            all.merge(self.get_load(url, reference)?);
        }
        Ok(all)
    }

    /// [`Args::get_load`] against serve with `3 × --hostile` hostile clients running
    /// beside the honest ones: slow readers (GET the largest file, read nothing),
    /// pipeliners (write GETs of `timestamp.json` as fast as the socket takes them, read
    /// nothing) and wrong-token publishers (PUT `timestamp.json` in a loop); and
    /// `--stalled` connections that send nothing or half a request line
    /// ([`stalled`]). The hostile ones start first and stop when the honest ones are done.
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
        let stalling = stalled::start(self.stalled, addr, &stop);
        // Let the attack take hold before the honest clients start.
        let started = Instant::now();
        std::thread::sleep(Duration::from_millis(500));
        let honest = self.honest_while_stalled(url, reference, started);
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let _ = h.join();
        }
        let mut stalls: Vec<(Kind, Stalls)> =
            Kind::ALL.iter().map(|k| (*k, Stalls::default())).collect();
        for h in stalling {
            if let Ok((kind, met)) = h.join()
                && let Some((_, all)) = stalls.iter_mut().find(|(k, _)| *k == kind)
            {
                all.held.extend(met.held);
                all.refused += met.refused;
            }
        }
        if self.stalled == 0 {
            stalls.clear();
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
                stalls,
                stall_bound: self.stall_timeout_secs,
            },
        ))
    }
}
