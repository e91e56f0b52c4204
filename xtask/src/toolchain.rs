//! `cargo xtask toolchain`: the CUDA toolkit that compiles, and its identity. By default the
//! wheels pinned in `manifests/toolchain.toml` (sha256-checked on every use, kept in the
//! per-user cache, unpacked once into `.cuda-aot/toolkit/<key>/`); `--toolkit system`
//! explicitly takes `CUDA_HOME` or the `nvcc` on PATH instead, and says so in its identity.

use anyhow::{Context, Result, bail};
use cuda_aot::{Digest, DriverVersion, Kind, Target, Toolkit};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, UNIX_EPOCH};

use crate::build::{Advise, atomic, fail};
use crate::paths;

/// The file that marks a complete toolkit folder (written last, before the folder is renamed
/// into place) and memoises its identity.
const STAMP: &str = "cuda-aot-toolkit.json";
const STAMP_SCHEMA: &str = "cuda-aot/toolkit-stamp/v1";
/// `Toolkit::source` of the pinned wheels.
pub const SOURCE_PINNED: &str = "pinned-wheels";
/// `Toolkit::source` of a system toolkit.
pub const SOURCE_SYSTEM: &str = "system";
/// The files of a system toolkit that take part in a compile (a system `bin/` may hold
/// profilers and debuggers, or be `/usr/bin`): its identity is the digest of these.
const SYSTEM_TOOLS: &[&str] = &[
    "bin/nvcc",
    "bin/nvcc.profile",
    "bin/cudafe++",
    "bin/ptxas",
    "bin/fatbinary",
    "bin/nvlink",
    "bin/bin2c",
    "bin/crt",
    "nvvm/bin",
];
/// Environment variables through which nvcc would take flags or a host compiler that are
/// not on its command line; every nvcc this tool runs has them removed.
pub const NVCC_ENV_SCRUB: &[&str] = &["NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN"];

/// Which CUDA toolkit compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ToolkitChoice {
    /// The wheels pinned in manifests/toolchain.toml: hermetic and reproducible (default).
    #[default]
    Pinned,
    /// `$CUDA_HOME/bin/nvcc`, else the `nvcc` on PATH. Manifests record `source = "system"`.
    System,
}

/// Toolkit selection shared by every task that compiles (`toolchain`, `build`, `repro`,
/// `bench`).
#[derive(Debug, Clone, clap::Args)]
pub struct ToolkitArgs {
    /// Which toolkit compiles: `pinned` (the sha256-pinned wheels of
    /// manifests/toolchain.toml, bootstrapped on first use) or `system` (CUDA_HOME, else
    /// nvcc on PATH; its identity differs, so its outputs never share cache entries with
    /// pinned builds).
    #[arg(long, value_enum, default_value_t = ToolkitChoice::Pinned)]
    pub toolkit: ToolkitChoice,
    /// Where pinned toolkits are unpacked (one folder per pinned wheel set).
    #[arg(long, value_name = "DIR", env = "CUDA_AOT_TOOLKIT_DIR")]
    pub toolkit_dir: Option<PathBuf>,
}

impl ToolkitArgs {
    /// The options these arguments select.
    pub fn options(&self) -> ToolchainOptions {
        let mut o = ToolchainOptions::new(self.toolkit);
        if let Some(d) = &self.toolkit_dir {
            o.toolkit_dir = d.clone();
        }
        o
    }
}

/// Arguments of `cargo xtask toolchain`.
///
/// Fetches the five pinned NVIDIA wheels (nvcc, crt, nvvm, runtime headers, CCCL) with pip
/// into the per-user cache ($CUDA_AOT_CACHE_DIR, else ~/.cache/cuda-aot/wheels, keyed by
/// sha256), checks every sha256, and unpacks them into .cuda-aot/toolkit/<key>/. Reruns are
/// instant. Builds do this implicitly; run it to bootstrap ahead of time or to see the
/// toolkit identity that manifests will record.
#[derive(clap::Args)]
#[command(after_long_help = "\
The five pinned wheels (nvcc, crt, nvvm, runtime headers, CCCL; manifests/toolchain.toml) are
fetched with `python3 -m pip download --no-deps` into the per-user cache
($CUDA_AOT_CACHE_DIR, else ~/.cache/cuda-aot/wheels, one <sha256>.whl each), their sha256
checked on every use, and unpacked into .cuda-aot/toolkit/<key>/. Reruns are instant.
pip honours PIP_INDEX_URL and PIP_FIND_LINKS for mirrors and offline use.

