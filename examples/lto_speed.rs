//! Link-time optimisation, measured: the same three-file NTT module built with a plain
//! device link (`foreign_ntt`) and with LTO (`foreign_ntt_lto`), from the foreign-style
//! registry. Both run `ntt_pow` (square-and-multiply through `ntt::mul`, which the plain
//! link calls across files and LTO inlines) on the same input; the results must be equal
//! (and match the CPU on a sample); the time of each launch is taken in interleaved pairs
//! (plain, LTO, LTO, plain, ...) in the same process, and the ratio LTO / plain is reported
//! as the median over the pairs with its spread. Nothing is asserted about speed.
//!
//! ```text
//! cargo run --release --example lto_speed -- [--registry DIR] [--trust FILE] [--pairs N]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use cuda_aot::cuda::{DevicePtrMut, KernelArg};
use cuda_aot::{Policy, Runtime};
use cuda_aot_kernels::foreign::bb31_pow;

/// BabyBear.
const P: u64 = 0x7800_0001;
/// Elements per launch.
const N: usize = 1 << 22;

fn run() -> Result<(), String> {
    let mut registry = PathBuf::from(".cuda-aot/foreign-registry");
    let mut trust = PathBuf::from(".cuda-aot/dev-keys/root.json");
    let mut pairs = 51usize;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--registry" => registry = it.next().ok_or("--registry needs a folder")?.into(),
            "--trust" => trust = it.next().ok_or("--trust needs a file")?.into(),
            "--pairs" => {
                pairs = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--pairs needs a number")?
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?}; usage: lto_speed [--registry DIR] [--trust FILE] [--pairs N]"
                ));
            }
        }
    }
    let root = std::fs::read(&trust).map_err(|e| format!("{}: {e}", trust.display()))?;
    let rt = Runtime::open(&registry, &root, Policy::development()).map_err(|e| e.to_string())?;
    rt.preload().map_err(|e| e.to_string())?;
    let stream = rt.stream().map_err(|e| e.to_string())?;
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let input: Vec<u32> = (0..N)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % P) as u32
        })
        .collect();
    let e = (P - 2) as u32;
    let modules = ["foreign_ntt", "foreign_ntt_lto"];
    let kernels: Vec<_> = modules
        .iter()
        .map(|m| rt.kernel(m, "ntt_pow").map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let mut bufs: Vec<_> = modules
        .iter()
        .map(|_| stream.clone_htod(&input).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    // One timed launch of module `i` (on its own copy of the input: the results stay
    // comparable, each launch maps x to x^e of the previous).
    let launch = |bufs: &mut Vec<_>, i: usize| -> Result<f64, String> {
        let buf: &mut cuda_aot::cuda::CudaSlice<u32> = &mut bufs[i];
        let (mut ptr, _g) = buf.device_ptr_mut(&stream);
        let (mut n, mut e) = (N as u32, e);
        let mut args = [
            KernelArg::new(&mut ptr),
            KernelArg::new(&mut n),
            KernelArg::new(&mut e),
        ];
        stream.synchronize().map_err(|e| e.to_string())?;
        let t = Instant::now();
        // SAFETY: (bb31_t*, uint32_t, uint32_t); the buffer holds N elements.
        unsafe { kernels[i].launch_args(&stream, (1024, 1, 1), (256, 1, 1), 0, &mut args) }
            .map_err(|e| e.to_string())?;
        stream.synchronize().map_err(|e| e.to_string())?;
        Ok(t.elapsed().as_secs_f64())
    };
    // Warm-up, and the correctness check: one launch each, equal results, CPU sample.
    launch(&mut bufs, 0)?;
    launch(&mut bufs, 1)?;
    let a = stream.clone_dtoh(&bufs[0]).map_err(|e| e.to_string())?;
    let b = stream.clone_dtoh(&bufs[1]).map_err(|e| e.to_string())?;
    if a != b {
        return Err("foreign_ntt and foreign_ntt_lto computed different results".into());
    }
    for i in (0..N).step_by(N / 64) {
        if a[i] != bb31_pow(input[i], u64::from(e)) {
            return Err(format!("element {i}: {} is not input^(p-2)", a[i]));
        }
    }
    let mut ratios = Vec::with_capacity(pairs);
    let (mut plain, mut lto) = (Vec::new(), Vec::new());
    for k in 0..pairs {
        // Alternate which goes first, so neither always runs on a warmer GPU.
        let (first, second) = if k % 2 == 0 { (0, 1) } else { (1, 0) };
        let t1 = launch(&mut bufs, first)?;
        let t2 = launch(&mut bufs, second)?;
        let (tp, tl) = if first == 0 { (t1, t2) } else { (t2, t1) };
        plain.push(tp);
        lto.push(tl);
        ratios.push(tl / tp);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (lo, hi) = {
        let mut r = ratios.clone();
        r.sort_by(f64::total_cmp);
        (r[r.len() / 10], r[r.len() * 9 / 10])
    };
    let m = median(&mut ratios);
    println!(
        "device: {} {} driver {}",
        rt.device().name,
        rt.device().sm(),
        rt.device().driver_version_string()
    );
    println!("ntt_pow over 2^22 BabyBear elements, e = p - 2, {pairs} interleaved pairs:");
    println!(
        "  foreign_ntt (plain device link)  median {:.3} ms",
        median(&mut plain) * 1e3
    );
    println!(
        "  foreign_ntt_lto (LTO)            median {:.3} ms",
        median(&mut lto) * 1e3
    );
    println!("  ratio LTO / plain: median {m:.3}, 10th-90th percentile [{lo:.3}, {hi:.3}]");
    println!("  results equal, and equal x^(p-2) on the CPU for 64 sampled elements");
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lto_speed: {e}");
            ExitCode::FAILURE
        }
    }
}
