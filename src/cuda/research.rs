//! Runtime compilation of CUDA C++ with NVRTC, for iterating on research kernels.
//!
//! Compiled only with the cargo feature `research`; a default build has no NVRTC entry point
//! (see the test in `cuda/mod.rs`). Nothing here is used to load production modules: what it
//! returns is bytes, which go through [`LoadedModule::load_ptx`](super::LoadedModule::load_ptx)
//! or [`LoadedModule::load_cubin`](super::LoadedModule::load_cubin) like any other module,
//! labelled by kind.
//!
//! Goes through `cudarc::nvrtc::result` and `sys` rather than cudarc's `compile_ptx_with_opts`,
//! which panics on NUL bytes and unwraps the log, and cannot produce a cubin.

use std::ffi::{CStr, CString, c_char};
use std::sync::OnceLock;

use cudarc::nvrtc::result::{self, NvrtcError};
use cudarc::nvrtc::sys;

use super::CudaError;

/// What to compile to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Output {
    /// PTX text for a virtual architecture (`compute_90`); loaded through the driver's JIT.
    Ptx,
    /// A cubin for one real architecture (`sm_90`).
    Cubin,
}

/// Whether the NVRTC library can be loaded (cached per process). When false, compiling
/// returns [`CudaError::CompilerMissing`] instead of letting cudarc panic.
pub fn compiler_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // SAFETY: tries to dlopen libnvrtc under the names cudarc itself would load; loading
        // runs the library's initialisers, which using NVRTC at all requires. The handle is
        // closed again, nothing is called.
        unsafe { sys::is_culib_present() }
    })
}

/// Compiles `source` to PTX text for `arch` (`compute_90`, or `sm_90` which means the same
/// virtual architecture here). `name` is the program name in diagnostics. Returns the PTX
/// without a trailing NUL.
pub fn compile_ptx(source: &str, arch: &str, name: &str) -> Result<Vec<u8>, CudaError> {
    compile(source, name, arch, Output::Ptx, &[])
}

/// Compiles `source` to a cubin for `arch` (`sm_90`, `sm_90a`; `compute_90` means `sm_90`).
pub fn compile_cubin(source: &str, arch: &str, name: &str) -> Result<Vec<u8>, CudaError> {
    compile(source, name, arch, Output::Cubin, &[])
}

/// Compiles `source` with NVRTC: `--gpu-architecture` from `arch` and `output`, then
/// `options` as given (e.g. `-std=c++17`, `--include-path=...`, `-lineinfo`).
pub fn compile(
    source: &str,
    name: &str,
    arch: &str,
    output: Output,
    options: &[&str],
) -> Result<Vec<u8>, CudaError> {
    // 1. Inputs the C API cannot carry are refused up front (cudarc would panic on them).
    let c_source = no_nul("kernel source", source, name)?;
    let c_name = no_nul("program name", name, name)?;
    let mut opts = vec![format!(
        "--gpu-architecture={}",
        gpu_architecture(arch, output)?
    )];
    for option in options {
        no_nul("compiler option", option, option)?;
        opts.push((*option).to_owned());
    }
    // 2. The library must be loadable.
    if !compiler_present() {
        return Err(CudaError::CompilerMissing);
    }
    // 3. Create, compile (keeping the log on failure), extract.
    let fail = |op: &'static str, e: NvrtcError, log: String| CudaError::Compile {
        program: name.to_owned(),
        op,
        code: format!("{:?}", e.0),
        log,
    };
    let program = Program {
        prog: result::create_program(&c_source, Some(c_name.as_c_str()))
            .map_err(|e| fail("nvrtcCreateProgram", e, String::new()))?,
    };
    // SAFETY: `program.prog` was created above and is destroyed only by `Program::drop`;
    // the source and name CStrings outlive it (declared before it, dropped after it).
    if let Err(e) = unsafe { result::compile_program(program.prog, &opts) } {
        return Err(fail("nvrtcCompileProgram", e, program.log()));
    }
    match output {
        // SAFETY: as above; the program compiled successfully.
        Output::Ptx => unsafe { result::get_ptx(program.prog) }
            .map(|ptx| c_chars_to_text(&ptx))
            .map_err(|e| fail("nvrtcGetPTX", e, program.log())),
        Output::Cubin => program
            .cubin()
            .map_err(|(op, e)| fail(op, e, program.log())),
    }
}

/// An NVRTC program, destroyed on drop.
struct Program {
    prog: sys::nvrtcProgram,
}

impl Program {
    /// The compiler log ("" if it cannot be read).
    fn log(&self) -> String {
        // SAFETY: `prog` is a live program (destroyed only in Drop).
        match unsafe { result::get_program_log(self.prog) } {
            Ok(log) => String::from_utf8_lossy(&c_chars_to_text(&log)).into_owned(),
            Err(_) => String::new(),
        }
    }

    /// The compiled cubin (`nvrtcGetCUBINSize` + `nvrtcGetCUBIN`).
    fn cubin(&self) -> Result<Vec<u8>, (&'static str, NvrtcError)> {
        let mut size = 0usize;
        // SAFETY: `prog` is a live, compiled program; the out-pointer is a live local.
        unsafe { sys::nvrtcGetCUBINSize(self.prog, &mut size) }
            .result()
            .map_err(|e| ("nvrtcGetCUBINSize", e))?;
        let mut cubin = vec![0u8; size];
        // SAFETY: `cubin` has exactly the `size` bytes NVRTC said it will write.
        unsafe { sys::nvrtcGetCUBIN(self.prog, cubin.as_mut_ptr().cast::<c_char>()) }
            .result()
            .map_err(|e| ("nvrtcGetCUBIN", e))?;
        Ok(cubin)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: `prog` was created by nvrtcCreateProgram and is destroyed exactly once, here.
        let _ = unsafe { result::destroy_program(self.prog) };
    }
}