The toolkit identity recorded in every manifest is nvcc's version plus a blake3 digest over
the toolkit's executables (bin/ and nvvm/bin/), and its source: pinned-wheels or system.")]
pub struct Args {
    #[command(flatten)]
    toolkit: ToolkitArgs,
}

impl Args {
    /// Runs the task: ensures the toolkit and prints what it is and where.
    pub fn run(self) -> Result<()> {
        let opts = self.toolkit.options();
        let t = std::time::Instant::now();
        let tk = ensure_with(&opts)?;
        if !tk.fresh {
            eprintln!(
                "toolchain: already in place, stamp and executables checked in {:.1} ms",
                t.elapsed().as_secs_f64() * 1000.0
            );
        }
        println!("toolkit  {}", tk.root.display());
        println!("nvcc     {} ({})", tk.identity.nvcc, tk.nvcc.display());
        println!("source   {}", tk.identity.source);
        println!("digest   {}", tk.identity.digest);
        println!("targets  {}", tk.real_targets.join(" "));
        println!("ptx      {}", tk.virtual_targets.join(" "));
        Ok(())
    }
}

/// Where a toolkit comes from and where it goes.
#[derive(Debug, Clone)]
pub struct ToolchainOptions {
    /// Pinned or system.
    pub choice: ToolkitChoice,
    /// The pin file (`manifests/toolchain.toml`).
    pub pin_file: PathBuf,
    /// Where pinned toolkits are unpacked (`.cuda-aot/toolkit`).
    pub toolkit_dir: PathBuf,
    /// The per-user wheel cache (`<user cache>/wheels`), files named `<sha256>.whl`.
    pub wheel_cache: PathBuf,
}

impl ToolchainOptions {
    /// The defaults for `choice`: the repository's pin file, `.cuda-aot/toolkit` and the
    /// per-user cache.
    pub fn new(choice: ToolkitChoice) -> Self {
        ToolchainOptions {
            choice,
            pin_file: paths::repo_root().join("manifests/toolchain.toml"),
            toolkit_dir: paths::work_dir().join("toolkit"),
            wheel_cache: paths::user_cache_dir().join("wheels"),
        }
    }
}

/// A toolkit ready to compile, and the identity manifests record for it.
#[derive(Debug, Clone)]
pub struct ToolkitInfo {
    /// The toolkit root (holds `bin/nvcc`, `nvvm/bin/cicc`, `include/`).
    pub root: PathBuf,
    /// `root/bin/nvcc`.
    pub nvcc: PathBuf,
    /// nvcc version, digest over the executables, and source (`pinned-wheels` / `system`).
    pub identity: Toolkit,
    /// Real targets nvcc accepts (`sm_80`, ...); `a` variants exist from sm_90 on.
    pub real_targets: Vec<String>,
    /// Virtual architectures nvcc accepts for PTX (`compute_80`, ...).
    pub virtual_targets: Vec<String>,
    /// Whether this call unpacked (or, for a system toolkit, hashed) it; false when its
    /// stamp was still valid.
    pub fresh: bool,
}

impl ToolkitInfo {
    /// Whether this nvcc can compile for `t` (`sm_90a` needs `sm_90` listed and SM >= 90).
    pub fn supports(&self, t: &Target) -> bool {
        let base = Target {
            arch_specific: false,
            ..*t
        }
        .to_string();
        let list = if t.virtual_arch {
            &self.virtual_targets
        } else {
            &self.real_targets
        };
        list.contains(&base) && (!t.arch_specific || t.number() >= 90)
    }

    /// The minimum driver version for a blob of `kind` built by this toolkit: cubin needs
    /// the toolkit's major.0, PTX its major.minor.
    pub fn driver_floor(&self, kind: Kind) -> Result<DriverVersion> {
        let mut parts = self.identity.nvcc.split('.');
        let mut num = || -> Result<u32> {
            parts.next().and_then(|p| p.parse().ok()).with_context(|| {
                format!(
                    "nvcc version `{}` is not MAJOR.MINOR.PATCH",
                    self.identity.nvcc
                )
            })
        };
        let (major, minor) = (num()?, num()?);
        Ok(match kind {
            Kind::Cubin => DriverVersion { major, minor: 0 },
            Kind::Ptx => DriverVersion { major, minor },
        })
    }
}

