//! The C ABI from C (issue 22): `examples/c/verify.c` and the C files of `tests/c/`
//! compiled with the system `cc` against the built library, run on a real signed registry
//! published in-process with generated keys. No GPU, no CUDA driver.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;

/// A folder for the compiled C programs, kept for the whole test binary.
fn bin_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// `examples/c/verify.c` linked against the shared library, compiled once.
fn verify_c() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let exe = bin_dir().join("verify");
        compile_c(&["examples/c/verify.c"], &exe, &link_shared());
        exe
    })
}

#[test]
fn verify_c_prints_one_line_per_module_of_a_good_registry() {
    let r = Registry::publish();
    let out = run(verify_c(), &[&r.path(), &r.trust_root()], &r.state_dir());
    let (stdout, stderr) = texts(&out);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.starts_with("registry OK: index v1"), "{stdout}");
    let lines: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for (line, sm) in lines.iter().zip(["sm_80", "sm_90"]) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let size = cubin(sm).len().to_string();
        let digest = cuda_aot::Digest::of(&cubin(sm)).to_string();
        assert_eq!(words, ["add", sm, "cubin", &size, &digest], "{stdout}");
    }
    // Verifying saves nothing: the C verify reads the rollback state, never writes it.
    assert!(
        !r.state_dir().exists(),
        "{} was written",
        r.state_dir().display()
    );
}

#[test]
fn verify_c_names_the_module_and_the_fix_when_one_byte_of_a_blob_is_flipped() {
    let r = Registry::publish();
    let blob = r.blob("sm_90");
    let mut bytes = std::fs::read(&blob).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&blob, &bytes).unwrap();
    let out = run(verify_c(), &[&r.path(), &r.trust_root()], &r.state_dir());
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("add sm_90 blob: blake3")
            && stderr.contains("[module add, target sm_90, file ")
            && stderr.contains(&blob.display().to_string())
            && stderr.contains("(CUDA_AOT_STATUS_TAMPERED)"),
        "{stderr}"
    );
    let fix = stderr
        .lines()
        .find(|l| l.starts_with("Fix: "))
        .unwrap_or("");
    assert!(
        fix.contains("altered or truncated after signing"),
        "{stderr}"
    );
}

#[test]
fn verify_c_refuses_a_missing_registry_with_a_fix() {
    let r = Registry::publish();
    let missing = r.fixture.path("no-such-registry");
    let out = run(verify_c(), &[&missing, &r.trust_root()], &r.state_dir());
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("timestamp: missing") && stderr.contains("(CUDA_AOT_STATUS_NOT_FOUND)"),
        "{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("Fix: publish a complete release")),
        "{stderr}"
    );
}

#[test]
fn verify_c_refuses_a_registry_under_another_trust_root_as_untrusted() {
    let r = Registry::publish();
    let other = Registry::publish();
    let out = run(
        verify_c(),
        &[&r.path(), &other.trust_root()],
        &r.state_dir(),
    );
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("(CUDA_AOT_STATUS_UNTRUSTED_KEY)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\nFix: verify with the trust root"),
        "{stderr}"
    );
}

#[test]
fn null_and_malformed_arguments_are_invalid_argument_from_c() {
    let exe = bin_dir().join("null_args");
    compile_c(&["capi/tests/c/null_args.c"], &exe, &link_shared());
    let out = run(&exe, &[], bin_dir());
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        27,
        "{stdout}"
    );
    assert!(stdout.contains("ok registry NULL: CUDA_AOT_STATUS_INVALID_ARGUMENT (registry is NULL) Fix: pass a valid pointer as registry"), "{stdout}");
}

/// `tests/c/open.c` (open a registry for device 0 and preload it) run on `registry`.
fn open_c(registry: &Path, trust: &Path, state: &Path, production: bool) -> (i32, String) {
    open_c_as(
        registry,
        trust,
        state,
        if production { "production" } else { "" },
    )
}

