//! The foreign-style corpus (`kernels/foreign`) on a GPU: loaded through `Runtime::kernel`
//! by demangled C++ name, run, compared with the CPU references of
//! `cuda_aot_kernels::foreign`; a launch with a wrong argument size refused before the
//! driver is called; `foreign_poseidon`'s device globals filled through `Module::global`
//! (issue 19, item 4), its kernels compared with a CPU reference here; the three-file,
//! device-linked `foreign_ntt` reading the twiddles the host wrote (issue 19, item 1); and
//! `big_params`' kernels taking 4 KiB, 8 KiB and 32,000-byte structs by value (item 5).
//!
//! Needs the corpus published into a registry (docs/gpu.md):
//! `CUDA_AOT_FOREIGN_REGISTRY` (default `.cuda-aot/foreign-registry`) and
//! `CUDA_AOT_TEST_TRUST` (default `.cuda-aot/dev-keys/root.json`).
//!
//! One file per concern: `kernels` (kernels by name, argument sizes, the launch ABI),
//! `globals` (device globals), `linked_ntt` (the device-linked NTT) and `big_params`
//! (large by-value parameters), `sponge` (the six-file device-linked library of issue 44);
//! the helpers several of them use are here.

mod big_params;
mod globals;
mod kernels;
mod linked_ntt;
mod sponge;

use cuda_aot::{Policy, Runtime};
use cuda_aot_kernels::foreign::Field;

fn open() -> Runtime {
    open_at(&foreign_registry())
}

/// The foreign-style registry: `CUDA_AOT_FOREIGN_REGISTRY`, else the checkout's.
fn foreign_registry() -> std::path::PathBuf {
    std::env::var_os("CUDA_AOT_FOREIGN_REGISTRY")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| ".cuda-aot/foreign-registry".into())
}

/// The release registry (`cargo xtask release`): `CUDA_AOT_TEST_REGISTRY`, else the
/// checkout's.
fn release_registry() -> std::path::PathBuf {
    std::env::var_os("CUDA_AOT_TEST_REGISTRY")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| ".cuda-aot/registry".into())
}

/// A runtime over the registry folder `reg`, preloaded, trusting `CUDA_AOT_TEST_TRUST`
/// (default: the checkout's dev root).
fn open_at(reg: &std::path::Path) -> Runtime {
    let trust: std::path::PathBuf = std::env::var_os("CUDA_AOT_TEST_TRUST")
        .map(Into::into)
        .unwrap_or_else(|| ".cuda-aot/dev-keys/root.json".into());
    let trust = std::fs::read(&trust).unwrap_or_else(|e| panic!("{}: {e}", trust.display()));
    let rt = Runtime::open(reg, &trust, Policy::development()).unwrap();
    rt.preload().unwrap();
    println!(
        "device: {} {} driver {}",
        rt.device().name,
        rt.device().sm(),
        rt.device().driver_version_string()
    );
    rt
}

/// Deterministic field elements (xorshift), canonical for `F`.
fn elems<F: Field>(n: usize, seed: u64, wide: fn(u64) -> F) -> Vec<F> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            wide(s).canonical()
        })
        .collect()
}

fn grid(n: usize) -> (u32, u32, u32) {
    ((n as u32).div_ceil(256).clamp(1, 1024), 1, 1)
}

/// BabyBear, the field of poseidon_consts.cu.
const BB: u64 = 0x7800_0001;

fn bb_mul(a: u32, b: u32) -> u32 {
    (u64::from(a) * u64::from(b) % BB) as u32
}

fn bb_add(a: u32, b: u32) -> u32 {
    ((u64::from(a) + u64::from(b)) % BB) as u32
}
