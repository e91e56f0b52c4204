//! libFuzzer entry point of the `index` target: see `cuda_aot_fuzz::index`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cuda_aot_fuzz::index(data);
});