/// `tests/c/open.c` in `mode` (`production`, `embedded`, or "" for the default).
fn open_c_as(registry: &Path, trust: &Path, state: &Path, mode: &str) -> (i32, String) {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    let exe = EXE.get_or_init(|| {
        let exe = bin_dir().join("open");
        compile_c(&["capi/tests/c/open.c"], &exe, &link_shared());
        exe
    });
    let mut args = vec![registry, trust];
    if !mode.is_empty() {
        args.push(Path::new(mode));
    }
    let out = run(exe, &args, state);
    let (stdout, stderr) = texts(&out);
    (out.status.code().unwrap_or(-1), format!("{stdout}{stderr}"))
}

#[test]
fn opening_from_c_gives_the_typed_error_and_fix_for_a_missing_driver_and_a_bad_registry() {
    let r = Registry::publish();
    if !cuda_aot::cuda::driver_present() {
        // The registry verifies, then the driver is missing: DRIVER, with its Fix.
        let (code, text) = open_c(&r.path(), &r.trust_root(), &r.state_dir(), false);
        assert_eq!(code, 16, "{text}");
        assert!(text.contains("status CUDA_AOT_STATUS_DRIVER\n"), "{text}");
        assert!(text.contains("libcuda"), "{text}");
        assert!(text.contains("Fix: install the NVIDIA driver"), "{text}");
    }
    // The production policy refuses a dev registry before any driver call.
    let (code, text) = open_c(&r.path(), &r.trust_root(), &r.state_dir(), true);
    assert_eq!(code, 14, "{text}");
    assert!(text.contains("status CUDA_AOT_STATUS_POLICY\n"), "{text}");
    // Another registry's trust root: UNTRUSTED_KEY, whatever the host.
    let other = Registry::publish();
    let (code, text) = open_c(&r.path(), &other.trust_root(), &r.state_dir(), false);
    assert_eq!(code, 8, "{text}");
    assert!(
        text.contains("status CUDA_AOT_STATUS_UNTRUSTED_KEY\n"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("Fix: ") && l.len() > 10),
        "{text}"
    );
}

/// Issue 36, item 3: the C ABI opens a bundle held in memory (pointer and length), with
/// the trust root by its bytes: another root is UNTRUSTED_KEY and a damaged bundle
/// MALFORMED before the driver is touched; a good one verifies, then meets the driver.
#[test]
fn issue_36_an_embedded_bundle_opens_from_c_by_pointer_and_length() {
    let r = Registry::publish();
    let src = cuda_aot::source::DirSource::new(r.path());
    let trust = std::fs::read(r.trust_root()).unwrap();
    let packed = cuda_aot::bundle::Embedded::pack(
        &r.path(),
        &src.layout_paths().unwrap(),
        &cuda_aot::Digest::of(&trust),
        "file:///c-test",
    )
    .unwrap();
    let bundle = r.fixture.path("cuda-aot.bundle");
    std::fs::write(&bundle, &packed).unwrap();
    let other = Registry::publish();
    let (code, text) = open_c_as(&bundle, &other.trust_root(), &r.state_dir(), "embedded");
    assert!(
        text.contains("status CUDA_AOT_STATUS_UNTRUSTED_KEY\n"),
        "{code}: {text}"
    );
    assert!(text.contains("fetched under trust root"), "{text}");
    let damaged = r.fixture.path("damaged.bundle");
    std::fs::write(&damaged, &packed[..packed.len() / 2]).unwrap();
    let (_, text) = open_c_as(&damaged, &r.trust_root(), &r.state_dir(), "embedded");
    assert!(
        text.contains("status CUDA_AOT_STATUS_MALFORMED\n"),
        "{text}"
    );
    assert!(text.contains("runs past the end"), "{text}");
    let (code, text) = open_c_as(&bundle, &r.trust_root(), &r.state_dir(), "embedded");
    match cuda_aot::cuda::driver_present() {
        false => assert!(text.contains("status CUDA_AOT_STATUS_DRIVER\n"), "{text}"),
        true => assert_eq!(code, 0, "{text}"),
    }
}

