//! The local trust state: the highest versions this machine has seen and when it last saw
//! the registry fresh, so an older timestamp, index or root served later is refused as a
//! rollback, and an offline host knows how long its last fresh release stays loadable.
//!
//! Where it lives by default (one file per registry location):
//! `$CUDA_AOT_STATE_DIR/<key>.json`, else `$XDG_STATE_HOME/cuda-aot/trust/<key>.json`, else
//! `~/.local/state/cuda-aot/trust/<key>.json`, where `<key>` is a digest of the registry's
//! absolute path.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::metadata::Time;

/// Last-seen versions for one registry and trust anchor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::fs::write_atomic(path, &crate::json::to_vec(self)).map_err(|e| {
            Error::StateNotSaved {
                path: path.into(),
                source: e,
            }
        })
    }

    /// The component-wise maximum of two states (the later `fresh_at`).
    pub fn max(self, other: TrustState) -> TrustState {
        TrustState {
            root: self.root.max(other.root),
            timestamp: self.timestamp.max(other.timestamp),
            index: self.index.max(other.index),
            fresh_at: self.fresh_at.max(other.fresh_at),
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
        let dir = match std::env::var_os("CUDA_AOT_STATE_DIR") {
            Some(d) => PathBuf::from(d),
            None => std::env::var_os("XDG_STATE_HOME")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state"))
                })?
                .join("cuda-aot/trust"),
        };
        let abs = Self::location(registry);
        let mut h = blake3::Hasher::new();
        h.update(b"cuda-aot trust state v1\n");
        h.update(abs.as_os_str().as_encoded_bytes());
        let key = h.finalize().to_hex();
        Some(dir.join(format!("{}.json", &key[..24])))
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
        };
        s.save(&p).unwrap();
        assert_eq!(TrustState::load(&p, 4096).unwrap(), s);
        assert_eq!(
            s.max(TrustState {
                timestamp: 9,
                ..TrustState::default()
            }),
            TrustState { timestamp: 9, ..s }
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

    #[test]
    fn the_default_path_is_per_registry() {
        let a = TrustState::default_path(Path::new("/srv/a")).unwrap();
        let b = TrustState::default_path(Path::new("/srv/b")).unwrap();
        assert_ne!(a, b);
        assert_eq!(a, TrustState::default_path(Path::new("/srv/a")).unwrap());
    }
}
