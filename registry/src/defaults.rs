//! The defaults of the network settings, each defined once: the libraries' `Default`s and
//! the command lines that offer the setting (`sync`, `serve`) read them here. Compiled
//! without the `net` feature too, since the command lines exist there.

/// [`HttpOptions`](crate::remote::HttpOptions): how `sync` and publishing talk to a server.
pub mod http {
    /// Seconds allowed to open a connection.
    pub const CONNECT_TIMEOUT_SECS: u64 = 10;
    /// Seconds allowed without receiving anything.
    pub const READ_TIMEOUT_SECS: u64 = 30;
    /// The minimum average transfer rate, in bytes per second.
    pub const MIN_SPEED_BYTES_PER_SEC: u64 = 1024;
    /// Seconds over which the minimum rate is averaged.
    pub const MIN_SPEED_WINDOW_SECS: u64 = 30;
    /// Attempts per file.
    pub const ATTEMPTS: u32 = 5;
}

/// `ServeOptions`: what the `serve` HTTP server allows its clients.
pub mod serve {
    /// Open connections at most.
    pub const MAX_CONNECTIONS: usize = 4096;
    /// Open connections from one client address (IPv6: one /64) at most.
    pub const MAX_CONNECTIONS_PER_ADDR: u64 = 256;
    /// Requests served on one connection at most.
    pub const MAX_REQUESTS_PER_CONNECTION: u64 = 1000;
    /// Seconds a client has to send its request headers.
    pub const HEADER_TIMEOUT_SECS: u64 = 10;
    /// Seconds a connection may make no progress while the server waits on its client
    /// (the stall bound). As long as the header timeout, so an idle keep-alive connection
    /// is kept as long as before; a third of the 30 s send timeout it replaced, for
    /// clients that read nothing.
    pub const STALL_TIMEOUT_SECS: u64 = 10;
    /// Seconds a client has to send a whole upload body.
    pub const BODY_TIMEOUT_SECS: u64 = 120;
    /// Seconds in-flight requests may take to finish after SIGTERM.
    pub const SHUTDOWN_GRACE_SECS: u64 = 30;
    /// The largest blob upload accepted, in MiB.
    pub const MAX_UPLOAD_MIB: u64 = 64;
}

/// The per-user download cache (wheels keyed by sha256, registries a project locked),
/// shared by clones, CI runs and build scripts: `$CUDA_AOT_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/cuda-aot`, else `~/.cache/cuda-aot`.
pub fn user_cache_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(x) = std::env::var_os("CUDA_AOT_CACHE_DIR") {
        return PathBuf::from(x);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("cuda-aot")
}
