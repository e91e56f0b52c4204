//! `big_params`' kernels taking 4 KiB, 8 KiB and 32,000-byte structs by value (issue 19,
//! item 5).

use crate::{elems, open};
use cuda_aot::cuda::{DevicePtrMut, KernelArg};

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