/// Ensures the default toolkit of `choice` (pinned: bootstrapping it on first use).
#[allow(dead_code, reason = "API for the release task")]
pub fn ensure(choice: ToolkitChoice) -> Result<ToolkitInfo> {
    ensure_with(&ToolchainOptions::new(choice))
}

/// Ensures the toolkit `opts` selects and returns its identity.
pub fn ensure_with(opts: &ToolchainOptions) -> Result<ToolkitInfo> {
    match opts.choice {
        ToolkitChoice::Pinned => ensure_pinned(opts),
        ToolkitChoice::System => ensure_system(opts),
    }
}

// ---------------------------------------------------------------------------------------
// The pin file

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PinFile {
    root: String,
    pip: PipSpec,
    wheel: Vec<WheelPin>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PipSpec {
    python: String,
    python_version: String,
    platforms: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WheelPin {
    name: String,
    version: String,
    sha256: String,
}

impl WheelPin {
    fn label(&self) -> String {
        format!("{} {}", self.name, self.version)
    }
    /// The file name prefix pip gives this wheel (`nvidia_cuda_nvcc-13.0.88-`).
    fn file_prefix(&self) -> String {
        format!("{}-{}-", self.name.replace('-', "_"), self.version)
    }
}

fn load_pins(path: &Path) -> Result<PinFile> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the toolkit pin file {}", path.display()))?;
    let pins: PinFile = toml::from_str(&text).advise(
        || format!("parsing {}", path.display()),
        || "fix manifests/toolchain.toml (docs/build.md describes it)".into(),
    )?;
    let bad = |what: String| -> Result<PinFile> {
        Err(fail(
            format!("{}: {what}", path.display()),
            "each [[wheel]] needs name, version and a 64-hex-digit sha256",
        ))
    };
    if pins.wheel.is_empty() {
        return bad("no [[wheel]] entries".into());
    }
    if !is_relative_plain(Path::new(&pins.root)) {
        return bad(format!(
            "root `{}` must be a relative path without `..`",
            pins.root
        ));
    }
    for w in &pins.wheel {
        if w.name.is_empty()
            || !w
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return bad(format!(
                "wheel name `{}` is not a lower-case distribution name",
                w.name
            ));
        }
        if w.version.is_empty() || !w.version.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return bad(format!(
                "wheel {}: version `{}` is not an exact release",
                w.name, w.version
            ));
        }
        if w.sha256.len() != 64
            || !w
                .sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return bad(format!(
                "wheel {}: sha256 `{}` is not 64 lower-case hex digits",
                w.name, w.sha256
            ));
        }
    }
    if !pins.wheel.iter().any(|w| w.name == "nvidia-cuda-nvcc") {
        return bad("no nvidia-cuda-nvcc wheel".into());
    }
    Ok(pins)
}

/// The folder name of a pinned wheel set: nvcc's wheel version plus a digest of the list.
fn toolkit_key(pins: &PinFile) -> String {
    let mut h = blake3::Hasher::new();
    h.update(b"cuda-aot toolkit key v1\n");
    h.update(pins.root.as_bytes());
    h.update(b"\n");
    for w in &pins.wheel {
        h.update(format!("{}=={} sha256:{}\n", w.name, w.version, w.sha256).as_bytes());
    }
    let nvcc = pins
        .wheel
        .iter()
        .find(|w| w.name == "nvidia-cuda-nvcc")
        .map_or("cuda", |w| w.version.as_str());
    format!("{nvcc}-{}", &h.finalize().to_hex()[..16])
}

