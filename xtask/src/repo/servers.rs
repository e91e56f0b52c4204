//! `cargo xtask servers`: real third-party servers for the network tests and benchmarks,
//! without root — an S3-compatible store from pinned PyPI wheels (`s3.rs`), a Remote
//! Execution API server (BuildGrid from pinned wheels, its scheduler on PostgreSQL:
//! `reapi.rs`) and the project's own worker for it (`reapi_worker.rs`), and nginx (static
//! hosting), the CNCF distribution registry (an OCI registry) and PostgreSQL as Debian 12
//! packages pinned by name, release and upstream version: the version Debian's signed
//! index serves today, downloaded and checked by apt (`apt.rs`) into the per-user cache,
//! its sha256 re-checked on every use and recorded, `dpkg -x` into `.cuda-aot/servers/`,
//! run on a loopback port with every path they write inside a work folder.

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::paths;

mod apt;
pub mod chromium;
pub mod ferro;
pub mod reapi;
pub mod reapi_worker;
pub mod s3;
mod venv;

/// Fetch (Debian 12, checked against the signed archive index) and unpack nginx, the OCI
/// registry and PostgreSQL, install the pinned S3 and REAPI servers (PyPI wheels checked by
/// sha256), or run one of them in the foreground.
///
/// Packages are pinned by name, Debian release and upstream version in
/// manifests/servers.toml; the Debian revision is what the signed index serves today.
/// Without a subcommand: makes sure every package is unpacked under .cuda-aot/servers/
/// and prints, for each, the version, suite and sha256 used and the binary. `nginx` serves a registry folder
/// read-only (a plain static file server: no cuda-aot code on the server side); `oci`
/// runs an OCI distribution registry with its storage in a folder; `s3` an S3-compatible
/// object store (manifests/s3-server.txt); `reapi` a Remote Execution API server with a
/// Bots service for workers (manifests/reapi-server.txt, PostgreSQL 15); `reapi-worker` a
/// worker taking that server's actions through the Bots service. Each replaces this process
/// (exec), prints one JSON line first, and stops on SIGTERM.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    run: Option<Run>,
}

