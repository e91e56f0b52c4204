//! libFuzzer entry point of the `rotate` target: see `cuda_aot_fuzz::rotate`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cuda_aot_fuzz::rotate(data);
});
