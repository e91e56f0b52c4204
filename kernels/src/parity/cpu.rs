//! The CPU side of parity: seeded input generators, the CPU steps that do what each entry
//! point does (by name, as parity specs write them), and running a whole
//! [`Program`] on the CPU.

use std::collections::BTreeMap;

use super::spec::{ArgValue, Buffer, Element, Program};
use crate::{goldilocks, ntt, research};

/// Buffer contents by name, little-endian as the GPU stores them.
pub type Buffers = BTreeMap<String, Vec<u8>>;

/// A CPU step: mutates the buffers as the entry point would, given the launch arguments.
pub type StepFn = fn(&mut Buffers, &[ArgValue]) -> Result<(), String>;

/// The CPU steps a parity spec can name.
pub const STEPS: &[(&str, StepFn)] = &[
    ("ntt::bit_reverse", step_bit_reverse),
    ("ntt::butterfly_stage", step_butterfly),
    ("ntt::scale", step_scale),
    ("ntt::forward", step_forward),
    ("research::ntt_stages", step_ntt_stages),
    ("goldilocks::add_vec", step_add),
    ("goldilocks::mul_vec", step_mul),
];

/// The generators a parity spec can name.
pub const GENERATORS: &[&str] = &["goldilocks", "u64", "bytes", "zeros", "ntt_twiddles"];

/// The step called `name`.
pub fn step(name: &str) -> Result<StepFn, String> {
    STEPS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .ok_or_else(|| {
            let known: Vec<&str> = STEPS.iter().map(|(n, _)| *n).collect();
            format!("unknown CPU step `{name}` (known: {})", known.join(", "))
        })
}

