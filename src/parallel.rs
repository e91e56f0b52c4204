//! Work spread over scoped threads, for the verifier and the publisher when a bundle is
//! large: no thread pool and no dependency, results in input order, the first failure in
//! input order reported.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A bundle with at least this many bytes of blobs is worth hashing on several threads.
pub const MIN_BYTES: u64 = 1 << 20;
/// ... as is one with at least this many entries (each costs a file read, a parse and a
/// hash, about as much as starting a thread).
pub const MIN_ITEMS: usize = 32;

/// Threads for hashing a bundle: the available cores, at most 8.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// How many threads work of `items` items and `bytes` bytes gets: one when it is small
/// (fewer than [`MIN_ITEMS`] items and [`MIN_BYTES`] bytes), else up to [`threads`].
pub fn threads_for(items: usize, bytes: u64) -> usize {
    if items >= MIN_ITEMS || bytes >= MIN_BYTES {
        threads().min(items.max(1))
    } else {
        1
    }
}

/// `f` over `items` on up to `threads` scoped threads, results in item order. The first
/// error in item order is returned; once an item failed, later items may be skipped.
pub fn try_map<T, R, E>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> Result<R, E> + Sync,
) -> Result<Vec<R>, E>
where
    T: Sync,
    R: Send,
    E: Send,
{
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let first_failed = AtomicUsize::new(usize::MAX);
    let slots: Vec<Mutex<Option<Result<R, E>>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    // Items are taken in order, so every item before a failed one runs.
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= items.len() || i > first_failed.load(Ordering::Relaxed) {
                        break;
                    }
                    let r = f(&items[i]);
                    if r.is_err() {
                        first_failed.fetch_min(i, Ordering::Relaxed);
                    }
                    *slots[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                }
            });
        }
    });
    let mut out = Vec::with_capacity(items.len());
    for slot in slots {
        match slot.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(Ok(r)) => out.push(r),
            Some(Err(e)) => return Err(e),
            None => unreachable!("an item was skipped before any failure"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_their_order_and_the_first_failure_wins() {
        let items: Vec<u32> = (0..200).collect();
        let doubled = try_map(&items, 4, |&x| Ok::<_, String>(x * 2)).unwrap();
        assert_eq!(doubled, items.iter().map(|x| x * 2).collect::<Vec<_>>());
        let failed = try_map(&items, 4, |&x| {
            if x == 150 || x == 120 {
                Err(format!("item {x}"))
            } else {
                Ok(x)
            }
        });
        assert_eq!(failed, Err("item 120".to_string()));
        assert_eq!(try_map(&items[..0], 4, |&x| Ok::<_, ()>(x)), Ok(vec![]));
    }

    #[test]
    fn small_work_stays_on_one_thread() {
        assert_eq!(threads_for(3, 1000), 1);
        assert!(threads_for(MIN_ITEMS, 0) >= 1);
        assert_eq!(threads_for(2, MIN_BYTES).min(2), threads().min(2));
    }
}
