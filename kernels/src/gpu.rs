//! Typed launch wrappers: the kernels of the release set, looked up through a verified
//! [`cuda_aot::Runtime`] and launched on cudarc streams with checked buffer lengths.
//!
//! The launches are `unsafe` underneath (the driver cannot check argument types); here
//! each wrapper fixes the argument list of one entry point and checks every length, so
//! the calls are safe. Every launch goes through [`Kernel::launch_args`], which compares
//! each argument's size with the kernel's signed launch ABI before the driver is called:
//! a wrapper out of step with its kernel is an error, not memory corruption.

#![allow(unsafe_code)]

use cuda_aot::cuda::{
    CudaSlice, CudaStream, DeviceGlobal, DevicePtr, DevicePtrMut, Kernel, KernelArg,
};
use cuda_aot::{Error, Module, Result, Runtime};

/// Largest grid the wrappers launch; the kernels use grid-stride loops.
const MAX_GRID: u32 = 1 << 16;

fn block_of(m: &Module, default: u32) -> u32 {
    m.manifest()
        .identity
        .geometry
        .get("block")
        .map(|b| *b as u32)
        .unwrap_or(default)
}

fn grid(n: u64, block: u32) -> (u32, u32, u32) {
    (
        n.div_ceil(u64::from(block)).clamp(1, u64::from(MAX_GRID)) as u32,
        1,
        1,
    )
}

fn len_u32(what: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::Argument {
        what: what.into(),
        reason: format!("{n} elements; at most 2^32 - 1"),
    })
}

fn check_len(what: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::Argument {
            what: what.into(),
            reason: format!("{got} elements where {want} are required"),
        })
    }
}

fn arg<T: Copy>(v: &mut T) -> KernelArg<'_> {
    KernelArg::new(v)
}

