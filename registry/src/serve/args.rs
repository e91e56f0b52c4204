//! The command line of `serve`, shared by the `cuda-aot-registry` binary and
//! `cargo xtask serve`, so both run exactly the same server.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::defaults::serve as defaults;
#[cfg(feature = "net")]
use std::time::Duration;

#[cfg(feature = "net")]
use super::server::{PublishSettings, ServeOptions, Server, shutdown_signal};
#[cfg(feature = "net")]
use crate::error::{Error, Result};

/// Serve a registry folder over HTTP: GET and HEAD for anyone, with strong ETags (blake3),
/// Range and conditional requests. One JSON line per request on stdout; SIGTERM stops
/// accepting and lets in-flight requests finish.
///
/// It speaks plain HTTP. Reads need no secrecy (every file is signed or named by its
/// digest), but a publish token must not cross a network in clear: to publish from another
/// machine, put TLS in front of it (a reverse proxy or load balancer); publishers refuse to
/// send the token over plain http:// to another host.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// The registry folder.
    #[arg(long, value_name = "DIR")]
    pub root: PathBuf,
    /// Address to listen on (port 0: a free port, printed in the `listening` line).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// Open connections at most; more are closed at once.
    #[arg(long, value_name = "N", default_value_t = defaults::MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Open connections from one client address (IPv6: one /64) at most; more are closed
    /// at once. Behind a reverse proxy, raise it to --max-connections.
    #[arg(long, value_name = "N", default_value_t = defaults::MAX_CONNECTIONS_PER_ADDR, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections_per_addr: u64,
    /// Requests served on one connection at most (then `Connection: close`).
    #[arg(long, value_name = "N", default_value_t = defaults::MAX_REQUESTS_PER_CONNECTION, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_requests_per_connection: u64,
    /// Seconds a client has to send its request headers, however steadily it sends them
    /// (an idle keep-alive connection is kept at most this long, and at most the stall
    /// bound).
    #[arg(long, value_name = "N", default_value_t = defaults::HEADER_TIMEOUT_SECS)]
    pub header_timeout_secs: u64,
    /// The stall bound: seconds a connection may make no progress while the server waits
    /// on the client before it is closed and its connection slot freed (logged as
    /// `connection_cut`, `stall timeout`). It waits on the client while a request is not
    /// fully sent (headers, an upload body, or no request yet on an open or idle
    /// connection) and while a response is not accepted (the client reads nothing). Any
    /// byte moved either way restarts the clock, so a slow but progressing download or
    /// upload is never cut; --header-timeout-secs and --body-timeout-secs still bound a
    /// whole request. Without it, clients that stall hold their slots and a few addresses
    /// can fill --max-connections.
    #[arg(long, value_name = "N", default_value_t = defaults::STALL_TIMEOUT_SECS, value_parser = clap::value_parser!(u64).range(1..), alias = "send-timeout-secs")]
    pub stall_timeout_secs: u64,
    /// Seconds a client has to send a whole upload body (publishing); slower: 408.
    #[arg(long, value_name = "N", default_value_t = defaults::BODY_TIMEOUT_SECS, value_parser = clap::value_parser!(u64).range(1..))]
    pub body_timeout_secs: u64,
    /// Seconds in-flight requests may take to finish after SIGTERM.
    #[arg(long, value_name = "N", default_value_t = defaults::SHUTDOWN_GRACE_SECS)]
    pub shutdown_grace_secs: u64,
    /// Do not write the per-request log lines.
    #[arg(long)]
    pub no_access_log: bool,
    /// Worker threads (default: one per core).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Accept publishes (PUT) from clients sending this file's token as a bearer token
    /// (one line, at least 16 characters, mode 0600). Needs --trust.
    #[arg(long, value_name = "FILE", requires = "trust")]
    pub publish_token_file: Option<PathBuf>,
    /// The trust root: a browser asking for `/` (Accept: text/html) gets a page of the
    /// registry verified against it (modules, signers, history, kernels); with
    /// --publish-token-file, every published file is checked against it too.
    #[arg(long, value_name = "FILE")]
    pub trust: Option<PathBuf>,
    /// The largest blob upload accepted, in MiB.
    #[arg(long, value_name = "N", default_value_t = defaults::MAX_UPLOAD_MIB)]
    pub max_upload_mib: u64,
}

#[cfg(feature = "net")]
impl ServeArgs {
    /// The server options these arguments select (reading the token and trust root files
    /// when publishing is on).
    pub fn options(&self) -> Result<ServeOptions> {
        let mut o = ServeOptions::new(self.root.clone());
        o.max_connections = self.max_connections;
        o.max_connections_per_addr =
            usize::try_from(self.max_connections_per_addr).unwrap_or(usize::MAX);
        o.max_requests_per_connection =
            usize::try_from(self.max_requests_per_connection).unwrap_or(usize::MAX);
        o.header_timeout = Duration::from_secs(self.header_timeout_secs);
        o.stall_timeout = Duration::from_secs(self.stall_timeout_secs);
        o.body_timeout = Duration::from_secs(self.body_timeout_secs);
        o.shutdown_grace = Duration::from_secs(self.shutdown_grace_secs);
        o.access_log = !self.no_access_log;
        o.max_upload = self.max_upload_mib.saturating_mul(1024 * 1024);
        if let Some(trust) = &self.trust {
            o.page_trust = Some(super::server::html::read_trust(trust, &o.limits).map_err(
                |reason| Error::TrustRoot {
                    path: trust.display().to_string(),
                    reason,
                },
            )?);
        }
        if let (Some(token), Some(trust)) = (&self.publish_token_file, &self.trust) {
            o.publish = Some(
                PublishSettings::load(token, trust, &o.limits).map_err(|reason| Error::Serve {
                    addr: self.addr.to_string(),
                    reason: format!("publishing cannot start: {reason}"),
                })?,
            );
        }
        Ok(o)
    }

    /// Runs the server until SIGTERM or SIGINT (blocking; starts its own runtime).
    pub fn run(&self) -> Result<()> {
        let mut rt = tokio::runtime::Builder::new_multi_thread();
        if let Some(n) = self.threads {
            rt.worker_threads(n.max(1));
        }
        let rt = rt.enable_all().build().map_err(|e| Error::Serve {
            addr: self.addr.to_string(),
            reason: format!("cannot start the runtime: {e}"),
        })?;
        let opts = self.options()?;
        rt.block_on(async {
            let server = Server::bind(self.addr, opts).await?;
            server.run(shutdown_signal()).await
        })
    }
}
