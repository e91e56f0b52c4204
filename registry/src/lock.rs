//! `cuda-aot.lock`: the registry release a prover's users build from, pinned like
//! `Cargo.lock` pins crates. It records the registry's address, the trust root's digest,
//! the index version and its build statements, and per (module, target, kind) the
//! manifest's and blob's digests and sizes. The build of a prover that depends on a
//! registry checks what the registry serves against its lock ([`Lock::check`]): a removed
//! module, another digest or an older index is refused with the difference. (Issue 36:
//! the `lock` task and the build-dependency crate read and write it through this module.)

use std::fmt::Write as _;
use std::path::Path;

use cuda_aot::source::DirSource;
use cuda_aot::verify::{Options, Select, VerifiedIndex, verify_metadata};
use cuda_aot::{Digest, Kind, ModuleName, Target};
use serde::{Deserialize, Serialize};

/// The lock file's name in a prover's project.
pub const LOCK_FILE: &str = "cuda-aot.lock";
/// The format version this code writes and reads.
pub const LOCK_VERSION: u32 = 1;

/// A parsed lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    /// Always [`LOCK_VERSION`].
    pub version: u32,
    /// Where the release comes from and which one it is.
    pub registry: LockedRegistry,
    /// One entry per (module, target, kind), sorted.
    #[serde(default, rename = "module")]
    pub modules: Vec<LockedModule>,
}

/// The registry a lock pins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedRegistry {
    /// `http(s)://`, `oci://`, `s3://` or a folder.
    pub url: String,
    /// blake3 of the trust root file the lock was made under.
    pub trust_root: Digest,
    /// The index version locked.
    pub index: u64,
    /// The build statements of the locked modules, sorted.
    pub statements: Vec<Digest>,
}

/// One locked module binary.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedModule {
    /// The module.
    pub name: ModuleName,
    /// Its exact target.
    pub target: Target,
    /// cubin or ptx.
    pub kind: Kind,
    /// blake3 of the manifest file.
    pub manifest: Digest,
    /// Size of the manifest file.
    pub manifest_size: u64,
    /// blake3 of the blob.
    pub blob: Digest,
    /// Size of the blob.
    pub blob_size: u64,
}

impl LockedModule {
    /// `module target (kind)`, for messages.
    pub fn label(&self) -> String {
        format!("{} {} ({})", self.name, self.target, self.kind)
    }
}

/// A lock file that cannot be read as one: its file, the line and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {message}\nFix: {fix}", .line.map_or(String::new(), |l| format!(":{l}")))]
pub struct LockError {
    /// The lock file.
    pub file: String,
    /// The 1-based line, where the parser knows it.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
    /// What to do.
    pub fix: String,
}

impl Lock {
    /// The lock of a verified release: every selected manifest of `index` whose target is
    /// in `targets` (all when empty), served from `url` under the trust root `trust_root`.
    pub fn of(url: &str, trust_root: &[u8], index: &VerifiedIndex, targets: &[Target]) -> Lock {
        let picked: Vec<_> = index
            .manifests()
            .iter()
            .filter(|m| targets.is_empty() || targets.contains(&m.entry().sm))
            .collect();
        let mut modules: Vec<LockedModule> = picked
            .iter()
            .map(|m| LockedModule {
                name: m.entry().module.clone(),
                target: m.entry().sm,
                kind: m.entry().kind,
                manifest: m.entry().manifest,
                manifest_size: m.entry().manifest_size,
                blob: m.manifest().module_digest,
                blob_size: m.manifest().size,
            })
            .collect();
        modules.sort();
        let mut statements: Vec<Digest> = picked.iter().map(|m| m.entry().statement).collect();
        statements.sort();
        statements.dedup();
        Lock {
            version: LOCK_VERSION,
            registry: LockedRegistry {
                url: url.to_string(),
                trust_root: Digest::of(trust_root),
                index: index.index().version,
                statements,
            },
            modules,
        }
    }

    /// The lock of the release the registry folder `dir` holds (served from `url`),
    /// verified against `trust_root` the way a prover verifies it, for `targets` (all when
    /// empty): what `lock` writes and what a build compares with its lock.
    pub fn served(
        dir: &Path,
        url: &str,
        trust_root: &[u8],
        targets: &[Target],
    ) -> cuda_aot::Result<Lock> {
        let src = DirSource::new(dir);
        let verified = verify_metadata(&src, trust_root, Default::default(), &Options::default())?
            .complete(&src, Select::all())
            .map_err(|f| *f.error)?;
        Ok(Lock::of(url, trust_root, verified.metadata(), targets))
    }

    /// The targets this lock pins, sorted, each once.
    pub fn targets(&self) -> Vec<Target> {
        let mut t: Vec<Target> = self.modules.iter().map(|m| m.target).collect();
        t.sort();
        t.dedup();
        t
    }

