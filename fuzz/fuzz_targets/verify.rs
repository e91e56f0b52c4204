//! libFuzzer entry point of the `verify` target: see `cuda_aot_fuzz::verify`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cuda_aot_fuzz::verify(data);
});
