//! `cuda-aot-registry`: serve a registry folder over HTTP.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cuda_aot_registry::serve::{ServeOptions, Server, shutdown_signal};

/// Storage and transport of cuda-aot registries.
#[derive(Parser)]
#[command(name = "cuda-aot-registry", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Serve(ServeArgs),
}

/// Serve a registry folder over HTTP: GET and HEAD for anyone, with strong ETags (blake3),
/// Range and conditional requests. One JSON line per request on stdout; SIGTERM stops
/// accepting and lets in-flight requests finish.
#[derive(clap::Args)]
struct ServeArgs {
    /// The registry folder.
    #[arg(long)]
    root: PathBuf,
    /// Address to listen on (port 0: a free port, printed in the `listening` line).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Open connections at most.
    #[arg(long, default_value_t = 4096)]
    max_connections: usize,
    /// Seconds a client has to send its request headers.
    #[arg(long, default_value_t = 10)]
    header_timeout_secs: u64,
    /// Seconds in-flight requests may take to finish after SIGTERM.
    #[arg(long, default_value_t = 30)]
    shutdown_grace_secs: u64,
    /// Do not write the per-request log lines.
    #[arg(long)]
    no_access_log: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(a) => serve(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!("Fix: {}", e.fix());
            ExitCode::FAILURE
        }
    }
}

fn serve(a: ServeArgs) -> cuda_aot_registry::Result<()> {
    let mut opts = ServeOptions::new(a.root);
    opts.max_connections = a.max_connections;
    opts.header_timeout = std::time::Duration::from_secs(a.header_timeout_secs);
    opts.shutdown_grace = std::time::Duration::from_secs(a.shutdown_grace_secs);
    opts.access_log = !a.no_access_log;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cuda_aot_registry::Error::Serve {
            addr: a.addr.to_string(),
            reason: format!("cannot start the runtime: {e}"),
        })?;
    rt.block_on(async {
        let server = Server::bind(a.addr, opts).await?;
        server.run(shutdown_signal()).await
    })
}
