//! Running a parity program on the GPU (feature `research`): buffers uploaded from the
//! CPU's inputs, one launch at a time through the kernel's checked launch (argument sizes
//! against the launch ABI read from the cubin), buffers read back after each launch for
//! the comparison.

#![allow(unsafe_code)] // kernel launches: the one place of this module that needs it

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cuda_aot::cuda::{
    CudaSlice, CudaStream, DevicePtr, Kernel, KernelArg, LoadedModule, SignedAbi,
};
use cuda_aot::{Manifest, lookup::resolve_function};

use super::cpu::Buffers;
use super::spec::{ArgValue, Launch};

/// The kernels of a loaded module by entry-point name, each carrying the launch ABI its
/// manifest records (so every launch is size-checked before the driver sees it).
pub fn kernels(
    module: &LoadedModule,
    manifest: &Manifest,
    entries: &[&str],
) -> Result<BTreeMap<String, Kernel>, String> {
    let mut out = BTreeMap::new();
    for &e in entries {
        let f = resolve_function(&manifest.functions, e).map_err(|c| {
            format!(
                "{}: entry point `{e}` names {} kernels of the module",
                manifest.label(),
                c.len()
            )
        })?;
        let abi = SignedAbi::of(f);
        let k = module
            .function(f.symbol.as_str())
            .and_then(|k| k.with_signed_abi(abi))
            .map_err(|err| format!("{} kernel {e}: {err}", manifest.label()))?;
        out.insert(e.to_string(), k);
    }
    Ok(out)
}

/// The buffers of one case on the device.
pub struct DeviceBuffers {
    bufs: BTreeMap<String, CudaSlice<u8>>,
}

impl DeviceBuffers {
    /// Uploads `inputs`.
    pub fn upload(stream: &Arc<CudaStream>, inputs: &Buffers) -> Result<Self, String> {
        let mut bufs = BTreeMap::new();
        for (name, bytes) in inputs {
            // A zero-length allocation is not allowed: keep one byte for empty buffers.
            let s = if bytes.is_empty() {
                stream.alloc_zeros::<u8>(1)
            } else {
                stream.clone_htod(bytes)
            }
            .map_err(|e| format!("uploading buffer `{name}`: {e:?}"))?;
            bufs.insert(name.clone(), s);
        }
        Ok(DeviceBuffers { bufs })
    }

    /// Reads every buffer back (waits for the stream).
    pub fn download(&self, stream: &Arc<CudaStream>, like: &Buffers) -> Result<Buffers, String> {
        let mut out = Buffers::new();
        for (name, s) in &self.bufs {
            let mut v = stream
                .clone_dtoh(s)
                .map_err(|e| format!("reading buffer `{name}`: {e:?}"))?;
            v.truncate(like.get(name).map_or(0, Vec::len));
            out.insert(name.clone(), v);
        }
        Ok(out)
    }

    /// Enqueues `launch` with `kernel` and waits for it; returns the time from enqueue to
    /// completion.
    ///
    /// # Safety
    ///
    /// `kernel` must be the entry point `launch` names, and the launch's arguments must be
    /// valid for it: each buffer argument at least as large as every access the kernel
    /// makes with these scalar arguments and this geometry. The parity runner runs each
    /// launch's CPU step first, which refuses a buffer smaller than the launch uses.
    pub unsafe fn launch(
        &self,
        stream: &Arc<CudaStream>,
        kernel: &Kernel,
        launch: &Launch,
    ) -> Result<Duration, String> {
        let mut ptrs: Vec<u64> = Vec::new();
        let mut u32s: Vec<u32> = Vec::new();
        let mut u64s: Vec<u64> = Vec::new();
        let mut guards = Vec::new();
        // Collect the values first (the argument list points into these vectors).
        for a in &launch.args {
            match a {
                ArgValue::Buffer(b) => {
                    let s = self
                        .bufs
                        .get(b)
                        .ok_or_else(|| format!("no device buffer `{b}`"))?;
                    // Read-tracking is enough: the stream is synchronised after the launch.
                    let (p, g) = s.device_ptr(stream);
                    ptrs.push(p);
                    guards.push(g);
                }
                ArgValue::U32(v) => u32s.push(*v),
                ArgValue::U64(v) => u64s.push(*v),
            }
        }
        let (mut pi, mut ui, mut li) = (ptrs.iter_mut(), u32s.iter_mut(), u64s.iter_mut());
        let mut params: Vec<KernelArg<'_>> = launch
            .args
            .iter()
            .map(|a| match a {
                ArgValue::Buffer(_) => KernelArg::new(pi.next().expect("one pointer per buffer")),
                ArgValue::U32(_) => KernelArg::new(ui.next().expect("one u32 per u32")),
                ArgValue::U64(_) => KernelArg::new(li.next().expect("one u64 per u64")),
            })
            .collect();
        let started = Instant::now();
        // SAFETY: forwarded from this function's contract; every argument's size is checked
        // against the kernel's launch ABI by `launch_args` before the driver is called.
        unsafe {
            kernel.launch_args(
                stream,
                (launch.grid, 1, 1),
                (launch.block, 1, 1),
                0,
                &mut params,
            )
        }
        .map_err(|e| format!("launch of {}: {e}", launch.entry))?;
        stream
            .synchronize()
            .map_err(|e| format!("running {}: {e:?}", launch.entry))?;
        drop(guards);
        Ok(started.elapsed())
    }
}