#[derive(clap::Subcommand)]
enum Run {
    /// Serve a registry folder read-only with nginx on 127.0.0.1.
    Nginx {
        /// The registry folder.
        #[arg(long, value_name = "DIR")]
        root: PathBuf,
        /// Port (0: a free one, printed).
        #[arg(long, value_name = "N", default_value_t = 0)]
        port: u16,
        /// Folder for nginx's configuration, logs and temporary files (default: a new
        /// folder under .cuda-aot/servers/run/).
        #[arg(long, value_name = "DIR")]
        work: Option<PathBuf>,
        /// Worker processes (default: one per core).
        #[arg(long, value_name = "N")]
        workers: Option<usize>,
    },
    /// Run an OCI distribution registry (docker-registry) on 127.0.0.1.
    Oci {
        /// Where it stores blobs and manifests.
        #[arg(long, value_name = "DIR")]
        storage: PathBuf,
        /// Port (0: a free one, printed).
        #[arg(long, value_name = "N", default_value_t = 0)]
        port: u16,
        /// Folder for its configuration (default: a new folder under .cuda-aot/servers/run/).
        #[arg(long, value_name = "DIR")]
        work: Option<PathBuf>,
    },
    /// Run an OCI registry with the referrers API (ferro-oci-server 1.0.0 from crates.io,
    /// built once per machine) on 127.0.0.1; the pinned docker-registry has no referrers
    /// API.
    OciReferrers {
        /// Where it stores blobs.
        #[arg(long, value_name = "DIR")]
        storage: PathBuf,
        /// Port (0: a free one, printed).
        #[arg(long, value_name = "N", default_value_t = 0)]
        port: u16,
    },
    /// Run an S3-compatible object store (moto's S3 service, pinned PyPI wheels) on
    /// 127.0.0.1, objects in memory, one request at a time (conditional writes atomic).
    /// Any access key is accepted; clients use path-style URLs and region us-east-1.
    S3 {
        /// Port (0: a free one, printed).
        #[arg(long, value_name = "N", default_value_t = 0)]
        port: u16,
        /// A bucket to create before serving (repeat for several).
        #[arg(long = "bucket", value_name = "NAME")]
        buckets: Vec<String>,
        /// Folder for its launcher (default: a new folder under .cuda-aot/servers/run/).
        #[arg(long, value_name = "DIR")]
        work: Option<PathBuf>,
        #[command(flatten)]
        faults: s3::Faults,
    },
    /// Run a Remote Execution API server (BuildGrid, pinned PyPI wheels) on 127.0.0.1:
    /// CAS on disk, ByteStream, an ActionCache that accepts updates, Execution and the
    /// Remote Workers API's Bots service, on instance "" without authentication; its
    /// scheduler on a private PostgreSQL 15 (Debian 12) that stops with it.
    Reapi {
        /// Port (0: a free one, printed).
        #[arg(long, value_name = "N", default_value_t = 0)]
        port: u16,
        /// Folder for its CAS, database, configuration and logs; a server started again
        /// on the same folder keeps its CAS and queue, not its in-memory ActionCache
        /// (default: a new folder under .cuda-aot/servers/run/).
        #[arg(long, value_name = "DIR")]
        work: Option<PathBuf>,
        /// Seconds a worker may stay silent before its session is closed and its lease
        /// queued again for another worker (at least 4).
        #[arg(long, value_name = "N", default_value_t = 5,
              value_parser = clap::value_parser!(u64).range(reapi::MIN_KEEPALIVE_SECS..))]
        keepalive_secs: u64,
        /// Also serve gRPC with TLS on this port (0: a free one), its certificate for
        /// 127.0.0.1 signed by a test certificate authority made in the work folder
        /// (tls/ca.pem): the starting line gives `tls_addr` and `ca`; clients reach it as
        /// grpcs://127.0.0.1:PORT trusting that CA (SSL_CERT_FILE). Workers keep the plain
        /// port.
        #[arg(long, value_name = "N")]
        tls_port: Option<u16>,
    },
    /// Load a page in headless Chromium (Debian 12's, pinned, not installed): write a
    /// screenshot, print the DOM it rendered, or both. For the tests of `serve --trust`'s
    /// page.
    Chromium {
        /// The page.
        #[arg(long, value_name = "URL")]
        url: String,
        /// Write a PNG screenshot of the window here.
        #[arg(long, value_name = "FILE")]
        screenshot: Option<PathBuf>,
        /// Print the DOM Chromium rendered (after its HTML parser: what a reader sees).
        #[arg(long)]
        dump_dom: bool,
        /// The window, as WIDTH,HEIGHT in pixels.
        #[arg(long, value_name = "TEXT", default_value = "1280,1600")]
        window_size: String,
    },
    /// Run a worker of a Remote Execution API server (`servers reapi`): a bot of the Remote
    /// Workers API that runs the actions the server leases it, each in a fresh folder under
    /// --root with its inputs hard-linked from a cache there, and reports their results.
    /// SIGTERM kills running actions and gives them back to the server.
    ReapiWorker {
        /// The server, as grpc://HOST:PORT (gRPC without TLS).
        #[arg(long, value_name = "URL")]
        server: String,
        /// The worker's folder: its cache of inputs (cas/, kept) and one folder per running
        /// action (deleted after it); one worker per folder.
        #[arg(long, value_name = "DIR")]
        root: PathBuf,
        /// The bot's name, unique among the server's workers (default: HOST-PID).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// The server's instance name.
        #[arg(long, value_name = "NAME", default_value = "")]
        instance: String,
        /// Actions run at once.
        #[arg(long, value_name = "N", default_value_t = 1,
              value_parser = clap::value_parser!(u32).range(1..=256))]
        capacity: u32,
        /// Fault injection for the tests: cut every output file to half its size before
        /// it is uploaded, as a broken or malicious worker would, so that the server caches
        /// damaged results (the client must refuse them, cached or not).
        #[arg(long)]
        damage_outputs: bool,
        /// Run every command as this user (numeric UID:GID, no supplementary groups); the
        /// worker itself must run as root. Actions then cannot write through the cache's
        /// read-only links (root could), and a test can show that the blobs do not depend on
        /// the user that built them.
        #[arg(long, value_name = "UID:GID")]
        run_as: Option<String>,
        /// Run every command with its wall clock this many days off (`-400`, `400`):
        /// Debian's datefudge (pinned in manifests/servers.toml) preloaded into it and
        /// every process it starts, so that a test can show the blobs do not depend on
        /// the worker's clock.
        #[arg(long, value_name = "N", allow_hyphen_values = true,
              value_parser = clap::value_parser!(i32).range(-36500..=36500))]
        clock_offset_days: Option<i32>,
    },
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        match self.run {
            None => {
                for name in ["nginx", "docker-registry", "postgresql-15", "libpq5"] {
                    let (bin, used) = ensure_recorded(name)?;
                    println!(
                        "{name:<18} {:<20} {:<18} sha256 {} {}",
                        used.version,
                        used.suite,
                        used.sha256,
                        paths::shown(&bin)
                    );
                }
                let s3 = s3::ensure()?;
                println!(
                    "{:<18} {:<20} {:<18} {}",
                    "s3 (moto)",
                    s3::version(),
                    "pypi, sha256-pinned",
                    paths::shown(&s3)
                );
                reapi::ensure_postgres()?;
                let reapi = reapi::ensure()?;
                println!(
                    "{:<18} {:<20} {:<18} {}",
                    "reapi (buildgrid)",
                    reapi::version(),
                    "pypi, sha256-pinned",
                    paths::shown(&reapi)
                );
                Ok(())
            }
            Some(Run::Nginx {
                root,
                port,
                work,
                workers,
            }) => {
                let work = work_dir(work)?;
                let port = pick_port(port)?;
                let cmd = nginx(&root, port, &work, workers)?;
                exec_announced(cmd, "nginx", port, &work)
            }
            Some(Run::Oci {
                storage,
                port,
                work,
            }) => {
                let work = work_dir(work)?;
                let port = pick_port(port)?;
                let cmd = oci_registry(&storage, port, &work)?;
                exec_announced(cmd, "docker-registry", port, &work)
            }
            Some(Run::OciReferrers { storage, port }) => {
                let port = pick_port(port)?;
                let cmd = ferro::command(&storage, port)?;
                exec_announced(cmd, "ferro-oci-server", port, &storage)
            }
            Some(Run::S3 {
                port,
                buckets,
                work,
                faults,
            }) => {
                let work = work_dir(work)?;
                let port = pick_port(port)?;
                let cmd = s3::command(port, &buckets, &work, faults)?;
                exec_announced(cmd, "s3", port, &work)
            }
            Some(Run::Reapi {
                port,
                work,
                keepalive_secs,
                tls_port,
            }) => {
                let port = pick_port(port)?;
                reapi::check_port_free(port)?;
                let tls_port = tls_port.map(pick_port).transpose()?;
                if let Some(p) = tls_port {
                    reapi::check_port_free(p)?;
                }
                let work = work_dir(work)?;
                let cmd = reapi::command(port, tls_port, &work, keepalive_secs)?;
                let mut line = serde_json::json!({
                    "event": "starting",
                    "server": "reapi",
                    "addr": format!("127.0.0.1:{port}"),
                    "work": work.display().to_string(),
                });
                if let Some(p) = tls_port {
                    line["tls_addr"] = format!("127.0.0.1:{p}").into();
                    line["ca"] = reapi::tls_ca(&work).display().to_string().into();
                }
                exec_with_line(cmd, "reapi", &line)
            }
            Some(Run::Chromium {
                url,
                screenshot,
                dump_dom,
                window_size,
            }) => chromium::run(&url, screenshot.as_deref(), dump_dom, &window_size),
            Some(Run::ReapiWorker {
                server,
                root,
                name,
                instance,
                capacity,
                damage_outputs,
                run_as,
                clock_offset_days,
            }) => {
                let mut worker =
                    reapi_worker::Worker::new(&server, &root, name, instance, capacity)?;
                worker.damage_outputs = damage_outputs;
                worker.clock_offset_days = clock_offset_days;
                worker.run_as = run_as.as_deref().map(reapi_worker::run_as).transpose()?;
                exec_with_line(worker.command()?, "reapi-worker", &worker.line())
            }
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PinFile {
    debian: Release,
    package: Vec<Package>,
}

/// The Debian release the packages come from: the suites whose signed indexes may list
/// them (the release itself, its updates and its security archive).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Release {
    suites: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Package {
    name: String,
    binary: String,
    /// The upstream version; the Debian revision is what the signed index serves today.
    upstream: String,
}

fn pin_file() -> PathBuf {
    paths::repo_root().join("manifests/servers.toml")
}

fn load_package(name: &str) -> Result<(Release, Package)> {
    let path = pin_file();
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the server pins {}", path.display()))?;
    let pins: PinFile =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let p = pins
        .package
        .into_iter()
        .find(|p| p.name == name)
        .with_context(|| format!("{}: no [[package]] named {name}", path.display()))?;
    let plain = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.~:".contains(&b))
    };
    // `15.*`: any minor release of a major version (apt.rs, `has_upstream`).
    let upstream = p.upstream.strip_suffix(".*").unwrap_or(&p.upstream);
    if !plain(&p.name)
        || !(plain(upstream) || upstream == "*")
        || pins.debian.suites.is_empty()
        || !pins.debian.suites.iter().all(|s| plain(s))
        || !paths::is_relative_plain(Path::new(&p.binary))
    {
        bail!(
            "{}: package {name} needs a plain name and upstream version and a relative binary path, [debian] plain suite names",
            path.display()
        );
    }
    Ok((pins.debian, p))
}

