//! `cuda_aot_verify`: the offline verification `cargo xtask verify --registry R --trust F`
//! performs (steps 1-8 of `cuda_aot::verify`, every module and blob, then the audit of
//! every other file: root chain, subjects' sha256, rebuild sources), through the C ABI.

use std::ffi::{CStr, c_char};
use std::path::{Path, PathBuf};

use cuda_aot::Limits;
use cuda_aot::source::{DirSource, layout};
use cuda_aot::state::TrustState;
use cuda_aot::verify::{Failed, Options, Select, verify_metadata};

use crate::last_error::{Failure, entry};
use crate::report::{Report, null};
use crate::status::Status;

/// Flag of `cuda_aot_verify`: after every step passed, save the versions seen in the
/// rollback state file (as `cargo xtask verify` does), so a later replay of older metadata
/// is refused. Without it nothing is written.
pub const CUDA_AOT_VERIFY_SAVE_STATE: u32 = 1;

/// Verifies the registry folder `registry` offline against the trust root file
/// `trust_root`, the way `cargo xtask verify --registry R --trust F` does: the trust root
/// and its rotation chain, the timestamp (expiry, no rollback), the bundle index, build
/// statements and promotion records, every manifest (builder signatures, listed digest),
/// every blob (size, blake3) and its content (the cubin's ELF SM or PTX target, the signed
/// kernels, launch ABI and globals). Needs no GPU and no CUDA driver.
///
/// `state_file` is the rollback state to check against: NULL for the default state file of
/// this registry (the one `cargo xtask verify` and the prover runtime share:
/// `$CUDA_AOT_STATE_DIR`, else `$XDG_STATE_HOME/cuda-aot/trust/`, else
/// `~/.local/state/cuda-aot/trust/`), or a path; a missing file is a first start. It is
/// only read, unless `flags` holds `CUDA_AOT_VERIFY_SAVE_STATE`. `flags`: 0 or
/// `CUDA_AOT_VERIFY_SAVE_STATE`.
///
/// On success `*out` is a new report (free it with `cuda_aot_report_free`) and the status
/// is `CUDA_AOT_STATUS_OK`. On failure `*out` is NULL (when `out` is not NULL), and
/// `cuda_aot_last_error_message` names the first failure (its file, module, target or key)
/// and `cuda_aot_last_error_fix` says what to do. Paths must be UTF-8.
///
/// # Safety
///
/// `registry` and `trust_root` are NULL or NUL-terminated strings; `state_file` is NULL or
/// a NUL-terminated string; `out` is NULL or points to a writable `cuda_aot_report*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_aot_verify(
    registry: *const c_char,
    trust_root: *const c_char,
    state_file: *const c_char,
    flags: u32,
    out: *mut *mut Report,
) -> Status {
    entry(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: `out` is non-null and writable (see # Safety).
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: each is NULL or a NUL-terminated string (see # Safety).
        let (registry, trust, state) = unsafe {
            (
                path_arg(registry, "registry")?,
                path_arg(trust_root, "trust_root")?,
                optional_path(state_file, "state_file")?,
            )
        };
        if flags & !CUDA_AOT_VERIFY_SAVE_STATE != 0 {
            return Err(Failure::invalid_argument(
                format!("unknown flags {flags:#x}"),
                "pass 0 or CUDA_AOT_VERIFY_SAVE_STATE",
            ));
        }
        let state = match state {
            Some(p) => p,
            None => default_state(&registry)?,
        };
        let report = verify(
            &registry,
            &trust,
            &state,
            flags & CUDA_AOT_VERIFY_SAVE_STATE != 0,
        )?;
        // SAFETY: as above; the caller frees the report with cuda_aot_report_free.
        unsafe { out.write(Box::into_raw(Box::new(report))) };
        Ok(())
    })
}

/// Steps 1-8 for every entry, the rollback floor read from `state`, saved there only when
/// `save` and every step passed.
fn verify(registry: &Path, trust: &Path, state: &Path, save: bool) -> Result<Report, Failure> {
    let limits = Limits::default();
    let anchor = cuda_aot::fs::read_capped(trust, limits.root, "trust root")?;
    let seen = TrustState::load(state, limits.state)?;
    let opts = Options {
        limits,
        ..Options::default()
    };
    let src = DirSource::new(registry);
    // The same pipeline as `cargo xtask verify`: metadata (1-5), then every manifest, blob
    // and its content (6-8) on several threads when the bundle is large; the first failure
    // in index order names its module and file. The verified bytes are not kept.
    let verified = verify_metadata(&src, &anchor, seen, &opts)?
        .complete(&src, Select::all().parallel())
        .map_err(|f| failed(f, registry))?;
    // What only auditors read, as `cargo xtask verify` does: every subject's sha256 and
    // every rebuild source the build statements name.
    verified.metadata().audit(&src)?;
    if save {
        verified.state().save(state)?;
    }
    Ok(Report::of(&verified))
}

/// A failure of steps 6-8, its message naming the module, target and file it concerns.
fn failed(f: Failed, registry: &Path) -> Failure {
    let mut failure = Failure::from(*f.error);
    if let Some(e) = &f.entry {
        let file = match f.blob {
            Some(d) => registry.join(layout::blob(&d)),
            None => registry.join(layout::manifest(&e.manifest)),
        };
        failure.message += &format!(
            " [module {}, target {}, file {}]",
            e.module,
            e.sm,
            file.display()
        );
    }
    failure
}

/// The default state file of `registry`, or the advice to name one.
fn default_state(registry: &Path) -> Result<PathBuf, Failure> {
    TrustState::default_path(registry).ok_or_else(|| {
        Failure::new(
            Status::Io,
            format!(
                "no per-user folder for the rollback state of {} (neither CUDA_AOT_STATE_DIR, XDG_STATE_HOME nor HOME is set)",
                registry.display()
            ),
            "set CUDA_AOT_STATE_DIR to a folder that outlives the process (the prover runtime reads the same one), or pass state_file",
        )
    })
}

/// A required path argument.
///
/// # Safety
///
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn path_arg(p: *const c_char, what: &str) -> Result<PathBuf, Failure> {
    // SAFETY: forwarded from the caller.
    unsafe { optional_path(p, what) }?.ok_or_else(|| null(what))
}

/// An optional path argument (NULL: none); UTF-8 and non-empty when given.
///
/// # Safety
///
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn optional_path(
    p: *const c_char,
    what: &str,
) -> Result<Option<PathBuf>, Failure> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null and NUL-terminated (see # Safety).
    let s = unsafe { CStr::from_ptr(p) }.to_str().map_err(|e| {
        Failure::invalid_argument(
            format!("{what} is not UTF-8 ({e})"),
            format!("pass {what} as a UTF-8 path"),
        )
    })?;
    if s.is_empty() {
        return Err(Failure::invalid_argument(
            format!("{what} is empty"),
            format!("pass {what} as the path of a file or folder"),
        ));
    }
    Ok(Some(PathBuf::from(s)))
}
