//! Command-line arguments shared by several tasks, spelled and documented once: the
//! registry and trust root, the toolkit choice, the build selection (spec, modules,
//! targets, jobs, cache), the verifier's checks (state file, clock skew, channel), the
//! channel and the message format. Value names are the same
//! everywhere: `DIR` for folders, `FILE` for files, `N` for counts, `SIZE` for byte sizes.

use anyhow::Result;
use cuda_aot::{Channel, ModuleName, Target};
use std::path::PathBuf;
use std::sync::Arc;

pub use cuda_aot_builder::build::SharedCacheMode;
use cuda_aot_builder::build::{BuildOptions, RemoteOptions};
use cuda_aot_builder::executor::{Executor, RemoteExecCache, RemoteExecFallback};
use cuda_aot_builder::toolchain::ToolchainOptions;
pub use cuda_aot_builder::toolchain::ToolkitChoice;

use crate::{anchor, paths};

/// The verifier's settings shared by `verify` and `sync`: the rollback-protection state
/// file, the clock-skew allowance and the required channel.
#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    /// Rollback-protection state file [default: the per-user file the prover runtime
    /// reads for this registry folder: $CUDA_AOT_STATE_DIR, else
    /// $XDG_STATE_HOME/cuda-aot/trust/, else ~/.local/state/cuda-aot/trust/].
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Accept documents up to this many seconds past their expiry (clock skew). Logged.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub clock_skew_secs: u64,
    /// Require this channel (production refuses dev-signed registries).
    #[arg(long, value_enum, value_name = "CHANNEL")]
    pub channel: Option<ChannelArg>,
}

impl CheckArgs {
    /// The state file for the registry folder `registry`: `--state`, else its default.
    pub fn state_path(&self, registry: &std::path::Path) -> Result<PathBuf> {
        match &self.state {
            Some(p) => Ok(p.clone()),
            None => crate::paths::state_file(registry),
        }
    }

    /// Verification options with this clock skew and channel.
    pub fn options(&self) -> cuda_aot::verify::Options {
        cuda_aot::verify::Options {
            skew: std::time::Duration::from_secs(self.clock_skew_secs),
            required_channel: self.channel.map(Channel::from),
            limits: crate::limits::limits(),
            ..cuda_aot::verify::Options::default()
        }
    }
}

/// The value of `--at TIME` (`verify`, `doctor`): an RFC 3339 time no earlier than now (a
/// what-if check runs in the future, never in the past, where expired documents would pass).
pub fn parse_later_time(s: &str) -> std::result::Result<cuda_aot::metadata::Time, String> {
    let t = humantime::parse_rfc3339(s)
        .map_err(|e| format!("{e}: give an RFC 3339 time such as 2027-01-01T00:00:00Z"))?;
    let t = cuda_aot::metadata::Time::from(t);
    let now = cuda_aot::metadata::Time::now();
    if t.unix() < now.unix() {
        return Err(format!(
            "{s} is before now ({now}): verification never runs in the past, where expired documents would pass"
        ));
    }
    Ok(t)
}

/// `--registry DIR` and `--trust FILE`, shared by the tasks that read a registry.
#[derive(clap::Args, Debug, Clone)]
pub struct RegistryArgs {
    /// The registry folder [default: .cuda-aot/registry of the project].
    #[arg(long, value_name = "DIR")]
    pub registry: Option<PathBuf>,
    /// The trust root [default: the dev root .cuda-aot/dev-keys/root.json if generated,
    /// else keys/root.json of the project].
    #[arg(long, value_name = "FILE")]
    pub trust: Option<PathBuf>,
}

impl RegistryArgs {
    /// The registry folder these arguments select.
    pub fn registry(&self) -> PathBuf {
        self.registry
            .clone()
            .unwrap_or_else(paths::default_registry)
    }

    /// The trust root file these arguments select.
    pub fn trust_file(&self) -> Result<PathBuf> {
        anchor::trust_file_for(self.trust.as_deref(), self.registry.as_deref())
    }
}

