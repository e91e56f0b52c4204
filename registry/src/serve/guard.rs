//! What keeps hostile clients from holding the server: a stall bound on every connection (a
//! client that sends nothing of its request or reads nothing of its answer for that long is
//! cut off and its slot freed), a cap on open connections per client address, and a
//! throttle on failed publish-token attempts per client address.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// What a connection waited for when the stall bound cut it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stalled {
    /// Bytes of a request (its headers, its upload body, or a first request on an open or
    /// idle keep-alive connection) that the client did not send.
    Request,
    /// Bytes of a response that the client did not accept (it reads nothing).
    Response,
}

impl Stalled {
    /// The word the log uses.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Stalled::Request => "request",
            Stalled::Response => "response",
        }
    }
}

/// One connection as the stall bound sees it, shared by its I/O ([`StallBound`]) and the
/// requests served on it: whether the server is waiting on the client, and why the bound
/// cut it. While the server holds a request (from its head until the response body is
/// produced), hyper's reads only watch for the client hanging up, so a read that waits is
/// the server's time, not a stall; an upload body being read is the client's time again.
#[derive(Default)]
pub(crate) struct Activity {
    held: AtomicUsize,
    reading_body: AtomicUsize,
    cut: Mutex<Option<Stalled>>,
}

/// A count on an [`Activity`] that dropping gives back.
pub(crate) struct Held {
    of: Arc<Activity>,
    body: bool,
}

