//! `cargo xtask sign`: sign one build statement over every manifest of a build output with
//! a builder key.

use anyhow::{Context, Result, bail};
use cuda_aot::SecretKey;
use cuda_aot::provenance::{Output, Statement};
use std::path::{Path, PathBuf};

use crate::{devkeys, outdir, paths};

/// Sign one build statement over every manifest of a build output with a builder key.
///
/// Reads every manifest (`<module>/<target>.<kind>.manifest.json`) of a build output, hashes
/// each blob again (a manifest is attested only if the blob beside it still has the size
/// and blake3 it records) and writes `<out>/build.statement.json`: one in-toto Statement v1,
/// signed by the builder, whose subjects are every blob and manifest (sha256 and blake3)
/// and whose predicate is the build's SLSA provenance v1 (`<out>/build.provenance.json`:
/// spec, sources, toolkit wheels, host compiler). A prover checks one builder signature per
/// build, however many modules it holds; docs/provenance.md shows how a security team
/// checks it with standard tools.
///
/// Without --builder-key the development builder key is used (generated on first use,
/// labelled dev).
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
            "signed a build statement over {n} manifest(s) in {} with builder key {}",
            out.display(),
            key.public().key_id().short()
        );
        Ok(())
    }
}

/// Signs one build statement over every manifest in `out`; returns how many it covers.
pub fn sign_output(out: &Path, key: &SecretKey) -> Result<usize> {
    let modules = outdir::read_output(out)?;
    let channel = modules[0].0.channel;
    if let Some((m, ..)) = modules.iter().find(|(m, ..)| m.channel != channel) {
        bail!(
            "{}: {} is built for channel {} but others for {channel}; rebuild the output with one --channel",
            out.display(),
            m.label(),
            m.channel
        );
    }
    let provenance = crate::build::provenance::read(out)?;
    let recorded = provenance.build_definition.external_parameters.channel;
    if recorded != channel {
        bail!(
            "{}: the manifests are built for channel {channel} but the build's provenance says {recorded}; build the output again",
            out.display()
        );
    }
    let statement = Statement::over(
        modules.iter().map(|(m, manifest_file, blob)| Output {
            manifest: m,
            manifest_file,
            blob,
        }),
        provenance,
    );
    let env = cuda_aot::metadata::sign_doc(&statement, &[key]);
    let path = outdir::statement_path(out);
    cuda_aot::fs::write_atomic(&path, &env.to_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(modules.len())
}