// ---------------------------------------------------------------------------------------
// The stamp: a complete toolkit folder and its memoised identity

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stamp {
    schema: String,
    source: String,
    /// The pinned wheels it was unpacked from (empty for a system toolkit).
    wheels: Vec<WheelPin>,
    /// The toolkit root, relative to the stamp's folder (pinned) or absolute (system).
    root: String,
    nvcc_version: String,
    digest: Digest,
    /// Size and mtime of every hashed file: when all still match, `digest` is reused.
    files: Vec<FileStat>,
    real_targets: Vec<String>,
    virtual_targets: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileStat {
    path: String,
    size: u64,
    mtime_ns: u64,
}

fn read_stamp(path: &Path) -> Result<Option<Stamp>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let stamp: Stamp = cuda_aot::json::parse(&bytes, 4 << 20, &path.display().to_string()).advise(
        || format!("reading the toolkit stamp {}", path.display()),
        || {
            format!(
                "delete {} and rerun `cargo xtask toolchain`",
                path.parent().unwrap_or(path).display()
            )
        },
    )?;
    if stamp.schema != STAMP_SCHEMA {
        bail!(
            "{}: unknown stamp schema `{}`",
            path.display(),
            stamp.schema
        );
    }
    Ok(Some(stamp))
}

impl Stamp {
    fn info(&self, root: PathBuf) -> ToolkitInfo {
        ToolkitInfo {
            nvcc: root.join("bin/nvcc"),
            root,
            identity: Toolkit {
                nvcc: self.nvcc_version.clone(),
                digest: self.digest,
                source: self.source.clone(),
            },
            real_targets: self.real_targets.clone(),
            virtual_targets: self.virtual_targets.clone(),
            fresh: false,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Pinned toolkit

fn ensure_pinned(opts: &ToolchainOptions) -> Result<ToolkitInfo> {
    let pins = load_pins(&opts.pin_file)?;
    let key = toolkit_key(&pins);
    let dir = opts.toolkit_dir.join(&key);
    let stamp_path = dir.join(STAMP);
    if let Some(stamp) = read_stamp(&stamp_path)? {
        return check_pinned(&pins, &dir, stamp);
    }
    if dir.exists() {
        return Err(fail(
            format!(
                "{} exists but holds no {STAMP}: an interrupted or foreign unpack",
                dir.display()
            ),
            format!("delete {} and rerun `cargo xtask toolchain`", dir.display()),
        ));
    }
    bootstrap(opts, &pins, &dir)
}

/// A stamped toolkit: the digest is reused when every executable's size and mtime still
/// match; otherwise it is recomputed and must equal the digest taken at unpack time.
fn check_pinned(pins: &PinFile, dir: &Path, stamp: Stamp) -> Result<ToolkitInfo> {
    let root = dir.join(&stamp.root);
    if stamp.wheels != pins.wheel || stamp.source != SOURCE_PINNED {
        return Err(fail(
            format!(
                "{} was unpacked from other wheels than manifests/toolchain.toml pins",
                dir.display()
            ),
            format!("delete {} and rerun `cargo xtask toolchain`", dir.display()),
        ));
    }
    let files = pinned_tool_files(&root)?;
    if stats_of(&root, &files)? == stamp.files {
        return Ok(stamp.info(root));
    }
    let (digest, stats) = digest_files(&root, &files)?;
    if digest != stamp.digest {
        return Err(fail(
            format!(
                "the pinned toolkit in {} was modified after it was unpacked: its executables \
                 hash to {digest}, unpacked as {}",
                dir.display(),
                stamp.digest
            ),
            format!(
                "delete {} and rerun `cargo xtask toolchain` to unpack the pinned wheels again",
                dir.display()
            ),
        ));
    }
    let mut fresh = stamp;
    fresh.files = stats;
    atomic::write(&dir.join(STAMP), &cuda_aot::json::to_vec(&fresh))?;
    Ok(fresh.info(root))
}

/// Fetches (or finds) every pinned wheel, checks each sha256, unpacks all of them into a
/// temporary sibling of `dir`, records the identity, and renames the folder into place.
fn bootstrap(opts: &ToolchainOptions, pins: &PinFile, dir: &Path) -> Result<ToolkitInfo> {
    let t0 = Instant::now();
    let wheels = fetch_wheels(opts, pins)?;
    std::fs::create_dir_all(&opts.toolkit_dir)
        .with_context(|| format!("creating {}", opts.toolkit_dir.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".unpack-")
        .tempdir_in(&opts.toolkit_dir)
        .with_context(|| {
            format!(
                "creating a temporary folder in {}",
                opts.toolkit_dir.display()
            )
        })?;
    for (pin, bytes) in &wheels {
        unpack_wheel(pin, bytes, tmp.path())?;
    }
    drop(wheels);
    let root = tmp.path().join(&pins.root);
    let nvcc = root.join("bin/nvcc");
    if !nvcc.is_file() {
        bail!(
            "the pinned wheels hold no {}/bin/nvcc; check `root` in {}",
            pins.root,
            opts.pin_file.display()
        );
    }
    let files = pinned_tool_files(&root)?;
    let (digest, stats) = digest_files(&root, &files)?;
    let probe = probe_nvcc(&nvcc)?;
    let stamp = Stamp {
        schema: STAMP_SCHEMA.into(),
        source: SOURCE_PINNED.into(),
        wheels: pins.wheel.clone(),
        root: pins.root.clone(),
        nvcc_version: probe.version,
        digest,
        files: stats,
        real_targets: probe.real,
        virtual_targets: probe.virtual_,
    };
    atomic::write(&tmp.path().join(STAMP), &cuda_aot::json::to_vec(&stamp))?;
    let staged = tmp.keep();
    if let Err(e) = std::fs::rename(&staged, dir) {
        let _ = std::fs::remove_dir_all(&staged);
        // Another process may have finished the same unpack first: use its folder.
        if let Ok(Some(theirs)) = read_stamp(&dir.join(STAMP)) {
            return check_pinned(pins, dir, theirs);
        }
        return Err(e).with_context(|| format!("moving the unpacked toolkit to {}", dir.display()));
    }
    eprintln!(
        "toolchain: unpacked {} wheels into {} in {:.1} s (nvcc {}, {})",
        pins.wheel.len(),
        dir.display(),
        t0.elapsed().as_secs_f64(),
        stamp.nvcc_version,
        stamp.digest
    );
    Ok(ToolkitInfo {
        fresh: true,
        ..stamp.info(dir.join(&pins.root))
    })
}

/// Every pinned wheel's bytes, each checked against its sha256: cached wheels first (a
/// tampered cache fails before any download), then one pip run for the missing ones.
fn fetch_wheels(opts: &ToolchainOptions, pins: &PinFile) -> Result<Vec<(WheelPin, Vec<u8>)>> {
    let mut have = Vec::new();
    let mut missing = Vec::new();
    for pin in &pins.wheel {
        let path = opts.wheel_cache.join(format!("{}.whl", pin.sha256));
        match std::fs::read(&path) {
            Ok(bytes) => {
                check_sha256(pin, &bytes, &path, true)?;
                eprintln!(
                    "toolchain: {} (sha256 ok) from {}",
                    pin.label(),
                    path.display()
                );
                have.push((pin.clone(), bytes));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(pin.clone()),
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("reading the cached wheel {}", path.display()));
            }
        }
    }
    if !missing.is_empty() {
        have.extend(download(opts, pins, &missing)?);
    }
    // Keep the pin file's order: it is the unpack order.
    have.sort_by_key(|(p, _)| pins.wheel.iter().position(|w| w == p));
    Ok(have)
}

fn check_sha256(pin: &WheelPin, bytes: &[u8], path: &Path, cached: bool) -> Result<()> {
    let actual = hex::encode(sha2::Sha256::digest(bytes));
    if actual == pin.sha256 {
        return Ok(());
    }
    let (what, fix) = if cached {
        (
            "cached wheel",
            format!(
                "delete {} (corrupted or tampered with); the next run downloads it again",
                path.display()
            ),
        )
    } else {
        (
            "downloaded wheel",
            "check manifests/toolchain.toml and the package index pip used (PIP_INDEX_URL, \
             PIP_FIND_LINKS): it must serve the pinned file byte for byte"
                .to_string(),
        )
    };
    Err(fail(
        format!(
            "{what} {} fails its sha256 check: {}\n  expected sha256 {}\n  actual   sha256 {actual}",
            pin.label(),
            path.display(),
            pin.sha256
        ),
        fix,
    ))
}

/// Downloads `missing` with one pip run into a temporary folder of the cache, checks each
/// sha256 and moves each into the cache as `<sha256>.whl`.
fn download(
    opts: &ToolchainOptions,
    pins: &PinFile,
    missing: &[WheelPin],
) -> Result<Vec<(WheelPin, Vec<u8>)>> {
    std::fs::create_dir_all(&opts.wheel_cache)
        .with_context(|| format!("creating the wheel cache {}", opts.wheel_cache.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".download-")
        .tempdir_in(&opts.wheel_cache)
        .with_context(|| {
            format!(
                "creating a temporary folder in {}",
                opts.wheel_cache.display()
            )
        })?;
    let mut cmd = Command::new(&pins.pip.python);
    cmd.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"]);
    for p in &pins.pip.platforms {
        cmd.args(["--platform", p]);
    }
    cmd.args(["--python-version", &pins.pip.python_version, "-d"])
        .arg(tmp.path())
        .args(missing.iter().map(|w| format!("{}=={}", w.name, w.version)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()));
    let names: Vec<String> = missing.iter().map(WheelPin::label).collect();
    eprintln!("toolchain: downloading {} with pip", names.join(", "));
    let shown = show_command(&cmd);
    let status = cmd.status().advise(
        || format!("running {shown}"),
        || {
            format!(
                "install Python 3 with pip (`{}` must run), or put the wheels into {} as <sha256>.whl",
                pins.pip.python,
                opts.wheel_cache.display()
            )
        },
    )?;
    if !status.success() {
        return Err(fail(
            format!(
                "pip failed ({status}) downloading {}\ncommand: {shown}",
                names.join(", ")
            ),
            format!(
                "check network access to PyPI, or point pip at a mirror (PIP_INDEX_URL) or a folder \
                 of wheels (PIP_FIND_LINKS), or put the wheels into {} as <sha256>.whl",
                opts.wheel_cache.display()
            ),
        ));
    }
    let listing: Vec<PathBuf> = std::fs::read_dir(tmp.path())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    let mut out = Vec::new();
    for pin in missing {
        let prefix = pin.file_prefix();
        let file = listing
            .iter()
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
            })
            .with_context(|| {
                format!(
                    "pip ran but left no {prefix}*.whl in {}",
                    tmp.path().display()
                )
            })?;
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        check_sha256(pin, &bytes, file, false)?;
        let dest = opts.wheel_cache.join(format!("{}.whl", pin.sha256));
        std::fs::rename(file, &dest)
            .with_context(|| format!("moving the wheel into {}", dest.display()))?;
        eprintln!(
            "toolchain: {} (sha256 ok) cached as {}",
            pin.label(),
            dest.display()
        );
        out.push((pin.clone(), bytes));
    }
    Ok(out)
}

/// Extracts a wheel (a zip) into `dest`; files whose zip mode has an exec bit become 0755.
fn unpack_wheel(pin: &WheelPin, bytes: &[u8], dest: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let ctx = || format!("unpacking wheel {}", pin.label());
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).with_context(ctx)?;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).with_context(ctx)?;
        let rel = entry
            .enclosed_name()
            .with_context(|| format!("{}: entry `{}` escapes the folder", ctx(), entry.name()))?;
        let path = dest.join(rel);
        if entry.is_dir() {
            std::fs::create_dir_all(&path)?;
            continue;
        }
        let mode = entry.unix_mode().unwrap_or(0o644);
        if mode & 0o170000 == 0o120000 {
            bail!("{}: entry `{}` is a symbolic link", ctx(), entry.name());
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut f = std::fs::File::create(&path)
            .with_context(|| format!("{}: creating {}", ctx(), path.display()))?;
        std::io::copy(&mut entry, &mut f)
            .with_context(|| format!("{}: writing {}", ctx(), path.display()))?;
        let perm = if mode & 0o111 != 0 { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(perm))?;
    }
    Ok(())
}