/// NVRTC text output (PTX, log) without the trailing NUL.
fn c_chars_to_text(chars: &[c_char]) -> Vec<u8> {
    // c_char is i8 or u8 depending on the target; either way the bits are the byte.
    #[allow(clippy::unnecessary_cast)]
    let bytes: Vec<u8> = chars.iter().map(|&c| c as u8).collect();
    match CStr::from_bytes_until_nul(&bytes) {
        Ok(text) => text.to_bytes().to_vec(),
        Err(_) => bytes,
    }
}

/// `value` as a C string, or [`CudaError::InvalidName`] if it holds a NUL byte.
fn no_nul(what: &'static str, value: &str, shown: &str) -> Result<CString, CudaError> {
    CString::new(value).map_err(|_| CudaError::InvalidName {
        what,
        value: shown.to_owned(),
        reason: "contains a NUL byte",
    })
}

/// The `--gpu-architecture` value: `compute_NN[a|f]` for PTX, `sm_NN[a|f]` for a cubin,
/// from either spelling.
fn gpu_architecture(arch: &str, output: Output) -> Result<String, CudaError> {
    let invalid = || CudaError::InvalidName {
        what: "GPU architecture",
        value: arch.to_owned(),
        reason: "expected sm_NN or compute_NN, optionally with an a or f suffix (e.g. sm_90, sm_90a)",
    };
    let rest = arch
        .strip_prefix("sm_")
        .or_else(|| arch.strip_prefix("compute_"))
        .ok_or_else(invalid)?;
    let digits = rest.strip_suffix(['a', 'f']).unwrap_or(rest);
    if !(2..=3).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    Ok(match output {
        Output::Ptx => format!("compute_{rest}"),
        Output::Cubin => format!("sm_{rest}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADD_ONE: &str = r#"extern "C" __global__ void add_one(unsigned long long *data, unsigned int n) {
        unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) data[i] += 1;
    }"#;

    #[test]
    fn architectures_normalise_per_output() {
        assert_eq!(
            gpu_architecture("sm_90", Output::Ptx).unwrap(),
            "compute_90"
        );
        assert_eq!(
            gpu_architecture("compute_90", Output::Cubin).unwrap(),
            "sm_90"
        );
        assert_eq!(gpu_architecture("sm_90a", Output::Cubin).unwrap(), "sm_90a");
        assert_eq!(
            gpu_architecture("sm_120", Output::Ptx).unwrap(),
            "compute_120"
        );
        for bad in [
            "90",
            "sm_9",
            "sm_90x",
            "sm_",
            "gfx90a",
            "sm_90 --foo",
            "compute_1234",
        ] {
            assert!(gpu_architecture(bad, Output::Ptx).is_err(), "{bad}");
        }
    }

    #[test]
    fn nul_bytes_are_refused_without_calling_the_compiler() {
        let err = compile("a\0b", "p", "sm_90", Output::Ptx, &[]).unwrap_err();
        assert!(
            matches!(
                err,
                CudaError::InvalidName {
                    what: "kernel source",
                    ..
                }
            ),
            "{err}"
        );
        let err = compile(ADD_ONE, "p", "sm_90", Output::Ptx, &["-I\0x"]).unwrap_err();
        assert!(
            matches!(
                err,
                CudaError::InvalidName {
                    what: "compiler option",
                    ..
                }
            ),
            "{err}"
        );
    }

    /// Without the library, compiling is an error, not a panic; with it, the same call
    /// compiles. Either way something is checked.
    #[test]
    fn without_the_library_compiling_is_an_error_not_a_panic() {
        let result = compile_ptx(ADD_ONE, "sm_90", "add_one.cu");
        if compiler_present() {
            let ptx = result.expect("NVRTC is present and the source is valid");
            assert!(ptx.starts_with(b"//") || ptx.windows(8).any(|w| w == b".version"));
            return;
        }
        assert_eq!(result, Err(CudaError::CompilerMissing));
        assert!(CudaError::CompilerMissing.fix().contains("LD_LIBRARY_PATH"));
    }

    #[test]
    fn text_output_loses_its_nul() {
        let chars: Vec<c_char> = b"abc\0".iter().map(|&b| b as c_char).collect();
        assert_eq!(c_chars_to_text(&chars), b"abc");
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn compiles_ptx_and_cubin_that_load() {
        let device = crate::cuda::Device::open(0).unwrap();
        let sm = device.info().sm();
        let ptx = compile_ptx(ADD_ONE, &sm, "add_one.cu").expect("PTX");
        assert!(ptx.starts_with(b"//") || ptx.windows(8).any(|w| w == b".version"));
        assert!(!ptx.contains(&0));
        let cubin = compile_cubin(ADD_ONE, &sm, "add_one.cu").expect("cubin");
        for api in [crate::cuda::LoadApi::Module, crate::cuda::LoadApi::Library] {
            let m = crate::cuda::LoadedModule::load_ptx(device.context(), &ptx, api).unwrap();
            m.function("add_one").unwrap();
            let m = crate::cuda::LoadedModule::load_cubin(device.context(), &cubin, api).unwrap();
            let k = m.function("add_one").unwrap();
            assert_eq!(
                k.attributes().unwrap().binary_version,
                device.info().cc_major * 10 + device.info().cc_minor
            );
        }
        let err = compile_ptx("this is not C++", &sm, "broken.cu").unwrap_err();
        match &err {
            CudaError::Compile { op, log, .. } => {
                assert_eq!(*op, "nvrtcCompileProgram");
                assert!(log.contains("broken.cu"), "{log}");
            }
            other => panic!("{other}"),
        }
    }
}
