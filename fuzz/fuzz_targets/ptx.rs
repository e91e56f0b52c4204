//! libFuzzer entry point of the `ptx` target: see `cuda_aot_fuzz::ptx`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cuda_aot_fuzz::ptx(data);
});
