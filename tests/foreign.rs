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

use cuda_aot::cuda::{CudaError, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, KernelArg};
use cuda_aot::{Error, Policy, Runtime};
use cuda_aot_kernels::foreign::{self, BB31_P, Field};
use cuda_aot_kernels::goldilocks;

fn open() -> Runtime {
    let reg = std::env::var_os("CUDA_AOT_FOREIGN_REGISTRY")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| ".cuda-aot/foreign-registry".into());
    let trust: std::path::PathBuf = std::env::var_os("CUDA_AOT_TEST_TRUST")
        .map(Into::into)
        .unwrap_or_else(|| ".cuda-aot/dev-keys/root.json".into());
    let trust = std::fs::read(&trust).unwrap_or_else(|e| panic!("{}: {e}", trust.display()));
    let rt = Runtime::open(&reg, &trust, Policy::development()).unwrap();
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

const N: usize = 1 << 14;

fn grid(n: usize) -> (u32, u32, u32) {
    ((n as u32).div_ceil(256).clamp(1, 1024), 1, 1)
}

/// Runs every kernel of the corpus for field `F` and compares with the CPU reference.
fn run_field<F: Field + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    rt: &Runtime,
    stream: &std::sync::Arc<CudaStream>,
    wide: fn(u64) -> F,
) {
    let t = F::CPP;
    let a = elems::<F>(N, 1, wide);
    let b = elems::<F>(N, 2, wide);
    let (da, db) = (
        stream.clone_htod(&a).unwrap(),
        stream.clone_htod(&b).unwrap(),
    );
    let mut n = N as u32;

    // fields::vec_mul<F>, by its demangled name.
    let k = rt
        .kernel("foreign_fields", &format!("fields::vec_mul<{t}>"))
        .unwrap();
    let mut out: CudaSlice<F> = stream.alloc_zeros(N).unwrap();
    {
        let (mut po, _g0) = out.device_ptr_mut(stream);
        let (mut pa, _g1) = da.device_ptr(stream);
        let (mut pb, _g2) = db.device_ptr(stream);
        let mut args = [
            KernelArg::new(&mut po),
            KernelArg::new(&mut pa),
            KernelArg::new(&mut pb),
            KernelArg::new(&mut n),
        ];
        // SAFETY: (F*, const F*, const F*, uint32_t); every buffer holds N elements.
        unsafe { k.launch_args(stream, grid(N), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    assert_eq!(
        stream.clone_dtoh(&out).unwrap(),
        foreign::vec_mul(&a, &b),
        "vec_mul<{t}>"
    );

    // fields::vec_axpy<F>, by its full signature: alpha is passed by value as F.
    let k = rt
        .kernel(
            "foreign_fields",
            &format!("fields::vec_axpy<{t}>({t}*, {t}, {t} const*, unsigned int)"),
        )
        .unwrap();
    let mut alpha = elems::<F>(1, 3, wide)[0];
    let mut dy = stream.clone_htod(&b).unwrap();
    {
        let (mut py, _g0) = dy.device_ptr_mut(stream);
        let (mut pa, _g1) = da.device_ptr(stream);
        let mut args = [
            KernelArg::new(&mut py),
            KernelArg::new(&mut alpha),
            KernelArg::new(&mut pa),
            KernelArg::new(&mut n),
        ];
        // SAFETY: (F*, F, const F*, uint32_t); both buffers hold N elements.
        unsafe { k.launch_args(stream, grid(N), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    let mut want = b.clone();
    foreign::vec_axpy(&mut want, alpha, &a);
    assert_eq!(stream.clone_dtoh(&dy).unwrap(), want, "vec_axpy<{t}>");

    // ntt::bit_rev_permutation<F> (device assert: lg_n <= 31).
    let k = rt
        .kernel("foreign_fields", &format!("ntt::bit_rev_permutation<{t}>"))
        .unwrap();
    let mut dd = stream.clone_htod(&a).unwrap();
    {
        let (mut pd, _g) = dd.device_ptr_mut(stream);
        let mut lg_n = N.trailing_zeros();
        let mut args = [KernelArg::new(&mut pd), KernelArg::new(&mut lg_n)];
        // SAFETY: (F*, uint32_t); the buffer holds 2^lg_n elements.
        unsafe { k.launch_args(stream, grid(N), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    let mut want = a.clone();
    foreign::bit_rev_permutation(&mut want);
    assert_eq!(
        stream.clone_dtoh(&dd).unwrap(),
        want,
        "bit_rev_permutation<{t}>"
    );

    // poly::eval<F>, from the define variant of poly.cu for this field.
    let module = if t == "gl64_t" {
        "foreign_poly_gl"
    } else {
        "foreign_poly_bb"
    };
    let k = rt.kernel(module, &format!("poly::eval<{t}>")).unwrap();
    let coeffs = elems::<F>(17, 4, wide);
    let dc = stream.clone_htod(&coeffs).unwrap();
    let mut dout: CudaSlice<F> = stream.alloc_zeros(N).unwrap();
    {
        let (mut po, _g0) = dout.device_ptr_mut(stream);
        let (mut pc, _g1) = dc.device_ptr(stream);
        let (mut px, _g2) = db.device_ptr(stream);
        let mut deg = 16u32;
        let mut args = [
            KernelArg::new(&mut po),
            KernelArg::new(&mut pc),
            KernelArg::new(&mut deg),
            KernelArg::new(&mut px),
            KernelArg::new(&mut n),
        ];
        // SAFETY: (F*, const F*, uint32_t, const F*, uint32_t); coeffs holds deg + 1, the
        // others N elements.
        unsafe { k.launch_args(stream, grid(N), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    assert_eq!(
        stream.clone_dtoh(&dout).unwrap(),
        foreign::poly_eval(&coeffs, &b),
        "poly::eval<{t}>"
    );
    println!("{t}: vec_mul, vec_axpy, bit_rev_permutation, poly::eval match the CPU references");
}

#[test]
#[ignore = "needs a CUDA device"]
fn gpu_foreign_kernels_by_demangled_name_match_their_cpu_references() {
    let rt = open();
    let stream = rt.stream().unwrap();
    run_field::<u64>(&rt, &stream, |x| x % goldilocks::P);
    run_field::<u32>(&rt, &stream, |x| (x % u64::from(BB31_P)) as u32);

    // The FEATURE_DERIVATIVE variant has a kernel the other variant lacks.
    let k = rt
        .kernel("foreign_poly_gl", "poly::derivative<gl64_t>")
        .unwrap();
    let coeffs = elems::<u64>(33, 5, |x| x % goldilocks::P);
    let dc = stream.clone_htod(&coeffs).unwrap();
    let mut dout: CudaSlice<u64> = stream.alloc_zeros(32).unwrap();
    {
        let (mut po, _g0) = dout.device_ptr_mut(&stream);
        let (mut pc, _g1) = dc.device_ptr(&stream);
        let mut deg = 32u32;
        let mut args = [
            KernelArg::new(&mut po),
            KernelArg::new(&mut pc),
            KernelArg::new(&mut deg),
        ];
        // SAFETY: (gl64_t*, const gl64_t*, uint32_t); out holds deg, coeffs deg + 1.
        unsafe { k.launch_args(&stream, (1, 1, 1), (64, 1, 1), 0, &mut args) }.unwrap();
    }
    assert_eq!(
        stream.clone_dtoh(&dout).unwrap(),
        foreign::poly_derivative(&coeffs)
    );
    let err = rt
        .kernel("foreign_poly_bb", "poly::derivative<bb31_t>")
        .unwrap_err();
    assert!(
        matches!(&err, Error::Unknown { available, .. } if available == "poly::eval<bb31_t>(bb31_t*, bb31_t const*, unsigned int, bb31_t const*, unsigned int)"),
        "{err}"
    );

    // The same kernel by symbol, by name and by signature: one function.
    let by_symbol = rt
        .kernel(
            "foreign_fields",
            "_ZN3ntt19bit_rev_permutationI6bb31_tEEvPT_j",
        )
        .unwrap();
    let by_name = rt
        .kernel("foreign_fields", "ntt::bit_rev_permutation<bb31_t>")
        .unwrap();
    assert_eq!(by_symbol.cu_function(), by_name.cu_function());
    assert_eq!(by_name.display_name(), "ntt::bit_rev_permutation<bb31_t>");
}

#[test]
#[ignore = "needs a CUDA device"]
fn gpu_a_wrong_argument_size_is_refused_before_the_driver_is_called() {
    let rt = open();
    let stream = rt.stream().unwrap();
    let k = rt
        .kernel("foreign_fields", "fields::vec_axpy<bb31_t>")
        .unwrap();
    let y: Vec<u32> = (0..1024).collect();
    let x: Vec<u32> = (0..1024).map(|i| i * 7).collect();
    let mut dy = stream.clone_htod(&y).unwrap();
    let dx = stream.clone_htod(&x).unwrap();
    let mut n = 1024u32;
    let err = {
        let (mut py, _g0) = dy.device_ptr_mut(&stream);
        let (mut px, _g1) = dx.device_ptr(&stream);
        let mut wide_alpha = 3u64; // a Goldilocks-sized alpha: 8 bytes where 4 are signed
        let mut args = [
            KernelArg::new(&mut py),
            KernelArg::new(&mut wide_alpha),
            KernelArg::new(&mut px),
            KernelArg::new(&mut n),
        ];
        // SAFETY: refused before the driver (size mismatch): nothing is read.
        unsafe { k.launch_args(&stream, (4, 1, 1), (256, 1, 1), 0, &mut args) }.unwrap_err()
    };
    assert_eq!(
        err,
        CudaError::ParamSize {
            function: "fields::vec_axpy<bb31_t>".into(),
            index: 1,
            expected: 4,
            actual: 8,
        }
    );
    println!("refused before the driver: {err}");
    // A block above the kernel's signed __launch_bounds__(256) is refused too.
    let mut alpha = 3u32;
    let (mut py, g0) = dy.device_ptr_mut(&stream);
    let (mut px, g1) = dx.device_ptr(&stream);
    let mut args = [
        KernelArg::new(&mut py),
        KernelArg::new(&mut alpha),
        KernelArg::new(&mut px),
        KernelArg::new(&mut n),
    ];
    // SAFETY: refused before the driver (block too large): nothing is read.
    let err = unsafe { k.launch_args(&stream, (1, 1, 1), (512, 1, 1), 0, &mut args) }.unwrap_err();
    assert!(
        matches!(
            &err,
            CudaError::BlockTooLarge {
                threads: 512,
                max: 256,
                ..
            }
        ),
        "{err}"
    );
    drop((g0, g1));
    // Nothing ran: y is untouched.
    assert_eq!(stream.clone_dtoh(&dy).unwrap(), y);
    // The right size launches and computes y = 3x + y.
    let (mut py, g0) = dy.device_ptr_mut(&stream);
    let (mut px, g1) = dx.device_ptr(&stream);
    let mut args = [
        KernelArg::new(&mut py),
        KernelArg::new(&mut alpha),
        KernelArg::new(&mut px),
        KernelArg::new(&mut n),
    ];
    // SAFETY: (bb31_t*, bb31_t, const bb31_t*, uint32_t); both buffers hold 1024 elements.
    unsafe { k.launch_args(&stream, (4, 1, 1), (256, 1, 1), 0, &mut args) }.unwrap();
    drop((g0, g1));
    let mut want = y.clone();
    foreign::vec_axpy(&mut want, 3u32, &x);
    assert_eq!(stream.clone_dtoh(&dy).unwrap(), want);
}

#[test]
#[ignore = "needs a CUDA device"]
fn gpu_the_signed_launch_abi_matches_what_the_driver_reports() {
    let rt = open();
    for m in rt.selected() {
        let module = rt.module(m.identity.module.as_str()).unwrap();
        for f in &m.functions {
            let k = module.kernel(f.symbol.as_str()).unwrap();
            let attrs = k.attributes().unwrap();
            println!(
                "{} {}: signed regs {:?} shared {:?} local {:?} max_threads {:?}; driver {attrs:?}",
                m.label(),
                f.display_name(),
                f.abi.registers,
                f.abi.shared_bytes,
                f.abi.local_bytes,
                f.abi.max_threads
            );
            // The driver's parameter layout was compared with the signed one at lookup.
            if let Some(driver) = k.params() {
                assert_eq!(driver.len(), f.abi.params.len());
            }
            assert_eq!(
                Some(attrs.num_regs),
                f.abi.registers,
                "{}",
                f.display_name()
            );
            assert_eq!(Some(attrs.local_size_bytes), f.abi.local_bytes);
            if let Some(max) = f.abi.max_threads {
                assert!(attrs.max_threads_per_block <= max);
            }
        }
    }
}

// ---- device globals: foreign_poseidon (kernels/foreign/src/poseidon_consts.cu) ---------

/// BabyBear, the field of poseidon_consts.cu.
const BB: u64 = 0x7800_0001;
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

fn bb_mul(a: u32, b: u32) -> u32 {
    (u64::from(a) * u64::from(b) % BB) as u32
}

fn bb_add(a: u32, b: u32) -> u32 {
    ((u64::from(a) + u64::from(b)) % BB) as u32
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

/// BabyBear's multiplicative generator: 31 generates the group of order p - 1 = 2^27 * 15.
const BB_GENERATOR: u32 = 31;
/// log2 of the largest transform `foreign_ntt`'s tables serve (`ntt::MAX_LG_N`).
const NTT_MAX_LG_N: u32 = 10;

/// The three-file module (kernels in one file, the `extern __constant__` tables in
/// another, the field multiply in a third, device-linked): after `preload` the host fills
/// `ntt::twiddles` (512 powers of a primitive 1024th root of unity) and `ntt::scale` (n^-1)
/// through `Module::global`, runs the bit reversal (looked up by c++filt's spelling,
/// `ntt::bit_reverse<10u>`; cpp_demangle's finds the same kernel), ten DIT stages and the
/// scaling, and the result equals a naive O(n^2) DFT on the CPU, scaled. The initialised
/// `__device__` counter reads back the number of stage launches.
#[test]
#[ignore = "needs a CUDA device"]
fn gpu_the_device_linked_ntt_reads_the_tables_the_host_wrote_and_matches_the_cpu_dft() {
    let rt = open();
    // The plain device link, and the same files with link-time optimisation.
    for name in ["foreign_ntt", "foreign_ntt_lto"] {
        linked_ntt(&rt, name);
    }
}

fn linked_ntt(rt: &Runtime, name: &str) {
    let stream = rt.stream().unwrap();
    let module = rt.module(name).unwrap();
    assert_eq!(module.manifest().identity.sources.len(), 3);
    let n = 1usize << NTT_MAX_LG_N;
    let w = foreign::bb31_pow(BB_GENERATOR, (BB - 1) / n as u64);
    assert_eq!(
        foreign::bb31_pow(w, n as u64 / 2),
        (BB - 1) as u32,
        "primitive"
    );
    let twiddles: Vec<u32> = (0..n as u64 / 2).map(|i| foreign::bb31_pow(w, i)).collect();
    let tw = module.global("ntt::twiddles").unwrap();
    assert_eq!(tw.size(), 2048);
    tw.write_values(&twiddles).unwrap();
    let n_inv = foreign::bb31_pow(n as u32, BB - 2);
    module
        .global("_ZN3ntt5scaleE")
        .unwrap()
        .write_values(&[n_inv])
        .unwrap();
    let stages_run = module.global("ntt::stages_run").unwrap();
    let mut counter = [0u8; 8];
    stages_run.read(&mut counter).unwrap();
    assert_eq!(u64::from_le_bytes(counter), 0, "initial value");

    let input = elems::<u32>(n, 31, |x| (x % BB) as u32);
    let mut d = stream.clone_htod(&input).unwrap();
    let theirs = rt.kernel(name, "ntt::bit_reverse<10u>").unwrap();
    let ours = rt
        .kernel(name, "ntt::bit_reverse<(unsigned int)10>")
        .unwrap();
    assert_eq!(theirs.name(), ours.name());
    assert_eq!(theirs.name(), "_ZN3ntt11bit_reverseILj10EEEvP6bb31_t");
    {
        let (mut p, _g) = d.device_ptr_mut(&stream);
        let mut args = [KernelArg::new(&mut p)];
        // SAFETY: (bb31_t*); the buffer holds 2^10 elements.
        unsafe { theirs.launch_args(&stream, (4, 1, 1), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    let stage = rt.kernel(name, "ntt_dit_stage").unwrap();
    for s in 0..NTT_MAX_LG_N {
        let (mut p, _g) = d.device_ptr_mut(&stream);
        let (mut lg_n, mut s) = (NTT_MAX_LG_N, s);
        let mut args = [
            KernelArg::new(&mut p),
            KernelArg::new(&mut lg_n),
            KernelArg::new(&mut s),
        ];
        // SAFETY: (bb31_t*, uint32_t, uint32_t); 2^(lg_n-1) butterflies over the buffer.
        unsafe { stage.launch_args(&stream, (2, 1, 1), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    let got = stream.clone_dtoh(&d).unwrap();
    let dft: Vec<u32> = (0..n)
        .map(|k| {
            let wk = foreign::bb31_pow(w, k as u64);
            let mut acc = 0u32;
            let mut x = 1u32;
            for v in &input {
                acc = bb_add(acc, bb_mul(*v, x));
                x = bb_mul(x, wk);
            }
            acc
        })
        .collect();
    assert_eq!(got, dft, "ntt_dit_stage x 10 after ntt::bit_reverse<10u>");
    let scale = rt.kernel(name, "ntt_scale").unwrap();
    {
        let (mut p, _g) = d.device_ptr_mut(&stream);
        let mut count = n as u32;
        let mut args = [KernelArg::new(&mut p), KernelArg::new(&mut count)];
        // SAFETY: (bb31_t*, uint32_t); n elements.
        unsafe { scale.launch_args(&stream, (4, 1, 1), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    let scaled = stream.clone_dtoh(&d).unwrap();
    let want: Vec<u32> = dft.iter().map(|v| bb_mul(*v, n_inv)).collect();
    assert_eq!(scaled, want, "ntt_scale by the scale the host wrote");
    stages_run.read(&mut counter).unwrap();
    assert_eq!(u64::from_le_bytes(counter), u64::from(NTT_MAX_LG_N));
    println!(
        "{name} (3 files, device-linked): twiddles and scale written through globals; a 2^10 NTT equals the CPU DFT; stages_run = {}",
        u64::from_le_bytes(counter)
    );
}

/// `big_params.cu`'s structs, laid out as the source's static_asserts fix them.
#[repr(C)]
#[derive(Clone, Copy)]
struct RoundConstants {
    rc: [[u64; 16]; 32],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct StageTwiddles {
    w: [u32; 2048],
    count: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct LeafBlock {
    bytes: [u8; 32000],
}

/// Kernels taking structs of 4,096, 8,196 (followed by two scalars) and 32,000 bytes by
/// value launch through the signed ABI (`launch_args` compares every argument's size with
/// it first) and compute what the CPU does; the signed layouts equal the driver's.
#[test]
#[ignore = "needs a CUDA device"]
fn gpu_large_by_value_parameters_launch_and_match_the_cpu() {
    assert_eq!(std::mem::size_of::<RoundConstants>(), 4096);
    assert_eq!(std::mem::size_of::<StageTwiddles>(), 8196);
    assert_eq!(std::mem::size_of::<LeafBlock>(), 32000);
    let rt = open();
    let stream = rt.stream().unwrap();
    let seeds = elems::<u64>(32 * 16, 41, |x| x);
    let mut rc = RoundConstants { rc: [[0; 16]; 32] };
    for (i, v) in seeds.iter().enumerate() {
        rc.rc[i / 16][i % 16] = *v;
    }

    // add_round_constants(RoundConstants, uint64_t* state, int round)
    let state0 = elems::<u64>(4 * 16, 42, |x| x);
    let mut d = stream.clone_htod(&state0).unwrap();
    let k = rt.kernel("big_params", "add_round_constants").unwrap();
    let layout: Vec<(usize, usize)> = k
        .signed_abi()
        .unwrap()
        .params
        .iter()
        .map(|p| (p.offset, p.size))
        .collect();
    assert_eq!(layout, [(0, 4096), (4096, 8), (4104, 4)]);
    {
        let (mut p, _g) = d.device_ptr_mut(&stream);
        let mut round = 37i32;
        let mut args = [
            KernelArg::new(&mut rc),
            KernelArg::new(&mut p),
            KernelArg::new(&mut round),
        ];
        // SAFETY: (RoundConstants, uint64_t*, int); 4 blocks of 16 lanes over 64 words.
        unsafe { k.launch_args(&stream, (4, 1, 1), (16, 1, 1), 0, &mut args) }.unwrap();
    }
    let got = stream.clone_dtoh(&d).unwrap();
    let want: Vec<u64> = state0
        .iter()
        .enumerate()
        .map(|(i, s)| s.wrapping_add(rc.rc[37 % 32][i % 16]))
        .collect();
    assert_eq!(got, want, "add_round_constants");

    // twiddle_stage(uint32_t* data, StageTwiddles, uint32_t n, uint8_t shift)
    let mut tw = StageTwiddles {
        w: [0; 2048],
        count: 3000,
    };
    for (i, v) in elems::<u32>(2048, 43, |x| x as u32).into_iter().enumerate() {
        tw.w[i] = v;
    }
    let n = 4096u32;
    let data0 = elems::<u32>(n as usize, 44, |x| x as u32);
    let mut d = stream.clone_htod(&data0).unwrap();
    let k = rt.kernel("big_params", "twiddle_stage").unwrap();
    {
        let (mut p, _g) = d.device_ptr_mut(&stream);
        let (mut n_arg, mut shift) = (n, 3u8);
        let mut args = [
            KernelArg::new(&mut p),
            KernelArg::new(&mut tw),
            KernelArg::new(&mut n_arg),
            KernelArg::new(&mut shift),
        ];
        // SAFETY: (uint32_t*, StageTwiddles, uint32_t, uint8_t); n elements.
        unsafe { k.launch_args(&stream, (16, 1, 1), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    let got = stream.clone_dtoh(&d).unwrap();
    let want: Vec<u32> = data0
        .iter()
        .enumerate()
        .map(|(i, v)| {
            if (i as u32) < tw.count {
                v.wrapping_mul(tw.w[i % 2048]) >> 3
            } else {
                *v
            }
        })
        .collect();
    assert_eq!(got, want, "twiddle_stage");

    // sum_leaf_block(LeafBlock, uint32_t* out): 32,008 bytes of parameters.
    let mut leaf = LeafBlock { bytes: [0; 32000] };
    for (i, b) in leaf.bytes.iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(2654435761).to_le_bytes()[3];
    }
    let mut out = stream.clone_htod(&[0u32]).unwrap();
    let k = rt.kernel("big_params", "sum_leaf_block").unwrap();
    {
        let (mut p, _g) = out.device_ptr_mut(&stream);
        let mut args = [KernelArg::new(&mut leaf), KernelArg::new(&mut p)];
        // SAFETY: (LeafBlock, uint32_t*); one block of 256 threads.
        unsafe { k.launch_args(&stream, (1, 1, 1), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    let got = stream.clone_dtoh(&out).unwrap();
    let want: u32 = leaf.bytes.iter().map(|b| u32::from(*b)).sum();
    assert_eq!(got, [want], "sum_leaf_block");
    // A struct of the wrong size is refused before the driver.
    let mut short = [0u8; 31999];
    let err = {
        let (mut p, _g) = out.device_ptr_mut(&stream);
        let mut args = [KernelArg::new(&mut short), KernelArg::new(&mut p)];
        // SAFETY: refused before the driver is called (the sizes differ from the ABI).
        unsafe { k.launch_args(&stream, (1, 1, 1), (256, 1, 1), 0, &mut args) }.unwrap_err()
    };
    println!("a 31,999-byte struct is refused: {err}");
    println!("big_params: 4,108-, 8,209- and 32,008-byte parameter buffers launch and match");
}
