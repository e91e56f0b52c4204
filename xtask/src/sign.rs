//! `cargo xtask sign`: sign the unsigned manifests of a build output with a builder key.

use anyhow::{Context, Result, bail};
use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::{Digest, Limits, Manifest, SecretKey};
use std::path::{Path, PathBuf};

use crate::{devkeys, outdir, paths};

/// Sign the unsigned manifests of a build output with a builder key.
///
/// Signs every unsigned manifest (`<module>/<target>.<kind>.manifest.json`) of a build
/// output with a builder key, writing `<...>.manifest.dsse.json` beside it.
///
/// Each blob is hashed again first: a manifest is signed only if the blob beside it still
/// has the size and blake3 it records. Without --builder-key the development builder key
/// is used (generated on first use, labelled dev).
#[derive(clap::Args)]
pub struct Args {
    /// The build output folder [default: .cuda-aot/build of the project].
    #[arg(value_name = "DIR")]
    out: Option<PathBuf>,
    /// The builder's private key file [default: the dev builder key].
    #[arg(long, value_name = "FILE", env = "CUDA_AOT_BUILDER_KEY")]
    builder_key: Option<PathBuf>,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let key = match &self.builder_key {
            Some(p) => devkeys::read_key(p)?,
            None => devkeys::ensure()?.builder,
        };
        let out = self.out.unwrap_or_else(paths::default_build_out);
        let n = sign_output(&out, &key)?;
        eprintln!(
            "signed {n} manifest(s) in {} with builder key {}",
            out.display(),
            key.public().key_id().short()
        );
        Ok(())
    }
}

/// Signs every unsigned manifest in `out`; returns how many.
pub fn sign_output(out: &Path, key: &SecretKey) -> Result<usize> {
    let limits = Limits::default();
    let unsigned = outdir::files_ending(out, ".manifest.json")?;
    if unsigned.is_empty() {
        bail!(
            "{}: no *.manifest.json files; run cargo xtask build first",
            out.display()
        );
    }
    for path in &unsigned {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let m: Manifest =
            cuda_aot::json::parse(&bytes, limits.manifest, &path.display().to_string())?;
        let blob_file = outdir::blob_of_manifest(path);
        let blob = std::fs::read(&blob_file).with_context(|| {
            format!(
                "reading the blob of {} ({})",
                m.label(),
                blob_file.display()
            )
        })?;
        if blob.len() as u64 != m.size || Digest::of(&blob) != m.module_digest {
            bail!(
                "{}: {} no longer matches its manifest (size/blake3); rebuild with cargo xtask build",
                m.label(),
                blob_file.display()
            );
        }
        let env = Envelope::sign(PayloadType::Manifest, &bytes, &[key]);
        let signed = path.with_file_name(
            path.file_name()
                .expect("file")
                .to_string_lossy()
                .replace(".manifest.json", ".manifest.dsse.json"),
        );
        std::fs::write(&signed, env.to_bytes())
            .with_context(|| format!("writing {}", signed.display()))?;
    }
    Ok(unsigned.len())
}
