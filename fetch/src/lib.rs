//! `cuda-aot-build`: what a prover crate's `build.rs` calls so that its users get the
//! kernels its maintainers signed, without a CUDA toolkit and without compiling any CUDA.
//!
//! It reads the project's `cuda-aot.lock` (written by `cargo xtask lock`), fetches the
//! release the lock pins through the verified pipeline `sync` uses into a per-user cache
//! (so a second crate or a rebuild fetches nothing, and offline a warm cache is enough),
//! checks it against the lock (a removed module, another digest or an older index is
//! refused with the difference), and copies the verified bundle into `OUT_DIR`.
//! `CUDA_AOT_BUNDLE_DIR` points the build at a vendored folder instead
//! (`cargo xtask sync --from URL --to DIR`).
//!
//! The whole `build.rs` of a prover crate (`main` calls this):
//!
//! ```no_run
//! let fetched = cuda_aot_build::Fetch::from_env("kernels-root.json").run_for_build();
//! if let Some(f) = fetched {
//!     println!("cargo:rustc-env=CUDA_AOT_BUNDLE={}", f.bundle.display());
//! }
//! ```

use std::path::{Path, PathBuf};

use cuda_aot::source::layout;
use cuda_aot_registry::lock::{LOCK_FILE, Lock};

/// Where the bundle is written below `OUT_DIR`.
pub const BUNDLE_DIR: &str = "cuda-aot-bundle";

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
    /// The index version.
    pub index: u64,
    /// The module binaries the lock pins.
    pub binaries: usize,
    /// Whether it came from the per-user cache without reaching the registry.
    pub offline: bool,
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
                let _ = std::fs::create_dir_all(self.out.join(BUNDLE_DIR));
                None
            }
        }
    }

    /// Reads the lock, fetches (or finds in the cache, or in the vendored folder) the
    /// release it pins, verifies it against the trust root and the lock, and writes the
    /// bundle into `out`.
    pub fn run(&self) -> Result<Fetched, FetchError> {
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
        let bundle = self.out.join(BUNDLE_DIR);
        copy_layout(&dir, &bundle)?;
        Ok(Fetched {
            bundle,
            index: served.registry.index,
            binaries: lock.modules.len(),
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
                        "connect and build again, or vendor the release: `cargo xtask sync --from {url} --to DIR` on a machine that can reach it, then build with CUDA_AOT_BUNDLE_DIR=DIR"
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

/// Copies the registry files of `from` (layout paths only) into `to`, replacing it.
fn copy_layout(from: &Path, to: &Path) -> Result<(), FetchError> {
    let io = |e: std::io::Error, p: &Path| {
        err(
            format!("{}: {e}", p.display()),
            "check that OUT_DIR is writable",
        )
    };
    let _ = std::fs::remove_dir_all(to);
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(from.join(&rel)).map_err(|e| io(e, &from.join(&rel)))? {
            let entry = entry.map_err(|e| io(e, from))?;
            let rel = rel.join(entry.file_name());
            let kind = entry.file_type().map_err(|e| io(e, &entry.path()))?;
            if kind.is_dir() {
                stack.push(rel);
            } else if kind.is_file() && layout::is_layout_path(&rel.to_string_lossy()) {
                let dst = to.join(&rel);
                std::fs::create_dir_all(dst.parent().expect("a parent"))
                    .map_err(|e| io(e, &dst))?;
                std::fs::copy(from.join(&rel), &dst).map_err(|e| io(e, &dst))?;
            }
        }
    }
    Ok(())
}
