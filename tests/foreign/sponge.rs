//! The six-file, device-linked `foreign_sponge` (issue 44): its kernels against the CPU
//! reference `cuda_aot_kernels::sponge`, its round constants read back through the
//! signed global, and its permutation counter counting the calls the kernels made across
//! the device link.

use crate::{BB, elems, grid, open};
use cuda_aot::cuda::{DevicePtr, DevicePtrMut, KernelArg};
use cuda_aot_kernels::sponge;

/// Rows of `LEN` elements (not a multiple of the rate: the last block is partial).
const LEN: usize = 10;
const ROWS: usize = 1000;

/// The library's four kernels match the CPU reference element for element; `sponge::RC`
/// holds the reference's constants; `sponge::permutations` counts what absorb ran.
#[test]
#[ignore = "needs a CUDA device"]
fn gpu_the_six_file_sponge_library_matches_its_cpu_reference() {
    let rt = open();
    let stream = rt.stream().unwrap();
    let module = rt.module("foreign_sponge").unwrap();
    assert_eq!(module.manifest().identity.sources.len(), 6);
    let rc = module.global("sponge::RC").unwrap();
    let mut bytes = vec![0u8; rc.size()];
    rc.read(&mut bytes).unwrap();
    let want: Vec<u8> = sponge::RC
        .iter()
        .flatten()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    assert_eq!(bytes, want, "sponge::RC");
    let counter = module.global("sponge::permutations").unwrap();
    counter.write_values(&[0u64]).unwrap();

    let rows = elems::<u32>(ROWS * LEN, 44, |x| (x % BB) as u32);
    let d_rows = stream.clone_htod(&rows).unwrap();
    let (mut n_rows, mut len) = (ROWS as u32, LEN as u32);

    // Absorb.
    let mut d_digests = stream.alloc_zeros::<u32>(ROWS * 4).unwrap();
    {
        let (mut out, _g0) = d_digests.device_ptr_mut(&stream);
        let (mut inp, _g1) = d_rows.device_ptr(&stream);
        let mut args = [
            KernelArg::new(&mut out),
            KernelArg::new(&mut inp),
            KernelArg::new(&mut len),
            KernelArg::new(&mut n_rows),
        ];
        let k = rt.kernel("foreign_sponge", "sponge_absorb").unwrap();
        // SAFETY: (uint32_t*, const uint32_t*, uint32_t, uint32_t); ROWS*4 and ROWS*LEN.
        unsafe { k.launch_args(&stream, grid(ROWS), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    let digests = stream.clone_dtoh(&d_digests).unwrap();
    assert_eq!(digests, sponge::absorb(&rows, LEN, ROWS), "sponge_absorb");
    let mut count = [0u8; 8];
    counter.read(&mut count).unwrap();
    assert_eq!(
        u64::from_le_bytes(count),
        sponge::absorb_permutations(LEN, ROWS),
        "sponge::permutations"
    );

    // One Merkle level over the digests.
    let parents_n = ROWS / 2;
    let mut d_parents = stream.alloc_zeros::<u32>(parents_n * 4).unwrap();
    {
        let (mut out, _g0) = d_parents.device_ptr_mut(&stream);
        let (mut inp, _g1) = d_digests.device_ptr(&stream);
        let mut n = parents_n as u32;
        let mut args = [
            KernelArg::new(&mut out),
            KernelArg::new(&mut inp),
            KernelArg::new(&mut n),
        ];
        let k = rt.kernel("foreign_sponge", "sponge_merkle_level").unwrap();
        // SAFETY: (uint32_t*, const uint32_t*, uint32_t); parents_n*4 and parents_n*8.
        unsafe { k.launch_args(&stream, grid(parents_n), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    assert_eq!(
        stream.clone_dtoh(&d_parents).unwrap(),
        sponge::merkle_level(&digests),
        "sponge_merkle_level"
    );

    // The column mix, over the rows' first ROWS*LEN/4*4 elements.
    let vectors = rows.len() / 4;
    let mut d_mixed = stream.alloc_zeros::<u32>(vectors * 4).unwrap();
    {
        let (mut out, _g0) = d_mixed.device_ptr_mut(&stream);
        let (mut inp, _g1) = d_rows.device_ptr(&stream);
        let mut n = vectors as u32;
        let mut args = [
            KernelArg::new(&mut out),
            KernelArg::new(&mut inp),
            KernelArg::new(&mut n),
        ];
        let k = rt.kernel("foreign_sponge", "sponge_mix").unwrap();
        // SAFETY: (uint32_t*, const uint32_t*, uint32_t); vectors*4 elements each.
        unsafe { k.launch_args(&stream, grid(vectors), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    assert_eq!(
        stream.clone_dtoh(&d_mixed).unwrap(),
        sponge::mix(&rows[..vectors * 4]),
        "sponge_mix"
    );

    // Squeeze 9 elements per row.
    let out_len = 9usize;
    let mut d_out = stream.alloc_zeros::<u32>(ROWS * out_len).unwrap();
    {
        let (mut out, _g0) = d_out.device_ptr_mut(&stream);
        let (mut inp, _g1) = d_rows.device_ptr(&stream);
        let mut o = out_len as u32;
        let mut args = [
            KernelArg::new(&mut out),
            KernelArg::new(&mut inp),
            KernelArg::new(&mut len),
            KernelArg::new(&mut n_rows),
            KernelArg::new(&mut o),
        ];
        let k = rt.kernel("foreign_sponge", "sponge_squeeze").unwrap();
        // SAFETY: (uint32_t*, const uint32_t*, uint32_t, uint32_t, uint32_t).
        unsafe { k.launch_args(&stream, grid(ROWS), (256, 1, 1), 0, &mut args) }.unwrap();
    }
    assert_eq!(
        stream.clone_dtoh(&d_out).unwrap(),
        sponge::squeeze(&rows, LEN, ROWS, out_len),
        "sponge_squeeze"
    );
    println!(
        "foreign_sponge (6 files, device-linked): absorb, merkle level, mix and squeeze equal the CPU reference over {ROWS} rows; sponge::permutations = {}",
        u64::from_le_bytes(count)
    );
}
