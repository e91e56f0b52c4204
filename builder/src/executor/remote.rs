//! The remote executor (`--remote-exec grpc://HOST:PORT`): each [`Action`] becomes a Remote
//! Execution API v2 action on a server (BuildGrid, Buildbarn, BuildBuddy, NativeLink,
//! EngFlow): its inputs placed by role in the input root ([`layout`]: the pinned toolkit in
//! one folder, the rest in another), hashed ([`tree`]) and uploaded once ([`cas`]); the same
//! command line, every path under an input made relative to the working folder; a cached
//! result looked up first; the outputs fetched back and checked against their digests. What the build then does with them is what it does with a local run's:
//! the executor is never trusted.
//!
//! The client is stock REAPI: the platform is `OSFamily`, `ISA` and the toolkit's digest
//! (`cuda-aot-toolkit`, which a scheduler may match or ignore), the SHA-256 digest function, `Execute` and `WaitExecution`, so any cluster runs the actions.
//! The host compiler nvcc's `-ccbin` names is the worker's own, at the same path, and must
//! answer the version the identities record.

pub mod cas;
pub mod layout;
pub mod tree;

use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use bazel_remote_apis::google::longrunning::operation;
use prost::Message;
use tonic::transport::{Channel, Endpoint};

use super::{Action, Executor, RemoteExecCache};
use crate::advice::fail;
use crate::paths::relative_to;
use cas::{Cas, grpc};
use layout::{Layout, OUT};
use tree::{Blob, Hashes, Source};

/// The platform property naming the digest of the action's toolkit folder.
pub const TOOLKIT_PROPERTY: &str = "cuda-aot-toolkit";

/// What the executor did, for the build's report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RemoteStats {
    /// Actions sent.
    pub actions: u64,
    /// Actions the server answered from its ActionCache.
    pub cached: u64,
    /// Bytes uploaded to the CAS.
    pub uploaded: u64,
    /// Cached results refused (they failed the build's checks) and run again.
    pub refused: u64,
}

/// An action in REAPI form ([`Remote::prepare`]).
struct Prepared {
    /// The `Action` message's digest: what is executed.
    digest: Blob,
    /// The digest of the cacheable form of the action (`do_not_cache` false): what a cached
    /// result is looked up by.
    lookup: Blob,
    /// Every blob of it (the input root's files and folders, the Command, the Action).
    blobs: std::collections::BTreeMap<Blob, Source>,
    /// Each output's path relative to the working folder on the worker.
    output_paths: Vec<String>,
    /// Where the inputs are in the input root.
    layout: Layout,
}

/// A REAPI server: its channel, instance and the CAS.
pub struct Remote {
    url: String,
    instance: String,
    runtime: tokio::runtime::Runtime,
    channel: Channel,
    cas: Cas,
    hashes: Hashes,
    cache: RemoteExecCache,
    actions: AtomicU64,
    cached: AtomicU64,
    uploaded: AtomicU64,
    refused: AtomicU64,
    /// Actions whose cached result failed a build's checks: never taken from the cache
    /// again by this process.
    distrusted: Mutex<HashSet<Blob>>,
    /// The host compiler the build's identities record (`-ccbin` and its `--version`).
    host: Mutex<Option<(PathBuf, String)>>,
    /// Whether the workers' host compiler was found the same (checked once, before the
    /// first action runs).
    host_checked: tokio::sync::OnceCell<Result<(), String>>,
}

thread_local! {
    /// The actions this thread ran since its job began that the ActionCache answered.
    static SERVED: RefCell<Vec<Blob>> = const { RefCell::new(Vec::new()) };
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.url)
            .field("instance", &self.instance)
            .field("cache", &self.cache)
            .finish()
    }
}