/// Launches `k` with `params` on `stream`, each argument's size checked against the
/// kernel's signed launch ABI first.
///
/// # Safety
/// `params` must match `k`'s signature and every device pointer in it must be valid for
/// the accesses the kernel makes with this geometry.
unsafe fn launch(
    k: &Kernel,
    stream: &CudaStream,
    grid: (u32, u32, u32),
    block: u32,
    params: &mut [KernelArg<'_>],
) -> Result<()> {
    // SAFETY: forwarded from this function's contract.
    unsafe { k.launch_args(stream, grid, (block, 1, 1), 0, params) }.map_err(Error::from)
}

/// Goldilocks vector operations (`field_ops`: gl_add, gl_mul, gl_axpy, and gl_poly_eval
/// with its host-filled coefficient table `gl_poly_coeffs`).
pub struct FieldOps {
    add: Kernel,
    mul: Kernel,
    axpy: Kernel,
    poly_eval: Kernel,
    coeffs: DeviceGlobal,
    block: u32,
}

impl FieldOps {
    /// Looks the kernels up (loading the module once if needed).
    pub fn new(rt: &Runtime) -> Result<Self> {
        let m = rt.module("field_ops")?;
        Ok(FieldOps {
            add: m.kernel("gl_add")?,
            mul: m.kernel("gl_mul")?,
            axpy: m.kernel("gl_axpy")?,
            poly_eval: m.kernel("gl_poly_eval")?,
            coeffs: m.global("gl_poly_coeffs")?,
            block: block_of(&m, 256),
        })
    }

    fn binary(
        &self,
        k: &Kernel,
        stream: &CudaStream,
        a: &CudaSlice<u64>,
        b: &CudaSlice<u64>,
        out: &mut CudaSlice<u64>,
    ) -> Result<()> {
        check_len("b", b.len(), a.len())?;
        check_len("out", out.len(), a.len())?;
        let mut n = len_u32("a", a.len())?;
        let (mut pa, _ga) = a.device_ptr(stream);
        let (mut pb, _gb) = b.device_ptr(stream);
        let (mut po, _go) = out.device_ptr_mut(stream);
        let g = grid(u64::from(n), self.block);
        let mut params = [arg(&mut pa), arg(&mut pb), arg(&mut po), arg(&mut n)];
        // SAFETY: (const u64*, const u64*, u64*, unsigned) as the kernel declares; all three
        // buffers hold n elements on this stream; the guards live until the launch is queued.
        unsafe { launch(k, stream, g, self.block, &mut params) }
    }

    /// out = a + b (mod p), element-wise.
    pub fn add(
        &self,
        stream: &CudaStream,
        a: &CudaSlice<u64>,
        b: &CudaSlice<u64>,
        out: &mut CudaSlice<u64>,
    ) -> Result<()> {
        self.binary(&self.add, stream, a, b, out)
    }

    /// out = a · b (mod p), element-wise.
    pub fn mul(
        &self,
        stream: &CudaStream,
        a: &CudaSlice<u64>,
        b: &CudaSlice<u64>,
        out: &mut CudaSlice<u64>,
    ) -> Result<()> {
        self.binary(&self.mul, stream, a, b, out)
    }

    /// out = alpha · x + y (mod p), element-wise.
    pub fn axpy(
        &self,
        stream: &CudaStream,
        alpha: u64,
        x: &CudaSlice<u64>,
        y: &CudaSlice<u64>,
        out: &mut CudaSlice<u64>,
    ) -> Result<()> {
        check_len("y", y.len(), x.len())?;
        check_len("out", out.len(), x.len())?;
        let mut n = len_u32("x", x.len())?;
        let mut alpha = alpha;
        let (mut px, _gx) = x.device_ptr(stream);
        let (mut py, _gy) = y.device_ptr(stream);
        let (mut po, _go) = out.device_ptr_mut(stream);
        let g = grid(u64::from(n), self.block);
        let mut params = [
            arg(&mut alpha),
            arg(&mut px),
            arg(&mut py),
            arg(&mut po),
            arg(&mut n),
        ];
        // SAFETY: (u64, const u64*, const u64*, u64*, unsigned) as declared; n elements each.
        unsafe { launch(&self.axpy, stream, g, self.block, &mut params) }
    }

    /// Fills the module's `gl_poly_coeffs` table (synchronously; once per device, before
    /// the first [`FieldOps::poly_eval`]; entries canonical).
    pub fn set_poly(&self, coeffs: &[u64; crate::goldilocks::POLY_TERMS]) -> Result<()> {
        Ok(self.coeffs.write_values(coeffs)?)
    }

    /// out = the polynomial of [`FieldOps::set_poly`] at each x (mod p), element-wise.
    pub fn poly_eval(
        &self,
        stream: &CudaStream,
        x: &CudaSlice<u64>,
        out: &mut CudaSlice<u64>,
    ) -> Result<()> {
        check_len("out", out.len(), x.len())?;
        let mut n = len_u32("x", x.len())?;
        let (mut px, _gx) = x.device_ptr(stream);
        let (mut po, _go) = out.device_ptr_mut(stream);
        let g = grid(u64::from(n), self.block);
        let mut params = [arg(&mut px), arg(&mut po), arg(&mut n)];
        // SAFETY: (const u64*, u64*, unsigned) as declared; n elements each; the table is
        // a __constant__ of the module, filled (or zero) before.
        unsafe { launch(&self.poly_eval, stream, g, self.block, &mut params) }
    }
}

/// Radix-2 NTT over Goldilocks (`ntt`: bit reversal, one launch per butterfly stage, scale).
pub struct Ntt {
    bit_reverse: Kernel,
    butterfly: Kernel,
    scale: Kernel,
    block: u32,
}

impl Ntt {
    /// Looks the kernels up (loading the module once if needed).
    pub fn new(rt: &Runtime) -> Result<Self> {
        let m = rt.module("ntt")?;
        Ok(Ntt {
            bit_reverse: m.kernel("ntt_bit_reverse")?,
            butterfly: m.kernel("ntt_butterfly")?,
            scale: m.kernel("ntt_scale")?,
            block: block_of(&m, 256),
        })
    }

    fn log_n(data: &CudaSlice<u64>) -> Result<u32> {
        let n = data.len();
        if !n.is_power_of_two() || !(2..=(1usize << 31)).contains(&n) {
            return Err(Error::Argument {
                what: "NTT data".into(),
                reason: format!("{n} elements; a power of two from 2 to 2^31 is required"),
            });
        }
        Ok(n.trailing_zeros())
    }

    /// In-place transform with the twiddle table `omega^t, t < n/2` (from
    /// [`crate::ntt::twiddles`]); forward or inverse depending on the table.
    fn transform(
        &self,
        stream: &CudaStream,
        data: &mut CudaSlice<u64>,
        twiddles: &CudaSlice<u64>,
    ) -> Result<()> {
        let mut log_n = Self::log_n(data)?;
        check_len("twiddles", twiddles.len(), data.len() / 2)?;
        let n = data.len() as u64;
        {
            let (mut pd, _g) = data.device_ptr_mut(stream);
            let mut params = [arg(&mut pd), arg(&mut log_n)];
            // SAFETY: (u64*, unsigned log_n) as declared; data holds 2^log_n elements.
            unsafe {
                launch(
                    &self.bit_reverse,
                    stream,
                    grid(n, self.block),
                    self.block,
                    &mut params,
                )?
            };
        }
        for stage in 0..log_n {
            let (mut stage, mut log_n) = (stage, log_n);
            let (mut pd, _g) = data.device_ptr_mut(stream);
            let (mut pt, _gt) = twiddles.device_ptr(stream);
            let mut params = [arg(&mut pd), arg(&mut pt), arg(&mut log_n), arg(&mut stage)];
            // SAFETY: (u64*, const u64*, unsigned, unsigned) as declared; data holds n and
            // twiddles n/2 elements; one thread per butterfly (n/2).
            unsafe {
                launch(
                    &self.butterfly,
                    stream,
                    grid(n / 2, self.block),
                    self.block,
                    &mut params,
                )?
            };
        }
        Ok(())
    }

    /// Forward NTT in place; `twiddles = ntt::twiddles(log_n, false)` on the device.
    pub fn forward(
        &self,
        stream: &CudaStream,
        data: &mut CudaSlice<u64>,
        twiddles: &CudaSlice<u64>,
    ) -> Result<()> {
        self.transform(stream, data, twiddles)
    }

    /// Inverse NTT in place; `inverse_twiddles = ntt::twiddles(log_n, true)` on the device.
    pub fn inverse(
        &self,
        stream: &CudaStream,
        data: &mut CudaSlice<u64>,
        inverse_twiddles: &CudaSlice<u64>,
    ) -> Result<()> {
        self.transform(stream, data, inverse_twiddles)?;
        let log_n = Self::log_n(data)?;
        let mut factor = crate::ntt::inverse_scale(log_n);
        let mut n = data.len() as u32;
        let (mut pd, _g) = data.device_ptr_mut(stream);
        let g = grid(u64::from(n), self.block);
        let mut params = [arg(&mut pd), arg(&mut factor), arg(&mut n)];
        // SAFETY: (u64*, u64, unsigned) as declared; data holds n elements.
        unsafe { launch(&self.scale, stream, g, self.block, &mut params) }
    }
}

/// One SHA-256 Merkle layer (`merkle`: merkle_layer).
pub struct Merkle {
    layer: Kernel,
    block: u32,
}

impl Merkle {
    /// Looks the kernel up (loading the module once if needed).
    pub fn new(rt: &Runtime) -> Result<Self> {
        let m = rt.module("merkle")?;
        Ok(Merkle {
            layer: m.kernel("merkle_layer")?,
            block: block_of(&m, 128),
        })
    }

    /// `parents[i] = SHA-256(children[64 i .. 64 i + 64])`; children holds 2 × 32 bytes per parent.
    pub fn layer(
        &self,
        stream: &CudaStream,
        children: &CudaSlice<u8>,
        parents: &mut CudaSlice<u8>,
    ) -> Result<()> {
        check_len("children", children.len(), parents.len() * 2)?;
        if !parents.len().is_multiple_of(32) {
            return Err(Error::Argument {
                what: "merkle parents".into(),
                reason: format!("{} bytes; a multiple of 32 is required", parents.len()),
            });
        }
        let mut n = len_u32("parents", parents.len() / 32)?;
        let (mut pc, _gc) = children.device_ptr(stream);
        let (mut pp, _gp) = parents.device_ptr_mut(stream);
        let g = grid(u64::from(n), self.block);
        let mut params = [arg(&mut pc), arg(&mut pp), arg(&mut n)];
        // SAFETY: (const u8*, u8*, unsigned) as declared; children holds 64 n and parents 32 n
        // bytes (checked above); cudarc allocations are 256-byte aligned.
        unsafe { launch(&self.layer, stream, g, self.block, &mut params) }
    }
}

/// The research NTT with several stages per launch in shared memory (`ntt_fused`:
/// ntt_bit_reverse, ntt_stages; `research/ntt_fused.cu`), once promoted into a registry.
/// Same transform and twiddle table as [`Ntt::forward`].
pub struct NttFused {
    bit_reverse: Kernel,
    stages: Kernel,
    block: u32,
    tile_log: u32,
}

impl NttFused {
    /// Looks the kernels up (loading the module once if needed).
    pub fn new(rt: &Runtime) -> Result<Self> {
        let m = rt.module("ntt_fused")?;
        let tile_log = m
            .manifest()
            .identity
            .geometry
            .get("tile_log")
            .copied()
            .unwrap_or(10) as u32;
        Ok(NttFused {
            bit_reverse: m.kernel("ntt_bit_reverse")?,
            stages: m.kernel("ntt_stages")?,
            block: block_of(&m, 256),
            tile_log,
        })
    }

    /// Forward NTT in place (`twiddles = ntt::twiddles(log_n, false)` on the device): the
    /// bit reversal, then [`crate::research::fused_schedule`]'s `ntt_stages` launches.
    pub fn forward(
        &self,
        stream: &CudaStream,
        data: &mut CudaSlice<u64>,
        twiddles: &CudaSlice<u64>,
    ) -> Result<()> {
        let log_n = Ntt::log_n(data)?;
        check_len("twiddles", twiddles.len(), data.len() / 2)?;
        let n = data.len() as u64;
        {
            let mut l = log_n;
            let (mut pd, _g) = data.device_ptr_mut(stream);
            let mut params = [arg(&mut pd), arg(&mut l)];
            // SAFETY: (u64*, unsigned log_n) as declared; data holds 2^log_n elements.
            unsafe {
                launch(
                    &self.bit_reverse,
                    stream,
                    grid(n, self.block),
                    self.block,
                    &mut params,
                )?
            };
        }
        for (s0, stages) in crate::research::fused_schedule(log_n, self.tile_log) {
            let (mut l, mut s0, mut stages) = (log_n, s0, stages);
            let tiles = (n >> stages).clamp(1, u64::from(MAX_GRID) - 1) as u32;
            let (mut pd, _g) = data.device_ptr_mut(stream);
            let (mut pt, _gt) = twiddles.device_ptr(stream);
            let mut params = [
                arg(&mut pd),
                arg(&mut pt),
                arg(&mut l),
                arg(&mut s0),
                arg(&mut stages),
            ];
            // SAFETY: (u64*, const u64*, unsigned, unsigned, unsigned) as declared; data
            // holds n and twiddles n/2 elements; s0 + stages <= log_n and stages <=
            // tile_log (the module's shared tile), as fused_schedule makes them.
            unsafe { launch(&self.stages, stream, (tiles, 1, 1), self.block, &mut params)? };
        }
        Ok(())
    }
}
