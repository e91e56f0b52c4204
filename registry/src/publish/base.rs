//! The registry's current state as the publisher reads it: the newest trust root (the
//! registry's root chain walked from the anchor), the current timestamp, index and
//! promotion records, verified expiry aside; a timestamp no current publisher key signed
//! is set aside (a new version line after a key rotation).

use cuda_aot::metadata::{DocRef, Index, Promotion, RoleName, Timestamp};
use cuda_aot::source::{RegistrySource, layout};
use cuda_aot::state::TrustState;
use cuda_aot::trust::{VerifiedRoot, decode_unverified};
use cuda_aot::verify::{Options, verify_metadata};
use cuda_aot::{Digest, Limits, SecretKey};

use super::Store;
use crate::error::{Error, Result};

/// The registry's current state as the publisher sees it, verified against the trust root
/// (expiry aside: an expired registry is what a publisher fixes).
pub(super) struct Base {
    pub(super) root: VerifiedRoot,
    pub(super) timestamp: Option<(Timestamp, Digest)>,
    pub(super) index: Option<Index>,
    /// The current index's promotion records (verified with it).
    pub(super) promotions: Vec<(DocRef, Promotion)>,
    pub(super) recovered: bool,
}

/// Reads and verifies the current state of `store` against `anchor` (walking the
/// registry's root chain), for a publisher holding `publisher`.
pub(super) fn base(
    store: &dyn Store,
    anchor: &[u8],
    publisher: &[&SecretKey],
    limits: &Limits,
) -> Result<Base> {
    let src = store.source();
    let anchor_root = cuda_aot::trust::verify_anchor(anchor, limits, "trust root")?;
    let raw_ts = src.read_at_most(layout::TIMESTAMP, limits.timestamp)?;
    // A registry awaiting its rebuild is read too: publishing the co-signed statement is
    // what completes it (a publish that is not itself awaiting checks every statement the
    // next index keeps against the full builder threshold).
    let opts = Options {
        limits: *limits,
        awaiting_rebuild: true,
        ..Options::ignoring_expiry()
    };
    let (root, timestamp, index, promotions, recovered) = match raw_ts {
        None => (
            walk(src, anchor_root, limits)?,
            None,
            None,
            Vec::new(),
            false,
        ),
        Some(ts_file) => match verify_metadata(src, anchor, TrustState::default(), &opts) {
            // The current index's promotion records, as the verifier opened them.
            Ok(v) => {
                let ts = v.timestamp().clone();
                let promotions = v.promotions().map(|(r, p)| (*r, p.clone())).collect();
                (
                    v.root().clone(),
                    Some((ts, Digest::of(&ts_file))),
                    Some(v.index().clone()),
                    promotions,
                    false,
                )
            }
            // The timestamp is signed by no publisher key of the newest root: the keys were
            // rotated (after a compromise, perhaps with inflated versions). Start a new
            // version line; clients discard their saved versions on the same rotation.
            Err(cuda_aot::Error::Threshold {
                valid: 0,
                role: RoleName::Publisher,
                ..
            }) => {
                let root = walk(src, anchor_root, limits)?;
                let digest = Digest::of(&ts_file);
                let ts = decode_unverified::<Timestamp>(&ts_file, limits.timestamp, "timestamp")
                    .ok()
                    .map(|t| (t, digest));
                (root, ts, None, Vec::new(), true)
            }
            Err(e) => return Err(e.into()),
        },
    };
    let keys = &root.root().roles.publisher.keys;
    if let Some(k) = publisher.iter().find(|k| !keys.contains(&k.public())) {
        return Err(Error::NotPublisher {
            key: k.public().key_id().short(),
            root: root.root().version,
        });
    }
    Ok(Base {
        root,
        timestamp,
        index,
        promotions,
        recovered,
    })
}

/// Walks the registry's root chain from `root` (each rotation checked, the chain capped:
/// [`cuda_aot::trust::walk_chain`]).
pub(crate) fn walk(
    src: &dyn RegistrySource,
    root: VerifiedRoot,
    limits: &Limits,
) -> Result<VerifiedRoot> {
    Ok(cuda_aot::trust::walk_chain(src, root, limits, |_, _| {})?)
}
