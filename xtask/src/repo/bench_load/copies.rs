//! The fresh-copy diagnostics: the same module bytes loaded with a bare `cuModuleLoadData`
//! (+ unload) from buffers in different states, to tell why an image copied into a new
//! allocation just before the clock loads faster than the runtime's verified bytes in place
//! (`*_bare_fresh_copy_vs_in_place`, 0.937–0.985 in the committed H200 runs): the cache
//! state of the bytes, the freshness of the allocation and its address, or noise.
//!
//! Each arm loads every selected module one at a time, each after its own fresh
//! `Runtime::open` (as the two arms of the puzzle do), and times only the driver call
//! (except [`Treatment::InsideClock`]); what differs is the buffer handed to the driver and
//! what was done to it just before the clock:
//!
//! - `copy_read_in_place`, the reference (the puzzle's in-place arm): the runtime's
//!   verified bytes, read;
//! - `copy_read_in_place_again`: the same again, this block's A/A (order and noise alone);
//! - `copy_written_in_place`: a long-lived buffer (the same address every repetition),
//!   its bytes copied out to a scratch buffer and back: just-written lines, no allocation;
//! - `copy_fresh_alloc`: a new allocation each repetition, made while the previous one
//!   still lives (so never at the previous repetition's address; the puzzle's copy arm
//!   lets malloc hand that address back), filled from the verified bytes;
//! - `copy_reused_buffer`: the long-lived buffer of `copy_written_in_place`, filled from
//!   the verified bytes: the same copy into a buffer that is not new;
//! - `copy_inside_clock`: the verified bytes read, then copied into a new allocation
//!   inside the clock: what a prover that copies before loading pays;
//! - `copy_reused_read`: another long-lived buffer, never written after it was filled,
//!   read: a long-lived buffer treated like the reference.
//!
//! Reading the ratios: `copy_written_vs_reused_read` (same kind of buffer, written against
//! read) is the cache state; `copy_fresh_alloc_vs_reused_buffer` (the same copy, into a new
//! allocation against into the long-lived buffer) is the allocation and its address;
//! `copy_reused_read_vs_read` is a long-lived buffer against the runtime's own allocation,
//! both only read; `copy_read_again_vs_read` is what noise and order alone give.

use anyhow::{Context, Result};
use cuda_aot::cuda::CudaContext;
use cuda_aot::{Policy, Runtime};
use cuda_aot_baseline as raw;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::Args;
use super::run::{Row, interleave, warm};
use super::stats::Ratio;

/// What an arm does to the bytes before it hands them to the driver (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Treatment {
    /// The runtime's verified bytes, read just before the clock.
    ReadInPlace,
    /// The long-lived buffer, its bytes copied out to a scratch buffer and back.
    WrittenInPlace,
    /// A new allocation filled from the verified bytes while the previous one still lives.
    FreshAlloc,
    /// The long-lived buffer, filled from the verified bytes.
    ReusedBuffer,
    /// A new allocation made and filled inside the clock.
    InsideClock,
    /// A long-lived buffer that is only ever read.
    ReusedRead,
}

/// The arms: row name and treatment, in row order.
const ARMS: [(&str, Treatment); 7] = [
    ("copy_read_in_place", Treatment::ReadInPlace),
    ("copy_read_in_place_again", Treatment::ReadInPlace),
    ("copy_written_in_place", Treatment::WrittenInPlace),
    ("copy_fresh_alloc", Treatment::FreshAlloc),
    ("copy_reused_buffer", Treatment::ReusedBuffer),
    ("copy_inside_clock", Treatment::InsideClock),
    ("copy_reused_read", Treatment::ReusedRead),
];

/// The buffers of one module that outlive the repetitions.
struct Buffers {
    /// Written by `WrittenInPlace` and `ReusedBuffer`: the same address every time.
    written: Box<[u8]>,
    /// Where `WrittenInPlace` copies the bytes out to.
    scratch: Box<[u8]>,
    /// `FreshAlloc`'s current copy; replaced (after the next is allocated) every repetition.
    fresh: Box<[u8]>,
    /// Only read (`ReusedRead`).
    read_only: Box<[u8]>,
}