/// Toolkit selection shared by every task that compiles.
#[derive(Debug, Clone, clap::Args)]
pub struct ToolkitArgs {
    /// Which toolkit compiles (a system toolkit's identity differs, so its outputs never
    /// share cache entries with pinned builds).
    #[arg(long, value_enum, value_name = "KIND", default_value_t = ToolkitChoice::Pinned)]
    pub toolkit: ToolkitChoice,
    /// Where pinned toolkits are unpacked, one folder per pinned wheel set
    /// [default: .cuda-aot/toolkit of the project].
    #[arg(long, value_name = "DIR", env = "CUDA_AOT_TOOLKIT_DIR")]
    pub toolkit_dir: Option<PathBuf>,
}

/// What to build: the spec, the modules and targets of it, and parallelism. Shared by
/// `build`, `release` and `repro`.
#[derive(Debug, Clone, clap::Args)]
pub struct SelectArgs {
    /// The release spec; relative paths in it are relative to it, and the project (where
    /// .cuda-aot/ goes) is the checkout holding it, else its folder
    /// [default: manifests/release.toml of the checkout holding the current folder].
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,
    /// Build only this module (repeatable) [default: every module of the spec].
    #[arg(long = "module", value_name = "NAME", value_parser = parse_module)]
    pub modules: Vec<ModuleName>,
    /// Build only for this target instead of the spec's (repeatable): `sm_90`, `sm_90a`,
    /// or `compute_90` for PTX, the labelled compatibility mode (a module of several
    /// sources has no PTX: it gets only the `sm_*` targets, and naming it with --module
    /// together with a `compute_*` target is an error).
    #[arg(long = "target", value_name = "TARGET")]
    pub targets: Vec<Target>,
    /// Parallel nvcc jobs [default: the number of available cores].
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    pub jobs: Option<usize>,
    #[command(flatten)]
    pub toolkit: ToolkitArgs,
}

impl SelectArgs {
    /// Selects the project of `--spec` (if given) for this run; call before any default
    /// path is computed.
    pub fn select_project(&self) -> Result<()> {
        if let Some(s) = &self.spec {
            paths::select_spec(s)?;
        }
        Ok(())
    }
}

/// `--cache-dir DIR` (or `CUDA_AOT_BUILD_CACHE`) and `--cache-max-size SIZE` (or
/// `CUDA_AOT_CACHE_MAX_SIZE`), shared by `build` and `release`.
#[derive(Debug, Clone, clap::Args)]
pub struct CacheArgs {
    /// The build cache [default: .cuda-aot/cache of the project].
    #[arg(long, value_name = "DIR", env = "CUDA_AOT_BUILD_CACHE")]
    pub cache_dir: Option<PathBuf>,
    /// The build cache's bound: after a build that added to it, the least recently used
    /// entries that the build does not use are removed until it is under 90 % of SIZE
    /// (bytes, or with a K, M or G suffix: powers of 1024) [default: 2G].
    #[arg(long, value_name = "SIZE", env = "CUDA_AOT_CACHE_MAX_SIZE", value_parser = parse_size)]
    pub cache_max_size: Option<u64>,
    #[command(flatten)]
    pub remote: RemoteCacheArgs,
    #[command(flatten)]
    pub exec: RemoteExecArgs,
}

/// `--remote-exec URL` and how a build uses it, shared by `build`, `release`, `kernels`,
/// `repro` (whose rebuilds never take the server's cached results) and `promote`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RemoteExecArgs {
    /// Run the build's nvcc and nvlink jobs as Remote Execution API v2 actions on this
    /// server (BuildGrid, Buildbarn, BuildBuddy, NativeLink, EngFlow):
    /// `grpc://HOST:PORT[/INSTANCE]`, `grpcs://…` for TLS. The inputs, the pinned toolkit
    /// included, are uploaded once; the outputs come back and get the checks a local run's
    /// get. Checked before any job starts. docs/build.md, "Remote execution".
    #[arg(long, value_name = "URL", env = "CUDA_AOT_REMOTE_EXEC")]
    pub remote_exec: Option<String>,
    /// `off`: every action runs (the server's ActionCache is neither read nor added to);
    /// `read`: cached results are taken (and checked), nothing is added; `read-write`:
    /// cached results are taken and what runs is cached.
    #[arg(
        long,
        value_name = "KIND",
        env = "CUDA_AOT_REMOTE_EXEC_CACHE",
        default_value = "read-write",
        requires = "remote_exec"
    )]
    pub remote_exec_cache: RemoteExecCache,
    /// `local`: when the server cannot be reached, build on this machine instead (said on
    /// stderr); `none`: fail, naming the server. A malformed URL always fails.
    #[arg(
        long,
        value_name = "KIND",
        env = "CUDA_AOT_REMOTE_EXEC_FALLBACK",
        default_value = "none",
        requires = "remote_exec"
    )]
    pub remote_exec_fallback: RemoteExecFallback,
}

