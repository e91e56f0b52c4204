//! The server itself (with the `net` feature): hyper and tokio, the routes, limits and
//! graceful shutdown.

#[path = "files.rs"]
mod files;
#[path = "guard.rs"]
mod guard;
#[path = "html.rs"]
pub(crate) mod html;
#[path = "log.rs"]
mod log;
#[path = "publish.rs"]
mod publish;

use crate::defaults::serve as defaults;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::HeaderValue;
use axum::http::header::CONNECTION;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::error::{Error, Result};

pub use guard::AuthThrottle;
pub use log::event;
pub use publish::{PublishSettings, read_token_file};

/// Settings of a server.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The registry folder served.
    pub root: PathBuf,
    /// Open connections at most; more are closed at once (and logged).
    pub max_connections: usize,
    /// Open connections from one client address at most (IPv6: one /64); more are closed
    /// at once (and logged), so one host cannot take every connection. Behind a reverse
    /// proxy every client has the proxy's address: raise it to `max_connections` there.
    pub max_connections_per_addr: usize,
    /// Requests served on one connection at most; the last answer carries
    /// `Connection: close` (pipelined requests past it are not read).
    pub max_requests_per_connection: usize,
    /// Time a client has to send a request's headers, however steadily it sends them
    /// (slow clients are cut off); an idle keep-alive connection is kept at most this long
    /// and at most `stall_timeout`.
    pub header_timeout: Duration,
    /// The stall bound: how long a connection may make no progress while the server waits
    /// on its client — a request not fully sent (headers, upload body, or none at all on an
    /// open or idle connection), or a response the client accepts no byte of — before it is
    /// closed, its slot freed and the cut logged. A byte moved either way restarts it, so a
    /// slow but progressing transfer is never cut; `header_timeout` and `body_timeout`
    /// still bound a whole request.
    pub stall_timeout: Duration,
    /// Time a client has to send a whole request body (an upload), from its headers on;
    /// a slower one is answered 408 and its connection closed.
    pub body_timeout: Duration,
    /// How failed publish-token attempts are slowed down per client address.
    pub auth_throttle: AuthThrottle,
    /// Bytes of request line and headers at most.
    pub max_header_bytes: usize,
    /// After a shutdown signal, how long in-flight requests may take to finish.
    pub shutdown_grace: Duration,
    /// Write one JSON line per request to stdout.
    pub access_log: bool,
    /// Accept publishes (PUT) from holders of this token, checked against this trust root.
    /// None: read-only.
    pub publish: Option<PublishSettings>,
    /// The largest blob upload accepted, in bytes (other files have their kind's limit).
    pub max_upload: u64,
    /// The trust root the page for browsers is verified against (`/`, Accept: text/html);
    /// None: no page.
    pub page_trust: Option<Vec<u8>>,
    /// Byte caps and the root-chain cap every uploaded file and every publish check is
    /// held to.
    pub limits: cuda_aot::Limits,
}

impl ServeOptions {
    /// Defaults for serving `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ServeOptions {
            root: root.into(),
            max_connections: defaults::MAX_CONNECTIONS,
            max_connections_per_addr: usize::try_from(defaults::MAX_CONNECTIONS_PER_ADDR)
                .unwrap_or(usize::MAX),
            max_requests_per_connection: usize::try_from(defaults::MAX_REQUESTS_PER_CONNECTION)
                .unwrap_or(usize::MAX),
            header_timeout: Duration::from_secs(defaults::HEADER_TIMEOUT_SECS),
            stall_timeout: Duration::from_secs(defaults::STALL_TIMEOUT_SECS),
            body_timeout: Duration::from_secs(defaults::BODY_TIMEOUT_SECS),
            auth_throttle: AuthThrottle::default(),
            max_header_bytes: 16 * 1024,
            shutdown_grace: Duration::from_secs(defaults::SHUTDOWN_GRACE_SECS),
            access_log: true,
            publish: None,
            max_upload: defaults::MAX_UPLOAD_MIB * 1024 * 1024,
            page_trust: None,
            limits: cuda_aot::Limits::default(),
        }
    }
}

/// What request handlers share.
pub(crate) struct Shared {
    pub(crate) opts: ServeOptions,
    pub(crate) etags: files::EtagCache,
    pub(crate) publish: Option<publish::Publishing>,
    pub(crate) page: super::html::PageCache,
}

