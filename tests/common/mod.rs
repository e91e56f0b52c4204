//! Shared fixtures of the integration tests: generated keys, a trust root, real cubins,
//! and a directory registry published with the real publisher.

#![allow(dead_code)]

mod fixtures;
pub use fixtures::*;

use std::path::{Path, PathBuf};
use std::time::Duration;

use cuda_aot::metadata::{
    BuildStatement, DocRef, Index, IndexEntry, IndexRef, Promotion, Root, Time, Timestamp,
};
use cuda_aot::provenance::{Output, Provenance, Statement};
use cuda_aot::source::{DirSource, layout};
use cuda_aot::state::TrustState;
use cuda_aot::verify::{Options, Verified, VerifiedModule, verify_all};
use cuda_aot::*;
use cuda_aot_registry::{DirRegistry, PublishOptions, Published, Release, SignedBuild};

/// A file under `tests/data/`: from the source tree, else relative to the working folder
/// (test binaries copied to the GPU host run from a checkout elsewhere).
pub fn data(rel: &str) -> Vec<u8> {
    let built = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel);
    let path = if built.exists() {
        built
    } else {
        Path::new("tests/data").join(rel)
    };
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A real cubin of `tests/data/elf/add.cu` for `sm` (sm_80, sm_90, sm_90a, sm_120).
pub fn cubin(sm: &str) -> Vec<u8> {
    data(&format!("elf/add_{sm}.cubin"))
}

/// Signs a root payload with `signers`.
pub fn sign_root(root: &Root, signers: &[&SecretKey]) -> Vec<u8> {
    sign_doc(root, signers)
}

/// PTX text of `add.cu` for `arch` (compute_80, compute_90).
pub fn ptx(arch: &str) -> Vec<u8> {
    data(&format!("elf/add_{arch}.ptx"))
}

/// The manifest and blob of `add` for `target` (cubin for sm_*, PTX for compute_*).
pub fn add_module(target: &str, channel: Channel) -> (Manifest, Vec<u8>) {
    let blob = if target.starts_with("compute_") {
        ptx(target)
    } else {
        cubin(target)
    };
    (manifest("add", target, &blob, channel), blob)
}

