//! The device globals (`__constant__` and `__device__` variables) of a loaded module: lookup
//! and host copies checked against the global's signed size before the driver runs them.

use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use cudarc::driver::CudaContext;
use cudarc::driver::sys;

use super::module::{Handle, Owner, bind};
use super::{CudaError, driver_name, require_driver};

/// A device global (`__constant__` or `__device__` variable) of a [`LoadedModule`](super::LoadedModule), in the
/// module's context: its address and size, and synchronous copies from and to the host.
///
/// Every copy must be exactly the global's size: anything else is refused
/// ([`CudaError::GlobalSize`]) before the driver is called. Holds an `Arc` of the module's
/// owner, so the module (and the address) stays valid while the handle lives.
///
/// The copies are synchronous (`cuMemcpyHtoD` / `cuMemcpyDtoH` on the context's legacy
/// default stream): they return once the bytes are copied, and kernels launched afterwards,
/// on any stream, see them. They do not wait for kernels still running on non-blocking
/// streams: fill tables before the first launch (after `preload`), or synchronise first.
#[derive(Clone)]
pub struct DeviceGlobal {
    ptr: sys::CUdeviceptr,
    size: usize,
    /// The module, for messages (empty when the handle did not come through the runtime).
    module: Arc<str>,
    /// The name to show: the demangled name when signed, else the symbol.
    name: Arc<str>,
    owner: Arc<Owner>,
}

// SAFETY: a device address and a size are plain values; every copy binds the owner's
// context on the calling thread first, and the owner (an Arc) keeps the module loaded.
unsafe impl Send for DeviceGlobal {}
// SAFETY: as for `Send`; `&DeviceGlobal` only reads its fields and calls thread-safe
// driver entry points after binding the context.
unsafe impl Sync for DeviceGlobal {}

impl fmt::Debug for DeviceGlobal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceGlobal")
            .field("module", &self.module)
            .field("name", &self.name)
            .field("size", &self.size)
            .field("ordinal", &self.owner.ctx.ordinal())
            .finish()
    }
}

impl DeviceGlobal {
    /// Looks the global `symbol` up in the module `owner` holds ([`LoadedModule::global`]).
    pub(super) fn lookup(owner: &Arc<Owner>, symbol: &str) -> Result<DeviceGlobal, CudaError> {
        let c_name = driver_name("global name", symbol)?;
        require_driver()?;
        bind(&owner.ctx)?;
        let (mut ptr, mut size) = (0 as sys::CUdeviceptr, 0usize);
        let (op, status) = match owner.handle {
            // SAFETY: `module` is loaded (the owner is alive) in `ctx`, which is current;
            // `c_name` is NUL-terminated and outlives the call; the out-pointers are live
            // locals.
            Handle::Module(module) => ("cuModuleGetGlobal", unsafe {
                sys::cuModuleGetGlobal_v2(&mut ptr, &mut size, module, c_name.as_ptr())
            }),
            // SAFETY: `library` is loaded (the owner is alive); the context it answers for
            // is current; the name and out-pointers are as above.
            Handle::Library(library) => ("cuLibraryGetGlobal", unsafe {
                sys::cuLibraryGetGlobal(&mut ptr, &mut size, library, c_name.as_ptr())
            }),
        };
        status
            .result()
            .map_err(|e| CudaError::global(symbol, op, e))?;
        Ok(DeviceGlobal {
            ptr,
            size,
            module: Arc::from(""),
            name: Arc::from(symbol),
            owner: owner.clone(),
        })
    }

    /// Attaches the size signed into the module's manifest, for `module`'s global `name`
    /// (its demangled name): the driver's size must be exactly the signed one
    /// ([`CudaError::GlobalDriverSize`] otherwise): what was signed is what was loaded.
    pub fn with_signed_size(
        mut self,
        module: &str,
        name: &str,
        signed: u64,
    ) -> Result<Self, CudaError> {
        if u64::try_from(self.size).ok() != Some(signed) {
            return Err(CudaError::GlobalDriverSize {
                module: module.to_string(),
                global: name.to_string(),
                signed,
                driver: self.size as u64,
            });
        }
        self.module = Arc::from(module);
        self.name = Arc::from(name);
        Ok(self)
    }

    /// The global's size in bytes (signed, and equal to the driver's).
    pub fn size(&self) -> usize {
        self.size
    }

