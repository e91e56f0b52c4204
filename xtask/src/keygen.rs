//! `cargo xtask keygen`: generate a signing key for one role.

use anyhow::{Context, Result, bail};
use cuda_aot::metadata::RoleName;
use std::path::{Path, PathBuf};

use crate::advice::fail;
use crate::devkeys;

/// Generate an ed25519 signing key for one role of the trust model.
///
/// The private key is written with mode 0600 to --out, which must not exist and must lie
/// outside the repository (or in a git-ignored folder of it): private keys are never
/// committed. The public key is printed on one line (`ed25519:<hex>`), ready to be listed
/// in a trust root.
#[derive(clap::Args)]
pub struct Args {
    /// The role the key is for: root, builder, reviewer or publisher.
    #[arg(long, value_name = "ROLE")]
    role: RoleName,
    /// Where to write the private key file.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// A free-text label stored in the key file (e.g. "release-2026").
    #[arg(long, value_name = "TEXT", default_value = "")]
    label: String,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        refuse_tracked_location(&self.out)?;
        let key = devkeys::generate()?;
        devkeys::write_key(&self.out, self.role, &key, &self.label)?;
        eprintln!(
            "wrote {} key {} (mode 0600), key id {}",
            self.role,
            self.out.display(),
            key.public().key_id().short()
        );
        println!("{}", key.public());
        Ok(())
    }
}

/// Refuses a key path inside a git working tree (any repository, not only this one) unless
/// git ignores it.
fn refuse_tracked_location(out: &Path) -> Result<()> {
    let abs = std::path::absolute(out)?;
    let parent = abs.parent().context("--out has no parent folder")?;
    let parent = std::fs::canonicalize(parent)
        .with_context(|| format!("folder {} does not exist", parent.display()))?;
    let target = parent.join(abs.file_name().context("--out names no file")?);
    if target.exists() {
        bail!("{} exists; keygen never overwrites a key", target.display());
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&parent)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let in_work_tree = git(&["rev-parse", "--is-inside-work-tree"]);
    if in_work_tree && !git(&["check-ignore", "-q", &target.to_string_lossy()]) {
        return Err(fail(
            format!(
                "refusing to write a private key to {}: it is inside the working tree and not ignored by git",
                target.display()
            ),
            "write the key outside the repository (e.g. ~/.config/cuda-aot/keys/), or into an ignored folder such as .cuda-aot/",
        ));
    }
    Ok(())
}
