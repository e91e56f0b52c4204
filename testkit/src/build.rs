//! Signed builds as `cargo xtask build` + `sign` produce them (the in-toto statement with
//! its provenance, or the earlier `cuda-aot/build/v1` form), and signed promotions.

use cuda_aot::metadata::{BuildStatement, Promotion, Time};
use cuda_aot::provenance::{Output, Provenance, Statement};
use cuda_aot::trust::VerifiedRoot;
use cuda_aot::{Channel, Digest, ModuleName, SecretKey, json};
use cuda_aot_registry::SignedBuild;

use crate::blobs::{ManifestAndBlob, Module};
use crate::keys::sign_doc;

/// The bytes of the fixture provenance's one source.
pub const FIXTURE_SPEC: &[u8] = b"[build]\n";

/// A build as `cargo xtask build` + `sign` produce it: manifest files, blobs, and the
/// statement over them signed by `signers`.
pub struct Build {
    /// The signed statement (envelope bytes).
    pub statement: Vec<u8>,
    /// Each manifest file with its blob.
    pub files: Vec<ManifestAndBlob>,
}

/// The manifest file of each module, with its blob.
fn files_of(modules: &[Module]) -> Vec<ManifestAndBlob> {
    modules
        .iter()
        .map(|(m, b)| (json::to_vec(m), b.clone()))
        .collect()
}

impl Build {
    /// The in-toto statement over `modules`, with the provenance of [`provenance`].
    pub fn new(modules: &[Module], signers: &[&SecretKey]) -> Build {
        let files = files_of(modules);
        let statement = Statement::over(
            modules.iter().zip(&files).map(|((m, _), (f, b))| Output {
                manifest: m,
                manifest_file: f,
                blob: b,
            }),
            provenance(modules),
        );
        Build {
            statement: sign_doc(&statement, signers),
            files,
        }
    }

    /// The statement of the earlier `cuda-aot/build/v1` form that registries published before
    /// the in-toto one still hold (the channel of the first module, dev if none).
    pub fn legacy(modules: &[Module], signers: &[&SecretKey]) -> Build {
        let files = files_of(modules);
        let channel = modules.first().map_or(Channel::Dev, |(m, _)| m.channel);
        let statement = BuildStatement::over(
            channel,
            modules
                .iter()
                .zip(&files)
                .map(|((m, _), (f, _))| (m, f.as_slice())),
        );
        Build {
            statement: sign_doc(&statement, signers),
            files,
        }
    }

    /// The build checked against `root` as the publisher takes it, with the one source the
    /// fixture's provenance names (a statement of the earlier form names none).
    pub fn signed(self, root: &VerifiedRoot) -> cuda_aot_registry::Result<SignedBuild> {
        let mut signed = SignedBuild::new(root, self.statement, self.files, &Default::default())?;
        if !signed.sources_named().is_empty() {
            signed.add_source(FIXTURE_SPEC.to_vec())?;
        }
        Ok(signed)
    }

    /// The statement parsed back from its envelope (unverified), for a test that alters it.
    pub fn statement(&self) -> Statement {
        let env: cuda_aot::envelope::Envelope = serde_json::from_slice(&self.statement).unwrap();
        json::parse(&env.payload_bytes("s").unwrap(), 1 << 20, "s").unwrap()
    }

    /// The blake3 of each manifest file.
    pub fn manifest_digests(&self) -> Vec<Digest> {
        self.files.iter().map(|(m, _)| Digest::of(m)).collect()
    }
}

/// A provenance as `cargo xtask build` records one, for the fixture's modules: one source
/// (the spec, [`FIXTURE_SPEC`]), no wheels, the first module's toolkit and channel.
pub fn provenance(modules: &[Module]) -> Provenance {
    let first = &modules.first().expect("a module").0;
    provenance_for(
        first.channel,
        first.identity.toolkit.clone(),
        first.identity.host_toolchain.clone(),
    )
}

/// A provenance as `cargo xtask build` records one: one source (the spec,
/// [`FIXTURE_SPEC`], as `manifests/release.toml`), no wheels, for `channel`, built by
/// `toolkit` with `host_compiler`.
pub fn provenance_for(
    channel: Channel,
    toolkit: cuda_aot::Toolkit,
    host_compiler: String,
) -> Provenance {
    use cuda_aot::provenance::*;
    let spec = Dependency::source("manifests/release.toml", FIXTURE_SPEC);
    Provenance {
        build_definition: BuildDefinition {
            build_type: BUILD_TYPE.into(),
            external_parameters: ExternalParameters {
                spec: spec.clone(),
                channel,
                modules: vec![],
                targets: vec![],
            },
            internal_parameters: InternalParameters {
                tool: "cuda-aot tests".into(),
                toolkit,
                host_compiler,
            },
            resolved_dependencies: vec![spec],
        },
        run_details: RunDetails {
            builder: Builder {
                id: BUILDER_ID.into(),
                version: Default::default(),
            },
            metadata: BuildMetadata {
                invocation_id: "test".into(),
                started_on: Time::from_unix(1_800_000_000),
                finished_on: Time::from_unix(1_800_000_060),
            },
        },
    }
}

/// A promotion record of `module` covering `manifests`, signed by `signers`.
pub fn promotion(module: &str, manifests: Vec<Digest>, signers: &[&SecretKey]) -> Vec<u8> {
    sign_doc(
        &Promotion {
            schema: Promotion::SCHEMA.into(),
            module: ModuleName::new(module).unwrap(),
            schedule_version: 1,
            manifests,
            parity_report: Digest::of(b"parity report"),
            resource_review: Digest::of(b"resource review"),
            note: "test".into(),
        },
        signers,
    )
}
