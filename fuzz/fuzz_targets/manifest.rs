//! libFuzzer entry point of the `manifest` target: see `cuda_aot_fuzz::manifest`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cuda_aot_fuzz::manifest(data);
});
