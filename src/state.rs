//! The local trust state: the highest versions this machine has seen and when it last saw
//! the registry fresh, so an older timestamp, index or root served later is refused as a
//! rollback, and an offline host knows how long its last fresh release stays loadable.
//!
//! Where it lives by default (one file per registry location):
//! `$CUDA_AOT_STATE_DIR/<key>.json`, else `$XDG_STATE_HOME/cuda-aot/trust/<key>.json`, else
//! `~/.local/state/cuda-aot/trust/<key>.json`, where `<key>` is a digest of the registry's
//! absolute path.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::metadata::Time;

/// Last-seen versions for one registry and trust anchor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustState {
    /// Highest root version trusted.
    pub root: u64,
    /// Highest timestamp version seen.
    pub timestamp: u64,
    /// Highest index version seen.
    pub index: u64,
    /// When a verification last passed with an unexpired timestamp (the start of the
    /// offline grace period).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_at: Option<Time>,
    /// Highest version seen of each delegated role's metadata (issue 46), by role name;
    /// `delegations` is the root's delegations role.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub teams: BTreeMap<String, u64>,
}

impl TrustState {
    /// Loads the state at `path`; a missing file is a fresh state (all zero). Only a
    /// regular file is read, within `limit` bytes.
    pub fn load(path: &Path, limit: u64) -> Result<TrustState> {
        match crate::fs::read_at_most(path, limit)? {
            None => Ok(TrustState::default()),
            Some(b) => crate::json::parse(
                b.as_slice(),
                limit,
                &format!("trust state {}", path.display()),
            ),
        }
    }

    /// Saves atomically (temporary file in the same folder, fsync, rename, fsync of the
    /// folder), creating the folder; [`Error::StateNotSaved`] when it cannot.
    ///
    /// Several processes may share the file (a prover host starting one process per GPU,
    /// a verify beside a sync): under an exclusive lock on `<file>.lock`, what is on disk
    /// now is merged in ([`TrustState::merged`]), so a process that verified an older
    /// release, or that saves last, never lowers what another one recorded.
    pub fn save(&self, path: &Path) -> Result<()> {
        let err = |source| Error::StateNotSaved {
            path: path.into(),
            source,
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(err)?;
        let mut lock_name = path.file_name().unwrap_or_default().to_os_string();
        lock_name.push(".lock");
        let lock = crate::fs::open_lock_file(&dir.join(lock_name)).map_err(err)?;
        lock.lock().map_err(err)?;
        // A file this process cannot read (damaged, oversized) is replaced, as before.
        let limit = crate::Limits::default().state;
        let merged = match TrustState::load(path, limit) {
            Ok(on_disk) => on_disk.merged(self.clone()),
            Err(_) => self.clone(),
        };
        crate::fs::write_atomic(path, &crate::json::to_vec(&merged)).map_err(err)
        // The lock is released when `lock` is dropped.
    }

    /// What to keep of this state and another one, `ours` (a newer save, or the rollback
    /// floor a registry folder sets: [`crate::verify::rollback_floor`]): the versions of the
    /// newer trust root (a root rotation may have discarded the old versions on purpose: the
    /// recovery from a stolen publisher key), for the same root the higher of each, and the
    /// later `fresh_at` in any case.
    pub fn merged(self, ours: TrustState) -> TrustState {
        let fresh_at = self.fresh_at.max(ours.fresh_at);
        let versions = match self.root.cmp(&ours.root) {
            std::cmp::Ordering::Greater => self,
            std::cmp::Ordering::Less => ours,
            std::cmp::Ordering::Equal => self.max(ours),
        };
        TrustState {
            fresh_at,
            ..versions
        }
    }

    /// The component-wise maximum of two states (the later `fresh_at`).
    pub fn max(self, other: TrustState) -> TrustState {
        let mut teams = self.teams;
        for (role, v) in other.teams {
            let e = teams.entry(role).or_insert(v);
            *e = (*e).max(v);
        }
        TrustState {
            root: self.root.max(other.root),
            timestamp: self.timestamp.max(other.timestamp),
            index: self.index.max(other.index),
            fresh_at: self.fresh_at.max(other.fresh_at),
            teams,
        }
    }

    /// The registry location a state file is kept for: `registry` made canonical, also
    /// while the folder does not exist (its parent's canonical path and its name), so a
    /// registry deleted and published again keeps its state.
    pub fn location(registry: &Path) -> PathBuf {
        std::fs::canonicalize(registry)
            .or_else(|e| match (registry.parent(), registry.file_name()) {
                (Some(parent), Some(name)) => {
                    let parent = if parent.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        parent
                    };
                    std::fs::canonicalize(parent).map(|p| p.join(name))
                }
                _ => Err(e),
            })
            .or_else(|_| std::path::absolute(registry))
            .unwrap_or_else(|_| registry.to_path_buf())
    }

    /// The default state file for the registry at `registry` (see the module docs), or
    /// `None` when no per-user folder can be found (no `HOME`).
    pub fn default_path(registry: &Path) -> Option<PathBuf> {
        Some(Self::file_in(&Self::default_dir()?, registry))
    }

