//! What the file system tests plant where a registry file belongs.

use std::path::Path;

/// Makes a FIFO (named pipe) at `path`, creating its folder: what an attacker or a stray
/// tool leaves where a registry file belongs.
pub fn mkfifo(path: &Path) {
    std::fs::create_dir_all(path.parent().expect("a parent folder")).unwrap();
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.unwrap().success(), "mkfifo {}", path.display());
}