/// The gRPC address and instance name of `url` (`grpc://HOST:PORT[/INSTANCE]`,
/// `grpcs://…` for TLS), or why it is not one.
pub fn parse_url(url: &str) -> anyhow::Result<(String, String)> {
    let bad = |why: &str| {
        fail(
            format!("--remote-exec {url:?}: {why}"),
            "give the server as grpc://HOST:PORT (or grpcs://HOST:PORT for TLS), with /INSTANCE after it when the server has named instances",
        )
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
    let http = match scheme {
        "grpc" => "http",
        "grpcs" => "https",
        _ => return Err(bad("the scheme is not grpc:// or grpcs://")),
    };
    let (host, instance) = rest.split_once('/').unwrap_or((rest, ""));
    let port_ok = host
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
    if !port_ok {
        return Err(bad("no HOST:PORT"));
    }
    if instance.split('/').any(|c| c == ".." || c == ".") || instance.ends_with('/') {
        return Err(bad("the instance name is not a plain path"));
    }
    Ok((format!("{http}://{host}"), instance.to_string()))
}

impl Remote {
    /// Connects to the server of `url` and asks its capabilities: refused, before any job
    /// starts, when the URL is malformed, the server cannot be reached, speaks no REAPI (or
    /// not over this TLS setting), or cannot execute actions with SHA-256 digests.
    pub fn connect(url: &str, cache: RemoteExecCache) -> anyhow::Result<Remote> {
        let (endpoint, instance) = parse_url(url)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let unreachable = |e: &dyn std::error::Error| {
            // Each cause (a TLS refusal says why only in the innermost).
            let mut text = e.to_string();
            let mut cause = e.source();
            while let Some(c) = cause {
                text = format!("{text}: {c}");
                cause = c.source();
            }
            fail(
                format!("the remote executor {url} did not answer as a REAPI server: {text}"),
                "check that the server runs and listens there (`cargo xtask servers reapi` starts one for tests), that grpc:// or grpcs:// matches its TLS setting, and that nothing between refuses HTTP/2; or build without --remote-exec (--remote-exec-fallback local builds here when it is gone)",
            )
        };
        let channel = runtime.block_on(async {
            let mut ep = Endpoint::from_shared(endpoint.clone())
                .map_err(|e| unreachable(&e))?
                .connect_timeout(std::time::Duration::from_secs(10))
                .tcp_nodelay(true);
            if endpoint.starts_with("https://") {
                // The public roots, and the machine's (where a company CA is installed;
                // `SSL_CERT_FILE` or `SSL_CERT_DIR` name others).
                let tls = tonic::transport::ClientTlsConfig::new()
                    .with_webpki_roots()
                    .with_native_roots();
                ep = ep.tls_config(tls).map_err(|e| unreachable(&e))?;
            }
            ep.connect().await.map_err(|e| unreachable(&e))
        })?;
        let caps = runtime
            .block_on(
                re::capabilities_client::CapabilitiesClient::new(channel.clone()).get_capabilities(
                    re::GetCapabilitiesRequest {
                        instance_name: instance.clone(),
                    },
                ),
            )
            .map_err(|s| unreachable(&grpc("GetCapabilities", s)))?
            .into_inner();
        let sha256 = re::digest_function::Value::Sha256 as i32;
        let executes = caps.execution_capabilities.as_ref().is_some_and(|e| {
            e.exec_enabled && (e.digest_function == sha256 || e.digest_functions.contains(&sha256))
        });
        if !executes {
            return Err(fail(
                format!(
                    "{url} does not execute actions with SHA-256 digests (its capabilities: {:?})",
                    caps.execution_capabilities
                ),
                "point --remote-exec at a server with remote execution enabled (an execution service, workers attached)",
            ));
        }
        Ok(Remote {
            url: url.to_string(),
            cas: Cas::new(channel.clone(), instance.clone()),
            instance,
            runtime,
            channel,
            hashes: Hashes::default(),
            cache,
            actions: AtomicU64::new(0),
            cached: AtomicU64::new(0),
            uploaded: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            distrusted: Mutex::new(HashSet::new()),
            host: Mutex::new(None),
            host_checked: tokio::sync::OnceCell::new(),
        })
    }

    /// What it did so far.
    pub fn stats(&self) -> RemoteStats {
        RemoteStats {
            actions: self.actions.load(Ordering::Relaxed),
            cached: self.cached.load(Ordering::Relaxed),
            uploaded: self.uploaded.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }

    /// The REAPI form of `action`: the Command, the Action and the input root, every blob
    /// of them with where its bytes are; and each output's path relative to the working
    /// folder.
    fn prepare(&self, action: &Action, skip_cache: bool) -> std::io::Result<Prepared> {
        let cwd = &action.cwd;
        let outputs: Vec<PathBuf> = action.outputs.iter().map(|o| cwd.join(o)).collect();
        let layout = Layout::of(action);
        // Each output is written in a folder of its own below the working folder
        // (`.cuda-aot-out/<n>/<name>`): REAPI takes output paths below the working folder,
        // and the job's own folder (its name random) stays out of the action.
        let output_paths: Vec<String> = outputs
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let name = o.file_name().map(|n| n.to_string_lossy().into_owned());
                format!("{OUT}/{i}/{}", name.unwrap_or_default())
            })
            .collect();
        let dirs = vec![layout.place(cwd)?];
        let inputs = action
            .inputs
            .iter()
            .map(|i| Ok((i.clone(), layout.place(i)?)))
            .collect::<std::io::Result<Vec<_>>>()?;
        let root = tree::input_root(&inputs, &dirs, &self.hashes)?;
        let relative = |p: &Path| -> std::io::Result<String> {
            if let Some(i) = outputs.iter().position(|o| o == p) {
                return Ok(output_paths[i].clone());
            }
            Ok(
                relative_to(&layout.virtual_path(cwd)?, &layout.virtual_path(p)?)
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        let under_inputs = |p: &Path| {
            action.inputs.iter().any(|i| p.starts_with(i)) || outputs.iter().any(|o| o == p)
        };
        let mut arguments = vec![if under_inputs(&action.program) {
            relative(&action.program)?
        } else {
            action.program.to_string_lossy().into_owned()
        }];
        for a in &action.args {
            let p = Path::new(a);
            arguments.push(if p.is_absolute() && under_inputs(p) {
                relative(p)?
            } else {
                os(a)?
            });
        }
        let messages = messages(
            arguments,
            output_paths.clone(),
            layout.place(cwd)?.join("/"),
            &root.digest,
            root.tops.get(layout::TOOLKIT),
            skip_cache,
        );
        let mut blobs = root.blobs;
        blobs.extend(messages.blobs);
        let (action_blob, lookup) = (messages.digest, messages.lookup);
        Ok(Prepared {
            digest: action_blob,
            lookup,
            blobs,
            output_paths,
            layout,
        })
    }

    /// Runs `action` remotely: uploads what the server lacks, executes (or takes the
    /// cached result), fetches the outputs into place and the command's output.
    async fn run(&self, action: &Action) -> std::io::Result<Output> {
        let no_cache = self.cache != RemoteExecCache::ReadWrite;
        let Prepared {
            digest,
            lookup,
            blobs,
            output_paths,
            layout,
        } = self.prepare(action, no_cache)?;
        self.actions.fetch_add(1, Ordering::Relaxed);
        let fresh = self
            .distrusted
            .lock()
            .expect("distrusted")
            .contains(&lookup);
        // A cached result first (nothing is uploaded for it), unless the cache is off or
        // this action's cached result was refused; then the inputs, and Execute.
        let cached = match self.cache != RemoteExecCache::Off && !fresh {
            true => self.cached_result(&lookup).await?,
            false => None,
        };
        let response = match cached {
            Some(result) => {
                self.cached.fetch_add(1, Ordering::Relaxed);
                SERVED.with(|s| s.borrow_mut().push(lookup.clone()));
                re::ExecuteResponse {
                    result: Some(result),
                    cached_result: true,
                    ..Default::default()
                }
            }
            None => {
                self.check_host_compiler().await?;
                let sent = self.cas.upload(&blobs).await?;
                self.uploaded.fetch_add(sent, Ordering::Relaxed);
                let response = self.execute(&digest).await?;
                if response.cached_result {
                    self.cached.fetch_add(1, Ordering::Relaxed);
                    SERVED.with(|s| s.borrow_mut().push(lookup.clone()));
                }
                response
            }
        };
        if let Some(s) = response.status.as_ref().filter(|s| s.code != 0) {
            return Err(std::io::Error::other(format!(
                "{} could not run the action: {} (code {})",
                self.url, s.message, s.code
            )));
        }
        let result = response.result.ok_or_else(|| {
            std::io::Error::other(format!("{}: an ExecuteResponse without a result", self.url))
        })?;
        for (path, rel) in action.outputs.iter().zip(&output_paths) {
            let Some(file) = result.output_files.iter().find(|f| &f.path == rel) else {
                continue;
            };
            let blob = Blob::from_proto(file.digest.as_ref().unwrap_or(&re::Digest::default()));
            let bytes = self.cas.read(&blob).await?;
            let bytes = match action.depfiles.iter().any(|d| d == path) {
                true => {
                    let mapped = layout.local_paths(&bytes, &action.cwd);
                    layout
                        .check_depfile(&mapped, action)
                        .map_err(|e| std::io::Error::other(format!("{}: {e}", self.url)))?;
                    mapped
                }
                false => bytes,
            };
            let to = action.cwd.join(path);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&to, bytes)?;
        }
        let stdout = self
            .output_stream(&result.stdout_raw, result.stdout_digest.as_ref())
            .await?;
        let stderr = self
            .output_stream(&result.stderr_raw, result.stderr_digest.as_ref())
            .await?;
        Ok(Output {
            status: std::process::ExitStatus::from_raw((result.exit_code & 0xff) << 8),
            stdout,
            stderr,
        })
    }

    async fn output_stream(
        &self,
        raw: &[u8],
        digest: Option<&re::Digest>,
    ) -> std::io::Result<Vec<u8>> {
        match digest.filter(|d| d.size_bytes > 0) {
            Some(d) => self.cas.read(&Blob::from_proto(d)).await,
            None => Ok(raw.to_vec()),
        }
    }

    /// Refuses to run anything when the workers' host compiler at the path the build gives
    /// nvcc's `-ccbin` is not the one its identities record (`<path> --version`, run once
    /// on a worker, never cached): the blobs would not be what they claim.
    async fn check_host_compiler(&self) -> std::io::Result<()> {
        let Some((path, version)) = self.host.lock().expect("host").clone() else {
            return Ok(());
        };
        let checked = self
            .host_checked
            .get_or_init(|| async {
                let found = self.remote_version(&path).await.map_err(|e| e.to_string())?;
                match found == version {
                    true => Ok(()),
                    false => Err(format!(
                        "the workers of {} have {found:?} at {} where this build records {version:?}: the identities would not say what built the blobs",
                        self.url,
                        path.display()
                    )),
                }
            })
            .await;
        checked.clone().map_err(std::io::Error::other)
    }

    /// The first line `path --version` prints on a worker.
    async fn remote_version(&self, path: &Path) -> std::io::Result<String> {
        let empty = re::Directory::default().encode_to_vec();
        let root = Blob::of(&empty);
        let mut m = messages(
            vec![path.to_string_lossy().into_owned(), "--version".into()],
            vec![],
            String::new(),
            &root,
            None,
            true,
        );
        m.blobs.insert(root, Source::Bytes(empty.into()));
        self.cas.upload(&m.blobs).await?;
        let response = self.execute(&m.digest).await?;
        let result = response.result.unwrap_or_default();
        let out = self
            .output_stream(&result.stdout_raw, result.stdout_digest.as_ref())
            .await?;
        let first = String::from_utf8_lossy(&out)
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_string);
        match (result.exit_code, first) {
            (0, Some(v)) => Ok(v),
            (code, _) => Err(std::io::Error::other(format!(
                "{} --version on a worker of {} exited {code} printing no version: the workers need the host compiler this build uses, at the same path",
                path.display(),
                self.url
            ))),
        }
    }

    /// The ActionCache's result of the action `lookup`, if it has one.
    async fn cached_result(&self, lookup: &Blob) -> std::io::Result<Option<re::ActionResult>> {
        let reply = re::action_cache_client::ActionCacheClient::new(self.channel.clone())
            .max_decoding_message_size(64 << 20)
            .get_action_result(re::GetActionResultRequest {
                instance_name: self.instance.clone(),
                action_digest: Some(lookup.proto()),
                inline_stdout: true,
                inline_stderr: true,
                ..Default::default()
            })
            .await;
        match reply {
            Ok(r) => Ok(Some(r.into_inner())),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(s) => Err(grpc("GetActionResult", s)),
        }
    }

    /// `Execute` of `digest`, waiting for the operation to finish. The server does not look
    /// it up in its ActionCache: the client did first, or must not.
    async fn execute(&self, digest: &Blob) -> std::io::Result<re::ExecuteResponse> {
        let mut client = re::execution_client::ExecutionClient::new(self.channel.clone());
        let mut stream = client
            .execute(re::ExecuteRequest {
                instance_name: self.instance.clone(),
                skip_cache_lookup: true,
                action_digest: Some(digest.proto()),
                ..Default::default()
            })
            .await
            .map_err(|s| grpc("Execute", s))?
            .into_inner();
        let mut name = String::new();
        let mut reconnects = 0;
        loop {
            // Ctrl-C (or SIGTERM) cancels the operation on the server, then stops.
            let message = tokio::select! {
                m = stream.message() => m,
                signal = interrupt() => {
                    self.cancel(&name).await;
                    return Err(std::io::Error::other(format!(
                        "{signal}: the remote operation {name} was cancelled"
                    )));
                }
            };
            match message {
                Ok(Some(op)) => {
                    name = op.name.clone();
                    reconnects = 0;
                    if op.done {
                        return finished(op.result);
                    }
                }
                // The stream broke or ended early: the operation goes on at the server.
                Ok(None) | Err(_) if !name.is_empty() && reconnects < 10 => {
                    reconnects += 1;
                    stream = client
                        .wait_execution(re::WaitExecutionRequest { name: name.clone() })
                        .await
                        .map_err(|s| grpc("WaitExecution", s))?
                        .into_inner();
                }
                Ok(None) => {
                    return Err(std::io::Error::other(
                        "Execute: the stream ended before the operation finished",
                    ));
                }
                Err(s) => return Err(grpc("Execute", s)),
            }
        }
    }

    /// Asks the server to cancel the operation `name` (best effort: the build stops anyway).
    async fn cancel(&self, name: &str) {
        if name.is_empty() {
            return;
        }
        let mut ops =
            bazel_remote_apis::google::longrunning::operations_client::OperationsClient::new(
                self.channel.clone(),
            );
        let cancel = ops.cancel_operation(
            bazel_remote_apis::google::longrunning::CancelOperationRequest {
                name: name.to_string(),
            },
        );
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), cancel).await;
    }
}

