//! The C library for the tests that link it: installed by the real tool (`xtask install-capi
//! --debug`: cargo's dev build, made by the tool) into a temporary prefix, as docs/capi.md
//! tells users to; and a real signed registry of the testkit for the C programs to verify.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Out, repo, xtask};

/// `xtask install-capi --debug --prefix prefix` of this checkout, staged below `destdir`
/// when given (`DESTDIR`), run from the checkout.
pub fn install(prefix: &Path, destdir: Option<&Path>) -> Out {
    let mut cmd = xtask();
    cmd.current_dir(repo())
        .args(["install-capi", "--debug", "--prefix"])
        .arg(prefix)
        .env_remove("DESTDIR");
    if let Some(d) = destdir {
        cmd.env("DESTDIR", d);
    }
    Out::of(&mut cmd)
}

/// A temporary prefix with the C library installed in it (kept as long as the value).
pub struct Installed {
    pub dir: tempfile::TempDir,
}

impl Installed {
    /// Installs into a new temporary prefix (`<tmp>/prefix`).
    pub fn new() -> Installed {
        let dir = tempfile::Builder::new()
            .prefix("capi-install-")
            .tempdir()
            .unwrap();
        install(&dir.path().join("prefix"), None).ok();
        Installed { dir }
    }

    /// The prefix.
    pub fn prefix(&self) -> PathBuf {
        self.dir.path().join("prefix")
    }
}

/// `readelf -d` of `elf` (binutils), for its SONAME, NEEDED and RUNPATH lines.
pub fn dynamic_section(elf: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(elf)
        .output()
        .expect("readelf (binutils) runs");
    assert!(out.status.success(), "readelf -d {}", elf.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A real signed registry (generated keys, the real cubins of `add` for sm_80 and sm_90,
/// published in-process) with its trust root in `root.json` beside it.
pub struct Registry {
    pub fixture: cuda_aot_testkit::Fixture,
}

impl Registry {
    pub fn publish() -> Registry {
        let fixture = cuda_aot_testkit::Fixture::new();
        std::fs::write(fixture.path("root.json"), &fixture.root_file).unwrap();
        fixture.append(&["sm_80", "sm_90"]);
        Registry { fixture }
    }

    pub fn path(&self) -> PathBuf {
        self.fixture.reg_path()
    }

    pub fn trust_root(&self) -> PathBuf {
        self.fixture.path("root.json")
    }

    /// Runs `program` on this registry (its rollback state in the fixture's folder).
    pub fn run(&self, program: &Path) -> Out {
        Out::of(
            Command::new(program)
                .arg(self.path())
                .arg(self.trust_root())
                .env("CUDA_AOT_STATE_DIR", self.fixture.path("state")),
        )
    }
}

/// `cuda_aot_verify` through the C ABI: `Ok` or the last error's message.
pub fn c_verify(registry: &Path, trust: &Path, state: &Path) -> Result<(), String> {
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let (r, t, s) = (c(registry), c(trust), c(state));
    let mut report = std::ptr::null_mut();
    // SAFETY: NUL-terminated paths that outlive the call; `report` is a writable pointer.
    let status = unsafe {
        cuda_aot_capi::cuda_aot_verify(r.as_ptr(), t.as_ptr(), s.as_ptr(), 0, &mut report)
    };
    if !report.is_null() {
        // SAFETY: a report the call returned, freed once.
        unsafe { cuda_aot_capi::report::cuda_aot_report_free(report) };
    }
    if status == cuda_aot_capi::Status::Ok {
        return Ok(());
    }
    // SAFETY: the thread's last error, a NUL-terminated string owned by the library.
    let msg = unsafe { std::ffi::CStr::from_ptr(cuda_aot_capi::cuda_aot_last_error_message()) };
    Err(msg.to_string_lossy().into_owned())
}
