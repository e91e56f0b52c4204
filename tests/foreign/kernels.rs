//! The corpus's kernels by demangled name, compared with their CPU references, a launch
//! with a wrong argument size or block refused before the driver, and the signed launch
//! ABI equal to what the driver reports.

use crate::{elems, grid, open};
use cuda_aot::cuda::{CudaError, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, KernelArg};
use cuda_aot::{Error, Runtime};
use cuda_aot_kernels::foreign::{self, BB31_P, Field};
use cuda_aot_kernels::goldilocks;

const N: usize = 1 << 14;

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

/// Issue 44, item 4: for every kernel of both bundles (the release registry and the
/// foreign-style one), the signed registers and launch bound equal what the driver reports
/// (`cuFuncGetAttribute`), the signed static shared memory is what the driver reports plus
/// the block's reserve, the signed whole stack is the driver's local memory per thread
/// (`CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES`: on an H100, 72 bytes for `sponge_absorb`, whose
/// own frame is 32) and cuobjdump's `STACK` (`-res-usage`, the GPU host's toolkit); every
/// signed global resolves with the signed size (`cuModuleGetGlobal`, which `Module::global`
/// compares).
#[test]
#[ignore = "needs a CUDA device and cuobjdump"]
fn gpu_the_signed_resources_and_globals_match_the_driver_and_cuobjdump() {
    let foreign = open();
    let release = crate::open_at(&crate::release_registry());
    let (mut kernels, mut globals) = (0, 0);
    for (rt, registry) in [
        (&foreign, crate::foreign_registry()),
        (&release, crate::release_registry()),
    ] {
        for m in rt.selected() {
            let module = rt.module(m.identity.module.as_str()).unwrap();
            let blob = registry.join(cuda_aot::source::layout::blob(&m.module_digest));
            let stacks = cuobjdump_stacks(&blob);
            for f in &m.functions {
                let k = module.kernel(f.symbol.as_str()).unwrap();
                let attrs = k.attributes().unwrap();
                let what = format!("{} {}", m.label(), f.display_name());
                println!(
                    "{what}: signed regs {:?} shared {:?} local {:?} stack {:?} max_threads {:?}; driver {attrs:?}; cuobjdump stack {:?}",
                    f.abi.registers,
                    f.abi.shared_bytes,
                    f.abi.local_bytes,
                    f.abi.stack_bytes,
                    f.abi.max_threads,
                    stacks.get(f.symbol.as_str())
                );
                // The driver's parameter layout was compared with the signed one at lookup.
                if let Some(driver) = k.params() {
                    assert_eq!(driver.len(), f.abi.params.len(), "{what}");
                }
                assert_eq!(Some(attrs.num_regs), f.abi.registers, "{what}");
                // The driver's local memory per thread is the whole stack (the frame plus
                // the deepest chain of calls): the signed stack, which equals the frame for
                // a kernel that calls nothing with a frame of its own.
                assert_eq!(
                    Some(attrs.local_size_bytes),
                    f.abi.stack_bytes.or(f.abi.local_bytes),
                    "{what}"
                );
                let shared = f.abi.shared_bytes.unwrap_or(0);
                assert_eq!(
                    cuda_aot::elf::driver_shared_bytes(m.identity.sm.number(), shared),
                    attrs.shared_size_bytes,
                    "{what}"
                );
                match f.abi.max_threads {
                    Some(max) => assert!(attrs.max_threads_per_block <= max, "{what}"),
                    None => assert!(attrs.max_threads_per_block > 0, "{what}"),
                }
                assert_eq!(
                    stacks.get(f.symbol.as_str()).copied(),
                    f.abi.stack_bytes,
                    "{what}: cuobjdump's STACK"
                );
                kernels += 1;
            }
            for g in m.globals.iter().flatten() {
                let global = module.global(g.symbol.as_str()).unwrap();
                assert_eq!(global.size() as u64, g.size, "{} {}", m.label(), g.name);
                globals += 1;
            }
        }
    }
    println!("{kernels} kernels and {globals} globals checked");
    assert!(kernels > 0 && globals > 0);
}

/// cuobjdump `-res-usage` of one cubin: each function's `STACK`, by symbol.
fn cuobjdump_stacks(cubin: &std::path::Path) -> std::collections::HashMap<String, u32> {
    let tool = ["/usr/local/cuda/bin/cuobjdump", "cuobjdump"]
        .into_iter()
        .find(|t| {
            std::process::Command::new(t)
                .arg("--version")
                .output()
                .is_ok()
        })
        .expect("cuobjdump (the GPU host's /usr/local/cuda/bin)");
    let out = std::process::Command::new(tool)
        .arg("-res-usage")
        .arg(cubin)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut stacks = std::collections::HashMap::new();
    let mut function = None;
    for line in text.lines().map(str::trim) {
        if let Some(f) = line.strip_prefix("Function ") {
            function = Some(f.trim_end_matches(':').to_string());
        } else if let (Some(f), Some(at)) = (&function, line.find("STACK:")) {
            let n: u32 = line[at + 6..]
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("cuobjdump line: {line}"));
            stacks.insert(f.clone(), n);
        }
    }
    stacks
}
