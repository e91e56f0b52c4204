//! `cuda-aot-registry`: serve a registry folder over HTTP.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cuda_aot_registry::serve::ServeArgs;

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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(a) => a.run(),
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
