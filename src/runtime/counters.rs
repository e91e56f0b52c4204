//! The runtime's counters: what it verified, loaded and reused, and the time each took.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A snapshot of the runtime's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Manifests verified (signatures, index entry) at open.
    pub modules_verified: u64,
    /// Modules handed to the driver (in this process, by this runtime).
    pub modules_loaded: u64,
    /// Requests for a module that was already loaded in this process.
    pub cache_hits: u64,
    /// Blob bytes hashed during verification.
    pub bytes_hashed: u64,
    /// Time spent verifying (metadata, signatures, blob digests, ELF checks).
    pub verify_time: Duration,
    /// Time spent in the driver's load calls.
    pub driver_time: Duration,
    /// Modules loaded as PTX through the driver JIT (compatibility mode).
    pub compat_loads: u64,
    /// Signed documents whose signature threshold was checked at open (constant in the
    /// number of modules).
    pub signatures_checked: u64,
    /// Research modules (NVRTC builds) loaded ([`Policy::research`](super::Policy::research) only).
    pub research_loads: u64,
}

/// The counters as the runtime updates them (relaxed atomics: they are telemetry).
#[derive(Default)]
pub(super) struct AtomicCounters {
    pub(super) modules_verified: AtomicU64,
    pub(super) modules_loaded: AtomicU64,
    pub(super) cache_hits: AtomicU64,
    pub(super) bytes_hashed: AtomicU64,
    pub(super) verify_ns: AtomicU64,
    pub(super) driver_ns: AtomicU64,
    pub(super) compat_loads: AtomicU64,
    pub(super) signatures_checked: AtomicU64,
    pub(super) research_loads: AtomicU64,
}

impl AtomicCounters {
    /// Their values now.
    pub(super) fn snapshot(&self) -> Counters {
        let c = self;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counters {
            modules_verified: get(&c.modules_verified),
            modules_loaded: get(&c.modules_loaded),
            cache_hits: get(&c.cache_hits),
            bytes_hashed: get(&c.bytes_hashed),
            verify_time: Duration::from_nanos(get(&c.verify_ns)),
            driver_time: Duration::from_nanos(get(&c.driver_ns)),
            compat_loads: get(&c.compat_loads),
            signatures_checked: get(&c.signatures_checked),
            research_loads: get(&c.research_loads),
        }
    }
}