/// Checks that a generator exists.
pub fn check_generator(name: &str) -> Result<(), String> {
    if GENERATORS.contains(&name) {
        Ok(())
    } else {
        Err(format!(
            "unknown generator `{name}` (known: {})",
            GENERATORS.join(", ")
        ))
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): the generators' stream. Fixed here, so a report's
/// seeds reproduce its inputs on any host.
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The initial content of buffer number `index` of a case seeded with `seed`: its own
/// SplitMix64 stream seeded with `seed + index * 2^32`.
///
/// - `goldilocks`: canonical field elements (below p), uniform;
/// - `u64`: any 64-bit values (as u64 elements; for u32/u8 buffers the low bytes);
/// - `bytes`: uniform bytes;
/// - `zeros`;
/// - `ntt_twiddles(log_n)`: exactly [`ntt::twiddles`]`(log_n, false)` (no randomness).
pub fn generate(b: &Buffer, seed: u64, index: usize) -> Result<Vec<u8>, String> {
    let mut rng = SplitMix64::new(seed.wrapping_add((index as u64) << 32));
    let n = usize::try_from(b.elements).map_err(|_| "buffer too large".to_string())?;
    let words = |f: &mut dyn FnMut() -> u64| -> Vec<u8> {
        let s = b.element.size() as usize;
        let mut out = Vec::with_capacity(n * s);
        for _ in 0..n {
            out.extend_from_slice(&f().to_le_bytes()[..s]);
        }
        out
    };
    match (b.generator.name.as_str(), b.generator.args.as_slice()) {
        ("goldilocks", []) => {
            if b.element != Element::U64 {
                return Err(format!(
                    "buffer `{}`: goldilocks needs u64 elements",
                    b.name
                ));
            }
            Ok(words(&mut || loop {
                let v = rng.next_u64();
                if v < goldilocks::P {
                    break v;
                }
            }))
        }
        ("u64", []) => Ok(words(&mut || rng.next_u64())),
        ("bytes", []) => Ok(words(&mut || rng.next_u64())),
        ("zeros", []) => Ok(vec![0; n * b.element.size() as usize]),
        ("ntt_twiddles", [log_n]) => {
            let log_n = u32::try_from(*log_n)
                .ok()
                .filter(|l| (1..=ntt::TWO_ADICITY).contains(l))
                .ok_or_else(|| format!("ntt_twiddles({log_n}): log_n must be 1..=32"))?;
            let t = ntt::twiddles(log_n, false);
            if t.len() != n || b.element != Element::U64 {
                return Err(format!(
                    "buffer `{}`: ntt_twiddles({log_n}) is {} u64 elements, the buffer {} {:?}",
                    b.name,
                    t.len(),
                    n,
                    b.element
                ));
            }
            Ok(t.iter().flat_map(|w| w.to_le_bytes()).collect())
        }
        (name, args) => Err(format!(
            "buffer `{}`: generator `{name}` with {} argument(s) does not exist",
            b.name,
            args.len()
        )),
    }
}

/// Generates every buffer of `p`.
pub fn inputs(p: &Program) -> Result<Buffers, String> {
    p.buffers
        .iter()
        .enumerate()
        .map(|(i, b)| Ok((b.name.clone(), generate(b, p.seed, i)?)))
        .collect()
}

/// Runs `p`'s launches on the CPU from `inputs`, calling `after(launch index, buffers)`
/// after each; stops at the first error (or the first `Err` of `after`).
pub fn run<E: From<String>>(
    p: &Program,
    mut bufs: Buffers,
    mut after: impl FnMut(usize, &Buffers) -> Result<(), E>,
) -> Result<Buffers, E> {
    for (i, l) in p.launches.iter().enumerate() {
        step(&l.cpu)?(&mut bufs, &l.args)
            .map_err(|e| format!("launch {i} ({}, cpu {}): {e}", l.entry, l.cpu))?;
        after(i, &bufs)?;
    }
    Ok(bufs)
}

/// The whole-program reference applied to a copy of `inputs`.
pub fn reference(p: &Program, mut inputs: Buffers) -> Result<Buffers, String> {
    step(&p.reference)?(&mut inputs, &p.reference_args)
        .map_err(|e| format!("reference {}: {e}", p.reference))?;
    Ok(inputs)
}

fn u64s(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

fn put(bufs: &mut Buffers, name: &str, v: &[u64]) {
    bufs.insert(
        name.to_string(),
        v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    );
}

fn buf(args: &[ArgValue], i: usize) -> Result<&str, String> {
    match args.get(i) {
        Some(ArgValue::Buffer(b)) => Ok(b),
        other => Err(format!("argument {i}: a buffer is required, got {other:?}")),
    }
}

fn scalar(args: &[ArgValue], i: usize) -> Result<u64, String> {
    match args.get(i) {
        Some(ArgValue::U32(v)) => Ok(u64::from(*v)),
        Some(ArgValue::U64(v)) => Ok(*v),
        other => Err(format!("argument {i}: a scalar is required, got {other:?}")),
    }
}

fn arity(args: &[ArgValue], n: usize) -> Result<(), String> {
    if args.len() == n {
        Ok(())
    } else {
        Err(format!("{} arguments where {n} are required", args.len()))
    }
}

/// The u64 buffer `name`, checked to hold exactly `want` elements (the kernel would touch
/// that many: a shorter buffer is refused here, before any GPU launch).
fn words(bufs: &Buffers, name: &str, want: u64) -> Result<Vec<u64>, String> {
    let b = bufs
        .get(name)
        .ok_or_else(|| format!("no buffer `{name}`"))?;
    if b.len() as u64 != want.saturating_mul(8) {
        return Err(format!(
            "buffer `{name}` holds {} u64 elements, the launch uses {want}",
            b.len() / 8
        ));
    }
    Ok(u64s(b))
}

fn log_n_of(args: &[ArgValue], i: usize) -> Result<Option<u32>, String> {
    let l = scalar(args, i)?;
    Ok(u32::try_from(l).ok().filter(|l| (1..=32).contains(l)))
}

fn step_bit_reverse(bufs: &mut Buffers, a: &[ArgValue]) -> Result<(), String> {
    arity(a, 2)?;
    let Some(log_n) = log_n_of(a, 1)? else {
        return Ok(()); // the kernel returns
    };
    let mut d = words(bufs, buf(a, 0)?, 1 << log_n)?;
    ntt::bit_reverse(&mut d);
    put(bufs, buf(a, 0)?, &d);
    Ok(())
}

fn step_butterfly(bufs: &mut Buffers, a: &[ArgValue]) -> Result<(), String> {
    arity(a, 4)?;
    let Some(log_n) = log_n_of(a, 2)? else {
        return Ok(());
    };
    let stage = scalar(a, 3)?;
    if stage >= u64::from(log_n) {
        return Ok(());
    }
    let mut d = words(bufs, buf(a, 0)?, 1 << log_n)?;
    let tw = words(bufs, buf(a, 1)?, 1 << (log_n - 1))?;
    ntt::butterfly_stage(&mut d, &tw, stage as u32);
    put(bufs, buf(a, 0)?, &d);
    Ok(())
}

fn step_scale(bufs: &mut Buffers, a: &[ArgValue]) -> Result<(), String> {
    arity(a, 3)?;
    let (factor, n) = (scalar(a, 1)?, scalar(a, 2)?);
    let mut d = words(bufs, buf(a, 0)?, n)?;
    ntt::scale(&mut d, factor);
    put(bufs, buf(a, 0)?, &d);
    Ok(())
}

fn step_forward(bufs: &mut Buffers, a: &[ArgValue]) -> Result<(), String> {
    arity(a, 1)?;
    let name = buf(a, 0)?;
    let len = bufs.get(name).map_or(0, |b| b.len() as u64 / 8);
    if !len.is_power_of_two() || len > 1 << 32 {
        return Err(format!(
            "buffer `{name}`: {len} elements is not a power of two"
        ));
    }
    let mut d = words(bufs, name, len)?;
    ntt::forward(&mut d);
    put(bufs, name, &d);
    Ok(())
}

fn step_ntt_stages(bufs: &mut Buffers, a: &[ArgValue]) -> Result<(), String> {
    arity(a, 5)?;
    let Some(log_n) = log_n_of(a, 2)? else {
        return Ok(());
    };
    let (s0, stages) = (scalar(a, 3)?, scalar(a, 4)?);
    if stages == 0 || s0 >= u64::from(log_n) || stages > u64::from(log_n) - s0 {
        return Ok(());
    }
    let mut d = words(bufs, buf(a, 0)?, 1 << log_n)?;
    let tw = words(bufs, buf(a, 1)?, 1 << (log_n - 1))?;
    research::ntt_stages(&mut d, &tw, log_n, s0 as u32, stages as u32);
    put(bufs, buf(a, 0)?, &d);
    Ok(())
}

fn binary(
    bufs: &mut Buffers,
    a: &[ArgValue],
    f: fn(&[u64], &[u64]) -> Vec<u64>,
) -> Result<(), String> {
    arity(a, 4)?;
    let n = scalar(a, 3)?;
    let x = words(bufs, buf(a, 0)?, n)?;
    let y = words(bufs, buf(a, 1)?, n)?;
    words(bufs, buf(a, 2)?, n)?;
    put(bufs, buf(a, 2)?, &f(&x, &y));
    Ok(())
}

fn step_add(bufs: &mut Buffers, a: &[ArgValue]) -> Result<(), String> {
    binary(bufs, a, goldilocks::add_vec)
}

fn step_mul(bufs: &mut Buffers, a: &[ArgValue]) -> Result<(), String> {
    binary(bufs, a, goldilocks::mul_vec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parity::spec::tests::spec;

    #[test]
    fn inputs_are_seeded_and_reproducible() {
        let geometry = BTreeMap::from([("block".to_string(), 64), ("tile_log".to_string(), 3)]);
        let p = spec().programs(&geometry).unwrap().remove(0);
        let a = inputs(&p).unwrap();
        assert_eq!(a, inputs(&p).unwrap());
        let data = u64s(&a["data"]);
        assert_eq!(data.len(), 32);
        assert!(data.iter().all(|&v| v < goldilocks::P));
        assert_eq!(u64s(&a["twiddles"]), ntt::twiddles(5, false));
        let mut other = p.clone();
        other.seed += 1;
        assert_ne!(inputs(&other).unwrap()["data"], a["data"]);
        // SplitMix64's published first output for seed 0.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn the_fused_program_on_the_cpu_equals_the_released_transform() {
        for tile_log in [1, 2, 3, 5, 10] {
            let geometry = BTreeMap::from([
                ("block".to_string(), 64),
                ("tile_log".to_string(), tile_log),
            ]);
            let p = spec().programs(&geometry).unwrap().remove(0);
            let inp = inputs(&p).unwrap();
            let want = reference(&p, inp.clone()).unwrap();
            let got = run::<String>(&p, inp, |_, _| Ok(())).unwrap();
            assert_eq!(got["data"], want["data"], "tile_log {tile_log}");
        }
    }

    #[test]
    fn a_launch_on_a_short_buffer_is_refused_before_any_gpu_sees_it() {
        let mut bufs = Buffers::from([("data".to_string(), vec![0u8; 8 * 8])]);
        let err = step_bit_reverse(
            &mut bufs,
            &[ArgValue::Buffer("data".into()), ArgValue::U32(4)],
        )
        .unwrap_err();
        assert!(
            err.contains("holds 8 u64 elements, the launch uses 16"),
            "{err}"
        );
    }
}
