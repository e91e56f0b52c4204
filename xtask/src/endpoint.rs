//! Where a `--registry` value points, and how to reach it: a local folder, or a registry
//! elsewhere: an OCI tag (`oci://HOST/REPO:TAG`), a
//! publishing `cuda-aot-registry serve` (`http(s)://…`) or a bucket (`s3://BUCKET/PREFIX`). The credential and transport
//! arguments of `sync` and `publish`, and the OCI publish flow (the tag's release brought
//! into a local folder, the build published there, the result pushed back).

use std::path::{Path, PathBuf};

#[cfg(feature = "net")]
pub mod client;

/// Where a `--registry` value points.
#[cfg_attr(not(feature = "net"), allow(dead_code))] // without `net`, only Dir is opened
pub enum Target<'a> {
    /// A local folder.
    Dir(&'a Path),
    /// An OCI tag (`oci://…`).
    Oci(&'a str),
    /// An HTTP(S) server (`http://…`, `https://…`).
    Http(&'a str),
    /// A bucket of an S3 or S3-compatible store (`s3://BUCKET/PREFIX`).
    S3(&'a str),
}

impl<'a> Target<'a> {
    /// Classifies a `--registry` value.
    pub fn of(registry: &'a Path) -> Target<'a> {
        match registry.to_str() {
            Some(s) if s.starts_with("oci://") => Target::Oci(s),
            Some(s) if s.starts_with("s3://") => Target::S3(s),
            Some(s) if s.starts_with("http://") || s.starts_with("https://") => Target::Http(s),
            _ => Target::Dir(registry),
        }
    }
}

/// How to reach a registry that is not a local folder.
#[derive(Debug, Clone, clap::Args)]
pub struct RemoteArgs {
    /// The bearer token file of a publishing `cuda-aot-registry serve` (for
    /// --registry http(s)://…).
    #[arg(long, value_name = "FILE", env = "CUDA_AOT_PUBLISH_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Send that token over plain http:// to a server on another machine (refused by
    /// default: anyone on the path could read it and publish with it).
    #[arg(long)]
    pub allow_plain_http: bool,
    /// Talk plain HTTP (no TLS) to the OCI registry (loopback registries always are).
    #[arg(long)]
    pub oci_plain_http: bool,
    /// User name for the OCI registry, with the password in CUDA_AOT_OCI_PASSWORD
    /// [default: anonymous].
    #[arg(long, value_name = "NAME", env = "CUDA_AOT_OCI_USERNAME")]
    pub oci_username: Option<String>,
}
