//! libFuzzer entry point of the `elf` target: see `cuda_aot_fuzz::elf`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cuda_aot_fuzz::elf(data);
});