    /// The per-user state folder: `$CUDA_AOT_STATE_DIR`, else
    /// `$XDG_STATE_HOME/cuda-aot/trust`, else `~/.local/state/cuda-aot/trust`; `None`
    /// without any of them.
    pub fn default_dir() -> Option<PathBuf> {
        match std::env::var_os("CUDA_AOT_STATE_DIR") {
            Some(d) => Some(PathBuf::from(d)),
            None => Some(
                std::env::var_os("XDG_STATE_HOME")
                    .map(PathBuf::from)
                    .or_else(|| {
                        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state"))
                    })?
                    .join("cuda-aot/trust"),
            ),
        }
    }

    /// The state file of the registry at `registry` inside the state folder `dir`: named by
    /// a digest of the registry's location ([`TrustState::location`]), so every tool and
    /// the runtime that use the same folder share one file per registry.
    pub fn file_in(dir: &Path, registry: &Path) -> PathBuf {
        let abs = Self::location(registry);
        Self::file_for_key(dir, abs.as_os_str().as_encoded_bytes())
    }

    /// The state file inside `dir` of the registry known by `key` (a folder's location, or
    /// what names an embedded bundle's registry: its trust root and origin).
    pub fn file_for_key(dir: &Path, key: &[u8]) -> PathBuf {
        let mut h = blake3::Hasher::new();
        h.update(b"cuda-aot trust state v1\n");
        h.update(key);
        let key = h.finalize().to_hex();
        dir.join(format!("{}.json", &key[..24]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_a_missing_file_is_fresh() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s/state.json");
        assert_eq!(TrustState::load(&p, 4096).unwrap(), TrustState::default());
        let s = TrustState {
            root: 2,
            timestamp: 7,
            index: 5,
            fresh_at: Some(Time::from_unix(1_800_000_000)),
            teams: [("team-a".to_string(), 3)].into(),
        };
        s.save(&p).unwrap();
        assert_eq!(TrustState::load(&p, 4096).unwrap(), s);
        // Each delegated role's version is kept at its highest, roles of either side kept.
        assert_eq!(
            s.clone().max(TrustState {
                timestamp: 9,
                teams: [("team-a".to_string(), 2), ("team-b".to_string(), 1)].into(),
                ..TrustState::default()
            }),
            TrustState {
                timestamp: 9,
                teams: [("team-a".to_string(), 3), ("team-b".to_string(), 1)].into(),
                ..s
            }
        );
    }

    /// A state folder that cannot be made (here: a file stands where it would go; in a
    /// deployment: a read-only home) fails closed with advice about where state can live.
    #[test]
    fn an_unwritable_state_location_is_named_with_where_state_can_live() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("home"), b"a file, not a folder").unwrap();
        let p = d.path().join("home/.local/state/cuda-aot/trust/x.json");
        let err = TrustState::default().save(&p).unwrap_err();
        assert!(
            matches!(&err, Error::StateNotSaved { path, .. } if path == &p),
            "{err}"
        );
        assert!(err.to_string().contains("cannot be saved"), "{err}");
        assert!(err.fix().contains("CUDA_AOT_STATE_DIR"), "{}", err.fix());
        assert_eq!(
            std::fs::read(d.path().join("home")).unwrap(),
            b"a file, not a folder"
        );
    }

    /// Processes saving one state file in any order never lower it; a newer root's state
    /// replaces an older root's (recovery after a rotation still works).
    #[test]
    fn saves_from_several_processes_never_lower_the_state() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.json");
        let v = |root, timestamp, index| TrustState {
            root,
            timestamp,
            index,
            ..TrustState::default()
        };
        v(1, 9, 4).save(&p).unwrap();
        v(1, 7, 5).save(&p).unwrap(); // verified an older release, saved last
        assert_eq!(TrustState::load(&p, 4096).unwrap(), v(1, 9, 5));
        v(2, 1, 1).save(&p).unwrap(); // root rotated: the old line is discarded
        assert_eq!(TrustState::load(&p, 4096).unwrap(), v(2, 1, 1));
        v(1, 50, 50).save(&p).unwrap(); // a process still on the old root
        assert_eq!(TrustState::load(&p, 4096).unwrap(), v(2, 1, 1));

        // Sixteen threads saving at once: the result is the maximum of all.
        let q = d.path().join("t.json");
        std::thread::scope(|s| {
            for k in 0..16u64 {
                let q = &q;
                s.spawn(move || v(1, k, 15 - k).save(q).unwrap());
            }
        });
        assert_eq!(TrustState::load(&q, 4096).unwrap(), v(1, 15, 15));
    }

    #[test]
    fn the_default_path_is_per_registry() {
        let a = TrustState::default_path(Path::new("/srv/a")).unwrap();
        let b = TrustState::default_path(Path::new("/srv/b")).unwrap();
        assert_ne!(a, b);
        assert_eq!(a, TrustState::default_path(Path::new("/srv/a")).unwrap());
    }
}