/// What `ensure` records beside an unpacked package: the version and sha256 it used.
const RECORD: &str = ".debian.json";

/// The unpacked binary of package `name` (fetching and unpacking it on first use), with
/// the Debian version it came from.
pub fn ensure(name: &str) -> Result<PathBuf> {
    ensure_recorded(name).map(|(bin, _)| bin)
}

fn ensure_recorded(name: &str) -> Result<(PathBuf, apt::Candidate)> {
    let (release, pkg) = load_package(name)?;
    let cache = paths::user_cache_dir();
    std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    // One process at a time uses the private apt folder (apt would refuse a second).
    let lock_path = cache.join("apt.lock");
    let lock = cuda_aot::fs::open_lock_file(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    let apt = apt::Apt::new(cache.join("apt"))?;
    apt.refresh_if_stale()?;
    let base = paths::work_dir().join("servers");
    let mut refreshed = false;
    loop {
        let pick = apt.candidate(&pkg.name, &pkg.upstream, &release.suites)?;
        let dir = base.join(format!("{}_{}", pkg.name, pick.version));
        let bin = dir.join(&pkg.binary);
        if read_record(&dir).is_some_and(|r| r == pick) && bin.is_file() {
            return Ok((bin, pick));
        }
        let deb = match fetch(&apt, &pkg, &pick) {
            Ok(deb) => deb,
            // Lists that lag the archive name a version it no longer has: refresh once.
            Err(e) if !refreshed => {
                eprintln!("servers: {e:#}; refreshing the lists");
                apt.update().context(e)?;
                refreshed = true;
                continue;
            }
            Err(e) => {
                return Err(crate::advice::fail(
                    format!("{} {}: {e:#}", pkg.name, pick.version),
                    "check the machine's apt sources (Debian 12) and its network, then run `cargo xtask servers` again",
                ));
            }
        };
        unpack(&pkg, &pick, &deb, &base, &dir)?;
        if !bin.is_file() {
            bail!(
                "{} {}: the package holds no {}",
                pkg.name,
                pick.version,
                pkg.binary
            );
        }
        return Ok((bin, pick));
    }
}

fn read_record(dir: &Path) -> Option<apt::Candidate> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(RECORD)).ok()?).ok()?;
    Some(apt::Candidate {
        version: v["version"].as_str()?.to_string(),
        suite: v["suite"].as_str()?.to_string(),
        sha256: v["sha256"].as_str()?.to_string(),
    })
}

