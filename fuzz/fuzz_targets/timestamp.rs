//! libFuzzer entry point of the `timestamp` target: see `cuda_aot_fuzz::timestamp`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cuda_aot_fuzz::timestamp(data);
});
