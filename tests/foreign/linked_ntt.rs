//! The three-file, device-linked `foreign_ntt` (and its LTO build) reading the twiddles
//! the host wrote through its globals (issue 19, item 1).

use crate::{BB, bb_add, bb_mul, elems, open};
use cuda_aot::Runtime;
use cuda_aot::cuda::{DevicePtrMut, KernelArg};
use cuda_aot_kernels::foreign;

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
