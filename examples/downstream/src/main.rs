//! A downstream prover: a single binary holding the kernel bundle its build fetched
//! (embedded, used in place). At start-up it verifies the bundle against the trust root it
//! was built with, opens it on this machine's GPU and launches a kernel, checked against its
//! CPU reference; or it says why it cannot (no driver, no binary for this GPU).

use std::process::ExitCode;

use cuda_aot::cuda::{CUdeviceptr, DevicePtrMut, KernelArg};
use cuda_aot::{Policy, Runtime};

/// The release `cuda-aot.lock` pins, as the build script fetched and verified it.
static BUNDLE: &[u8] = cuda_aot::include_bundle!();

/// The trust root the project ships with (the one its lock was made under).
const TRUST_ROOT: &[u8] = include_bytes!("../kernels-root.json");

/// `gamma_twice(unsigned* data, unsigned n)`: data[i] *= 2, on the GPU, against the CPU.
fn run_gamma(rt: &Runtime) -> Result<(), Box<dyn std::error::Error>> {
    let kernel = rt.kernel("gamma", "gamma_twice")?;
    let stream = rt.stream()?;
    let input: Vec<u32> = (0..4096u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let mut data = stream.clone_htod(&input)?;
    {
        let (ptr, _guard) = data.device_ptr_mut(&stream);
        let mut ptr: CUdeviceptr = ptr;
        let mut n = input.len() as u32;
        let mut args = [KernelArg::new(&mut ptr), KernelArg::new(&mut n)];
        // SAFETY: gamma_twice(unsigned*, unsigned): `data` holds n u32 on this stream, and
        // 16 blocks of 256 threads touch exactly those.
        unsafe { kernel.launch_args(&stream, (16, 1, 1), (256, 1, 1), 0, &mut args)? };
    }
    let got = stream.clone_dtoh(&data)?;
    let want: Vec<u32> = input.iter().map(|x| x.wrapping_mul(2)).collect();
    if got != want {
        return Err("gamma_twice: the GPU's result differs from the CPU reference".into());
    }
    println!(
        "gamma_twice on {} ({}): {} values match the CPU reference",
        rt.device().name,
        rt.device().sm(),
        got.len()
    );
    Ok(())
}

fn main() -> ExitCode {
    if BUNDLE.is_empty() {
        eprintln!(
            "the kernel bundle is missing: this build could not fetch it (see the build's warnings)"
        );
        return ExitCode::from(2);
    }
    println!("embedded bundle: {} bytes", BUNDLE.len());
    // Verified offline first: no driver needed.
    let embedded = match cuda_aot::bundle::Embedded::parse(BUNDLE) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}\nFix: {}", e.fix());
            return ExitCode::from(1);
        }
    };
    match cuda_aot::verify::verify_all(&embedded, TRUST_ROOT, Default::default(), &Default::default()) {
        Ok(v) => println!(
            "verified: {} module binaries of index v{}",
            v.modules().len(),
            v.metadata().index().version
        ),
        Err(f) => {
            eprintln!("the kernel bundle does not verify: {}\nFix: {}", f.error, f.error.fix());
            return ExitCode::from(1);
        }
    }
    let policy = Policy::development().without_rollback_protection();
    match Runtime::open_embedded(BUNDLE, TRUST_ROOT, policy) {
        Ok(rt) => {
            let names: Vec<String> = rt.selected().map(|m| m.label()).collect();
            println!("loaded on {}: {}", rt.device().name, names.join(", "));
            match run_gamma(&rt) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(1)
                }
            }
        }
        Err(cuda_aot::Error::Cuda(fault)) if fault.is_driver_missing() => {
            let e = cuda_aot::Error::Cuda(fault);
            println!("no CUDA driver on this machine: {e}");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("cannot open the bundle here: {e}\nFix: {}", e.fix());
            ExitCode::from(1)
        }
    }
}
