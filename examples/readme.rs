//! The README's example, compiled by `cargo test` (xtask's tidy test keeps the two equal).
//! Run it in the checkout after `cargo xtask release`: on a GPU host it loads the release;
//! elsewhere it verifies the registry and then says that there is no CUDA driver.

use cuda_aot::{Policy, Runtime};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // What `cargo xtask release` made: a dev-signed registry and the dev trust root. A
    // production prover passes its registry, keys/root.json and Policy::production().
    let root = ".cuda-aot/dev-keys/root.json";
    let trust =
        std::fs::read(root).map_err(|e| format!("{root}: {e}; run `cargo xtask release` first"))?;
    let rt = Runtime::open(".cuda-aot/registry", &trust, Policy::development())?;
    rt.preload()?; // verify once, load every module once
    let ntt = rt.kernel("ntt", "ntt_butterfly")?; // a handle for cudarc streams
    println!("{} ready: {:?}", ntt.name(), rt.counters());
    Ok(())
}
