//! libFuzzer entry point of the `envelope` target: see `cuda_aot_fuzz::envelope`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cuda_aot_fuzz::envelope(data);
});
