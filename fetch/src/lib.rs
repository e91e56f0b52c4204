//! `cuda-aot-build`: what a prover crate's `build.rs` calls so that its users get the
//! kernels its maintainers signed, without a CUDA toolkit and without compiling any CUDA.
//!
//! It reads the project's `cuda-aot.lock` (written by `cargo xtask lock`), fetches the
//! release the lock pins through the verified pipeline `sync` uses into a per-user cache
//! (so a second crate or a rebuild fetches nothing, and offline a warm cache is enough),
//! checks it against the lock (a removed module, another digest or an older index is
//! refused with the difference), and copies the verified bundle into `OUT_DIR`.
//! `CUDA_AOT_BUNDLE_DIR` points the build at a vendored folder instead
//! (`cargo xtask vendor --to DIR`).
//!
//! It writes the bundle twice: as one file (`OUT_DIR/cuda-aot.bundle`, holding only the
//! module binaries the lock pins) that the program embeds with `cuda_aot::include_bundle!()`
//! and opens with `Runtime::open_embedded`, and as a registry folder for `Runtime::open`.
//!
//! The whole `build.rs` of a prover crate:
//!
//! ```no_run
//! cuda_aot_build::Fetch::from_env("kernels-root.json").run_for_build();
//! ```
//!
//! and its program:
//!
//! ```ignore
//! static BUNDLE: &[u8] = cuda_aot::include_bundle!();
//! const TRUST_ROOT: &[u8] = include_bytes!("../kernels-root.json");
//! let rt = cuda_aot::Runtime::open_embedded(BUNDLE, TRUST_ROOT, cuda_aot::Policy::production())?;
//! ```

use std::path::{Path, PathBuf};

use cuda_aot::source::layout;
use cuda_aot_registry::lock::{LOCK_FILE, Lock};

/// Where the bundle is written below `OUT_DIR` as a registry folder (`Runtime::open`).
pub const BUNDLE_DIR: &str = "cuda-aot-bundle";
/// Where the bundle is written below `OUT_DIR` as one file, for `cuda_aot::include_bundle!`
/// and `Runtime::open_embedded`.
pub use cuda_aot::bundle::FILE_NAME as BUNDLE_FILE;

/// Why a fetch failed: what, and how to fix it.
#[derive(Debug, thiserror::Error)]
#[error("{message}\nFix: {fix}")]
pub struct FetchError {
    /// What went wrong, naming the lock entry, file or URL.
    pub message: String,
    /// What to do.
    pub fix: String,
}

fn err(message: impl Into<String>, fix: impl Into<String>) -> FetchError {
    FetchError {
        message: message.into(),
        fix: fix.into(),
    }
}

/// What a fetch wrote.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The verified bundle: a registry folder (`Runtime::open` reads it).
    pub bundle: PathBuf,
    /// The same release as one file of the locked binaries (`include_bundle!`).
    pub bundle_file: PathBuf,
    /// Its size in bytes.
    pub bundle_bytes: u64,
    /// The index version.
    pub index: u64,
    /// The module binaries the lock pins.
    pub binaries: usize,
    /// Whether it came from the per-user cache without reaching the registry.
    pub offline: bool,
}

/// A release the lock pins, verified and checked against the lock.
struct Release {
    /// The registry folder holding it (the per-user cache's, or the vendored one).
    dir: PathBuf,
    /// The lock.
    lock: Lock,
    /// The lock of what the folder holds (equal to `lock`'s pins).
    served: Lock,
    /// The trust root file's bytes.
    trust: Vec<u8>,
    /// Whether the registry was not reached.
    offline: bool,
}

/// One fetch: the lock, the trust root, where the bundle goes and where it is cached.
#[derive(Debug, Clone)]
pub struct Fetch {
    /// The lock file.
    pub lock: PathBuf,
    /// The trust root file the lock was made under.
    pub trust: PathBuf,
    /// The folder the bundle is written into (`OUT_DIR`).
    pub out: PathBuf,
    /// The per-user cache (`$CUDA_AOT_CACHE_DIR`, else `~/.cache/cuda-aot`).
    pub cache: PathBuf,
    /// A vendored registry folder to read instead of the registry (`CUDA_AOT_BUNDLE_DIR`).
    pub vendored: Option<PathBuf>,
}

