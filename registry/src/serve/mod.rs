//! `cuda-aot-registry serve`: a registry folder over HTTP/1.1 on hyper and tokio. Read-only
//! GET and HEAD for anyone, with strong ETags (blake3 of the bytes), Range, conditional
//! requests and cache headers; only layout files, opened without following a link below
//! the root; caps on connections (in all and per client address), requests per connection,
//! header size and header read time; a stall bound (a connection whose client sends or reads
//! nothing for that long is closed) and an upload-body timeout; a throttle on failed
//! publish tokens; graceful shutdown on SIGTERM; one JSON log line per request.

//!
//! The command line ([`ServeArgs`]) is always there, so tools that offer `serve` show the
//! same options with or without the `net` feature; the server needs `net`.

mod args;
#[cfg(feature = "net")]
mod server;

pub use args::ServeArgs;
#[cfg(feature = "net")]
pub use server::*;
