//! The local trust state: the highest versions this machine has seen, so an older
//! timestamp, index or root served later is refused as a rollback.

use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::error::{Error, Result};

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
}

impl TrustState {
    /// Loads the state at `path`; a missing file is a fresh state (all zero).
    pub fn load(path: &Path, limit: u64) -> Result<TrustState> {
        match std::fs::read(path) {
            Ok(b) => crate::json::parse(&b, limit, &format!("trust state {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TrustState::default()),
            Err(e) => Err(Error::Io {
                path: path.into(),
                source: e,
            }),
        }
    }

    /// Saves atomically (temporary file in the same folder, fsync, rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let io = |e| Error::Io {
            path: path.into(),
            source: e,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp).map_err(io)?;
            f.write_all(&crate::json::to_vec(self)).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// The component-wise maximum of two states.
    pub fn max(self, other: TrustState) -> TrustState {
        TrustState {
            root: self.root.max(other.root),
            timestamp: self.timestamp.max(other.timestamp),
            index: self.index.max(other.index),
        }
    }
}
