//! `cargo xtask sign`: sign one build statement over every manifest of a build output with
//! a builder key.

use anyhow::{Context, Result, bail};
use cuda_aot::digest::check_blob;
use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::metadata::{Attested, BuildStatement};
use cuda_aot::{Digest, Limits, Manifest, SecretKey};
use std::path::{Path, PathBuf};

use crate::build::output;
use crate::{devkeys, paths};

/// Sign one build statement over every manifest of a build output with a builder key.
///
/// Reads every manifest (`<module>/<target>.<kind>.manifest.json`) of a build output, hashes
/// each blob again (a manifest is attested only if the blob beside it still has the size
/// and blake3 it records) and writes `<out>/build.statement.json`: one statement, signed by
/// the builder, listing the blake3 of every manifest. A prover checks one builder signature
/// per build, however many modules it holds.
///
/// Without --builder-key the development builder key is used (generated on first use,
/// labelled dev).
#[derive(clap::Args)]
pub struct Args {
    /// The build output folder (default: .cuda-aot/build).
    #[arg(default_value_os_t = paths::default_build_out())]
    out: PathBuf,
    /// The builder's private key file.
    #[arg(long, env = "CUDA_AOT_BUILDER_KEY")]
    builder_key: Option<PathBuf>,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let key = match &self.builder_key {
            Some(p) => devkeys::read_key(p)?,
            None => devkeys::ensure()?.builder,
        };
        let n = sign_output(&self.out, &key)?;
        eprintln!(
            "signed a build statement over {n} manifest(s) in {} with builder key {}",
            self.out.display(),
            key.public().key_id().short()
        );
        Ok(())
    }
}

/// The blob that a manifest file describes: the path without `.manifest.json`.
pub fn blob_path(manifest_path: &Path) -> PathBuf {
    let s = manifest_path.to_string_lossy();
    let stem = s.strip_suffix(".manifest.json").unwrap_or(&s);
    PathBuf::from(stem.to_string())
}

/// Files under `out` whose names end with `suffix`, sorted.
pub fn files_ending(out: &Path, suffix: &str) -> Result<Vec<PathBuf>> {
    if !out.is_dir() {
        return Err(anyhow::Error::new(paths::Fix(
            "run cargo xtask build first, or pass the build output folder".into(),
        )))
        .context(format!("build output {} does not exist", out.display()));
    }
    let mut v = Vec::new();
    for e in walkdir::WalkDir::new(out).min_depth(2).max_depth(2) {
        let e = e?;
        if e.file_type().is_file() && e.file_name().to_string_lossy().ends_with(suffix) {
            v.push(e.into_path());
        }
    }
    v.sort();
    Ok(v)
}

/// One module of a build output: its manifest, the manifest file's bytes, the blob.
pub type OutputModule = (Manifest, Vec<u8>, Vec<u8>);

/// Every manifest of `out` with its file bytes and blob, each blob checked against its
/// manifest (size, blake3).
pub fn read_output(out: &Path) -> Result<Vec<OutputModule>> {
    let limits = Limits::default();
    let files = files_ending(out, ".manifest.json")?;
    if files.is_empty() {
        bail!(
            "{}: no *.manifest.json files; run cargo xtask build first",
            out.display()
        );
    }
    let mut v = Vec::with_capacity(files.len());
    for path in &files {
        let bytes = cuda_aot::fs::read_capped(path, limits.manifest, "manifest")?;
        let m: Manifest =
            cuda_aot::json::parse(&bytes, limits.manifest, &path.display().to_string())?;
        let blob_file = blob_path(path);
        let blob =
            cuda_aot::fs::read_capped(&blob_file, limits.blob, "blob").with_context(|| {
                format!(
                    "reading the blob of {} ({})",
                    m.label(),
                    blob_file.display()
                )
            })?;
        check_blob(&m.label(), &blob, m.size, &m.module_digest).map_err(|e| {
            anyhow::Error::new(paths::Fix("rebuild with cargo xtask build".into())).context(
                format!(
                    "{}: {} no longer matches its manifest: {e}",
                    m.label(),
                    blob_file.display()
                ),
            )
        })?;
        v.push((m, bytes, blob));
    }
    Ok(v)
}

/// Signs one build statement over every manifest in `out`; returns how many it covers.
pub fn sign_output(out: &Path, key: &SecretKey) -> Result<usize> {
    let modules = read_output(out)?;
    let channel = modules[0].0.channel;
    if let Some((m, ..)) = modules.iter().find(|(m, ..)| m.channel != channel) {
        bail!(
            "{}: {} is built for channel {} but others for {channel}; rebuild the output with one --channel",
            out.display(),
            m.label(),
            m.channel
        );
    }
    let mut manifests: Vec<Attested> = modules
        .iter()
        .map(|(m, bytes, _)| Attested {
            module: m.identity.module.clone(),
            sm: m.identity.sm,
            kind: m.identity.kind,
            manifest: Digest::of(bytes),
            manifest_size: bytes.len() as u64,
        })
        .collect();
    manifests.sort();
    let statement = BuildStatement {
        schema: BuildStatement::SCHEMA.into(),
        channel,
        manifests,
    };
    let env = Envelope::sign(
        PayloadType::Build,
        &cuda_aot::json::to_vec(&statement),
        &[key],
    );
    let path = output::statement_path(out);
    cuda_aot::fs::write_atomic(&path, &env.to_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(modules.len())
}
