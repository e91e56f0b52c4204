//! The test hook of crash and race tests: pause points between the steps of a publish
//! (cargo feature `test-hooks` only; without it they compile to nothing).

#[cfg(feature = "test-hooks")]
use std::time::Duration;

use super::Step;

/// Test hook for crash and race tests (cargo feature `test-hooks` only, never in release
/// binaries): with `CUDA_AOT_PUBLISH_PAUSE=<step>:<dir>`, the publisher announces
/// `<dir>/<step>.<pid>.reached` after that step and waits (up to a minute) for `<dir>/go`
/// before going on, so a test can kill it or line up two publishers.
#[cfg(feature = "test-hooks")]
pub(crate) fn pause_point(step: Step) {
    use std::path::Path;
    let Some(spec) = std::env::var_os("CUDA_AOT_PUBLISH_PAUSE") else {
        return;
    };
    let spec = spec.to_string_lossy().into_owned();
    let Some((name, dir)) = spec.split_once(':') else {
        return;
    };
    if name != step.as_str() {
        return;
    }
    let dir = Path::new(dir);
    let _ = std::fs::write(
        dir.join(format!("{name}.{}.reached", std::process::id())),
        b"",
    );
    for _ in 0..6000 {
        if dir.join("go").exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Without the `test-hooks` feature the pause points compile to nothing.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn pause_point(_step: Step) {}
