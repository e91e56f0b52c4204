//! Which jobs run, in what order, on how many workers: the split of a sharded build
//! (`--shard K/N`) and the worker pool that takes jobs longest first. What one job does is
//! [`Ctx::run_job`]'s; where its toolkit runs happen is the executor's.

use anyhow::Result;
use cuda_aot::Digest;
use std::cmp::Reverse;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use super::job::{Ctx, Done};
use super::shared_cache::Remote;
use super::{Keyed, Plan, Shard, nvcc};
use crate::message::Progress;
use crate::{paths, process};

/// Keeps the jobs of part `shard` in `plan` and returns their records: the split uses the
/// shared cache's timings, which only a whole build writes, so every shard of one run sees
/// the same weights (local records differ between machines).
pub(super) fn take_shard(
    plan: &mut Plan,
    keyed: Keyed,
    remote: Option<&Remote>,
    shard: Shard,
) -> Keyed {
    let keys: Vec<Digest> = keyed.iter().map(|(k, _)| *k).collect();
    let weights = remote.map_or_else(|| vec![None; keys.len()], |r| r.timings(&keys));
    let mine = shard_split(&weights, shard);
    plan.jobs = mine.iter().map(|&i| plan.jobs[i].clone()).collect();
    eprintln!(
        "build: shard {}/{}: {} job(s): {}",
        shard.index,
        shard.count,
        plan.jobs.len(),
        plan.jobs
            .iter()
            .map(|j| format!("{} {}", plan.spec.modules[j.module].name, j.target))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if plan.jobs.is_empty() {
        eprintln!(
            "build: shard {}/{} has no job: the release has fewer jobs than parts",
            shard.index, shard.count
        );
    }
    mine.iter().map(|&i| keyed[i].clone()).collect()
}

/// Positions of part `shard` when jobs of these weights (compile times; `None`: unknown)
/// are split into `shard.count` parts: known weights longest first, then the unknown in
/// order (each counted as the mean known weight, 1 when none is known), each job given to
/// the part with the least weight so far (the lowest-numbered on a tie). Deterministic, so
/// every machine that sees the same weights makes the same split; the parts cover every
/// job exactly once.
fn shard_split(weights: &[Option<u64>], shard: Shard) -> Vec<usize> {
    let weight = |i: usize| weights[i].map(|w| w.max(1));
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| (weight(i).is_none(), Reverse(weight(i).unwrap_or(0)), i));
    let known: Vec<u64> = (0..weights.len()).filter_map(weight).collect();
    let mean = if known.is_empty() {
        1
    } else {
        (known.iter().sum::<u64>() / known.len() as u64).max(1)
    };
    let mut load = vec![0u64; shard.count];
    let mut mine = Vec::new();
    for i in order {
        let part = (0..shard.count)
            .min_by_key(|&p| (load[p], p))
            .expect("at least one part");
        load[part] += weight(i).unwrap_or(mean);
        if part + 1 == shard.index {
            mine.push(i);
        }
    }
    mine.sort_unstable();
    mine
}

/// Runs every job of `ctx.plan` on up to `workers` threads, longest first (by the compile
/// time its newest record remembers; unknown counts as longest, so the last job to start is
/// a short one). A failed job stops the others from starting, and so does an interrupt.
/// Returns one slot per job, in job order: `None` for a job that never started.
pub(super) fn run_jobs(
    ctx: &Ctx,
    keyed: &Keyed,
    workers: usize,
    progress: &Progress,
) -> Vec<Option<Result<Done>>> {
    let plan = ctx.plan;
    let n = plan.jobs.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| Reverse(keyed[i].1.first().map_or(u64::MAX, |r| r.compile_ms)));

    let results: Vec<Mutex<Option<Result<Done>>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let fresh = keyed.iter().filter(|k| !k.1.is_empty()).count();
    progress.note(&format!(
        "{n} job(s) of {}, up to {} in parallel ({fresh} with a dependency record from an earlier build)",
        paths::shown(&plan.spec.path),
        workers.clamp(1, n)
    ));
    std::thread::scope(|s| {
        for _ in 0..workers.clamp(1, n) {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) && process::interrupted().is_none() {
                    let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    let r = run_one(ctx, i, keyed, progress);
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    *results[i].lock().expect("result slot") = Some(r);
                }
            });
        }
    });
    progress.finish_and_clear();
    let results: Vec<Option<Result<Done>>> = results
        .into_iter()
        .map(|m| m.into_inner().expect("result slot"))
        .collect();
    let hits = results
        .iter()
        .filter(|r| matches!(r, Some(Ok(Done::Cached { .. }))))
        .count();
    if hits > 0 {
        progress.note(&format!("{hits} of {n} job(s) taken from the build cache"));
    }
    results
}

