//! `cargo xtask servers`: real third-party servers for the network tests and benchmarks,
//! without root — nginx (static hosting) and the CNCF distribution registry (an OCI
//! registry) as pinned Debian packages: `apt-get download` by exact version into the
//! per-user cache, sha256-checked on every use, `dpkg -x` into `.cuda-aot/servers/`, run
//! on a loopback port with every path they write inside a work folder.

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use sha2::Digest as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::advice::Fix;
use crate::paths;

/// Fetch (pinned, sha256-checked) and unpack nginx and the OCI registry, or run one of
/// them in the foreground.
///
/// Without a subcommand: makes sure both packages of manifests/servers.toml are unpacked
/// under .cuda-aot/servers/ and prints their binaries. `nginx` serves a registry folder
/// read-only (a plain static file server: no cuda-aot code on the server side); `oci`
/// runs an OCI distribution registry with its storage in a folder. Both replace this
/// process (exec), print one JSON line first, and stop on SIGTERM.
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
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        match self.run {
            None => {
                for name in ["nginx", "docker-registry"] {
                    let bin = ensure(name)?;
                    println!("{name:<16} {}", bin.display());
                }
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
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PinFile {
    package: Vec<Package>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Package {
    name: String,
    binary: String,
    versions: Vec<Pin>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Pin {
    version: String,
    sha256: String,
}

fn pin_file() -> PathBuf {
    paths::repo_root().join("manifests/servers.toml")
}

fn load_package(name: &str) -> Result<Package> {
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
    if !plain(&p.name)
        || p.versions.is_empty()
        || p.versions.iter().any(|v| {
            !plain(&v.version)
                || v.sha256.len() != 64
                || !v.sha256.bytes().all(|b| b.is_ascii_hexdigit())
        })
        || !paths::is_relative_plain(Path::new(&p.binary))
    {
        bail!(
            "{}: package {name} needs a plain name, a relative binary path and versions with a 64-hex-digit sha256",
            path.display()
        );
    }
    Ok(p)
}

/// The unpacked binary of package `name` (fetching and unpacking it on first use).
pub fn ensure(name: &str) -> Result<PathBuf> {
    let pkg = load_package(name)?;
    let base = paths::work_dir().join("servers");
    // Already unpacked from a pin that is still listed.
    for v in &pkg.versions {
        let dir = base.join(format!("{}_{}", pkg.name, v.version));
        let bin = dir.join(&pkg.binary);
        if std::fs::read_to_string(dir.join(".sha256")).is_ok_and(|s| s.trim() == v.sha256)
            && bin.is_file()
        {
            return Ok(bin);
        }
    }
    let (pin, deb) = fetch(&pkg)?;
    let dir = base.join(format!("{}_{}", pkg.name, pin.version));
    let tmp = base.join(format!(".tmp.{}.{}", std::process::id(), pkg.name));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let out = Command::new("dpkg")
        .arg("-x")
        .arg(&deb)
        .arg(&tmp)
        .output()
        .context("running dpkg -x (Debian's dpkg must be installed)")?;
    if !out.status.success() {
        bail!(
            "dpkg -x {} failed: {}",
            deb.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::write(tmp.join(".sha256"), &pin.sha256)?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir).with_context(|| format!("moving into {}", dir.display()))?;
    let bin = dir.join(&pkg.binary);
    if !bin.is_file() {
        bail!(
            "{} {}: the package holds no {}",
            pkg.name,
            pin.version,
            pkg.binary
        );
    }
    Ok(bin)
}

/// The .deb of the first pin found in the per-user cache (hash-checked), else downloaded
/// with apt-get into the cache.
fn fetch(pkg: &Package) -> Result<(Pin, PathBuf)> {
    let cache = paths::user_cache_dir().join("debs");
    std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    for v in &pkg.versions {
        let p = cache.join(format!("{}.deb", v.sha256));
        if p.exists() {
            let got = sha256_file(&p)?;
            if got == v.sha256 {
                return Ok((v.clone(), p));
            }
            eprintln!(
                "servers: {} has sha256 {got}, not {}: removed",
                p.display(),
                v.sha256
            );
            std::fs::remove_file(&p)?;
        }
    }
    let mut tried = Vec::new();
    for v in &pkg.versions {
        let dl = tempfile::Builder::new()
            .prefix(".download.")
            .tempdir_in(&cache)?;
        let spec = format!("{}={}", pkg.name, v.version);
        eprintln!("servers: apt-get download {spec}");
        let out = Command::new("apt-get")
            .args(["download", "-q", &spec])
            .current_dir(dl.path())
            .output()
            .context("running apt-get (the servers are Debian packages)")?;
        if !out.status.success() {
            tried.push(format!(
                "{spec}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            continue;
        }
        let deb = std::fs::read_dir(dl.path())?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "deb"))
            .with_context(|| format!("apt-get download {spec} wrote no .deb"))?;
        let got = sha256_file(&deb)?;
        if got != v.sha256 {
            bail!(
                "{spec}: downloaded .deb has sha256 {got}, manifests/servers.toml pins {}",
                v.sha256
            );
        }
        let dest = cache.join(format!("{}.deb", v.sha256));
        std::fs::rename(&deb, &dest)?;
        return Ok((v.clone(), dest));
    }
    Err(anyhow::Error::new(Fix(
        "run apt-get update (Debian 12 lists) and try again; if the archive has moved past every pin, add the new version and its sha256 to manifests/servers.toml".into(),
    )))
    .context(format!(
        "no pinned version of {} could be downloaded:\n  {}",
        pkg.name,
        tried.join("\n  ")
    ))
}

fn sha256_file(p: &Path) -> Result<String> {
    let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
    Ok(hex::encode(sha2::Sha256::digest(&bytes)))
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
pub fn wait_listening(addr: SocketAddr, timeout: Duration) -> Result<()> {
    let t = Instant::now();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if t.elapsed() > timeout {
            bail!("nothing listens on {addr} after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Whether this process runs as root (then nginx's workers must be told to stay root, or
/// they drop to `nobody` and cannot read a private temporary folder).
fn running_as_root(work: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(work).is_ok_and(|m| m.uid() == 0)
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
    let user = if running_as_root(work) {
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

/// Prints the `listening` line, then becomes the server.
fn exec_announced(mut cmd: Command, server: &str, port: u16, work: &Path) -> Result<()> {
    use std::os::unix::process::CommandExt;
    println!(
        "{}",
        serde_json::json!({
            "event": "starting",
            "server": server,
            "addr": format!("127.0.0.1:{port}"),
            "work": work.display().to_string(),
        })
    );
    let err = cmd.exec();
    Err(err).with_context(|| format!("starting {server}"))
}