    /// Reads the lock text of `file`: strict (an unknown field, a malformed digest, name or
    /// target, another format version is an error naming the file and line).
    pub fn parse(text: &str, file: &Path) -> Result<Lock, LockError> {
        let file_name = file.display().to_string();
        let lock: Lock = toml::from_str(text).map_err(|e| LockError {
            file: file_name.clone(),
            line: e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1),
            message: e.message().trim().to_string(),
            fix: "write the lock again with the lock task (`--update` moves it to what the registry holds now), or restore it from version control".into(),
        })?;
        if lock.version != LOCK_VERSION {
            return Err(LockError {
                file: file_name,
                line: None,
                message: format!(
                    "lock format version {}, this tool reads version {LOCK_VERSION}",
                    lock.version
                ),
                fix: "use the cuda-aot version that wrote it, or write the lock again".into(),
            });
        }
        Ok(lock)
    }

    /// The lock as written to disk: a header saying what it is, then TOML.
    pub fn to_text(&self) -> String {
        let body = toml::to_string_pretty(self).expect("a lock serialises");
        format!(
            "# cuda-aot.lock: the kernel release this project builds from, pinned. Written by\n# the lock task; do not edit by hand. Commit it.\n{body}"
        )
    }

    /// What moved between this lock and `newer`, a line each: the index version, modules
    /// removed or added, and digests that changed.
    pub fn diff(&self, newer: &Lock) -> Vec<String> {
        let mut out = Vec::new();
        let (a, b) = (&self.registry, &newer.registry);
        if a.url != b.url {
            out.push(format!("registry {} -> {}", a.url, b.url));
        }
        if a.trust_root != b.trust_root {
            out.push(format!(
                "trust root {} -> {}",
                a.trust_root.short(),
                b.trust_root.short()
            ));
        }
        if a.index != b.index {
            out.push(format!("index v{} -> v{}", a.index, b.index));
        }
        let key = |m: &LockedModule| (m.name.clone(), m.target, m.kind);
        for m in &self.modules {
            match newer.modules.iter().find(|n| key(n) == key(m)) {
                None => out.push(format!("- {} (removed)", m.label())),
                Some(n) if n != m => {
                    let mut line = format!("~ {}:", m.label());
                    if (n.manifest, n.manifest_size) != (m.manifest, m.manifest_size) {
                        let _ = write!(
                            line,
                            " manifest {} -> {}",
                            m.manifest.short(),
                            n.manifest.short()
                        );
                    }
                    if (n.blob, n.blob_size) != (m.blob, m.blob_size) {
                        let _ = write!(
                            line,
                            " blob {} ({} B) -> {} ({} B)",
                            m.blob.short(),
                            m.blob_size,
                            n.blob.short(),
                            n.blob_size
                        );
                    }
                    out.push(line);
                }
                Some(_) => {}
            }
        }
        for n in &newer.modules {
            if !self.modules.iter().any(|m| key(m) == key(n)) {
                out.push(format!("+ {} (added)", n.label()));
            }
        }
        out
    }

    /// Whether the release a registry serves (`served`, the lock of what it holds now) is
    /// the one this lock pins: every locked module present with the locked digests and
    /// sizes, under the locked trust root, at an index no older than the lock's. A newer
    /// index holding the same bytes passes. `Err` is the difference, a line each.
    pub fn check(&self, served: &Lock) -> Result<(), Vec<String>> {
        let mut wrong = Vec::new();
        if served.registry.trust_root != self.registry.trust_root {
            wrong.push(format!(
                "trust root {} -> {}",
                self.registry.trust_root.short(),
                served.registry.trust_root.short()
            ));
        }
        if served.registry.index < self.registry.index {
            wrong.push(format!(
                "index v{} is older than the locked v{} (a rollback)",
                served.registry.index, self.registry.index
            ));
        }
        let pinned = Lock {
            modules: served
                .modules
                .iter()
                .filter(|n| {
                    self.modules
                        .iter()
                        .any(|m| (&m.name, m.target, m.kind) == (&n.name, n.target, n.kind))
                })
                .cloned()
                .collect(),
            registry: self.registry.clone(),
            version: self.version,
        };
        wrong.extend(self.diff(&pinned));
        if wrong.is_empty() { Ok(()) } else { Err(wrong) }
    }
}

/// The folder of the per-user cache (`cache_root`, [`crate::defaults::user_cache_dir`])
/// that the release at `url` is synced into: one per registry address.
pub fn cached_release_dir(cache_root: &Path, url: &str) -> std::path::PathBuf {
    cache_root
        .join("registries")
        .join(&Digest::of(url.as_bytes()).hex()[..16])
}