impl Fetch {
    /// The fetch a build script makes: the lock beside `Cargo.toml`, the trust root
    /// `trust` relative to it, `OUT_DIR`, the per-user cache and `CUDA_AOT_BUNDLE_DIR`.
    /// Tells cargo to run the script again when the lock, the trust root or the variable
    /// change.
    pub fn from_env(trust: impl AsRef<Path>) -> Fetch {
        let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
        let lock = dir.join(LOCK_FILE);
        let trust = dir.join(trust);
        for f in [&lock, &trust] {
            println!("cargo:rerun-if-changed={}", f.display());
        }
        for var in ["CUDA_AOT_BUNDLE_DIR", "CUDA_AOT_CACHE_DIR"] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        Fetch {
            lock,
            trust,
            out: PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()),
            cache: cuda_aot_registry::defaults::user_cache_dir(),
            vendored: std::env::var_os("CUDA_AOT_BUNDLE_DIR").map(PathBuf::from),
        }
    }

    /// What a build script does: [`Fetch::run`], and on failure the build fails with the
    /// error and its `Fix:`. Only where there is nothing to fetch from by design (docs.rs,
    /// `DOCS_RS` set) does it warn and leave an empty bundle ([`Fetch::run_or_warn`]), so
    /// the crate's Rust code still compiles and documents.
    pub fn run_for_build(&self) -> Option<Fetched> {
        if std::env::var_os("DOCS_RS").is_some() {
            return self.run_or_warn();
        }
        match self.run() {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("cuda-aot: {e}");
                std::process::exit(1);
            }
        }
    }

    /// [`Fetch::run`]; on failure, a cargo warning saying why and how to fix it, and an
    /// empty bundle folder, so the crate's Rust code still compiles (as on docs.rs, with no
    /// network): the runtime then says the bundle is missing.
    pub fn run_or_warn(&self) -> Option<Fetched> {
        match self.run() {
            Ok(f) => Some(f),
            Err(e) => {
                for line in e.to_string().lines() {
                    println!("cargo:warning=cuda-aot: {line}");
                }
                // What include_bundle! embeds must exist: empty, which open_embedded
                // refuses as a bundle this build could not fetch.
                let _ = std::fs::create_dir_all(self.out.join(BUNDLE_DIR));
                let _ = cuda_aot::fs::write_atomic(&self.out.join(BUNDLE_FILE), b"");
                None
            }
        }
    }

    /// Reads the lock, fetches (or finds in the cache, or in the vendored folder) the
    /// release it pins, verifies it against the trust root and the lock, and writes the
    /// bundle into `out`.
    pub fn run(&self) -> Result<Fetched, FetchError> {
        let release = self.verified_release()?;
        let (dir, lock, served) = (&release.dir, &release.lock, &release.served);
        let bundle = self.out.join(BUNDLE_DIR);
        copy_layout(dir, &bundle)?;
        let bundle_file = self.out.join(BUNDLE_FILE);
        let packed = pack_locked(dir, lock, served, &release.trust)?;
        // Whole or not at all: an interrupted build leaves no half bundle to embed.
        cuda_aot::fs::write_atomic(&bundle_file, &packed).map_err(|e| {
            err(
                format!("{}: {e}", bundle_file.display()),
                "check that OUT_DIR is writable",
            )
        })?;
        Ok(Fetched {
            bundle,
            bundle_file,
            bundle_bytes: packed.len() as u64,
            index: served.registry.index,
            binaries: lock.modules.len(),
            offline: release.offline,
        })
    }

    /// What `cargo xtask vendor` does: the release the lock pins, fetched and checked as
    /// [`Fetch::run`] does, copied into the folder `to` (made, or replaced whole: a
    /// vendoring that fails leaves `to` as it was). A build with `CUDA_AOT_BUNDLE_DIR=to`
    /// then reads it, with no network. Returns how many module binaries and the index.
    pub fn vendor(&self, to: &Path) -> Result<(usize, u64), FetchError> {
        let release = self.verified_release()?;
        let parent = to
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let io = |e: std::io::Error, p: &Path| {
            err(
                format!("{}: {e}", p.display()),
                "check that the folder is writable",
            )
        };
        std::fs::create_dir_all(parent).map_err(|e| io(e, parent))?;
        let staging = tempfile::Builder::new()
            .prefix(".cuda-aot-vendor-")
            .tempdir_in(parent)
            .map_err(|e| io(e, parent))?;
        let copy = staging.path().join("release");
        copy_layout(&release.dir, &copy)?;
        if to.exists() {
            std::fs::remove_dir_all(to).map_err(|e| io(e, to))?;
        }
        std::fs::rename(&copy, to).map_err(|e| io(e, to))?;
        Ok((release.lock.modules.len(), release.served.registry.index))
    }

    /// Reads the lock and the trust root, checks they belong together, fetches (or finds
    /// in the cache, or in the vendored folder) the release the lock pins, verified, and
    /// checks it against the lock.
    fn verified_release(&self) -> Result<Release, FetchError> {
        let text = std::fs::read_to_string(&self.lock).map_err(|e| {
            err(
                format!("{}: {e}", self.lock.display()),
                "write the lock with `cargo xtask lock --registry URL --trust FILE` and commit it",
            )
        })?;
        let lock =
            Lock::parse(&text, &self.lock).map_err(|e| err(e.message.clone(), e.fix.clone()))?;
        let trust = cuda_aot::fs::read_capped(&self.trust, 1 << 20, "trust root").map_err(|e| {
            err(
                e.to_string(),
                "give the trust root file the lock was made under",
            )
        })?;
        if cuda_aot::Digest::of(&trust) != lock.registry.trust_root {
            return Err(err(
                format!(
                    "{} is not the trust root {} was made under ({})",
                    self.trust.display(),
                    self.lock.display(),
                    lock.registry.trust_root.short()
                ),
                "give the trust root the lock names, or lock again under this one (`cargo xtask lock --update`)",
            ));
        }
        let (dir, offline) = match &self.vendored {
            Some(v) => (v.clone(), true),
            None => self.fetch_into_cache(&lock, &trust)?,
        };
        let served = served_lock(&dir, &lock, &trust)?;
        lock.check(&served).map_err(|diff| {
            err(
                format!(
                    "{} serves other kernels than {} pins:\n{}",
                    lock.registry.url,
                    self.lock.display(),
                    diff.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
                ),
                "if the registry's maintainers meant this release, lock again with `cargo xtask lock --update`; otherwise keep the lock and ask them",
            )
        })?;
        Ok(Release {
            dir,
            lock,
            served,
            trust,
            offline,
        })
    }

    /// Syncs the lock's registry into its folder in the per-user cache; when that fails
    /// (no network), a cached release is used if there is one.
    fn fetch_into_cache(&self, lock: &Lock, trust: &[u8]) -> Result<(PathBuf, bool), FetchError> {
        let url = &lock.registry.url;
        let dir = cuda_aot_registry::lock::cached_release_dir(&self.cache, url);
        let synced = cuda_aot_registry::lock::fetch_into_cache(url, trust, &self.cache);
        match synced {
            Ok(_) => Ok((dir, false)),
            // The registry answered with bytes that fail verification: never hidden
            // behind a cached copy.
            Err(e @ cuda_aot_registry::Error::Core(_)) => Err(err(
                format!("{url} serves a release that does not verify: {e}"),
                "the registry (or something between it and you) altered what it serves: keep the lock, tell its maintainers; a build with CUDA_AOT_BUNDLE_DIR pointing at a verified copy still works",
            )),
            Err(e) if dir.join(layout::TIMESTAMP).is_file() => {
                println!(
                    "cargo:warning=cuda-aot: {url} could not be reached ({e}); using the release in the per-user cache {}",
                    dir.display()
                );
                Ok((dir, true))
            }
            Err(e) => {
                let first = lock
                    .modules
                    .first()
                    .map_or_else(String::new, |m| format!(" (first: {})", m.label()));
                Err(err(
                    format!(
                        "cannot fetch {url}: {e}; the per-user cache {} holds no release, so the {} module binaries {} pins{first} are not here",
                        dir.display(),
                        lock.modules.len(),
                        self.lock.display()
                    ),
                    format!(
                        "connect and build again, or vendor the release: `cargo xtask vendor --to DIR` in this project on a machine that can reach {url}, then build with CUDA_AOT_BUNDLE_DIR=DIR"
                    ),
                ))
            }
        }
    }
}