#[test]
fn eight_threads_verify_at_once_each_with_its_own_last_error() {
    let r = Registry::publish();
    let exe = bin_dir().join("threads");
    let mut flags = link_shared();
    flags.push("-pthread".into());
    compile_c(&["capi/tests/c/threads.c"], &exe, &flags);
    let out = run(&exe, &[&r.path(), &r.trust_root()], &r.state_dir());
    let (stdout, stderr) = texts(&out);
    assert!(
        out.status.success() && stdout.starts_with("threads ok (8 threads x 20 rounds)"),
        "{stdout}\n{stderr}"
    );
}

/// `tests/c/handles.c` built with AddressSanitizer (and its leak checker) against the
/// static library, with `defines`, run on `r` saving the state to `state`.
fn handles_under_asan(r: &Registry, state: &Path, defines: &[&str]) -> std::process::Output {
    let exe = bin_dir().join(format!("handles_asan{}", defines.join("")));
    let mut flags: Vec<String> = defines.iter().map(|d| format!("-D{d}")).collect();
    flags.extend([
        "-fsanitize=address".to_string(),
        "-fno-omit-frame-pointer".into(),
    ]);
    flags.extend(link_static());
    compile_c(&["capi/tests/c/handles.c"], &exe, &flags);
    std::process::Command::new(&exe)
        .args([r.path(), r.trust_root(), state.to_path_buf()])
        .env("ASAN_OPTIONS", "detect_leaks=1:halt_on_error=1:exitcode=23")
        .output()
        .unwrap()
}

#[test]
fn every_handle_is_freed_under_address_sanitizer_with_the_static_library() {
    let r = Registry::publish();
    let state = r.fixture.path("state.json");
    let out = handles_under_asan(&r, &state, &[]);
    let (stdout, stderr) = texts(&out);
    assert!(
        out.status.success() && stdout.starts_with("handles ok"),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(!stderr.contains("Sanitizer"), "{stderr}");
    // CUDA_AOT_VERIFY_SAVE_STATE saved the versions seen.
    let saved = cuda_aot::state::TrustState::load(&state, 4096).unwrap();
    assert_eq!((saved.root, saved.timestamp, saved.index), (1, 1, 1));
}

#[test]
fn address_sanitizer_reports_a_report_that_is_not_freed() {
    let r = Registry::publish();
    let out = handles_under_asan(&r, &r.fixture.path("state.json"), &["LEAK_ONE_REPORT"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(23), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("ERROR: LeakSanitizer: detected memory leaks"),
        "{stderr}"
    );
}

/// Issue 43: the shared library carries its versioned soname (capi/build.rs): `.so.0.MINOR`
/// for a 0.x version, `.so.MAJOR` from 1.0 on.
#[test]
fn issue_43_the_shared_library_has_a_versioned_soname() {
    let (major, minor) = (
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR"),
    );
    let abi = if major == "0" {
        format!("0.{minor}")
    } else {
        major.to_string()
    };
    assert_eq!(
        soname(&lib_dir().join("libcuda_aot_capi.so")),
        format!("libcuda_aot_capi.so.{abi}")
    );
}

/// `examples/c/doctor.c` linked against the shared library, compiled once.
fn doctor_c() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let exe = bin_dir().join("doctor");
        compile_c(&["examples/c/doctor.c"], &exe, &link_shared());
        exe
    })
}

/// `examples/c/doctor.c` on `r` with `device` (SM and driver version): exit code, stdout,
/// stderr.
fn doctor(r: &Registry, device: &[&str]) -> (Option<i32>, String, String) {
    let mut args: Vec<&Path> = vec![];
    let (reg, trust) = (r.path(), r.trust_root());
    args.push(&reg);
    args.push(&trust);
    args.extend(device.iter().map(Path::new));
    let out = run(doctor_c(), &args, &r.state_dir());
    let (stdout, stderr) = texts(&out);
    (out.status.code(), stdout, stderr)
}

