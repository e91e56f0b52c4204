//! The server itself (with the `net` feature): hyper and tokio, the routes, limits and
//! graceful shutdown.

#[path = "files.rs"]
mod files;
#[path = "log.rs"]
mod log;
#[path = "publish.rs"]
mod publish;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::error::{Error, Result};

pub use log::event;
pub use publish::{PublishSettings, read_token_file};

/// Settings of a server.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The registry folder served.
    pub root: PathBuf,
    /// Open connections at most; more are closed at once (and logged).
    pub max_connections: usize,
    /// Time a client has to send a request's headers (slow clients are cut off).
    pub header_timeout: Duration,
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
}

impl ServeOptions {
    /// Defaults for serving `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ServeOptions {
            root: root.into(),
            max_connections: 4096,
            header_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
            shutdown_grace: Duration::from_secs(30),
            access_log: true,
            publish: None,
            max_upload: 64 * 1024 * 1024,
        }
    }
}

/// What request handlers share.
pub(crate) struct Shared {
    pub(crate) opts: ServeOptions,
    pub(crate) etags: files::EtagCache,
    pub(crate) publish: Option<publish::Publishing>,
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
        let publish = opts.publish.as_ref().map(|p| p.start(&opts.root));
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                opts,
                etags: files::EtagCache::default(),
                publish,
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
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                event(
                    "connection_refused",
                    &[
                        ("remote", remote.to_string().into()),
                        ("reason", "max_connections reached".into()),
                    ],
                );
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let svc = app
                .clone()
                .map_request(move |mut r: hyper::Request<Incoming>| {
                    r.extensions_mut().insert(ConnectInfo(remote));
                    r
                });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(opts.header_timeout)
                .max_buf_size(opts.max_header_bytes.max(8192))
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc));
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                let _ = conn.await;
                drop(slot);
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