/// Every file under `bin/` and `nvvm/bin/` of a pinned toolkit, by relative path.
fn pinned_tool_files(root: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for sub in ["bin", "nvvm/bin"] {
        collect_files(root, sub, &mut out)?;
    }
    out.sort();
    Ok(out)
}

fn collect_files(root: &Path, sub: &str, out: &mut Vec<String>) -> Result<()> {
    let base = root.join(sub);
    if !base.exists() {
        return Ok(());
    }
    for e in walkdir::WalkDir::new(&base).follow_links(false) {
        let e = e.with_context(|| format!("listing {}", base.display()))?;
        if e.file_type().is_dir() {
            continue;
        }
        let rel = e.path().strip_prefix(root).expect("walk stays under root");
        out.push(rel.to_str().context("non-UTF-8 toolkit path")?.to_string());
    }
    Ok(())
}

fn stats_of(root: &Path, files: &[String]) -> Result<Vec<FileStat>> {
    files
        .iter()
        .map(|rel| {
            let m = std::fs::symlink_metadata(root.join(rel))
                .with_context(|| format!("reading {}", root.join(rel).display()))?;
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as u64);
            Ok(FileStat {
                path: rel.clone(),
                size: m.len(),
                mtime_ns: mtime,
            })
        })
        .collect()
}