/// Issue 43: `cuda_aot_doctor` reports per module what `cargo xtask doctor` reports, with
/// the runtime's reasons, statuses and fixes: the exact cubin and its driver floor, no
/// cubin for the device's SM, a driver below the floor, a tampered blob; a device named by
/// a variant and a probe without a driver are refused with their fix.
#[test]
fn issue_43_doctor_from_c_says_which_blob_loads_or_why_none_would() {
    let r = Registry::publish();
    // An sm_90 device with a 13.0 driver: the exact cubin.
    let (code, stdout, stderr) = doctor(&r, &["sm_90", "13000"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("device sm_90 (device_sm): sm_90, driver 13.0\nmodule "),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nadd                sm_90 cubin                  verified; needs driver 13.0 or newer\n"),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("\nmodule add CUDA_AOT_STATUS_OK loads sm_90 cubin (driver 13.0 or newer)\n"),
        "{stdout}"
    );
    // An sm_89 device: nothing, the targets that exist, the fix.
    let (code, stdout, _) = doctor(&r, &["sm_89", "13000"]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("no cubin for this device's sm_89")
            && stdout.contains("Fix: add sm_89 to the module's targets")
            && stdout.contains("module add CUDA_AOT_STATUS_NO_TARGET has sm_80 cubin, sm_90 cubin"),
        "{stdout}"
    );
    // A driver below the floor.
    let (code, stdout, _) = doctor(&r, &["sm_90", "12040"]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("needs CUDA driver 13.0 or newer; this driver is 12.4")
            && stdout.contains("module add CUDA_AOT_STATUS_DRIVER"),
        "{stdout}"
    );
    // Without a driver version the floor is not checked.
    let (code, stdout, _) = doctor(&r, &["sm_80"]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("driver not given (floors not checked)"),
        "{stdout}"
    );
    // A device named by a variant: refused with the plain SM to use.
    let (code, _, stderr) = doctor(&r, &["sm_90a", "13000"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("sm_90a names no device: a device is named by its plain SM (sm_90)")
            && stderr.contains("(CUDA_AOT_STATUS_INVALID_ARGUMENT)")
            && stderr.contains("\nFix: describe the device as sm_90"),
        "{stderr}"
    );
    // Probing this host's device: without a driver, DRIVER and how to describe one.
    if !cuda_aot::cuda::driver_present() {
        let (code, _, stderr) = doctor(&r, &[]);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(
            stderr.contains("(CUDA_AOT_STATUS_DRIVER)")
                && stderr.contains("\nFix: describe the device instead: pass device_sm"),
            "{stderr}"
        );
    }
    // A tampered blob: that module's reason, TAMPERED.
    let blob = r.blob("sm_90");
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&blob, &bytes).unwrap();
    let (code, stdout, _) = doctor(&r, &["sm_90", "13000"]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("module add CUDA_AOT_STATUS_TAMPERED") && stdout.contains("Fix: "),
        "{stdout}"
    );
    // The sm_80 blob is untouched and still loads on its device.
    let (code, stdout, _) = doctor(&r, &["sm_80", "13000"]);
    assert_eq!(code, Some(0), "{stdout}");
}

/// Issue 43: a registry refused as a whole fails the call as opening would (here: another
/// trust root), with `*out` NULL.
#[test]
fn issue_43_doctor_from_c_refuses_a_registry_of_another_trust_root_as_a_whole() {
    let r = Registry::publish();
    let other = Registry::publish();
    let out = run(
        doctor_c(),
        &[&r.path(), &other.trust_root(), Path::new("sm_90")],
        &r.state_dir(),
    );
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("(CUDA_AOT_STATUS_UNTRUSTED_KEY)") && stderr.contains("\nFix: "),
        "{stderr}"
    );
}
