//! libFuzzer entry point of the `bundle` target: see `cuda_aot_fuzz::bundle`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cuda_aot_fuzz::bundle(data);
});
