//! The process-wide module cache: one loaded module per device and identity, shared by every
//! runtime of the process and unloaded with the last of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::Digest;
use crate::cuda::LoadedModule;

/// One module slot of the process-wide cache, keyed by device and identity.
type SlotInner = Mutex<Option<Arc<LoadedModule>>>;
pub(super) type Slot = Arc<SlotInner>;
type ProcessCache = Mutex<HashMap<CacheKey, Weak<SlotInner>>>;
pub(super) type CacheKey = (usize, Digest, Digest);

/// The process-wide module cache: `(device ordinal, identity digest, blob digest)` → slot.
/// Runtimes hold the slots; the cache holds weak references, so a module is unloaded
/// when the last runtime (and kernel handle) using it is dropped.
fn process_cache() -> &'static ProcessCache {
    static CACHE: OnceLock<ProcessCache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The shared slot for `key`, created if no live runtime holds one.
pub(super) fn shared_slot(key: CacheKey) -> Slot {
    let mut cache = process_cache().lock().expect("module cache lock");
    if let Some(slot) = cache.get(&key).and_then(Weak::upgrade) {
        return slot;
    }
    cache.retain(|_, w| w.strong_count() > 0);
    let slot = Slot::default();
    cache.insert(key, Arc::downgrade(&slot));
    slot
}