/// blake3 over the files in sorted relative-path order: each path, then its length and
/// bytes (a symbolic link contributes its target instead).
fn digest_files(root: &Path, files: &[String]) -> Result<(Digest, Vec<FileStat>)> {
    let stats = stats_of(root, files)?;
    let mut h = blake3::Hasher::new();
    h.update(b"cuda-aot toolkit digest v1\n");
    for rel in files {
        let path = root.join(rel);
        h.update(rel.as_bytes());
        h.update(&[0]);
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path)?;
            h.update(b"link:");
            h.update(target.as_os_str().as_encoded_bytes());
        } else {
            h.update(&meta.len().to_le_bytes());
            let f = std::fs::File::open(&path)
                .with_context(|| format!("hashing {}", path.display()))?;
            h.update_reader(f)
                .with_context(|| format!("hashing {}", path.display()))?;
        }
        h.update(&[0]);
    }
    Ok((Digest(*h.finalize().as_bytes()), stats))
}

struct Probe {
    version: String,
    real: Vec<String>,
    virtual_: Vec<String>,
}

/// Runs `nvcc --version`, `--list-gpu-code` and `--list-gpu-arch` (once per toolkit: the
/// answers are memoised in the stamp, so builds spawn no nvcc for them).
fn probe_nvcc(nvcc: &Path) -> Result<Probe> {
    let run = |arg: &str| -> Result<String> {
        let mut cmd = Command::new(nvcc);
        cmd.arg(arg).env("LC_ALL", "C").stdin(Stdio::null());
        for v in NVCC_ENV_SCRUB {
            cmd.env_remove(v);
        }
        let out = cmd
            .output()
            .with_context(|| format!("running {} {arg}", nvcc.display()))?;
        if !out.status.success() {
            bail!(
                "{} {arg} failed ({}): {}",
                nvcc.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let version_text = run("--version")?;
    let version = parse_nvcc_version(&version_text).with_context(|| {
        format!("no `release X.Y, VX.Y.Z` line in `nvcc --version`:\n{version_text}")
    })?;
    let list = |text: String, prefix: &str| -> Vec<String> {
        text.split_whitespace()
            .filter(|t| t.starts_with(prefix) && t.parse::<Target>().is_ok())
            .map(str::to_string)
            .collect()
    };
    Ok(Probe {
        version,
        real: list(run("--list-gpu-code")?, "sm_"),
        virtual_: list(run("--list-gpu-arch")?, "compute_"),
    })
}

/// `13.0.88` from nvcc's `Cuda compilation tools, release 13.0, V13.0.88`.
fn parse_nvcc_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.contains("release"))?;
    let v = line.rsplit(", V").next()?.trim();
    (v.split('.').count() >= 3 && v.split('.').all(|p| p.parse::<u32>().is_ok()))
        .then(|| v.to_string())
}

// ---------------------------------------------------------------------------------------
// System toolkit

fn ensure_system(opts: &ToolchainOptions) -> Result<ToolkitInfo> {
    let root = find_system_root()?;
    let files: Vec<String> = {
        let mut v = Vec::new();
        for t in SYSTEM_TOOLS {
            let p = root.join(t);
            if p.is_dir() {
                collect_files(&root, t, &mut v)?;
            } else if p.exists() {
                v.push((*t).to_string());
            }
        }
        v.sort();
        v
    };
    let memo_name = format!(
        "system-{}.json",
        &blake3::hash(root.as_os_str().as_encoded_bytes()).to_hex()[..16]
    );
    let memo_path = opts.toolkit_dir.join(memo_name);
    let stats = stats_of(&root, &files)?;
    match read_stamp(&memo_path) {
        Ok(Some(stamp)) if stamp.files == stats && stamp.source == SOURCE_SYSTEM => {
            return Ok(stamp.info(root));
        }
        _ => {}
    }
    let (digest, stats) = digest_files(&root, &files)?;
    let probe = probe_nvcc(&root.join("bin/nvcc"))?;
    let stamp = Stamp {
        schema: STAMP_SCHEMA.into(),
        source: SOURCE_SYSTEM.into(),
        wheels: Vec::new(),
        root: root.display().to_string(),
        nvcc_version: probe.version,
        digest,
        files: stats,
        real_targets: probe.real,
        virtual_targets: probe.virtual_,
    };
    std::fs::create_dir_all(&opts.toolkit_dir)
        .with_context(|| format!("creating {}", opts.toolkit_dir.display()))?;
    atomic::write(&memo_path, &cuda_aot::json::to_vec(&stamp))?;
    eprintln!(
        "toolchain: system toolkit {} (nvcc {}, {})",
        root.display(),
        stamp.nvcc_version,
        stamp.digest
    );
    Ok(ToolkitInfo {
        fresh: true,
        ..stamp.info(root)
    })
}

/// `$CUDA_HOME`, else the folder above the `bin/` holding the `nvcc` found on PATH.
fn find_system_root() -> Result<PathBuf> {
    if let Some(home) = std::env::var_os("CUDA_HOME").filter(|h| !h.is_empty()) {
        let root = PathBuf::from(home);
        if !root.join("bin/nvcc").is_file() {
            return Err(fail(
                format!("CUDA_HOME={} holds no bin/nvcc", root.display()),
                "point CUDA_HOME at a CUDA toolkit (the folder holding bin/nvcc), or build with \
                 the pinned toolkit (--toolkit pinned, the default)",
            ));
        }
        return Ok(root);
    }
    let nvcc = which("nvcc").advise(
        || "--toolkit system: CUDA_HOME is not set".into(),
        || {
            "set CUDA_HOME to a CUDA toolkit or put its bin/ on PATH, or build with the pinned \
             toolkit (--toolkit pinned, the default)"
                .into()
        },
    )?;
    let real = nvcc.canonicalize().unwrap_or(nvcc.clone());
    real.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .with_context(|| format!("{} is not inside a toolkit's bin/", real.display()))
}

/// The first executable named `name` on PATH (or `name` itself when it holds a `/`).
pub fn which(name: &str) -> Result<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return if p.is_file() {
            Ok(p)
        } else {
            bail!("{name} does not exist")
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("`{name}` is not on PATH"))
}

