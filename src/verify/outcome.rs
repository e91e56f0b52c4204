//! What the one pipeline returns: the selection steps 6-8 cover ([`Select`]), the fully
//! verified registry that alone hands out the state to save ([`Verified`]), and why a
//! verification stopped ([`Failed`]).

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::metadata::IndexEntry;
use crate::state::TrustState;

use super::{VerifiedIndex, VerifiedManifest, VerifiedModule};

/// Which index entries steps 6-8 ([`VerifiedIndex::complete`]) cover, what the caller
/// checks between steps 6 and 7, whether the verified bytes are kept and whether the
/// work may use several threads.
pub struct Select<'a> {
    pub(super) entries: Option<Vec<usize>>,
    pub(super) before_blobs: Option<BeforeBlobs<'a>>,
    pub(super) keep: bool,
    pub(super) parallel: bool,
}

/// A caller's check of the verified manifests (each with its index entry's position),
/// all at once, before any blob is read: so that one refusal can name every manifest it
/// concerns.
pub type BeforeBlobs<'a> = &'a (dyn Fn(&[(usize, &VerifiedManifest)]) -> Result<()> + Sync);

impl<'a> Select<'a> {
    /// Every entry of the index.
    pub fn all() -> Select<'a> {
        Select {
            entries: None,
            before_blobs: None,
            keep: false,
            parallel: false,
        }
    }
    /// The entries at these positions of the index (duplicates count once; positions past
    /// the end are ignored).
    pub fn entries(picked: Vec<usize>) -> Select<'a> {
        Select {
            entries: Some(picked),
            ..Select::all()
        }
    }
    /// Runs `check` on the verified manifests before any blob is read (the runtime's
    /// driver floor: a device that cannot run a module learns it before the blob is
    /// hashed).
    pub fn before_blobs(self, check: BeforeBlobs<'a>) -> Select<'a> {
        Select {
            before_blobs: Some(check),
            ..self
        }
    }
    /// Keeps the verified bytes ([`Verified::modules`]): for a loader, or a publisher that
    /// writes exactly what it checked.
    pub fn keep_bytes(self) -> Select<'a> {
        Select { keep: true, ..self }
    }
    /// Lets steps 6-8 use several threads when the work is large
    /// ([`crate::parallel::threads_for`]); the first failure in entry order is still the
    /// one returned.
    pub fn parallel(self) -> Select<'a> {
        Select {
            parallel: true,
            ..self
        }
    }
}

/// A registry that passed steps 1-8 for the selected entries: the verified metadata, the
/// manifests and (when kept) the blob bytes. The only value that hands out the rollback
/// state to save (`Deref` gives the [`VerifiedIndex`] accessors).
#[derive(Debug, Clone)]
pub struct Verified {
    pub(super) index: VerifiedIndex,
    pub(super) modules: Vec<(usize, VerifiedModule)>,
}

impl Verified {
    /// The trust state to persist: every step passed.
    pub fn state(&self) -> TrustState {
        self.index.state.clone()
    }
    /// The verified metadata and manifests.
    pub fn metadata(&self) -> &VerifiedIndex {
        &self.index
    }
    /// The verified modules with their index entry's position, by that position (empty
    /// unless [`Select::keep_bytes`]).
    pub fn modules(&self) -> &[(usize, VerifiedModule)] {
        &self.modules
    }
    /// The verified module of the index entry at `i`, when it was selected and kept.
    pub fn module(&self, i: usize) -> Option<&VerifiedModule> {
        self.modules
            .binary_search_by_key(&i, |(j, _)| *j)
            .ok()
            .map(|k| &self.modules[k].1)
    }
}

impl std::ops::Deref for Verified {
    type Target = VerifiedIndex;
    fn deref(&self) -> &VerifiedIndex {
        &self.index
    }
}

/// Why a verification stopped: the error, and for steps 6-8 the index entry it concerns
/// (and the blob, for steps 7-8), so a tool can name the module, target and file. Converts
/// into [`Error`] (`?` in a function returning this crate's `Result`); it is deliberately no
/// `std::error::Error`, so it is never passed on without its error's `Fix:` advice.
#[derive(Debug)]
pub struct Failed {
    /// What failed.
    pub error: Box<Error>,
    /// The index entry whose manifest or blob failed (steps 6-8).
    pub entry: Option<Box<IndexEntry>>,
    /// The blob digest, when its blob or content failed (steps 7-8).
    pub blob: Option<Digest>,
}

impl Failed {
    pub(super) fn at(error: Error, entry: &IndexEntry, blob: Option<Digest>) -> Failed {
        Failed {
            error: Box::new(error),
            entry: Some(Box::new(entry.clone())),
            blob,
        }
    }
}

impl From<Error> for Failed {
    fn from(error: Error) -> Failed {
        Failed {
            error: Box::new(error),
            entry: None,
            blob: None,
        }
    }
}

impl From<Failed> for Error {
    fn from(f: Failed) -> Error {
        *f.error
    }
}