impl RemoteExecArgs {
    /// The remote executor these arguments name, connected and checked (its capabilities
    /// asked), or `None` without `--remote-exec` (or with the local fallback when the
    /// server cannot be reached).
    pub fn executor(&self) -> Result<Option<Arc<dyn Executor>>> {
        let Some(url) = &self.remote_exec else {
            return Ok(None);
        };
        #[cfg(not(feature = "net"))]
        {
            let _ = url;
            crate::features::rerun("--remote-exec", "net")?;
            unreachable!("rerun returns only on failure");
        }
        #[cfg(feature = "net")]
        {
            use cuda_aot_builder::executor::remote::{Remote, parse_url};
            parse_url(url)?;
            match Remote::connect(url, self.remote_exec_cache) {
                Ok(r) => Ok(Some(Arc::new(r))),
                Err(e) if self.remote_exec_fallback == RemoteExecFallback::Local => {
                    eprintln!(
                        "warning: {}; building on this machine instead (--remote-exec-fallback local)",
                        format!("{e:#}").lines().next().unwrap_or_default()
                    );
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        }
    }
}

/// `--remote-cache-timeout-secs` unless given.
pub const REMOTE_CACHE_TIMEOUT_SECS: u64 = 60;

/// `--remote-cache URL` and how a build uses it, shared by `build`, `release`, `repro` and
/// `promote`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RemoteCacheArgs {
    /// A shared build cache several machines build into and take from, after the local
    /// one: `file:///path` (a folder every builder reaches), `s3://BUCKET/PREFIX` (S3 or an
    /// S3-compatible store; credentials and endpoint in the AWS variables, as every AWS tool
    /// reads them: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL) or
    /// `oci://HOST/REPOSITORY` (an OCI registry; credentials in CUDA_AOT_OCI_USERNAME and
    /// CUDA_AOT_OCI_PASSWORD).
    /// Every entry it serves must be
    /// signed by a builder key of the trust root and pass the checks `verify` makes
    /// (identity, digests, content); a refused one is reported and compiled instead.
    /// docs/build.md, "Shared build cache".
    #[arg(long, value_name = "URL", env = "CUDA_AOT_REMOTE_CACHE")]
    pub remote_cache: Option<String>,
    /// `read`: only take from the shared cache (no private key needed); `read-write`: also
    /// add, after a build that succeeded, every entry (signed), record and header set it
    /// lacks.
    #[arg(
        long,
        value_name = "KIND",
        env = "CUDA_AOT_REMOTE_CACHE_MODE",
        default_value = "read",
        requires = "remote_cache"
    )]
    pub remote_cache_mode: SharedCacheMode,
    /// The trust root whose builder keys the shared cache's entries must be signed by
    /// [default: the project's: the dev root if generated, else keys/root.json].
    #[arg(
        long,
        value_name = "FILE",
        env = "CUDA_AOT_REMOTE_CACHE_TRUST",
        requires = "remote_cache"
    )]
    pub remote_cache_trust: Option<PathBuf>,
    /// The builder key that signs what a read-write build adds (one the trust root lists)
    /// [default: the dev builder key, when the trust root is the project's dev root].
    #[arg(
        long,
        value_name = "FILE",
        env = "CUDA_AOT_REMOTE_CACHE_KEY",
        requires = "remote_cache"
    )]
    pub remote_cache_key: Option<PathBuf>,
    /// How long one request to the shared cache may wait for the store, in seconds, before
    /// it counts as failed (S3: its retries included; OCI: each of its 5 attempts). After a
    /// request that failed, the build asks the store nothing more and compiles what it
    /// would have taken.
    #[arg(
        long,
        value_name = "N",
        env = "CUDA_AOT_REMOTE_CACHE_TIMEOUT_SECS",
        default_value_t = REMOTE_CACHE_TIMEOUT_SECS,
        requires = "remote_cache"
    )]
    pub remote_cache_timeout_secs: u64,
}

