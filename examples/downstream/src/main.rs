//! A downstream prover: verifies the kernel bundle its build fetched, against the trust
//! root it was built with, then opens it on this machine's GPU and launches a kernel, or
//! says why it cannot (no driver, no device).

use std::process::ExitCode;

use cuda_aot::source::DirSource;
use cuda_aot::{Policy, Runtime};

/// The trust root the project ships with (the one its lock was made under).
const TRUST_ROOT: &[u8] = include_bytes!("../kernels-root.json");

fn main() -> ExitCode {
    let bundle = env!("CUDA_AOT_BUNDLE");
    if bundle.is_empty() {
        eprintln!("the kernel bundle is missing: this build could not fetch it (see the build's warnings)");
        return ExitCode::from(2);
    }
    // Verified offline first: no driver needed.
    let src = DirSource::new(bundle);
    let verified = match cuda_aot::verify::verify_all(&src, TRUST_ROOT, Default::default(), &Default::default()) {
        Ok(v) => v,
        Err(f) => {
            eprintln!("the kernel bundle does not verify: {}", f.error);
            return ExitCode::from(1);
        }
    };
    println!(
        "verified: {} module binaries of index v{}",
        verified.modules().len(),
        verified.metadata().index().version
    );
    match Runtime::open(bundle, TRUST_ROOT, Policy::development().without_rollback_protection()) {
        Ok(rt) => {
            let names: Vec<String> = rt.selected().map(|m| m.label()).collect();
            println!("loaded on {}: {}", rt.device().name, names.join(", "));
            ExitCode::SUCCESS
        }
        Err(cuda_aot::Error::Cuda(fault)) if fault.is_driver_missing() => {
            let e = cuda_aot::Error::Cuda(fault);
            println!("no CUDA driver on this machine: {e}");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("cannot open the bundle here: {e}");
            ExitCode::from(1)
        }
    }
}