/// The shared libraries of `bins` that `ldd` cannot find with `lib_path` as the library
/// path (folders joined with `:`).
pub fn missing_libraries(bins: &[&Path], lib_path: &std::ffi::OsStr) -> Result<Vec<String>> {
    let mut missing = Vec::new();
    for bin in bins {
        let out = Command::new("ldd")
            .arg(bin)
            .env("LD_LIBRARY_PATH", lib_path)
            .stdin(Stdio::null())
            .output()
            .context("running ldd (Debian's libc-bin)")?;
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines().filter(|l| l.contains("=> not found")) {
            let name = line.split_whitespace().next().unwrap_or(line).to_string();
            if !missing.contains(&name) {
                missing.push(name);
            }
        }
    }
    Ok(missing)
}

/// `dpkg -x` into a temporary sibling, the record written, then renamed into place.
fn unpack(pkg: &Package, pick: &apt::Candidate, deb: &Path, base: &Path, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(base).with_context(|| format!("creating {}", base.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".tmp.{}.", pkg.name))
        .tempdir_in(base)?;
    let out = Command::new("dpkg")
        .arg("-x")
        .arg(deb)
        .arg(tmp.path())
        .output()
        .context("running dpkg -x (Debian's dpkg must be installed)")?;
    if !out.status.success() {
        bail!(
            "dpkg -x {} failed: {}",
            deb.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let record = serde_json::json!({
        "package": pkg.name,
        "version": pick.version,
        "suite": pick.suite,
        "sha256": pick.sha256,
    });
    std::fs::write(tmp.path().join(RECORD), format!("{record}\n"))?;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(tmp.keep(), dir).with_context(|| format!("moving into {}", dir.display()))?;
    eprintln!(
        "servers: {} {} ({}, sha256 {}) unpacked into {}",
        pkg.name,
        pick.version,
        pick.suite,
        pick.sha256,
        paths::shown(dir)
    );
    Ok(())
}

/// The `.deb` of `pick` from the per-user cache (re-hashed), else downloaded by apt
/// (which checks it against the signed index) into the cache; its sha256 is checked
/// against the index's either way.
fn fetch(apt: &apt::Apt, pkg: &Package, pick: &apt::Candidate) -> Result<PathBuf> {
    let cache = paths::user_cache_dir().join("debs");
    std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    let dest = cache.join(format!("{}.deb", pick.sha256));
    if dest.exists() {
        let got = apt::sha256_file(&dest)?;
        if got == pick.sha256 {
            return Ok(dest);
        }
        eprintln!(
            "servers: {} has sha256 {got}, not {}: removed",
            dest.display(),
            pick.sha256
        );
        std::fs::remove_file(&dest)?;
    }
    let dl = tempfile::Builder::new()
        .prefix(".download.")
        .tempdir_in(&cache)?;
    let deb = apt.download(&pkg.name, &pick.version, dl.path())?;
    let got = apt::sha256_file(&deb)?;
    if got != pick.sha256 {
        bail!(
            "{} {}: downloaded .deb has sha256 {got}, the signed index says {}",
            pkg.name,
            pick.version,
            pick.sha256
        );
    }
    std::fs::rename(&deb, &dest)?;
    Ok(dest)
}

fn work_dir(given: Option<PathBuf>) -> Result<PathBuf> {
    let dir = match given {
        Some(d) => d,
        None => {
            let runs = paths::work_dir().join("servers/run");
            std::fs::create_dir_all(&runs)?;
            tempfile::Builder::new()
                .prefix("run-")
                .tempdir_in(&runs)?
                .keep()
        }
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(std::path::absolute(&dir)?)
}

/// A port that was free a moment ago (the servers take a fixed port in their config).
pub fn pick_port(port: u16) -> Result<u16> {
    if port != 0 {
        return Ok(port);
    }
    let l = TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(l.local_addr()?.port())
}

/// Waits until something accepts connections on `addr`.
#[cfg(feature = "net")] // bench-serve's
pub fn wait_listening(addr: std::net::SocketAddr, timeout: std::time::Duration) -> Result<()> {
    use std::time::{Duration, Instant};
    let t = Instant::now();
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if t.elapsed() > timeout {
            bail!("nothing listens on {addr} after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// nginx serving `root` read-only on 127.0.0.1:`port`: GET and HEAD only, no dot-files, no
/// symbolic links, `timestamp.json` revalidated on every use; logs, pid and temporary
/// files inside `work`.
pub fn nginx(root: &Path, port: u16, work: &Path, workers: Option<usize>) -> Result<Command> {
    let bin = ensure("nginx")?;
    let root = std::path::absolute(root)?;
    if !root.is_dir() {
        bail!("{} is not a folder", root.display());
    }
    let w = work.display();
    for d in ["tmp", "logs"] {
        std::fs::create_dir_all(work.join(d))?;
    }
    let workers = workers.map_or("auto".to_string(), |n| n.to_string());
    // As root, nginx's workers must be told to stay root, or they drop to `nobody` and
    // cannot read a private temporary folder.
    let user = if apt::running_as_root() {
        "user root;\n"
    } else {
        ""
    };
    let conf = format!(
        "daemon off;\nmaster_process on;\nworker_processes {workers};\n{user}pid {w}/nginx.pid;\n\
error_log {w}/logs/error.log warn;\nevents {{ worker_connections 8192; }}\n\
http {{\n  access_log {w}/logs/access.log;\n\
  client_body_temp_path {w}/tmp/body;\n  proxy_temp_path {w}/tmp/proxy;\n\
  fastcgi_temp_path {w}/tmp/fastcgi;\n  uwsgi_temp_path {w}/tmp/uwsgi;\n  scgi_temp_path {w}/tmp/scgi;\n\
  types {{ application/json json; }}\n  default_type application/octet-stream;\n\
  sendfile on;\n  tcp_nopush on;\n  keepalive_requests 100000;\n  client_max_body_size 0;\n\
  server_tokens off;\n\
  server {{\n    listen 127.0.0.1:{port};\n    root {root};\n    disable_symlinks on;\n\
    location ~ /\\. {{ return 404; }}\n\
    location = /timestamp.json {{ add_header Cache-Control no-cache; limit_except GET {{ deny all; }} }}\n\
    location / {{ limit_except GET {{ deny all; }} }}\n  }}\n}}\n",
        root = root.display()
    );
    let conf_path = work.join("nginx.conf");
    std::fs::write(&conf_path, conf)?;
    let mut cmd = Command::new(bin);
    cmd.arg("-p")
        .arg(work)
        .arg("-c")
        .arg(&conf_path)
        .arg("-e")
        .arg(work.join("logs/error.log"))
        .stdin(Stdio::null());
    Ok(cmd)
}

/// The distribution registry on 127.0.0.1:`port` storing into `storage`.
pub fn oci_registry(storage: &Path, port: u16, work: &Path) -> Result<Command> {
    let bin = ensure("docker-registry")?;
    std::fs::create_dir_all(storage)?;
    let storage = std::path::absolute(storage)?;
    let mut secret = [0u8; 16];
    getrandom::fill(&mut secret).map_err(|e| anyhow::anyhow!("random secret: {e}"))?;
    let conf = format!(
        "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: {}\n",
        storage.display(),
        hex::encode(secret)
    );
    let conf_path = work.join("registry.yml");
    std::fs::write(&conf_path, conf)?;
    let mut cmd = Command::new(bin);
    cmd.arg("serve").arg(&conf_path).stdin(Stdio::null());
    Ok(cmd)
}

/// Prints the `starting` line, then becomes the server.
fn exec_announced(cmd: Command, server: &str, port: u16, work: &Path) -> Result<()> {
    let line = serde_json::json!({
        "event": "starting",
        "server": server,
        "addr": format!("127.0.0.1:{port}"),
        "work": work.display().to_string(),
    });
    exec_with_line(cmd, server, &line)
}

/// Prints `line`, then becomes `cmd` (`what`, for the error).
fn exec_with_line(mut cmd: Command, what: &str, line: &serde_json::Value) -> Result<()> {
    use std::os::unix::process::CommandExt;
    println!("{line}");
    let err = cmd.exec();
    Err(err).with_context(|| format!("starting {what}"))
}
