//! libFuzzer entry point of the `trust_root` target: see `cuda_aot_fuzz::trust_root`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cuda_aot_fuzz::trust_root(data);
});
