//! A prover's startup and first requests: open the registry made by `cargo xtask release`,
//! verify and load every module once, run the field ops, the NTT (forward then inverse)
//! and a Merkle layer on the GPU, compare each with its CPU reference, print the counters.
//!
//! ```text
//! Runs every module of the release set the registry holds (field_ops, ntt, the promoted
//! research kernel ntt_fused, merkle) and checks each against its CPU reference.
//!
//! cargo run --release --example prover -- [--registry DIR] [--trust FILE] [--production]
//!     [--allow-ptx] [--log-n N]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use cuda_aot::{Policy, Runtime};
use cuda_aot_kernels::gpu::{FieldOps, Merkle, Ntt, NttFused};
use cuda_aot_kernels::{goldilocks, merkle, ntt};

struct Args {
    registry: PathBuf,
    trust: PathBuf,
    production: bool,
    allow_ptx: bool,
    log_n: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        registry: PathBuf::from(".cuda-aot/registry"),
        trust: PathBuf::from(".cuda-aot/dev-keys/root.json"),
        production: false,
        allow_ptx: false,
        log_n: 20,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--registry" => a.registry = it.next().ok_or("--registry needs a folder")?.into(),
            "--trust" => a.trust = it.next().ok_or("--trust needs a file")?.into(),
            "--production" => a.production = true,
            "--allow-ptx" => a.allow_ptx = true,
            "--log-n" => a.log_n = it.next().and_then(|v| v.parse().ok()).ok_or("--log-n needs a number")?,
            "-h" | "--help" => return Err("usage: prover [--registry DIR] [--trust FILE] [--production] [--allow-ptx] [--log-n N]".into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

/// xorshift64*: deterministic, non-trivial inputs (never all zeros).
fn random_u64s(n: usize, mut s: u64) -> Vec<u64> {
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            s.wrapping_mul(0x2545_f491_4f6c_dd1d)
        })
        .collect()
}

fn check(name: &str, ok: bool, failures: &mut Vec<String>) {
    println!(
        "  {name:<34} {}",
        if ok {
            "matches CPU reference"
        } else {
            "MISMATCH"
        }
    );
    if !ok {
        failures.push(name.to_string());
    }
}

fn run(a: &Args) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let rt = open(a)?;
    let stream = rt.stream()?;
    let mut failures = Vec::new();
    // Every module of the release set the registry holds, against its CPU reference.
    let has = |m: &str| rt.selected().any(|x| x.identity.module.as_str() == m);
    let mut ran = 0;
    if has("field_ops") {
        ran += 1;
        field_ops(&rt, &stream, &mut failures)?;
    }
    if has("ntt") {
        ran += 1;
        ntt_round_trip(&rt, &stream, a.log_n, &mut failures)?;
    }
    // The promoted research NTT (several stages per launch), when the registry has it.
    if has("ntt_fused") {
        ran += 1;
        ntt_fused(&rt, &stream, a.log_n, &mut failures)?;
    }
    if has("merkle") {
        ran += 1;
        merkle_layer(&rt, &stream, &mut failures)?;
    }
    if ran == 0 {
        failures.push("the registry holds none of field_ops, ntt, ntt_fused, merkle".into());
    }

    let c = rt.counters();
    println!(
        "counters: modules_verified={} modules_loaded={} cache_hits={} bytes_hashed={} verify_time={:?} driver_time={:?} compat_loads={}",
        c.modules_verified,
        c.modules_loaded,
        c.cache_hits,
        c.bytes_hashed,
        c.verify_time,
        c.driver_time,
        c.compat_loads
    );
    Ok(failures)
}

type Stream = std::sync::Arc<cuda_aot::cuda::CudaStream>;
type Outcome = Result<(), Box<dyn std::error::Error>>;

/// Opens the registry under the policy the arguments select, loads every module once and
/// says what was loaded and how long start-up took.
fn open(a: &Args) -> Result<Runtime, Box<dyn std::error::Error>> {
    let trust = std::fs::read(&a.trust).map_err(|e| format!("{}: {e}", a.trust.display()))?;
    let mut policy = if a.production {
        Policy::production()
    } else {
        Policy::development()
    };
    if a.allow_ptx {
        policy = policy.with_ptx_compatibility();
    }
    let t = Instant::now();
    let rt = Runtime::open(&a.registry, &trust, policy)?;
    rt.preload()?;
    let startup = t.elapsed();
    let d = rt.device();
    println!(
        "device: {} ({}), {} SMs, driver CUDA {}",
        d.name,
        d.sm(),
        d.sm_count,
        d.driver_version_string()
    );
    println!(
        "startup (verify + select + load, index v{}): {startup:?}",
        rt.index_version()
    );
    for m in rt.selected() {
        println!(
            "  loaded {:<32} {} bytes, {}",
            m.label(),
            m.size,
            m.module_digest.short()
        );
    }
    Ok(rt)
}