/// Job `i`, with its progress line and nvcc's warnings (once per (module, target), on a
/// cache hit too).
fn run_one(ctx: &Ctx, i: usize, keyed: &Keyed, progress: &Progress) -> Result<Done> {
    let plan = ctx.plan;
    let job = &plan.jobs[i];
    let what = format!(
        "{} {} ({})",
        plan.spec.modules[job.module].name, job.target, job.kind
    );
    // A job with a dependency record is most likely a cache hit: only compiles are
    // announced line by line.
    let likely_hit = !keyed[i].1.is_empty();
    progress.start(&what, !likely_hit);
    let t = Instant::now();
    let r = ctx.run_job(job, &keyed[i].1);
    let outcome = match &r {
        Ok(Done::Cached { .. }) => None,
        Ok(Done::Compiled { .. }) => {
            Some(format!("compiled in {:.2} s", t.elapsed().as_secs_f64()))
        }
        Err(_) if process::interrupted().is_some() => Some("interrupted".to_string()),
        Err(_) => Some("FAILED".to_string()),
    };
    progress.finish(&what, outcome.as_deref());
    let warnings = match &r {
        Ok(Done::Cached { warnings, .. }) | Ok(Done::Compiled { warnings, .. }) => {
            warnings.as_slice()
        }
        Err(_) => &[],
    };
    if !warnings.is_empty() {
        progress.warn(&format!(
            "{} nvcc warning(s) for {}:\n{}",
            warnings.iter().filter(|l| l.contains("warning")).count(),
            plan.label(job),
            nvcc::indent(&warnings.join("\n"))
        ));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(weights: &[Option<u64>], n: usize) -> Vec<Vec<usize>> {
        (1..=n)
            .map(|index| shard_split(weights, Shard { index, count: n }))
            .collect()
    }

    #[test]
    fn shards_cover_every_job_once_and_balance_known_compile_times() {
        let w = [Some(100), Some(10), Some(90), Some(20), Some(80), Some(30)];
        let p = parts(&w, 2);
        let mut all: Vec<usize> = p.concat();
        all.sort_unstable();
        assert_eq!(all, (0..6).collect::<Vec<_>>());
        let load = |part: &[usize]| part.iter().map(|&i| w[i].unwrap()).sum::<u64>();
        // 330 in all: longest first gives 160 and 170, not the 220/110 of halving in order.
        assert_eq!((load(&p[0]), load(&p[1])), (160, 170));
        assert_eq!(p, parts(&w, 2), "deterministic");
    }

    #[test]
    fn unknown_compile_times_spread_evenly_and_more_parts_than_jobs_leave_some_empty() {
        let p = parts(&[None; 5], 2);
        assert_eq!(p, vec![vec![0, 2, 4], vec![1, 3]]);
        let p = parts(&[Some(5), None, None], 4);
        assert_eq!(p.iter().filter(|x| x.is_empty()).count(), 1);
        assert_eq!(p.concat().len(), 3);
        assert_eq!("2/4".parse::<Shard>(), Ok(Shard { index: 2, count: 4 }));
        for bad in ["0/4", "5/4", "1/0", "2", "a/b"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }
}
