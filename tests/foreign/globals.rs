//! Device globals: `foreign_poseidon`'s tables filled through `Module::global`
//! (kernels/foreign/src/poseidon_consts.cu; issue 19, item 4), copies of the wrong size
//! refused, signed sizes equal to the driver's, one copy per device.

use crate::{BB, bb_add, bb_mul, elems, grid, open};
use cuda_aot::cuda::{CudaError, DevicePtr, DevicePtrMut, KernelArg};
use cuda_aot::{Error, Policy, Runtime};

const WIDTH: usize = 8;
const ROUNDS: usize = 8;

/// `poseidon::Params`, as the device lays it out (16 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Params {
    rounds: u32,
    width: u32,
    domain_tag: u64,
}

/// Round constants and MDS matrix: canonical BabyBear elements from `seed`.
fn table(seed: u64) -> [[u32; WIDTH]; WIDTH] {
    let v = elems::<u32>(WIDTH * WIDTH, seed, |x| (x % BB) as u32);
    std::array::from_fn(|r| std::array::from_fn(|c| v[r * WIDTH + c]))
}

/// The CPU reference of `poseidon_permute` for one state.
fn permute(
    s: &mut [u32; WIDTH],
    rc: &[[u32; WIDTH]; ROUNDS],
    mds: &[[u32; WIDTH]; WIDTH],
    p: Params,
) {
    s[0] = bb_add(s[0], (p.domain_tag % BB) as u32);
    for row in rc.iter().take((p.rounds as usize).min(ROUNDS)) {
        for (x, c) in s.iter_mut().zip(row) {
            let y = bb_add(*x, *c);
            let y3 = bb_mul(bb_mul(y, y), y);
            *x = bb_mul(bb_mul(y3, y3), y);
        }
        let m: [u32; WIDTH] = std::array::from_fn(|i| {
            (0..WIDTH).fold(0, |acc, j| bb_add(acc, bb_mul(mds[i][j], s[j])))
        });
        *s = m;
    }
}