/// A bound, not yet running server.
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port; see [`Server::local_addr`]).
    pub async fn bind(addr: SocketAddr, opts: ServeOptions) -> Result<Server> {
        let fail = |reason: String| Error::Serve {
            addr: addr.to_string(),
            reason,
        };
        let meta = std::fs::metadata(&opts.root)
            .map_err(|e| fail(format!("registry folder {}: {e}", opts.root.display())))?;
        if !meta.is_dir() {
            return Err(fail(format!("{} is not a folder", opts.root.display())));
        }
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let publish = opts
            .publish
            .as_ref()
            .map(|p| p.start(&opts.root, opts.auth_throttle, opts.limits));
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                opts,
                etags: files::EtagCache::default(),
                publish,
                page: Default::default(),
            }),
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until `shutdown` completes, then stops accepting, lets in-flight requests
    /// finish (up to the grace period) and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let addr = self.local_addr();
        let Server { listener, shared } = self;
        let opts = &shared.opts;
        let app = router(shared.clone());
        let graceful = GracefulShutdown::new();
        let slots = Arc::new(Semaphore::new(opts.max_connections));
        let per_addr = Arc::new(guard::PerAddr::default());
        event(
            "listening",
            &[
                ("addr", addr.to_string().into()),
                ("root", opts.root.display().to_string().into()),
                ("publish", opts.publish.is_some().into()),
            ],
        );
        tokio::pin!(shutdown);
        loop {
            let (stream, remote) = tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        event("accept_error", &[("error", e.to_string().into())]);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let refuse = |reason: &str| {
                event(
                    "connection_refused",
                    &[
                        ("remote", remote.to_string().into()),
                        ("reason", reason.into()),
                    ],
                );
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                refuse("max_connections reached");
                drop(stream);
                continue;
            };
            let Some(addr_slot) = per_addr.take(remote.ip(), opts.max_connections_per_addr) else {
                refuse("max_connections_per_addr reached");
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let activity = Arc::new(guard::Activity::default());
            let svc = per_connection(
                app.clone(),
                remote,
                opts.max_requests_per_connection,
                activity.clone(),
            );
            let io = guard::StallBound::new(stream, opts.stall_timeout, activity.clone());
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(opts.header_timeout)
                .max_buf_size(opts.max_header_bytes.max(8192))
                .serve_connection(TokioIo::new(io), svc);
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                let ended = conn.await;
                if let Some(stalled) = activity.cut() {
                    event(
                        "connection_cut",
                        &[
                            ("remote", remote.to_string().into()),
                            ("reason", "stall timeout".into()),
                            ("stalled", stalled.as_str().into()),
                        ],
                    );
                } else if let Err(e) = ended
                    && e.is_timeout()
                {
                    event(
                        "connection_cut",
                        &[
                            ("remote", remote.to_string().into()),
                            ("reason", "header timeout".into()),
                        ],
                    );
                }
                drop((slot, addr_slot));
            });
        }
        // Stop accepting at once: new clients get "connection refused", not a wait.
        drop(listener);
        let open = graceful.count();
        event(
            "shutting_down",
            &[
                ("open_connections", open.into()),
                ("grace_secs", opts.shutdown_grace.as_secs().into()),
            ],
        );
        tokio::select! {
            _ = graceful.shutdown() => event("stopped", &[]),
            _ = tokio::time::sleep(opts.shutdown_grace) => event(
                "stopped",
                &[("reason", "grace period over; remaining connections closed".into())],
            ),
        }
        Ok(())
    }
}

/// The service of one connection from `remote`: the routes, with the client's address and
/// the connection's [`guard::Activity`] for the handlers and the log, and `Connection:
/// close` on the answer to request number `max_requests` (hyper then closes the connection
/// after it). Each request is held in `activity` until hyper has taken its response body's
/// last byte.
fn per_connection(
    app: Router,
    remote: SocketAddr,
    max_requests: usize,
    activity: Arc<guard::Activity>,
) -> impl hyper::service::Service<
    hyper::Request<Incoming>,
    Response = hyper::Response<guard::HeldBody>,
    Error = Infallible,
    Future = impl Future<Output = Result<hyper::Response<guard::HeldBody>, Infallible>> + Send,
> + Clone {
    let served = Arc::new(AtomicUsize::new(0));
    let svc = move |mut r: hyper::Request<Incoming>| {
        let held = activity.hold();
        r.extensions_mut().insert(ConnectInfo(remote));
        r.extensions_mut().insert(activity.clone());
        let last = served.fetch_add(1, Ordering::Relaxed) + 1 >= max_requests;
        let app = app.clone();
        async move {
            let mut resp = app.oneshot(r).await?;
            if last {
                resp.headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(resp.map(|body| guard::HeldBody::new(body, held)))
        }
    };
    hyper::service::service_fn(svc)
}

/// The routes: `/healthz`, and every other path as a registry file.
fn router(shared: Arc<Shared>) -> Router {
    let access_log = shared.opts.access_log;
    let r = Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .fallback(files::handle)
        .with_state(shared);
    if access_log {
        r.layer(axum::middleware::from_fn(log::access))
    } else {
        r
    }
}

/// Completes on SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install a SIGINT handler");
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    event("signal", &[("signal", name.into())]);
}