impl Drop for Held {
    fn drop(&mut self) {
        let n = if self.body {
            &self.of.reading_body
        } else {
            &self.of.held
        };
        n.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Activity {
    /// The server holds a request until the returned value is dropped (with the response
    /// body, once hyper has taken its last byte).
    pub(crate) fn hold(self: &Arc<Self>) -> Held {
        self.held.fetch_add(1, Ordering::Relaxed);
        Held {
            of: self.clone(),
            body: false,
        }
    }

    /// A handler waits for the request body (an upload) until the returned value is
    /// dropped: its reads are a wait on the client.
    pub(crate) fn reading_body(self: &Arc<Self>) -> Held {
        self.reading_body.fetch_add(1, Ordering::Relaxed);
        Held {
            of: self.clone(),
            body: true,
        }
    }

    /// Why the stall bound cut this connection, if it did.
    pub(crate) fn cut(&self) -> Option<Stalled> {
        *self.cut.lock().expect("stall cut")
    }

    /// Whether a read that waits is a wait on the client for request bytes.
    fn awaits_request(&self) -> bool {
        self.held.load(Ordering::Relaxed) == 0 || self.reading_body.load(Ordering::Relaxed) > 0
    }
}

/// A response body that holds its request in the connection's [`Activity`] until hyper
/// has taken its last byte (and drops it).
pub(crate) struct HeldBody {
    inner: axum::body::Body,
    _held: Held,
}

impl HeldBody {
    /// `inner`, holding `held` as long as it lives.
    pub(crate) fn new(inner: axum::body::Body, held: Held) -> Self {
        HeldBody { inner, _held: held }
    }
}

impl hyper::body::Body for HeldBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// A connection closed once it has made no progress for `bound` while the server waits on
/// its client: a read waiting for request bytes ([`Activity`] says when a read is that), or
/// a write the client accepts nothing of (its receive window and our send buffer are full).
/// One clock for both directions; a byte moved either way stops it, as nginx's
/// `send_timeout` and `client_body_timeout` do per direction, so a slow but progressing
/// transfer is never cut. The I/O then fails with `TimedOut` and [`Activity::cut`] says
/// what the client withheld.
pub(crate) struct StallBound<S> {
    inner: S,
    bound: Duration,
    activity: Arc<Activity>,
    clock: Option<Pin<Box<Sleep>>>,
    /// The last write or flush is waiting (the client reads nothing).
    write_waits: bool,
}

impl<S> StallBound<S> {
    /// `inner` closed after `bound` without progress while `activity` says the server
    /// waits on the client.
    pub(crate) fn new(inner: S, bound: Duration, activity: Arc<Activity>) -> Self {
        StallBound {
            inner,
            bound,
            activity,
            clock: None,
            write_waits: false,
        }
    }

    /// Runs the clock for a wait on the client (starting it if it is not running); fails
    /// with `TimedOut` once it ran out.
    fn wait_on_client<T>(&mut self, cx: &mut Context<'_>, what: Stalled) -> Poll<io::Result<T>> {
        let bound = self.bound;
        let clock = self
            .clock
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(bound)));
        if clock.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        *self.activity.cut.lock().expect("stall cut") = Some(what);
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "stall bound: the client moved no byte of the {} for {} s",
                what.as_str(),
                bound.as_secs_f64()
            ),
        )))
    }

    /// Passes a write's (or flush's) result on, running the clock while it waits.
    /// Progress is a write that moved bytes (`moved`) or one that had been waiting and is
    /// done: a flush with nothing to send (hyper flushes after every read) is none.
    fn watch_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<T>>,
        moved: bool,
    ) -> Poll<io::Result<T>> {
        let was_waiting = std::mem::replace(&mut self.write_waits, r.is_pending());
        if r.is_ready() {
            if moved || was_waiting {
                self.clock = None;
            }
            return r;
        }
        self.wait_on_client(cx, Stalled::Response)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallBound<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if r.is_ready() {
            self.clock = None;
            return r;
        }
        if self.activity.awaits_request() {
            return self.wait_on_client(cx, Stalled::Request);
        }
        // The server's own time (it is preparing an answer); a waiting write keeps its clock.
        if !self.write_waits {
            self.clock = None;
        }
        Poll::Pending
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallBound<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        let moved = matches!(r, Poll::Ready(Ok(n)) if n > 0);
        self.watch_write(cx, r, moved)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        let moved = matches!(r, Poll::Ready(Ok(n)) if n > 0);
        self.watch_write(cx, r, moved)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch_write(cx, r, false)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch_write(cx, r, false)
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

    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    /// The server's end of an in-memory connection of 64 bytes' buffer, under a stall bound
    /// of 1 s, and the client's end.
    fn connection(activity: &Arc<Activity>) -> (StallBound<DuplexStream>, DuplexStream) {
        let (server, client) = tokio::io::duplex(64);
        let bound = Duration::from_secs(1);
        (StallBound::new(server, bound, activity.clone()), client)
    }

    // The clock is tokio's paused one: waits pass at once, in order, and nothing depends on
    // how fast the machine is.

    /// `f`'s output; a panic if it is still pending after 1000 (paused) seconds, so a
    /// connection the bound fails to cut fails the test instead of hanging it.
    async fn settled<F: Future>(f: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(1000), f)
            .await
            .expect("still pending after 1000 s")
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_but_progressing_reader_is_never_cut() {
        let activity = Arc::new(Activity::default());
        let _request = activity.hold();
        let (mut server, mut client) = connection(&activity);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 16];
            loop {
                tokio::time::sleep(Duration::from_millis(900)).await;
                match client.read(&mut buf).await.unwrap() {
                    0 => return got,
                    n => got.extend_from_slice(&buf[..n]),
                }
            }
        });
        // 16 bytes each 0.9 s: 8 KiB take about 8 minutes, never 1 s without progress.
        let answer = vec![7u8; 8192];
        settled(server.write_all(&answer)).await.unwrap();
        server.shutdown().await.unwrap();
        drop(server);
        assert_eq!(reader.await.unwrap(), answer);
        assert_eq!(activity.cut(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_reads_nothing_is_cut_after_the_bound() {
        let activity = Arc::new(Activity::default());
        let _request = activity.hold();
        let (mut server, _client) = connection(&activity);
        let e = settled(server.write_all(&[7u8; 8192])).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(activity.cut(), Some(Stalled::Response));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_but_progressing_sender_is_never_cut() {
        let activity = Arc::new(Activity::default());
        let (mut server, mut client) = connection(&activity);
        tokio::spawn(async move {
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_millis(900)).await;
                client.write_all(b"x").await.unwrap();
            }
        });
        let mut got = [0u8; 100];
        settled(server.read_exact(&mut got)).await.unwrap();
        assert_eq!(activity.cut(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_sends_nothing_is_cut_but_the_servers_own_time_is_not() {
        // An open or idle connection: no request held, so a read waits on the client. Each
        // poll flushes too, as hyper does: a flush with nothing to send is no progress.
        let activity = Arc::new(Activity::default());
        let (mut server, _client) = connection(&activity);
        let mut one = [0u8; 1];
        let read_and_flush = std::future::poll_fn(|cx| {
            let mut buf = ReadBuf::new(&mut one);
            let r = Pin::new(&mut server).poll_read(cx, &mut buf);
            assert!(Pin::new(&mut server).poll_flush(cx).is_ready());
            r
        });
        let e = settled(read_and_flush).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(activity.cut(), Some(Stalled::Request));

        // A request held (the server prepares its answer): hyper's read only watches for a
        // hang-up, however long the server takes.
        let activity = Arc::new(Activity::default());
        let request = activity.hold();
        let (mut server, _client) = connection(&activity);
        let watch = tokio::time::timeout(Duration::from_secs(60), server.read(&mut one));
        assert!(watch.await.is_err(), "still waiting after 60 bounds");
        assert_eq!(activity.cut(), None);

        // An upload body read by the handler is the client's time again.
        let body = activity.reading_body();
        let e = settled(server.read(&mut one)).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(activity.cut(), Some(Stalled::Request));
        drop((body, request));
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
