//! `cargo xtask sign`: sign one build statement over every manifest of a build output with
//! a builder key.

use anyhow::{Context, Result, bail};
use cuda_aot::SecretKey;
use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::provenance::{Output, Provenance, Statement};
use std::path::{Path, PathBuf};

use crate::advice::fail;
use crate::{devkeys, outdir, paths};

/// Sign one build statement over every manifest of a build output with a builder key.
///
/// Reads every manifest (`<module>/<target>.<kind>.manifest.json`) of a build output, hashes
/// each blob again (a manifest is attested only if the blob beside it still has the size
/// and blake3 it records) and writes `<out>/build.statement.json`: one in-toto Statement v1,
/// signed by the builder, whose subjects are every blob and manifest (sha256 and blake3)
/// and whose predicate is the build's SLSA provenance v1 (`<out>/build.provenance.json`:
/// spec, sources, toolkit wheels, host compiler). A prover checks one builder signature per
/// build, however many modules it holds; a security team
/// checks it with standard tools (docs/trust.md).
///
/// Without --builder-key the development builder key is used (generated on first use,
/// labelled dev).
///
/// With --co-sign, a second builder adds its signature to the statement already in the
/// output instead, after checking that the statement is exactly the one this output's
/// files give (a co-signer attests only bytes it has: its own rebuild of the release). A
/// trust root with a builder threshold of 2 accepts the release only with two distinct
/// listed builder keys over the identical statement.
#[derive(clap::Args)]
#[command(after_long_help = "\
Examples:
  cargo xtask sign --builder-key ~/.config/cuda-aot/keys/builder.key
  cargo xtask sign --co-sign --builder-key /secure/second-builder.key rebuilt/out

--co-sign refuses a statement that is not the one the output's files give (a blob, a manifest
or the provenance differs), and a key that already signed it; the statement's payload is not
changed, so every signature stays valid. Publish the co-signed output as usual (cargo xtask
publish): the index then names the co-signed statement.")]
pub struct Args {
    /// The build output folder [default: .cuda-aot/build of the project].
    #[arg(value_name = "DIR")]
    out: Option<PathBuf>,
    /// The builder's private key file [default: the dev builder key].
    #[arg(long, value_name = "FILE", env = "CUDA_AOT_BUILDER_KEY")]
    builder_key: Option<PathBuf>,
    /// Add this builder's signature to the statement already in the output (which must be
    /// the statement the output's files give) instead of signing a new one.
    #[arg(long)]
    co_sign: bool,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let key = match &self.builder_key {
            Some(p) => devkeys::read_key(p)?,
            None => devkeys::ensure()?.builder,
        };
        let out = self.out.unwrap_or_else(paths::default_build_out);
        if self.co_sign {
            let (n, signatures) = co_sign_output(&out, &key)?;
            eprintln!(
                "co-signed the build statement over {n} manifest(s) in {} with builder key {} ({signatures} signatures now)",
                out.display(),
                key.public().key_id().short()
            );
            return Ok(());
        }
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
    let (n, statement) = statement_of(out, None)?;
    let env = cuda_aot::metadata::sign_doc(&statement, &[key]);
    let path = outdir::statement_path(out);
    cuda_aot::fs::write_atomic(&path, &env.to_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(n)
}

/// Adds `key`'s signature to the statement in `out`, which must be byte for byte the
/// statement `out`'s files give; returns how many manifests it covers and how many
/// signatures it then holds.
pub fn co_sign_output(out: &Path, key: &SecretKey) -> Result<(usize, usize)> {
    let path = outdir::statement_path(out);
    let bytes = std::fs::read(&path).with_context(|| {
        format!(
            "reading {} (co-signing needs the statement the first builder signed)",
            path.display()
        )
    })?;
    let mut env = Envelope::parse(
        &bytes,
        cuda_aot::Limits::default().statement,
        PayloadType::InToto,
        &path.display().to_string(),
    )
    .with_context(|| format!("{} is not an in-toto build statement", path.display()))?;
    let what = path.display().to_string();
    let theirs: Statement = cuda_aot::json::parse(
        &env.payload_bytes(&what)?,
        cuda_aot::Limits::default().statement,
        &what,
    )?;
    // The subjects from this machine's own files, under the first builder's provenance:
    // the same payload only if every blob and manifest is identical.
    let (n, ours) = statement_of(out, Some(theirs.predicate.clone()))?;
    if cuda_aot::json::to_vec(&ours) != env.payload_bytes(&what)? {
        return Err(fail(
            format!(
                "{what}: this output is not a bit-identical rebuild of what the statement attests; nothing signed\n{}",
                subject_differences(&theirs, &ours).join("\n")
            ),
            "co-sign only a bit-identical rebuild: build from exactly the recorded inputs (spec, sources, flags, toolkit pins, host compiler); cargo xtask repro shows per-module digests",
        ));
    }
    let own = cuda_aot_builder::build::provenance::read(out)?;
    if own.build_definition != theirs.predicate.build_definition {
        return Err(fail(
            format!(
                "{what}: the statement's build definition (spec, selection, sources, toolkit wheels, host compiler) is not the one this output was built from ({}); nothing signed",
                outdir::provenance_path(out).display()
            ),
            "rebuild from exactly the recorded inputs (the same spec and sources, toolkit pins and host compiler), then co-sign",
        ));
    }
    let id = key.public().key_id().hex();
    if env.signatures.iter().any(|s| s.keyid == id) {
        return Err(fail(
            format!(
                "{}: builder key {} already signed this statement; a second signature by the same key does not count",
                path.display(),
                key.public().key_id().short()
            ),
            "co-sign with another builder key that the trust root lists (--builder-key)",
        ));
    }
    env.add_signature(key)?;
    cuda_aot::fs::write_atomic(&path, &env.to_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok((n, env.signatures.len()))
}

/// The (unsigned) statement over every manifest in `out` with `predicate` (default: `out`'s
/// recorded provenance), and how many manifests it covers.
fn statement_of(out: &Path, predicate: Option<Provenance>) -> Result<(usize, Statement)> {
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
    let provenance = match predicate {
        Some(p) => p,
        None => cuda_aot_builder::build::provenance::read(out)?,
    };
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
    Ok((modules.len(), statement))
}

/// One line per subject that `signed` and `rebuilt` do not share byte for byte.
fn subject_differences(signed: &Statement, rebuilt: &Statement) -> Vec<String> {
    let by_name = |st: &Statement| -> std::collections::BTreeMap<String, String> {
        st.subject
            .iter()
            .map(|s| {
                let d = s.digest.blake3.map(|d| d.to_string()).unwrap_or_default();
                (s.name.clone(), d)
            })
            .collect()
    };
    let (signed, rebuilt) = (by_name(signed), by_name(rebuilt));
    let mut lines = Vec::new();
    for (name, d) in &signed {
        match rebuilt.get(name) {
            None => lines.push(format!("  {name}: signed, not in this output")),
            Some(r) if r != d => lines.push(format!(
                "  {name}: differs (blake3 {} here, {} signed)",
                &r[..12.min(r.len())],
                &d[..12.min(d.len())]
            )),
            Some(_) => {}
        }
    }
    for name in rebuilt.keys().filter(|n| !signed.contains_key(*n)) {
        lines.push(format!("  {name}: in this output, not signed"));
    }
    lines
}