fn le_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_le(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The prover's pattern: after `preload`, fill the constant tables once through
/// `Module::global` (by demangled name and by symbol, as values and as bytes), then
/// launch; the permutation and the scratch table the kernels write match the CPU
/// reference, the initialised `__device__` PARAMS reads back its initial value, and the
/// counter the kernels bump reads back the number of permutations.
#[test]
#[ignore = "needs a CUDA device"]
fn gpu_poseidon_tables_filled_through_globals_match_the_cpu_reference() {
    let rt = open();
    let stream = rt.stream().unwrap();
    let module = rt.module("foreign_poseidon").unwrap();
    let rc = table(11);
    let mds = table(12);
    module
        .global("poseidon::ROUND_CONSTANTS")
        .unwrap()
        .write_values(&rc[..])
        .unwrap();
    let mds_global = module.global("_ZN8poseidon3MDSE").unwrap();
    assert_eq!(mds_global.name(), "poseidon::MDS");
    mds_global.write(&le_bytes(mds.as_flattened())).unwrap();

    // The initialised __device__ struct holds its static initial value.
    let params = module.global("poseidon::PARAMS").unwrap();
    let mut raw = [0u8; 16];
    params.read(&mut raw).unwrap();
    let initial = Params {
        rounds: u32::from_le_bytes(raw[0..4].try_into().unwrap()),
        width: u32::from_le_bytes(raw[4..8].try_into().unwrap()),
        domain_tag: u64::from_le_bytes(raw[8..16].try_into().unwrap()),
    };
    assert_eq!(
        initial,
        Params {
            rounds: 8,
            width: 8,
            domain_tag: u64::from_le_bytes(*b"nodiesop")
        }
    );

    let n = 4096usize;
    let states = elems::<u32>(n * WIDTH, 13, |x| (x % BB) as u32);
    let mut d = stream.clone_htod(&states).unwrap();
    let k = rt.kernel("foreign_poseidon", "poseidon_permute").unwrap();
    {
        let (mut pd, _g) = d.device_ptr_mut(&stream);
        let mut count = n as u32;
        let mut args = [KernelArg::new(&mut pd), KernelArg::new(&mut count)];
        // SAFETY: (uint32_t*, uint32_t); the buffer holds n states of WIDTH elements.
        unsafe { k.launch_args(&stream, grid(n), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    let got = stream.clone_dtoh(&d).unwrap();
    let mut want = states.clone();
    for s in want.chunks_exact_mut(WIDTH) {
        permute(s.try_into().unwrap(), &rc, &mds, initial);
    }
    assert_eq!(got, want, "poseidon_permute");
    let mut counter = [0u8; 8];
    module
        .global("poseidon::PERMUTATIONS")
        .unwrap()
        .read(&mut counter)
        .unwrap();
    assert_eq!(u64::from_le_bytes(counter), n as u64);

    // A table the kernel writes, read back through its global.
    let input = elems::<u32>(1024, 14, |x| (x % BB) as u32);
    let di = stream.clone_htod(&input).unwrap();
    let k = rt.kernel("foreign_poseidon", "poseidon_absorb").unwrap();
    {
        let (mut pi, _g) = di.device_ptr(&stream);
        let mut count = 1024u32;
        let mut args = [KernelArg::new(&mut pi), KernelArg::new(&mut count)];
        // SAFETY: (const uint32_t*, uint32_t); the buffer holds 1024 elements.
        unsafe { k.launch_args(&stream, grid(1024), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    stream.synchronize().unwrap();
    let scratch = module.global("poseidon::SCRATCH").unwrap();
    assert_eq!(scratch.size(), 4096);
    let mut back = vec![0u8; 4096];
    scratch.read(&mut back).unwrap();
    let want: Vec<u32> = (0..1024)
        .map(|i| bb_add(bb_mul(input[i], mds[0][i % WIDTH]), rc[0][i % WIDTH]))
        .collect();
    assert_eq!(from_le(&back), want, "poseidon_absorb");
    println!("foreign_poseidon: tables filled through globals; permute and absorb match");
}

/// A copy of the wrong size is refused before the driver, naming the module, the global
/// and both sizes; the device contents are unchanged. Reads are checked the same way.
#[test]
#[ignore = "needs a CUDA device"]
fn gpu_a_wrong_size_global_write_is_refused_and_changes_nothing() {
    let rt = open();
    let module = rt.module("foreign_poseidon").unwrap();
    let g = module.global("poseidon::ROUND_CONSTANTS").unwrap();
    let rc = table(21);
    g.write(&le_bytes(rc.as_flattened())).unwrap();
    let short = vec![0xffu8; 255];
    let err = g.write(&short).unwrap_err();
    assert_eq!(
        err,
        CudaError::GlobalSize {
            module: module.manifest().label(),
            global: "poseidon::ROUND_CONSTANTS".into(),
            op: "write",
            signed: 256,
            given: 255,
        }
    );
    println!("refused before the driver: {err}\nFix: {}", err.fix());
    // Seven rows of constants as values: 224 bytes where 256 are signed.
    assert!(matches!(
        g.write_values(&rc[..7]).unwrap_err(),
        CudaError::GlobalSize { given: 224, .. }
    ));
    let mut back = vec![0u8; 256];
    g.read(&mut back).unwrap();
    assert_eq!(from_le(&back), rc.as_flattened(), "unchanged");
    let mut big = vec![0u8; 257];
    assert!(matches!(
        g.read(&mut big).unwrap_err(),
        CudaError::GlobalSize {
            op: "read",
            given: 257,
            ..
        }
    ));
}

/// Every global of every selected module: the signed size is what the driver reports
/// (`Module::global` compares them at lookup); an unknown name lists the module's globals.
#[test]
#[ignore = "needs a CUDA device"]
fn gpu_signed_global_sizes_equal_what_the_driver_reports() {
    let rt = open();
    let mut seen = 0;
    for m in rt.selected() {
        let module = rt.module(m.identity.module.as_str()).unwrap();
        for g in m.globals.iter().flatten() {
            let handle = module.global(g.symbol.as_str()).unwrap();
            assert_eq!(handle.size() as u64, g.size, "{} {}", m.label(), g.name);
            assert_ne!(handle.device_ptr(), 0);
            println!("{} {}: {} bytes, {}", m.label(), g.name, g.size, g.space);
            seen += 1;
        }
    }
    assert!(seen >= 5, "foreign_poseidon defines five globals");
    let err = rt
        .module("foreign_poseidon")
        .unwrap()
        .global("poseidon::TWIDDLES")
        .unwrap_err();
    assert!(
        matches!(&err, Error::Unknown { kind: "global", available, .. }
            if available.contains("poseidon::MDS (256 bytes, constant)")
                && available.contains("poseidon::SCRATCH (4096 bytes, device)")),
        "{err}"
    );
}

/// With `Runtime::open_devices`, each device's module has its own copy of every global:
/// tables written on one device are not seen on another.
#[test]
#[ignore = "needs a CUDA device"]
fn gpu_each_device_has_its_own_globals() {
    let reg = std::env::var_os("CUDA_AOT_FOREIGN_REGISTRY")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| ".cuda-aot/foreign-registry".into());
    let trust: std::path::PathBuf = std::env::var_os("CUDA_AOT_TEST_TRUST")
        .map(Into::into)
        .unwrap_or_else(|| ".cuda-aot/dev-keys/root.json".into());
    let trust = std::fs::read(&trust).unwrap();
    let count = cuda_aot::cuda::device_count().unwrap();
    let devices: Vec<usize> = (0..count).collect();
    let rts = Runtime::open_devices(&reg, &trust, Policy::development(), &devices).unwrap();
    Runtime::preload_all(&rts).unwrap();
    for (i, rt) in rts.iter().enumerate() {
        let g = rt
            .module("foreign_poseidon")
            .unwrap()
            .global("poseidon::MDS")
            .unwrap();
        g.write(&le_bytes(table(100 + i as u64).as_flattened()))
            .unwrap();
    }
    for (i, rt) in rts.iter().enumerate() {
        let g = rt
            .module("foreign_poseidon")
            .unwrap()
            .global("poseidon::MDS")
            .unwrap();
        let mut back = vec![0u8; 256];
        g.read(&mut back).unwrap();
        assert_eq!(
            from_le(&back),
            table(100 + i as u64).as_flattened(),
            "device {i}"
        );
    }
    println!("{count} device(s): each has its own poseidon::MDS");
}
