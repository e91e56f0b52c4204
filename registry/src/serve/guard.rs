//! What keeps hostile clients from holding the server: a send timeout on every connection
//! (a client that reads nothing is cut off), a cap on open connections per client address,
//! and a throttle on failed publish-token attempts per client address.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// The address that limits count against: an IPv4 address, or the /64 network of an IPv6
/// address (one host usually holds a whole /64), IPv4-mapped IPv6 as IPv4.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

/// A connection whose writes fail with `TimedOut` once one of them has made no progress
/// for `timeout` (the client stopped reading: its receive window and our send buffer are
/// full). Progress of any size restarts the clock, as nginx's `send_timeout` does.
pub(crate) struct SendTimeout<S> {
    inner: S,
    timeout: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
    fired: Arc<AtomicBool>,
}

impl<S> SendTimeout<S> {
    /// `inner` with a send timeout; `fired` is set when it cut the connection.
    pub(crate) fn new(inner: S, timeout: Duration, fired: Arc<AtomicBool>) -> Self {
        SendTimeout {
            inner,
            timeout,
            stalled: None,
            fired,
        }
    }

    /// Passes a write's result on, starting the clock when it is pending and failing it
    /// once the clock ran out.
    fn watch<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.stalled = None;
            return r;
        }
        let timeout = self.timeout;
        let clock = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if clock.as_mut().poll(cx).is_ready() {
            self.fired.store(true, Ordering::Relaxed);
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "send timeout: the client read nothing for {} s",
                    timeout.as_secs_f64()
                ),
            )));
        }
        Poll::Pending
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for SendTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SendTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, r)
    }
}

/// Open connections per client address ([`client_key`]).
#[derive(Default)]
pub(crate) struct PerAddr {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection counted in [`PerAddr`]; dropping it gives the place back.
pub(crate) struct AddrSlot {
    map: Arc<PerAddr>,
    key: IpAddr,
}

impl PerAddr {
    /// A place for one more connection from `ip`, or None when it has `max` already.
    pub(crate) fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<AddrSlot> {
        let key = client_key(ip);
        let mut open = self.open.lock().expect("connections per address");
        let n = open.entry(key).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(AddrSlot {
            map: self.clone(),
            key,
        })
    }
}

impl Drop for AddrSlot {
    fn drop(&mut self) {
        let mut open = self.map.open.lock().expect("connections per address");
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// How failed publish-token attempts are slowed down, per client address ([`client_key`]):
/// the first `free_failures` are answered 401; after that every request of that address
/// (even one with the right token, which would otherwise tell a guesser it was right) is
/// answered 429 with `Retry-After` for a wait that doubles with each further failure, from
/// `first_delay` up to `max_delay`. A success, or `forget_after` without a failure, clears
/// the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthThrottle {
    /// Failures answered with 401 before the throttle starts.
    pub free_failures: u32,
    /// The first wait imposed.
    pub first_delay: Duration,
    /// The longest wait.
    pub max_delay: Duration,
    /// How long after its last failure an address's count is forgotten.
    pub forget_after: Duration,
}

impl Default for AuthThrottle {
    fn default() -> Self {
        AuthThrottle {
            free_failures: 5,
            first_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            forget_after: Duration::from_secs(15 * 60),
        }
    }
}

impl AuthThrottle {
    /// The wait after `failures` failures (none while within the free ones).
    fn delay(&self, failures: u32) -> Option<Duration> {
        let over = failures.checked_sub(self.free_failures)?.checked_sub(1)?;
        Some(
            self.first_delay
                .saturating_mul(1u32 << over.min(20))
                .min(self.max_delay),
        )
    }
}

/// An address's failed attempts.
struct Failures {
    count: u32,
    last: Instant,
    until: Option<Instant>,
}

/// The failed-attempt counts of an [`AuthThrottle`].
pub(crate) struct Throttle {
    rule: AuthThrottle,
    by_addr: Mutex<HashMap<IpAddr, Failures>>,
}

/// Addresses tracked at most: past it, forgotten ones are dropped first, then all.
const TRACKED_MAX: usize = 65_536;

impl Throttle {
    pub(crate) fn new(rule: AuthThrottle) -> Throttle {
        Throttle {
            rule,
            by_addr: Mutex::new(HashMap::new()),
        }
    }

    /// How long `ip` must still wait, if it must.
    pub(crate) fn wait(&self, ip: IpAddr) -> Option<Duration> {
        let map = self.by_addr.lock().expect("auth throttle");
        let until = map.get(&client_key(ip))?.until?;
        until.checked_duration_since(Instant::now())
    }

    /// Counts a failed attempt of `ip`.
    pub(crate) fn failed(&self, ip: IpAddr) {
        let now = Instant::now();
        let mut map = self.by_addr.lock().expect("auth throttle");
        if map.len() >= TRACKED_MAX {
            let forget = self.rule.forget_after;
            map.retain(|_, f| now.duration_since(f.last) < forget);
            if map.len() >= TRACKED_MAX {
                map.clear();
            }
        }
        let f = map.entry(client_key(ip)).or_insert(Failures {
            count: 0,
            last: now,
            until: None,
        });
        if now.duration_since(f.last) >= self.rule.forget_after {
            f.count = 0;
        }
        f.count = f.count.saturating_add(1);
        f.last = now;
        f.until = self.rule.delay(f.count).map(|d| now + d);
    }

    /// Clears the count of `ip` after a success.
    pub(crate) fn succeeded(&self, ip: IpAddr) {
        self.by_addr
            .lock()
            .expect("auth throttle")
            .remove(&client_key(ip));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_after_the_free_failures_up_to_the_cap() {
        let t = AuthThrottle::default();
        assert_eq!(t.delay(5), None);
        assert_eq!(t.delay(6), Some(Duration::from_secs(1)));
        assert_eq!(t.delay(7), Some(Duration::from_secs(2)));
        assert_eq!(t.delay(12), Some(Duration::from_secs(60)));
        assert_eq!(t.delay(u32::MAX), Some(Duration::from_secs(60)));
    }

    #[test]
    fn ipv6_addresses_count_by_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        assert_eq!(client_key(mapped), "10.0.0.7".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn a_connection_slot_is_given_back_on_drop() {
        let per = Arc::new(PerAddr::default());
        let ip: IpAddr = "127.0.0.2".parse().unwrap();
        let one = per.take(ip, 2).unwrap();
        let _two = per.take(ip, 2).unwrap();
        assert!(per.take(ip, 2).is_none());
        assert!(per.take("127.0.0.1".parse().unwrap(), 2).is_some());
        drop(one);
        assert!(per.take(ip, 2).is_some());
    }
}
