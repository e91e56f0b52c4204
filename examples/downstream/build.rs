//! Fetches the kernel release `cuda-aot.lock` pins, verified against `kernels-root.json`,
//! into `OUT_DIR` (`cuda-aot.bundle`, which the program embeds).

fn main() {
    cuda_aot_build::Fetch::from_env("kernels-root.json").run_for_build();
}
