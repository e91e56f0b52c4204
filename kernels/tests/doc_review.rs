//! The production load of docs/review.md ("Production"), compiled so the doc cannot drift:
//! `xtask/tests/doc_blocks.rs` checks that the doc's block is the body below. Never run
//! (it needs a production registry and a GPU); the GPU tests run the same calls.

use cuda_aot::cuda::{CudaSlice, CudaStream};
use cuda_aot::{Policy, Runtime};

#[allow(dead_code)]
fn production_load(
    trust: Vec<u8>,
    stream: CudaStream,
    mut data: CudaSlice<u64>,
    twiddles: CudaSlice<u64>,
) -> cuda_aot::Result<()> {
    let rt = Runtime::open("/srv/cuda-aot/registry", &trust, Policy::production())?;
    rt.preload()?;
    let ntt = cuda_aot_kernels::gpu::NttFused::new(&rt)?; // ntt_bit_reverse + ntt_stages
    ntt.forward(&stream, &mut data, &twiddles)?; // equals ntt::forward
    Ok(())
}
