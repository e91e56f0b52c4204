//! Byte caps per file kind: every size that comes from outside is bounded before it is read.

/// Upper bounds, in bytes, for each kind of registry file.
///
/// Readers stop at `limit + 1` bytes and refuse, so a hostile registry cannot make a
/// verifier read or parse an unbounded file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A signed trust root.
    pub root: u64,
    /// `timestamp.json`.
    pub timestamp: u64,
    /// One bundle index.
    pub index: u64,
    /// One module manifest.
    pub manifest: u64,
    /// One signed build statement.
    pub statement: u64,
    /// One signed promotion record.
    pub promotion: u64,
    /// One cubin or PTX blob.
    pub blob: u64,
    /// The local trust state file.
    pub state: u64,
    /// Entries in one index.
    pub index_entries: usize,
    /// Root rotations walked in one verification (past the trusted root) before the chain
    /// is refused: a registry cannot make a verifier walk an unbounded chain.
    pub max_root_updates: u64,
    /// Signatures looked at in one envelope (each costs a verification).
    pub max_signatures: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            root: 64 * 1024,
            timestamp: 16 * 1024,
            index: 8 * 1024 * 1024,
            manifest: 256 * 1024,
            statement: 8 * 1024 * 1024,
            promotion: 64 * 1024,
            blob: 512 * 1024 * 1024,
            state: 16 * 1024,
            index_entries: 10_000,
            // tough's default; a registry rotating its root weekly takes twenty years.
            max_root_updates: 1024,
            max_signatures: 64,
        }
    }
}
