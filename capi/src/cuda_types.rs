//! The CUDA driver's handle types as the C ABI names them: opaque structs with the tags
//! `cuda.h` uses (`struct CUfunc_st *` is `CUfunction`), so the header needs no CUDA header
//! and a host that includes `cuda.h` passes and receives its own handle types unchanged.
#![allow(non_camel_case_types)]

/// `struct CUctx_st`: a `CUcontext` is a pointer to it.
pub struct CUctx_st {
    _opaque: [u8; 0],
}

/// `struct CUfunc_st`: a `CUfunction` is a pointer to it.
pub struct CUfunc_st {
    _opaque: [u8; 0],
}

/// `struct CUkern_st`: a `CUkernel` is a pointer to it.
pub struct CUkern_st {
    _opaque: [u8; 0],
}

/// `struct CUstream_st`: a `CUstream` (and a CUDA runtime `cudaStream_t`) is a pointer to
/// it.
pub struct CUstream_st {
    _opaque: [u8; 0],
}