impl Args {
    /// The fresh-copy diagnostics of `registry` (module docs): seven arms interleaved over
    /// `ratio_reps` repetitions in the balanced order, each against `copy_read_in_place`,
    /// plus the two contrasts that separate cache state from allocation. Reported, not gated.
    pub(super) fn copy_arms(
        &self,
        scope: &str,
        registry: &Path,
        trust: &[u8],
        policy: &Policy,
        ctx: &Arc<CudaContext>,
    ) -> Result<(Vec<Row>, Vec<Ratio>)> {
        let (names, mut buffers, total) = {
            let rt = Runtime::open(registry, trust, policy.clone())?;
            let names: Vec<String> = rt
                .selected()
                .map(|m| m.identity.module.to_string())
                .collect();
            let buffers: Vec<Buffers> = names
                .iter()
                .map(|n| {
                    let bytes = rt.verified_bytes(n).expect("selected");
                    Buffers {
                        written: bytes.into(),
                        scratch: bytes.into(),
                        fresh: bytes.into(),
                        read_only: bytes.into(),
                    }
                })
                .collect();
            let total = rt.selected().map(|m| m.size as usize).sum();
            (names, buffers, total)
        };
        // Where FreshAlloc's copies lay, to show that each repetition's address was new.
        let mut fresh_addresses = BTreeSet::new();
        let samples = interleave(self.order, ARMS.len(), self.ratio_reps, |k, _| {
            let (method, treatment) = ARMS[k];
            let mut sum = Duration::ZERO;
            for (name, b) in names.iter().zip(buffers.iter_mut()) {
                let rt = Runtime::open(registry, trust, policy.clone())?;
                let image = rt.verified_bytes(name).expect("selected");
                let took = match treatment {
                    Treatment::ReadInPlace => {
                        warm(&[image]);
                        raw::time_module_load(ctx, image, false)
                    }
                    Treatment::WrittenInPlace => {
                        b.scratch.copy_from_slice(&b.written);
                        b.written.copy_from_slice(&b.scratch);
                        raw::time_module_load(ctx, &b.written, false)
                    }
                    Treatment::FreshAlloc => {
                        // Allocated while the previous copy is alive, so never at its address;
                        // that one is freed before the clock starts.
                        let copy: Box<[u8]> = image.into();
                        drop(std::mem::replace(&mut b.fresh, copy));
                        fresh_addresses.insert(b.fresh.as_ptr() as usize);
                        raw::time_module_load(ctx, &b.fresh, false)
                    }
                    Treatment::ReusedBuffer => {
                        b.written.copy_from_slice(image);
                        raw::time_module_load(ctx, &b.written, false)
                    }
                    Treatment::InsideClock => {
                        warm(&[image]);
                        raw::time_cubin_load_copying(ctx, image)
                    }
                    Treatment::ReusedRead => {
                        warm(&[&b.read_only]);
                        raw::time_module_load(ctx, &b.read_only, false)
                    }
                };
                sum += took.with_context(|| format!("{scope} {method}: loading {name}"))?;
            }
            Ok(sum)
        })?;
        let loads = (self.ratio_reps.max(2) + 1) * names.len();
        eprintln!(
            "note: {scope} copy_fresh_alloc: {} distinct buffer addresses over {loads} copies \
             ({} modules; each copy allocated before the previous one is freed)",
            fresh_addresses.len(),
            names.len()
        );
        let rows: Vec<Row> = ARMS
            .iter()
            .zip(samples)
            .map(|(&(method, _), s)| {
                let mut row = Row::new(scope, method, total);
                row.samples = s;
                row
            })
            .collect();
        let ratio = |name: &str, a: usize, b: usize| {
            rows[a].ratio(&rows[b], &format!("{scope}_{name}"), None)
        };
        let ratios = vec![
            ratio("copy_read_again_vs_read", 1, 0),
            ratio("copy_written_in_place_vs_read", 2, 0),
            ratio("copy_fresh_alloc_vs_read", 3, 0),
            ratio("copy_reused_buffer_vs_read", 4, 0),
            ratio("copy_inside_clock_vs_read", 5, 0),
            ratio("copy_reused_read_vs_read", 6, 0),
            // The two contrasts: cache state (same kind of buffer, written against read) and
            // allocation (the same copy, into a new allocation against the long-lived one).
            ratio("copy_written_vs_reused_read", 2, 6),
            ratio("copy_fresh_alloc_vs_reused_buffer", 3, 4),
        ];
        Ok((rows, ratios))
    }
}