/// The lock of what the folder `dir` holds, verified against `trust`, for the lock's
/// targets.
fn served_lock(dir: &Path, lock: &Lock, trust: &[u8]) -> Result<Lock, FetchError> {
    Lock::served(dir, &lock.registry.url, trust, &lock.targets()).map_err(|e| {
        err(
            format!("{}: {e}", dir.display()),
            "remove that folder (a fetch brings it again), or vendor the release again",
        )
    })
}

/// The bundle file of the verified release in `dir`: its metadata (timestamp, root chain,
/// the index the lock pins, build statements, promotions, delegated metadata) and the manifests and blobs of
/// exactly the binaries the lock pins, for the trust root `trust`.
fn pack_locked(
    dir: &Path,
    lock: &Lock,
    served: &Lock,
    trust: &[u8],
) -> Result<Vec<u8>, FetchError> {
    let fail = |e: cuda_aot::Error| {
        err(
            format!("{}: {e}", dir.display()),
            "remove that folder (a fetch brings it again), or vendor the release again",
        )
    };
    let index = layout::index(served.registry.index);
    let mut paths: Vec<String> = cuda_aot::source::DirSource::new(dir)
        .layout_paths()
        .map_err(fail)?
        .into_iter()
        .filter(|p| {
            p == &index
                || p == layout::TIMESTAMP
                || ["root/", "statements/", "promotions/", "teams/"]
                    .iter()
                    .any(|d| p.starts_with(d))
        })
        .collect();
    for m in &lock.modules {
        paths.push(layout::manifest(&m.manifest));
        paths.push(layout::blob(&m.blob));
    }
    cuda_aot::bundle::Embedded::pack(
        dir,
        &paths,
        &cuda_aot::Digest::of(trust),
        &lock.registry.url,
    )
    .map_err(fail)
}

/// Copies the registry files of `from` (layout paths only) into `to`, replacing it.
fn copy_layout(from: &Path, to: &Path) -> Result<(), FetchError> {
    let io = |e: std::io::Error, p: &Path| {
        err(
            format!("{}: {e}", p.display()),
            "check that OUT_DIR is writable",
        )
    };
    let _ = std::fs::remove_dir_all(to);
    let paths = cuda_aot::source::DirSource::new(from)
        .layout_paths()
        .map_err(|e| err(e.to_string(), "check that the cached release is readable"))?;
    for rel in paths {
        let dst = to.join(&rel);
        std::fs::create_dir_all(dst.parent().expect("a parent")).map_err(|e| io(e, &dst))?;
        std::fs::copy(from.join(&rel), &dst).map_err(|e| io(e, &dst))?;
    }
    Ok(())
}
