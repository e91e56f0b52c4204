//! The rollback floor a registry folder's own files set: what a server replacing the
//! timestamp it serves, or a sync replacing its target's copy, must never go below.

use crate::error::Result;
use crate::limits::Limits;
use crate::metadata::Timestamp;
use crate::source::{RegistrySource, layout};
use crate::state::TrustState;
use crate::trust::{VerifiedRoot, verify_anchor};

/// The rollback floor a registry's own files set: the versions of the timestamp (and the
/// index it names) that `src` holds now, recorded with the newest root of its chain under
/// which that timestamp still verifies.
///
/// A caller that must never go back from what a folder holds (the server replacing the
/// timestamp it serves, a sync replacing its target's copy) verifies the newcomer with
/// this floor merged into its saved state. The root version is what makes the floor
/// survive key rotations: a rotation already in the chain when this timestamp was signed
/// is not "past the saved root", so it cannot discard these versions
/// ([`crate::verify::VerifiedIndex::discarded_state`]); a rotation that arrives later and
/// replaces the publisher keys still does, as the recovery from a stolen publisher key
/// requires.
///
/// A folder with no timestamp yet sets only its newest root. A timestamp that verifies
/// under no root of the chain (a damaged copy) sets nothing: the saved state still
/// protects, and the verification of the newcomer decides. Errors: the chain itself
/// (anchor, rotations, [`Limits::max_root_updates`]) and unreadable files (a FIFO or a
/// link in place of `timestamp.json` is refused, never waited on).
pub fn rollback_floor(
    src: &dyn RegistrySource,
    anchor: &[u8],
    limits: &Limits,
) -> Result<TrustState> {
    let anchor = verify_anchor(anchor, limits, "trust root")?;
    let ts_file = src.read_at_most(layout::TIMESTAMP, limits.timestamp)?;
    let opens = |r: &VerifiedRoot| -> Option<Timestamp> {
        let bytes = ts_file.as_deref()?;
        r.open::<Timestamp>(bytes, limits.timestamp, layout::TIMESTAMP)
            .ok()
            .map(|o| o.doc)
    };
    let mut signed_under = opens(&anchor).map(|ts| (anchor.root().version, ts));
    let newest = crate::trust::walk_chain(src, anchor, limits, |_, new| {
        if let Some(ts) = opens(new) {
            signed_under = Some((new.root().version, ts));
        }
    })?;
    Ok(match signed_under {
        Some((root, ts)) => TrustState {
            root,
            timestamp: ts.version,
            index: ts.index.version,
            ..TrustState::default()
        },
        None if ts_file.is_none() => TrustState {
            root: newest.root().version,
            ..TrustState::default()
        },
        None => TrustState::default(),
    })
}