/// Resolves once the build is interrupted (Ctrl-C, SIGTERM), with the signal's name.
async fn interrupt() -> String {
    loop {
        if let Some(i) = crate::process::interrupted() {
            return i.to_string();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The Command and Action messages of a run: their blobs, the Action's digest (to execute)
/// and the cacheable Action's digest (to look up).
struct Messages {
    blobs: std::collections::BTreeMap<Blob, Source>,
    digest: Blob,
    lookup: Blob,
}

/// The messages of running `arguments` in `working_directory` of the input root `root`,
/// writing `output_paths`. The platform is `ISA`, `OSFamily` and, given the digest of the
/// toolkit folder, `cuda-aot-toolkit` (`HASH/SIZE`: a scheduler may route on it; the toolkit
/// itself is in the input root), sorted by name as REAPI requires; the environment only the
/// C locale and a plain PATH. With `skip_cache` the executed Action is marked
/// `do_not_cache` (its lookup digest is the cacheable one's).
fn messages(
    arguments: Vec<String>,
    output_paths: Vec<String>,
    working_directory: String,
    root: &Blob,
    toolkit: Option<&Blob>,
    skip_cache: bool,
) -> Messages {
    let property = |name: &str, value: String| re::platform::Property {
        name: name.into(),
        value,
    };
    let mut properties = vec![
        property("ISA", std::env::consts::ARCH.replace('_', "-")),
        property("OSFamily", std::env::consts::OS.into()),
    ];
    if let Some(t) = toolkit {
        properties.push(property(TOOLKIT_PROPERTY, format!("{}/{}", t.hash, t.size)));
    }
    let platform = re::Platform { properties };
    let env = [("LC_ALL", "C"), ("PATH", "/usr/bin:/bin")];
    // The platform in the Command too: servers before REAPI 2.2 read it there.
    #[allow(deprecated)]
    let command = re::Command {
        arguments,
        environment_variables: env
            .iter()
            .map(|(k, v)| re::command::EnvironmentVariable {
                name: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        output_paths,
        working_directory,
        platform: Some(platform.clone()),
        ..Default::default()
    };
    let command_bytes = command.encode_to_vec();
    let command_blob = Blob::of(&command_bytes);
    let mut message = re::Action {
        command_digest: Some(command_blob.proto()),
        input_root_digest: Some(root.proto()),
        do_not_cache: false,
        platform: Some(platform),
        ..Default::default()
    };
    let lookup = Blob::of(&message.encode_to_vec());
    message.do_not_cache = skip_cache;
    let action_bytes = message.encode_to_vec();
    let digest = Blob::of(&action_bytes);
    let mut blobs = std::collections::BTreeMap::new();
    blobs.insert(command_blob, Source::Bytes(command_bytes.into()));
    blobs.insert(digest.clone(), Source::Bytes(action_bytes.into()));
    Messages {
        blobs,
        digest,
        lookup,
    }
}

/// The ExecuteResponse in a finished operation's result.
fn finished(result: Option<operation::Result>) -> std::io::Result<re::ExecuteResponse> {
    match result {
        Some(operation::Result::Response(any)) => re::ExecuteResponse::decode(any.value.as_slice())
            .map_err(|e| {
                std::io::Error::other(format!("Execute: a response that does not decode: {e}"))
            }),
        Some(operation::Result::Error(s)) => Err(std::io::Error::other(format!(
            "Execute failed: {} (code {})",
            s.message, s.code
        ))),
        None => Err(std::io::Error::other(
            "Execute: a finished operation without a result",
        )),
    }
}

fn os(a: &OsString) -> std::io::Result<String> {
    a.to_str()
        .map(str::to_string)
        .ok_or_else(|| std::io::Error::other(format!("{a:?}: an argument that is not UTF-8")))
}

impl Executor for Remote {
    fn name(&self) -> String {
        format!("remote {}", self.url)
    }

    fn execute(&self, action: &Action) -> std::io::Result<Output> {
        self.runtime.block_on(self.run(action))
    }

    fn summary(&self) -> Option<String> {
        let s = self.stats();
        let refused = match s.refused {
            0 => String::new(),
            n => format!(" ({n} refused: they failed the checks, and ran again)"),
        };
        Some(format!(
            "remote execution on {}: {} action(s), {} from its ActionCache{refused}, {:.1} MiB uploaded",
            self.url,
            s.actions,
            s.cached,
            s.uploaded as f64 / f64::from(1 << 20)
        ))
    }

    fn begin_job(&self) {
        SERVED.with(|s| s.borrow_mut().clear());
    }

    fn expect_host_compiler(&self, path: &Path, version: &str) {
        *self.host.lock().expect("host") = Some((path.to_path_buf(), version.to_string()));
    }

    fn refuse_cached(&self) -> Vec<String> {
        let served = SERVED.with(|s| std::mem::take(&mut *s.borrow_mut()));
        self.refused
            .fetch_add(served.len() as u64, Ordering::Relaxed);
        let mut distrusted = self.distrusted.lock().expect("distrusted");
        served
            .into_iter()
            .map(|d| {
                let name = format!("sha256:{}/{}", d.hash, d.size);
                distrusted.insert(d);
                name
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_grpc_server_or_are_refused_with_a_fix() {
        assert_eq!(
            parse_url("grpc://127.0.0.1:8980").unwrap(),
            ("http://127.0.0.1:8980".into(), String::new())
        );
        assert_eq!(
            parse_url("grpcs://re.example:443/main").unwrap(),
            ("https://re.example:443".into(), "main".into())
        );
        for bad in [
            "127.0.0.1:8980",
            "http://127.0.0.1:8980",
            "grpc://127.0.0.1",
            "grpc://:80",
            "grpc://host:0",
            "grpc://host:99999",
            "grpc://host:1/../x",
        ] {
            let e = parse_url(bad).unwrap_err();
            assert!(
                format!("{e:?}").contains("give the server as grpc://"),
                "{bad}: {e:?}"
            );
        }
    }
}