/// A relative path made only of normal components (no `..`, no root).
pub fn is_relative_plain(p: &Path) -> bool {
    !p.as_os_str().is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// A command line as a shell would take it (for error messages).
pub fn show_command(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./=+:,@%".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvcc_version_line_parses() {
        let text = "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n\
                    Built on Wed_Aug_20_01:58:59_PM_PDT_2025\n\
                    Cuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n";
        assert_eq!(parse_nvcc_version(text).as_deref(), Some("13.0.88"));
        assert_eq!(parse_nvcc_version("garbage"), None);
    }

    #[test]
    fn repository_pin_file_is_valid_and_keyed() {
        let pins = load_pins(&paths::repo_root().join("manifests/toolchain.toml")).unwrap();
        assert_eq!(pins.wheel.len(), 5);
        let key = toolkit_key(&pins);
        assert!(key.starts_with("13.0.88-"), "{key}");
        assert_eq!(key, toolkit_key(&pins));
    }

    #[test]
    fn a_variants_need_sm_90_or_later() {
        let tk = ToolkitInfo {
            root: PathBuf::new(),
            nvcc: PathBuf::new(),
            identity: Toolkit {
                nvcc: "13.0.88".into(),
                digest: Digest::of(b""),
                source: SOURCE_PINNED.into(),
            },
            real_targets: vec!["sm_80".into(), "sm_89".into(), "sm_90".into()],
            virtual_targets: vec!["compute_90".into()],
            fresh: false,
        };
        let ok = |s: &str| tk.supports(&s.parse().unwrap());
        assert!(
            ok("sm_80") && ok("sm_90") && ok("sm_90a") && ok("compute_90") && ok("compute_90a")
        );
        assert!(!ok("sm_89a") && !ok("sm_91") && !ok("compute_80") && !ok("sm_100"));
        assert_eq!(tk.driver_floor(Kind::Cubin).unwrap().to_string(), "13.0");
    }

    #[test]
    fn shell_quoting_is_copy_pasteable() {
        assert_eq!(shell_quote("-DCUDA_AOT_BLOCK=256"), "-DCUDA_AOT_BLOCK=256");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
