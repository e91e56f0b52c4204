//! Fetches the kernel release `cuda-aot.lock` pins, verified against `kernels-root.json`,
//! into `OUT_DIR`, and tells the program where it is.

fn main() {
    let fetched = cuda_aot_build::Fetch::from_env("kernels-root.json").run_for_build();
    let bundle = fetched.map(|f| f.bundle.display().to_string());
    println!("cargo:rustc-env=CUDA_AOT_BUNDLE={}", bundle.unwrap_or_default());
}