/// A size: bytes, or a number with a `K`, `M`, `G` or `T` suffix (powers of 1024; `KiB`,
/// `MB` and the like are read the same way).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let digits = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let shift = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => {
            return Err(format!(
                "`{s}`: a size is a number of bytes, or ends in K, M, G or T"
            ));
        }
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}`: a size is a number of bytes, or ends in K, M, G or T"))?;
    let bytes = n * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("`{s}`: out of range"));
    }
    Ok(bytes as u64)
}

fn parse_module(s: &str) -> std::result::Result<ModuleName, String> {
    ModuleName::new(s).map_err(|e| e.to_string())
}

/// The trust channel, as a command-line value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ChannelArg {
    /// Development: signed with generated dev keys.
    Dev,
    /// Production: signed with managed release keys.
    Production,
}

impl From<ChannelArg> for Channel {
    fn from(c: ChannelArg) -> Channel {
        match c {
            ChannelArg::Dev => Channel::Dev,
            ChannelArg::Production => Channel::Production,
        }
    }
}

/// How results are printed on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MessageFormat {
    /// Tables and summaries for people.
    #[default]
    Human,
    /// JSON Lines, one message per line (docs/json.md, schema `cuda-aot/xtask/v1`).
    Json,
}

/// `--message-format human|json` and its short form `--json`, as cargo spells them.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct FormatArgs {
    /// Print results on stdout as `human` text or `json` lines (docs/json.md); progress
    /// and errors go to stderr either way.
    #[arg(long, value_enum, value_name = "FMT", default_value_t = MessageFormat::Human)]
    pub message_format: MessageFormat,
    /// Same as --message-format json.
    #[arg(long)]
    pub json: bool,
}

impl FormatArgs {
    /// The format selected.
    pub fn format(&self) -> MessageFormat {
        if self.json {
            MessageFormat::Json
        } else {
            self.message_format
        }
    }

    /// Whether JSON was asked for.
    pub fn is_json(&self) -> bool {
        self.format() == MessageFormat::Json
    }
}

impl SelectArgs {
    /// The build options these arguments select with the cache arguments `cache` (after
    /// [`SelectArgs::select_project`]): spec, modules, targets, jobs, cache and toolkit.
    pub fn build_options(&self, cache: &CacheArgs) -> BuildOptions {
        let a = self;
        let mut o = BuildOptions::default();
        if let Some(s) = &a.spec {
            o.spec = s.clone();
        }
        if let Some(j) = a.jobs {
            o.jobs = j.max(1);
        }
        if let Some(c) = &cache.cache_dir {
            o.cache = c.clone();
        }
        if let Some(m) = cache.cache_max_size {
            o.cache_max = m;
        }
        o.remote = cache.remote.options();
        // The executor (`--remote-exec`) is connected by the command, which can fail.
        o.modules = a.modules.clone();
        o.targets = a.targets.clone();
        o.toolkit = a.toolkit.options();
        o
    }
}

impl ToolkitArgs {
    /// The toolchain options that `--toolkit` and `--toolkit-dir` select.
    pub fn options(&self) -> ToolchainOptions {
        let mut o = ToolchainOptions::new(self.toolkit);
        if let Some(d) = &self.toolkit_dir {
            o.toolkit_dir = d.clone();
        }
        o
    }
}

impl RemoteCacheArgs {
    /// The shared cache these arguments name, if any.
    pub fn options(&self) -> Option<RemoteOptions> {
        self.remote_cache.as_ref().map(|url| RemoteOptions {
            url: url.clone(),
            mode: self.remote_cache_mode,
            trust: self.remote_cache_trust.clone(),
            key: self.remote_cache_key.clone(),
            timeout: std::time::Duration::from_secs(self.remote_cache_timeout_secs.max(1)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_with_binary_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("1.5M"), Ok(3 << 19));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("10 mb"), Ok(10 << 20));
        assert!(parse_size("0").is_err());
        assert!(parse_size("ten").is_err());
        assert!(parse_size("5X").is_err());
    }
}
