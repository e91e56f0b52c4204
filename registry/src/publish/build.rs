//! A signed build: the builder's statement checked against a trust root, each attested
//! manifest paired with its file and blob ([`SignedBuild::new`]), and the source files its
//! provenance names.

use std::collections::BTreeMap;

use cuda_aot::digest::check_hashed;
use cuda_aot::provenance::{Attestation, Statement, open_build};
use cuda_aot::trust::VerifiedRoot;
use cuda_aot::{Channel, Digest, Limits, Manifest};

use crate::error::{Error, Result};

/// One module of a build: its manifest file and the blob it describes.
#[derive(Debug, Clone)]
pub struct BuiltModule {
    pub(super) manifest: Manifest,
    pub(super) manifest_file: Vec<u8>,
    pub(super) blob: Vec<u8>,
}

impl BuiltModule {
    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
}

/// A whole build, as the builder signed it: one build statement over every manifest, and
/// each manifest's blob. Only [`SignedBuild::new`] makes one, after checking the builder
/// threshold against a trust root and every manifest and blob against the statement.
#[derive(Debug, Clone)]
pub struct SignedBuild {
    statement: Attestation,
    provenance: Option<Statement>,
    pub(super) statement_file: Vec<u8>,
    pub(super) modules: Vec<BuiltModule>,
    pub(super) sources: BTreeMap<Digest, Vec<u8>>,
}

impl SignedBuild {
    /// Checks `statement_file` (a builder-signed build statement, in either form
    /// [`cuda_aot::provenance::open_build`] reads) against `root`, and
    /// pairs each attested manifest with its file and blob from `files` (manifest file
    /// bytes, blob bytes): every manifest the statement lists must be given exactly once,
    /// match its attested size and blake3, and describe its blob (size, blake3). The
    /// statement is read within `limits`, the caller's caps.
    pub fn new(
        root: &VerifiedRoot,
        statement_file: Vec<u8>,
        files: Vec<(Vec<u8>, Vec<u8>)>,
        limits: &Limits,
    ) -> Result<Self> {
        let opened = open_build(root, &statement_file, limits.statement, "build statement")?;
        let (statement, provenance) = (opened.attestation, opened.statement);
        // Every manifest and blob hashed once, on several threads when the build is large.
        let bytes = files
            .iter()
            .map(|(m, b)| (m.len() + b.len()) as u64)
            .fold(0u64, u64::saturating_add);
        let threads = cuda_aot::parallel::threads_for(files.len(), bytes);
        let digests = cuda_aot::parallel::try_map(&files, threads, |(m, b)| {
            Ok::<_, std::convert::Infallible>((Digest::of(m), Digest::of(b)))
        })
        .unwrap_or_else(|never| match never {});
        let mut by_digest: BTreeMap<Digest, (Vec<u8>, Vec<u8>, Digest)> = BTreeMap::new();
        for ((m, b), (md, bd)) in files.into_iter().zip(digests) {
            by_digest.insert(md, (m, b, bd));
        }
        let mut modules = Vec::with_capacity(statement.manifests.len());
        for a in &statement.manifests {
            let what = format!("manifest of {} {}", a.module, a.sm);
            let Some((manifest_file, blob, blob_digest)) = by_digest.remove(&a.manifest) else {
                return Err(Error::Core(cuda_aot::Error::Missing {
                    what,
                    path: format!("a manifest file with blake3 {}", a.manifest),
                }));
            };
            // Found by its digest: the size is what remains to check.
            check_hashed(
                &what,
                manifest_file.len() as u64,
                || a.manifest,
                a.manifest_size,
                &a.manifest,
            )?;
            let manifest: Manifest = cuda_aot::json::parse(&manifest_file, limits.manifest, &what)?;
            let id = &manifest.identity;
            if (&id.module, id.sm, id.kind) != (&a.module, a.sm, a.kind)
                || manifest.channel != statement.channel
            {
                return Err(Error::Core(cuda_aot::Error::MixAndMatch {
                    what,
                    listed: format!("{} {} {} {}", a.module, a.sm, a.kind, statement.channel),
                    found: format!("{} {} {} {}", id.module, id.sm, id.kind, manifest.channel),
                }));
            }
            check_hashed(
                &format!("{} blob", manifest.label()),
                blob.len() as u64,
                || blob_digest,
                manifest.size,
                &manifest.module_digest,
            )
            .map_err(|e| Error::BlobMismatch {
                module: id.module.to_string(),
                target: id.sm.to_string(),
                reason: e.to_string(),
            })?;
            if let Some(&(d, size)) = statement.blobs.get(&a.manifest)
                && (d, size) != (manifest.module_digest, manifest.size)
            {
                return Err(Error::BlobMismatch {
                    module: id.module.to_string(),
                    target: id.sm.to_string(),
                    reason: format!(
                        "the build statement's blob subject is {} ({size} bytes), the manifest's blob {} ({} bytes)",
                        d.short(),
                        manifest.module_digest.short(),
                        manifest.size
                    ),
                });
            }
            modules.push(BuiltModule {
                manifest,
                manifest_file,
                blob,
            });
        }
        if let Some((d, _)) = by_digest.into_iter().next() {
            return Err(Error::Core(cuda_aot::Error::NotAttested {
                what: format!("manifest file {d}"),
                statement: Digest::of(&statement_file).short(),
            }));
        }
        Ok(SignedBuild {
            statement,
            provenance,
            statement_file,
            modules,
            sources: BTreeMap::new(),
        })
    }

    /// The source files (and the spec) the build statement's provenance names, each with
    /// its name, blake3 and size: what [`SignedBuild::add_source`] must be given before
    /// the build can be published, so a rebuilder finds them in the registry.
    pub fn sources_named(&self) -> Vec<(String, Digest, u64)> {
        self.provenance.as_ref().map_or_else(Vec::new, |s| {
            s.predicate
                .sources()
                .into_iter()
                .map(|(d, h, n)| (d.name.clone(), h, n))
                .collect()
        })
    }

    /// Adds one source file the provenance names (checked by size and blake3); a file it
    /// does not name is refused.
    pub fn add_source(&mut self, bytes: Vec<u8>) -> Result<()> {
        let d = Digest::of(&bytes);
        let named = self
            .sources_named()
            .into_iter()
            .find(|(_, h, n)| *h == d && *n == bytes.len() as u64);
        if named.is_none() {
            return Err(Error::Core(cuda_aot::Error::NotAttested {
                what: format!("source file {d} ({} bytes)", bytes.len()),
                statement: Digest::of(&self.statement_file).short(),
            }));
        }
        self.sources.insert(d, bytes);
        Ok(())
    }

    /// The first named source not added yet.
    pub(super) fn missing_source(&self) -> Option<(String, Digest)> {
        self.sources_named()
            .into_iter()
            .find(|(_, d, _)| !self.sources.contains_key(d))
            .map(|(name, d, _)| (name, d))
    }

    /// The modules of the build.
    pub fn modules(&self) -> &[BuiltModule] {
        &self.modules
    }

    /// The channel of the build.
    pub fn channel(&self) -> Channel {
        self.statement.channel
    }
}