/// Syncs the release at `url` (verified against `trust_root`, every file checked before
/// it is visible) into its folder of the per-user cache `cache_root`, and returns the
/// folder: what `lock` and a build script fetch through.
#[cfg(feature = "net")]
pub fn fetch_into_cache(
    url: &str,
    trust_root: &[u8],
    cache_root: &Path,
) -> crate::Result<std::path::PathBuf> {
    let dir = cached_release_dir(cache_root, url);
    let remote = crate::sync::open_remote(url, &Default::default(), &Default::default())?;
    let opts = crate::sync::SyncOptions {
        verify: Options::default(),
        seen: Default::default(),
    };
    crate::sync::sync(remote.as_ref(), &dir, trust_root, &opts)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuda_aot_testkit::Fixture;

    fn lock_of(f: &Fixture, targets: &[Target]) -> Lock {
        let (verified, _) = f.verify().unwrap();
        Lock::of(
            "https://kernels.example/team",
            &f.root_file,
            verified.metadata(),
            targets,
        )
    }

    #[test]
    fn a_lock_round_trips_and_names_each_module_binary() {
        let f = Fixture::new();
        f.append(&["sm_80", "sm_90"]);
        let lock = lock_of(&f, &[]);
        assert_eq!(lock.modules.len(), 2);
        assert_eq!(lock.registry.index, 1);
        assert_eq!(lock.registry.statements.len(), 1);
        let text = lock.to_text();
        assert!(text.starts_with("# cuda-aot.lock"), "{text}");
        assert_eq!(Lock::parse(&text, Path::new(LOCK_FILE)).unwrap(), lock);
        // --targets narrows it.
        let only: Target = "sm_90".parse().unwrap();
        assert_eq!(lock_of(&f, &[only]).modules.len(), 1);
    }

    #[test]
    fn a_registry_that_serves_other_bytes_or_an_older_index_is_refused_with_the_difference() {
        let f = Fixture::new();
        f.append(&["sm_80", "sm_90"]);
        let lock = lock_of(&f, &[]);
        assert_eq!(lock.check(&lock), Ok(()));
        // A newer release with one more module still serves what the lock pins.
        f.append(&["sm_120"]);
        let newer = lock_of(&f, &[]);
        assert_eq!(lock.check(&newer), Ok(()));
        assert!(
            lock.diff(&newer)
                .iter()
                .any(|l| l.starts_with("+ ") && l.contains("sm_120"))
        );
        assert!(lock.diff(&newer).contains(&"index v1 -> v2".to_string()));
        // A module removed, a blob replaced, an older index: each named.
        let mut served = lock.clone();
        served.modules.remove(0);
        let err = lock.check(&served).unwrap_err();
        assert!(
            err.iter()
                .any(|l| l.starts_with("- ") && l.ends_with("(removed)")),
            "{err:?}"
        );
        let mut served = lock.clone();
        served.modules[1].blob = Digest::of(b"other");
        let err = lock.check(&served).unwrap_err();
        assert!(
            err.iter()
                .any(|l| l.starts_with("~ ") && l.contains(" blob ")),
            "{err:?}"
        );
        let mut newer_lock = lock.clone();
        newer_lock.registry.index = 5;
        let err = newer_lock.check(&lock).unwrap_err();
        assert!(
            err.iter().any(|l| l.contains("older than the locked v5")),
            "{err:?}"
        );
    }

    #[test]
    fn a_lock_with_an_unknown_field_or_a_malformed_digest_is_refused_naming_its_line() {
        let f = Fixture::new();
        f.append(&["sm_90"]);
        let text = lock_of(&f, &[]).to_text();
        let unknown = text.replacen("[registry]\n", "[registry]\nmirror = \"x\"\n", 1);
        let line = unknown
            .lines()
            .position(|l| l.starts_with("mirror"))
            .unwrap()
            + 1;
        let err = Lock::parse(&unknown, Path::new("p/cuda-aot.lock")).unwrap_err();
        assert_eq!(err.line, Some(line), "{err}");
        assert!(
            err.to_string()
                .starts_with(&format!("p/cuda-aot.lock:{line}: ")),
            "{err}"
        );
        assert!(err.message.contains("mirror"), "{err}");
        let at = text.find("blob = \"blake3:").unwrap() + "blob = \"blake3:".len();
        let bad = format!("{}zz{}", &text[..at], &text[at + 2..]);
        let line = bad[..at].matches('\n').count() + 1;
        let err = Lock::parse(&bad, Path::new("cuda-aot.lock")).unwrap_err();
        assert_eq!(err.line, Some(line), "{err}");
        assert!(err.to_string().contains("Fix: "), "{err}");
    }
}