/// A build as `cargo xtask build` + `sign` produce it: manifest files, blobs, and the
/// statement over them signed by `signers`.
pub struct Build {
    pub statement: Vec<u8>,
    pub files: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Build {
    /// The in-toto statement over `modules`, with the provenance of [`provenance`].
    pub fn new(modules: &[(Manifest, Vec<u8>)], signers: &[&SecretKey]) -> Build {
        let files: Vec<(Vec<u8>, Vec<u8>)> = modules
            .iter()
            .map(|(m, b)| (json::to_vec(m), b.clone()))
            .collect();
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

    /// The build checked against `root` as the publisher takes it, with the one source the
    /// fixture's provenance names (a statement of the earlier form names none).
    pub fn signed(
        self,
        root: &cuda_aot::trust::VerifiedRoot,
    ) -> cuda_aot_registry::Result<SignedBuild> {
        let mut signed = SignedBuild::new(root, self.statement, self.files)?;
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

    /// The statement of the earlier `cuda-aot/build/v1` form that registries published before
    /// the in-toto one still hold.
    pub fn legacy(modules: &[(Manifest, Vec<u8>)], signers: &[&SecretKey]) -> Build {
        let files: Vec<(Vec<u8>, Vec<u8>)> = modules
            .iter()
            .map(|(m, b)| (json::to_vec(m), b.clone()))
            .collect();
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

    /// The blake3 of each manifest file.
    pub fn manifest_digests(&self) -> Vec<Digest> {
        self.files.iter().map(|(m, _)| Digest::of(m)).collect()
    }
}

/// The bytes of the fixture provenance's one source.
pub const FIXTURE_SPEC: &[u8] = b"[build]\n";

/// A provenance as `cargo xtask build` records one, for the fixture's modules: one source
/// (the spec), no wheels, the first module's toolkit and channel.
pub fn provenance(modules: &[(Manifest, Vec<u8>)]) -> Provenance {
    use cuda_aot::provenance::*;
    let first = &modules.first().expect("a module").0;
    let spec = Dependency::source("manifests/release.toml", FIXTURE_SPEC);
    Provenance {
        build_definition: BuildDefinition {
            build_type: BUILD_TYPE.into(),
            external_parameters: ExternalParameters {
                spec: spec.clone(),
                channel: first.channel,
                modules: vec![],
                targets: vec![],
            },
            internal_parameters: InternalParameters {
                tool: "cuda-aot tests".into(),
                toolkit: first.identity.toolkit.clone(),
                host_compiler: first.identity.host_toolchain.clone(),
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

/// A temporary registry with a trust root and a publish helper.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub keys: Keys,
    pub root_file: Vec<u8>,
    pub channel: Channel,
}

impl Fixture {
    /// An empty registry holding root v1 (dev channel).
    pub fn new() -> Self {
        Fixture::with_channel(Channel::Dev)
    }

    /// An empty registry holding root v1 of `channel`.
    pub fn with_channel(channel: Channel) -> Self {
        let keys = Keys::new();
        let root_file = sign_root(&root_payload(&keys, 1, channel), &[&keys.root]);
        Fixture::with_root(keys, root_file, channel)
    }

    /// An empty registry holding the signed root `root_file` (made from `keys`).
    pub fn with_root(keys: Keys, root_file: Vec<u8>, channel: Channel) -> Self {
        let f = Fixture {
            dir: tempfile::tempdir().unwrap(),
            keys,
            root_file,
            channel,
        };
        f.registry().ensure_root(&f.root_file).unwrap();
        f
    }

    pub fn reg_path(&self) -> PathBuf {
        self.dir.path().join("registry")
    }

    pub fn registry(&self) -> DirRegistry {
        DirRegistry::new(self.reg_path())
    }

    pub fn state_path(&self) -> PathBuf {
        self.dir.path().join("state.json")
    }

    /// Publishes `add` for each SM, signed by the fixture's builder and publisher (and, in
    /// the production channel, promoted by its reviewer).
    pub fn publish_sms(&self, sms: &[&str]) -> Published {
        let mods: Vec<(Manifest, Vec<u8>)> =
            sms.iter().map(|sm| add_module(sm, self.channel)).collect();
        self.publish_modules(&mods, PublishOptions::default())
    }

    /// Publishes `mods` as one build signed by the fixture's builder (promoted by its
    /// reviewer in the production channel).
    pub fn publish_modules(&self, mods: &[(Manifest, Vec<u8>)], opts: PublishOptions) -> Published {
        let build = Build::new(mods, &[&self.keys.builder]);
        let promotions = match self.channel {
            Channel::Dev => vec![],
            Channel::Production | Channel::Research => {
                vec![promotion(
                    "add",
                    build.manifest_digests(),
                    &[&self.keys.reviewer],
                )]
            }
        };
        self.publish(build, promotions, opts).unwrap()
    }

    /// Publishes a build with the real publisher (which checks the builder threshold).
    pub fn publish(
        &self,
        build: Build,
        promotions: Vec<Vec<u8>>,
        opts: PublishOptions,
    ) -> cuda_aot_registry::Result<Published> {
        let root = cuda_aot::trust::verify_anchor(&self.root_file, &Limits::default(), "root")?;
        let release = Release {
            build: build.signed(&root)?,
            promotions,
        };
        self.registry()
            .publish(&self.root_file, &release, &[&self.keys.publisher], &opts)
    }

    /// What a publisher holding only the publisher key could serve: writes the build's
    /// files and a publisher-signed index and timestamp listing them, WITHOUT checking the
    /// builder signatures (attack tests).
    pub fn forge(&self, build: &Build, promotions: &[Vec<u8>]) {
        let sd = Digest::of(&build.statement);
        self.write(&layout::statement(&sd), &build.statement);
        let mut entries = Vec::new();
        for (mf, blob) in &build.files {
            let m: Manifest = json::parse(mf, 1 << 20, "m").unwrap();
            let d = Digest::of(mf);
            self.write(&layout::manifest(&d), mf);
            self.write(&layout::blob(&m.module_digest), blob);
            entries.push(IndexEntry {
                module: m.identity.module.clone(),
                sm: m.identity.sm,
                kind: m.identity.kind,
                manifest: d,
                manifest_size: mf.len() as u64,
                identity: m.identity.digest(),
                statement: sd,
                since: 1,
            });
        }
        let mut prefs = Vec::new();
        for p in promotions {
            let d = Digest::of(p);
            self.write(&layout::promotion(&d), p);
            prefs.push(DocRef {
                digest: d,
                size: p.len() as u64,
            });
        }
        let current = self.registry().current().unwrap();
        let (ts_v, idx_v) = current
            .as_ref()
            .map_or((0, 0), |(t, i)| (t.version, i.version));
        let idx = Index {
            schema: Index::SCHEMA.into(),
            version: idx_v + 1,
            expires: Time::now().plus(Duration::from_secs(86_400)),
            channel: self.channel,
            statements: vec![DocRef {
                digest: sd,
                size: build.statement.len() as u64,
            }],
            promotions: prefs,
            entries,
        };
        self.write_index(&idx, ts_v + 1);
    }

    /// Writes `idx` as its version's index file and a publisher-signed timestamp `ts_version`
    /// naming it.
    pub fn write_index(&self, idx: &Index, ts_version: u64) {
        let file = sign_doc(idx, &[&self.keys.publisher]);
        self.write(&layout::index(idx.version), &file);
        let ts = Timestamp {
            schema: Timestamp::SCHEMA.into(),
            version: ts_version,
            expires: Time::now().plus(Duration::from_secs(86_400)),
            index: IndexRef {
                version: idx.version,
                digest: Digest::of(&file),
                size: file.len() as u64,
            },
        };
        self.write(layout::TIMESTAMP, &sign_doc(&ts, &[&self.keys.publisher]));
    }

    /// A policy for this fixture's registry: its channel, state in the fixture's folder.
    pub fn policy(&self) -> cuda_aot::Policy {
        let p = match self.channel {
            Channel::Dev => cuda_aot::Policy::development(),
            Channel::Production => cuda_aot::Policy::production(),
            Channel::Research => cuda_aot::Policy::research(),
        };
        p.with_state_file(self.state_path())
    }

    /// Verifies metadata and every blob with `opts`, saving the trust state on success.
    pub fn verify_with(&self, opts: &Options) -> Result<(Verified, Vec<VerifiedModule>)> {
        let src = DirSource::new(self.reg_path());
        let seen = TrustState::load(&self.state_path(), 4096)?;
        let verified = verify_all(&src, &self.root_file, seen, opts)?;
        let mods = verified.modules().iter().map(|(_, m)| m.clone()).collect();
        verified.state().save(&self.state_path())?;
        Ok((verified, mods))
    }

    pub fn verify(&self) -> Result<(Verified, Vec<VerifiedModule>)> {
        self.verify_with(&Options::default())
    }

    /// The path of the blob of `sm` as published.
    pub fn blob_path(&self, sm: &str) -> PathBuf {
        self.reg_path()
            .join(cuda_aot::source::layout::blob(&Digest::of(&cubin(sm))))
    }

    /// Rewrites the timestamp/index/… file at `rel` (tests of tampering).
    pub fn write(&self, rel: &str, bytes: &[u8]) {
        let p = self.reg_path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    pub fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.reg_path().join(rel)).unwrap()
    }
}
