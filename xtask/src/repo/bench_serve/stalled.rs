//! The stalled connections of bench-serve's `get-hostile` workload (with the `net` feature):
//! clients that take a connection slot of serve and then send nothing more — connected and
//! silent, or half a request line sent — from several loopback addresses, each reconnecting
//! as soon as serve closes it; and how long each held its slot. (The workload's slow readers
//! and pipeliners are the clients that read nothing.)

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The loopback addresses the stalled connections come from (Linux answers on all of
/// 127.0.0.0/8), so serve's per-address cap does not refuse them before its slots are full.
pub(super) const ADDRESSES: u8 = 8;

/// What a stalled connection does once connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Sends nothing.
    Silent,
    /// Sends part of a request line and stops.
    Partial,
}

impl Kind {
    /// Every kind, in the order connections take them.
    pub(super) const ALL: [Kind; 2] = [Kind::Silent, Kind::Partial];

    /// The kind's name in the report.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Silent => "silent",
            Kind::Partial => "partial request",
        }
    }
}

/// What the stalled connections of one kind met during a run.
#[derive(Default, Clone)]
pub(super) struct Stalls {
    /// How long each connection serve closed had been open.
    pub(super) held: Vec<Duration>,
    /// Connections closed at once (within 50 ms: a cap refused them) or never opened.
    pub(super) refused: usize,
}

impl Stalls {
    /// The median time a cut connection held its slot, in seconds (NaN when none was cut).
    pub(super) fn median_held_secs(&self) -> f64 {
        let v: Vec<f64> = self.held.iter().map(Duration::as_secs_f64).collect();
        crate::repo::stats::percentile(&v, 0.5)
    }
}

/// A TCP connection to `to` from the loopback address `from`.
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None)?;
    bind(&fd, &SocketAddr::from((from, 0)))?;
    connect(&fd, &to)?;
    Ok(TcpStream::from(fd))
}

/// Starts `n` stalled connections to `addr`, the kinds in turn, from [`ADDRESSES`]
/// addresses 127.0.0.2 and up, until `stop`; each thread returns its kind and what it met.
pub(super) fn start(
    n: usize,
    addr: SocketAddr,
    stop: &Arc<AtomicBool>,
) -> Vec<JoinHandle<(Kind, Stalls)>> {
    (0..n)
        .map(|i| {
            let kind = Kind::ALL[i % Kind::ALL.len()];
            let from = Ipv4Addr::new(127, 0, 0, 2 + (i % usize::from(ADDRESSES)) as u8);
            let stop = stop.clone();
            std::thread::spawn(move || (kind, stall(kind, from, addr, &stop)))
        })
        .collect()
}

/// One stalled client: connect, stall, wait for serve to close the connection, again,
/// until `stop`.
fn stall(kind: Kind, from: Ipv4Addr, addr: SocketAddr, stop: &AtomicBool) -> Stalls {
    let mut met = Stalls::default();
    while !stop.load(Ordering::Relaxed) {
        let opened = Instant::now();
        let Ok(mut c) = connect_from(from, addr) else {
            met.refused += 1;
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let _ = c.set_nodelay(true);
        let _ = c.set_read_timeout(Some(Duration::from_millis(250)));
        // (A write may fail: serve refused the connection.)
        let _ = match kind {
            Kind::Silent => Ok(()),
            Kind::Partial => c.write_all(b"GET /timestamp.json HT"),
        };
        if !closed_by_server(&mut c, stop) {
            break;
        }
        let held = opened.elapsed();
        if held < Duration::from_millis(50) {
            met.refused += 1;
        } else {
            met.held.push(held);
        }
    }
    met
}

/// Waits until serve closes `c` (true) or `stop` is set (false), reading: nothing comes
/// until the close, and reading is no progress serve could see.
fn closed_by_server(c: &mut TcpStream, stop: &AtomicBool) -> bool {
    use std::io::ErrorKind::{TimedOut, WouldBlock};
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        match c.read(&mut buf) {
            Ok(n) if n > 0 => {}
            Err(e) if matches!(e.kind(), WouldBlock | TimedOut) => {}
            Ok(_) | Err(_) => return true,
        }
    }
    false
}