    /// The global's device address in this module's context, e.g. to pass to a kernel or
    /// a stream-ordered copy. Valid while this handle (or a clone) lives.
    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// The name shown in messages (the demangled name when signed).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The context the global lives in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.owner.ctx
    }

    /// Copies `bytes` into the global. Refused before the driver unless `bytes` is exactly
    /// the global's size.
    pub fn write(&self, bytes: &[u8]) -> Result<(), CudaError> {
        self.check_size("write", bytes.len())?;
        // SAFETY: `bytes` is a live slice of exactly `len` bytes.
        unsafe { self.copy_in(bytes.as_ptr().cast(), bytes.len()) }
    }

    /// Copies `values` into the global, as their in-memory bytes (`#[repr(C)]` structs,
    /// integer arrays): refused before the driver unless `size_of_val(values)` is exactly
    /// the global's size. The values are read as bytes by the driver, never reinterpreted
    /// on the host, so any `Copy` type is sound here (padding included).
    pub fn write_values<T: Copy>(&self, values: &[T]) -> Result<(), CudaError> {
        let len = std::mem::size_of_val(values);
        self.check_size("write", len)?;
        // SAFETY: `values` is a live slice of `len` bytes; the driver only reads them.
        unsafe { self.copy_in(values.as_ptr().cast(), len) }
    }

    /// Copies the global into `out`. Refused before the driver unless `out` is exactly the
    /// global's size.
    pub fn read(&self, out: &mut [u8]) -> Result<(), CudaError> {
        self.check_size("read", out.len())?;
        require_driver()?;
        bind(&self.owner.ctx)?;
        // SAFETY: the context is current; `ptr` is the global's address in it (the owner
        // keeps the module loaded) and `size` its length, which is `out.len()` (checked);
        // `out` is a live, writable buffer of that length.
        unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr, out.len()) }
            .result()
            .map_err(|e| CudaError::global(&self.name, "cuMemcpyDtoH", e))
    }

    /// Copies `len` host bytes at `src` into the global, `len` having been checked.
    ///
    /// # Safety
    ///
    /// `src` must be valid for reads of `len` bytes, and `len` the global's size.
    unsafe fn copy_in(&self, src: *const c_void, len: usize) -> Result<(), CudaError> {
        require_driver()?;
        bind(&self.owner.ctx)?;
        // SAFETY: the context is current; `ptr` is the global's address in it (the owner
        // keeps the module loaded) and `len` its size; the caller guarantees `src`.
        unsafe { sys::cuMemcpyHtoD_v2(self.ptr, src, len) }
            .result()
            .map_err(|e| CudaError::global(&self.name, "cuMemcpyHtoD", e))
    }

    fn check_size(&self, op: &'static str, given: usize) -> Result<(), CudaError> {
        check_global_size(&self.module, &self.name, op, self.size, given)
    }
}

/// A copy of `given` bytes to or from a global of `size` bytes: refused unless equal.
fn check_global_size(
    module: &str,
    global: &str,
    op: &'static str,
    size: usize,
    given: usize,
) -> Result<(), CudaError> {
    if given == size {
        Ok(())
    } else {
        Err(CudaError::GlobalSize {
            module: module.to_string(),
            global: global.to_string(),
            op,
            signed: size,
            given,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 19, item 4: a copy of the wrong size is refused before the driver, naming
    /// the module, the global and both sizes.
    #[test]
    fn global_copies_of_the_wrong_size_are_refused_before_the_driver() {
        assert_eq!(check_global_size("m", "g", "write", 64, 64), Ok(()));
        let err =
            check_global_size("foreign_poseidon", "poseidon::MDS", "write", 64, 60).unwrap_err();
        assert_eq!(
            err,
            CudaError::GlobalSize {
                module: "foreign_poseidon".into(),
                global: "poseidon::MDS".into(),
                op: "write",
                signed: 64,
                given: 60
            }
        );
        let text = err.to_string();
        assert!(
            text.contains("foreign_poseidon")
                && text.contains("poseidon::MDS")
                && text.contains("64 bytes")
                && text.contains("60"),
            "{text}"
        );
        assert!(err.fix().contains("exactly"), "{}", err.fix());
        assert!(
            driver_name("global name", "a\0b").is_err() && driver_name("global name", "").is_err()
        );
    }
}