/// Field ops on 4M elements, and a constant table the host fills.
fn field_ops(rt: &Runtime, stream: &Stream, failures: &mut Vec<String>) -> Outcome {
    // Field ops on 4M elements.
    let n = 1usize << 22;
    let (x, y) = (random_u64s(n, 1), random_u64s(n, 2));
    let alpha = 0x1234_5678_9abc_def1 % goldilocks::P;
    let fops = FieldOps::new(rt)?;
    let (dx, dy) = (stream.clone_htod(&x)?, stream.clone_htod(&y)?);
    let mut out = stream.alloc_zeros::<u64>(n)?;
    fops.add(stream, &dx, &dy, &mut out)?;
    let got = stream.clone_dtoh(&out)?;
    check(
        "gl_add (2^22)",
        got.iter()
            .zip(x.iter().zip(&y))
            .all(|(g, (a, b))| *g == goldilocks::add(*a, *b)),
        failures,
    );
    fops.mul(stream, &dx, &dy, &mut out)?;
    let got = stream.clone_dtoh(&out)?;
    check(
        "gl_mul (2^22)",
        got.iter()
            .zip(x.iter().zip(&y))
            .all(|(g, (a, b))| *g == goldilocks::mul(*a, *b)),
        failures,
    );
    fops.axpy(stream, alpha, &dx, &dy, &mut out)?;
    let got = stream.clone_dtoh(&out)?;
    check(
        "gl_axpy (2^22)",
        got == goldilocks::axpy(alpha, &x, &y),
        failures,
    );
    // A constant table the host fills: the polynomial gl_poly_eval evaluates.
    let coeffs: [u64; goldilocks::POLY_TERMS] =
        std::array::from_fn(|k| random_u64s(k + 1, 9 + k as u64)[k] % goldilocks::P);
    fops.set_poly(&coeffs)?;
    fops.poly_eval(stream, &dx, &mut out)?;
    check(
        "gl_poly_eval (2^22, host-filled __constant__ table)",
        stream.clone_dtoh(&out)? == goldilocks::poly_eval(&coeffs, &x),
        failures,
    );
    Ok(())
}

/// NTT forward, then inverse returns the input.
fn ntt_round_trip(
    rt: &Runtime,
    stream: &Stream,
    log_n: u32,
    failures: &mut Vec<String>,
) -> Outcome {
    // NTT forward, then inverse returns the input.
    let input: Vec<u64> = random_u64s(1 << log_n, 3)
        .into_iter()
        .map(|v| v % goldilocks::P)
        .collect();
    let nt = Ntt::new(rt)?;
    let fwd = stream.clone_htod(&ntt::twiddles(log_n, false))?;
    let inv = stream.clone_htod(&ntt::twiddles(log_n, true))?;
    let mut data = stream.clone_htod(&input)?;
    nt.forward(stream, &mut data, &fwd)?;
    let got = stream.clone_dtoh(&data)?;
    let mut expect = input.clone();
    ntt::forward(&mut expect);
    check(&format!("ntt forward (2^{log_n})"), got == expect, failures);
    nt.inverse(stream, &mut data, &inv)?;
    check(
        &format!("ntt inverse(forward(x)) == x (2^{log_n})"),
        stream.clone_dtoh(&data)? == input,
        failures,
    );
    Ok(())
}

/// The promoted research NTT equals the AOT one.
fn ntt_fused(rt: &Runtime, stream: &Stream, log_n: u32, failures: &mut Vec<String>) -> Outcome {
    let input: Vec<u64> = random_u64s(1 << log_n, 5)
        .into_iter()
        .map(|v| v % goldilocks::P)
        .collect();
    let fused = NttFused::new(rt)?;
    let tw = stream.clone_htod(&ntt::twiddles(log_n, false))?;
    let mut data = stream.clone_htod(&input)?;
    fused.forward(stream, &mut data, &tw)?;
    let mut expect = input;
    ntt::forward(&mut expect);
    check(
        &format!("ntt_fused forward (2^{log_n}) == ntt::forward"),
        stream.clone_dtoh(&data)? == expect,
        failures,
    );
    Ok(())
}

/// One Merkle layer: 2^18 parents from 2^19 children.
fn merkle_layer(rt: &Runtime, stream: &Stream, failures: &mut Vec<String>) -> Outcome {
    // One Merkle layer: 2^18 parents from 2^19 children.
    let parents = 1usize << 18;
    let children: Vec<u8> = random_u64s(parents * 8, 4)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mk = Merkle::new(rt)?;
    let dc = stream.clone_htod(&children)?;
    let mut dp = stream.alloc_zeros::<u8>(parents * 32)?;
    mk.layer(stream, &dc, &mut dp)?;
    check(
        "merkle_layer (2^18 parents)",
        stream.clone_dtoh(&dp)? == merkle::layer_bytes(&children),
        failures,
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(f) if f.is_empty() => {
            println!("all kernels match their CPU references");
            ExitCode::SUCCESS
        }
        Ok(f) => {
            eprintln!("FAILED: {}", f.join(", "));
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            if let Some(x) = e.downcast_ref::<cuda_aot::Error>() {
                eprintln!("Fix: {}", x.fix());
            }
            ExitCode::FAILURE
        }
    }
}
