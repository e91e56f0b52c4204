//! `cargo xtask keygen`: generate a signing key for one role.

use anyhow::{Context, Result, bail};
use cuda_aot::metadata::RoleName;
use std::path::{Path, PathBuf};

use crate::{devkeys, paths};

/// Generate an ed25519 signing key for one role of the trust model.
///
/// The private key is written with mode 0600 to --out, which must not exist and must lie
/// outside the repository (or in a git-ignored folder of it): private keys are never
/// committed. The public key is printed on one line (`ed25519:<hex>`), ready to be listed
/// in a trust root.
#[derive(clap::Args)]
pub struct Args {
    /// The role the key is for: root, builder, reviewer or publisher.
    #[arg(long)]
    role: RoleName,
    /// Where to write the private key file.
    #[arg(long)]
    out: PathBuf,
    /// A free-text label stored in the key file (e.g. "release-2026").
    #[arg(long, default_value = "")]
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

/// Refuses a key path inside the working tree unless git ignores it.
fn refuse_tracked_location(out: &Path) -> Result<()> {
    let abs = if out.is_absolute() {
        out.to_path_buf()
    } else {
        std::env::current_dir()?.join(out)
    };
    let parent = abs.parent().context("--out has no parent folder")?;
    let parent = std::fs::canonicalize(parent)
        .with_context(|| format!("folder {} does not exist", parent.display()))?;
    let repo = std::fs::canonicalize(paths::repo_root())?;
    if !parent.starts_with(&repo) {
        return Ok(());
    }
    let target = parent.join(abs.file_name().context("--out names no file")?);
    let ignored = std::process::Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["check-ignore", "-q"])
        .arg(&target)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ignored {
        return Err(anyhow::Error::new(paths::Fix("write the key outside the repository (e.g. ~/.config/cuda-aot/keys/), or into an ignored folder such as .cuda-aot/".into())))
            .context(format!("refusing to write a private key to {}: it is inside the working tree and not ignored by git", target.display()));
    }
    if target.exists() {
        bail!("{} exists; keygen never overwrites a key", target.display());
    }
    Ok(())
}
