//! The build statement in the form supply-chain tools read, and the one reader of build
//! statements: an in-toto Statement v1 whose subjects are every blob and manifest of one
//! build (each with its sha256 and blake3) and whose predicate is SLSA provenance v1 (what
//! was built from which spec, sources, toolkit wheels and host compiler, by which tool, when),
//! signed by builders in a DSSE envelope of payload type `application/vnd.in-toto+json`.
//! [`open_build`] opens it, or a statement of the earlier `cuda-aot/build/v1` form, for the
//! verifier and the publishers alike.
//!
//! The verifier uses blake3 (what every other cuda-aot document names); the sha256 digests
//! are for the tools that know only sha256 (`cosign verify-blob-attestation`, the in-toto
//! libraries). Both are computed by [`Statement::over`] from the same bytes.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::digest::Digest;
use crate::envelope::PayloadType;
use crate::error::{Error, Result};
use crate::identity::{Channel, Kind, Toolkit};
use crate::keys::KeyId;
use crate::manifest::Manifest;
use crate::metadata::{Attested, BuildStatement, Document, RoleName, Time};
use crate::name::{ModuleName, Target};
use crate::source::layout;
use crate::trust::VerifiedRoot;

/// The in-toto Statement v1 type (`_type`).
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The SLSA provenance v1 predicate type.
pub const PREDICATE_TYPE: &str = "https://slsa.dev/provenance/v1";
/// `buildDefinition.buildType` of a cuda-aot build (described in docs/provenance.md): one
/// nvcc compile per (module, exact target, kind) of a release spec with the pinned toolkit.
pub const BUILD_TYPE: &str = "https://cuda-aot.dev/provenance/build/v1";
/// `runDetails.builder.id` of cuda-aot's build tool (`cargo xtask release`, `cargo cuda-aot`).
pub const BUILDER_ID: &str = "https://cuda-aot.dev/provenance/builder/xtask";
/// The media type of a manifest subject.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.cuda-aot.manifest.v1+json";

/// The media type of a blob subject of `kind`.
pub fn blob_media_type(kind: Kind) -> &'static str {
    match kind {
        Kind::Cubin => "application/vnd.cuda-aot.cubin",
        Kind::Ptx => "application/vnd.cuda-aot.ptx",
    }
}

/// 32 bytes written as 64 lower-case hex digits, as in-toto digest sets write them.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hex32(pub [u8; 32]);

impl Hex32 {
    /// The sha256 of `bytes`.
    pub fn sha256(bytes: &[u8]) -> Hex32 {
        use sha2::Digest as _;
        Hex32(sha2::Sha256::digest(bytes).into())
    }
}

impl fmt::Display for Hex32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}
impl fmt::Debug for Hex32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
impl From<Digest> for Hex32 {
    fn from(d: Digest) -> Self {
        Hex32(d.0)
    }
}
impl Serialize for Hex32 {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
impl std::str::FromStr for Hex32 {
    type Err = &'static str;
    /// Exactly 64 lower-case hex digits.
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let ok = s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        let mut out = [0u8; 32];
        if !ok || hex::decode_to_slice(s, &mut out).is_err() {
            return Err("expected a digest of 64 lower-case hex digits");
        }
        Ok(Hex32(out))
    }
}
impl<'de> Deserialize<'de> for Hex32 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// An in-toto digest set, with the two algorithms cuda-aot writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DigestSet {
    /// sha256 of the bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<Hex32>,
    /// blake3 of the bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<Hex32>,
}

impl DigestSet {
    /// Both digests of `bytes`.
    pub fn of(bytes: &[u8]) -> DigestSet {
        DigestSet {
            sha256: Some(Hex32::sha256(bytes)),
            blake3: Some(Digest::of(bytes).into()),
        }
    }
    /// The blake3 digest, when the set has one.
    pub fn blake3(&self) -> Option<Digest> {
        self.blake3.map(|h| Digest(h.0))
    }
}

/// What a subject is, for the verifier: the module, target and kind it belongs to, and its
/// size (the bound a reader reads it with).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectAnnotations {
    /// Module name.
    pub module: ModuleName,
    /// Exact target.
    pub sm: Target,
    /// cubin or ptx.
    pub kind: Kind,
    /// Size in bytes.
    pub size: u64,
}

/// One subject of the statement (an in-toto resource descriptor): a blob
/// (`<module>/<target>.<kind>`) or its manifest (`….manifest.json`), named as in the build
/// output folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Subject {
    /// The path in the build output folder.
    pub name: String,
    /// sha256 and blake3 of its bytes.
    pub digest: DigestSet,
    /// [`MANIFEST_MEDIA_TYPE`] or [`blob_media_type`].
    pub media_type: String,
    /// Module, target, kind and size.
    pub annotations: SubjectAnnotations,
}

/// An input of the build (an in-toto resource descriptor): a source file, the spec, a
/// toolkit wheel, the host compiler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Dependency {
    /// A source or the spec: its path relative to the build's source root (the folder that
    /// holds the spec, the sources and the include folders); a wheel: its file name; the
    /// host compiler: `host-compiler`.
    pub name: String,
    /// A wheel: `pkg:pypi/<name>@<version>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Its digests (a wheel: sha256, as PyPI publishes them).
    pub digest: DigestSet,
    /// A source or the spec: where the registry keeps its bytes, relative to the registry
    /// root (`sources/blake3/<hex>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download_location: Option<String>,
    /// Free-form facts (`size`, `version`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Dependency {
    /// A source file (or the spec) named `name` below the source root, with these bytes.
    pub fn source(name: &str, bytes: &[u8]) -> Dependency {
        Dependency {
            name: name.into(),
            uri: None,
            digest: DigestSet::of(bytes),
            download_location: Some(source_location(&Digest::of(bytes))),
            annotations: BTreeMap::from([("size".into(), bytes.len().to_string())]),
        }
    }

    /// A source's blake3 and size, when this is a source kept in the registry.
    pub fn as_source(&self) -> Option<(Digest, u64)> {
        let d = self.digest.blake3()?;
        let size = self.annotations.get("size")?.parse().ok()?;
        (self.download_location.as_deref() == Some(source_location(&d).as_str()))
            .then_some((d, size))
    }
}

/// Where a registry keeps a source file a build read ([`layout::source`]).
pub fn source_location(d: &Digest) -> String {
    layout::source(d)
}

/// What the build was asked to build (SLSA `externalParameters`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExternalParameters {
    /// The release spec, named as among the resolved dependencies, with its digests.
    pub spec: Dependency,
    /// The channel every manifest was built for.
    pub channel: Channel,
    /// `--module` selections (empty: every module of the spec).
    pub modules: Vec<ModuleName>,
    /// `--target` selections (empty: the spec's targets).
    pub targets: Vec<Target>,
}

/// What the tool added (SLSA `internalParameters`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InternalParameters {
    /// The tool and its version (`cuda-aot xtask 0.1.0`).
    pub tool: String,
    /// The toolkit that compiled (as every manifest's identity names it).
    pub toolkit: Toolkit,
    /// The host compiler's version line (as every manifest's identity names it).
    pub host_compiler: String,
}

/// How to build (SLSA `buildDefinition`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BuildDefinition {
    /// Always [`BUILD_TYPE`].
    pub build_type: String,
    /// The spec and the selection.
    pub external_parameters: ExternalParameters,
    /// What the tool added.
    pub internal_parameters: InternalParameters,
    /// The spec, every source and header of the source root, the toolkit wheels and the host
    /// compiler.
    pub resolved_dependencies: Vec<Dependency>,
}

/// The builder (SLSA `runDetails.builder`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Builder {
    /// Always [`BUILDER_ID`].
    pub id: String,
    /// `cuda-aot` → the tool's version.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub version: BTreeMap<String, String>,
}

/// When the build ran (SLSA `runDetails.metadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BuildMetadata {
    /// A random id of this invocation.
    pub invocation_id: String,
    /// When the build started.
    pub started_on: Time,
    /// When it finished.
    pub finished_on: Time,
}

/// How the build ran (SLSA `runDetails`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunDetails {
    /// The builder.
    pub builder: Builder,
    /// When.
    pub metadata: BuildMetadata,
}

/// The SLSA provenance v1 predicate of a cuda-aot build. `cargo xtask build` writes it,
/// unsigned, as `<out>/build.provenance.json`; signing wraps it with the subjects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Provenance {
    /// How to build.
    pub build_definition: BuildDefinition,
    /// How it ran.
    pub run_details: RunDetails,
}

impl Provenance {
    /// The spec and the sources, each with its blake3 and size: what a rebuilder fetches
    /// from the registry (`sources/blake3/<hex>`).
    pub fn sources(&self) -> Vec<(&Dependency, Digest, u64)> {
        self.build_definition
            .resolved_dependencies
            .iter()
            .filter_map(|d| d.as_source().map(|(h, n)| (d, h, n)))
            .collect()
    }
}

/// The build statement: an in-toto Statement v1 with a SLSA provenance v1 predicate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    /// Always [`STATEMENT_TYPE`].
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// Every blob and manifest of the build, sorted by name.
    pub subject: Vec<Subject>,
    /// Always [`PREDICATE_TYPE`].
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// The provenance.
    pub predicate: Provenance,
}

/// One module of a build output, as [`Statement::over`] attests it.
pub struct Output<'a> {
    /// Its manifest.
    pub manifest: &'a Manifest,
    /// The exact bytes of the manifest file.
    pub manifest_file: &'a [u8],
    /// The blob.
    pub blob: &'a [u8],
}

/// The subject names of a module's blob and manifest (`<module>/<target>.<kind>` and
/// `….manifest.json`, the build output folder's own paths).
pub fn subject_names(module: &ModuleName, sm: Target, kind: Kind) -> [String; 2] {
    let blob = format!("{module}/{sm}.{kind}");
    let manifest = format!("{blob}.manifest.json");
    [blob, manifest]
}

impl Statement {
    /// The statement over the modules of one build, with its provenance: a blob and a
    /// manifest subject per module, sorted by name, so the same build gives the same list.
    pub fn over<'a>(outputs: impl IntoIterator<Item = Output<'a>>, predicate: Provenance) -> Self {
        let mut subject = Vec::new();
        for o in outputs {
            let id = &o.manifest.identity;
            let [blob_name, manifest_name] = subject_names(&id.module, id.sm, id.kind);
            let ann = |size: usize| SubjectAnnotations {
                module: id.module.clone(),
                sm: id.sm,
                kind: id.kind,
                size: size as u64,
            };
            subject.push(Subject {
                name: blob_name,
                digest: DigestSet::of(o.blob),
                media_type: blob_media_type(id.kind).into(),
                annotations: ann(o.blob.len()),
            });
            subject.push(Subject {
                name: manifest_name,
                digest: DigestSet::of(o.manifest_file),
                media_type: MANIFEST_MEDIA_TYPE.into(),
                annotations: ann(o.manifest_file.len()),
            });
        }
        subject.sort_by(|a, b| a.name.cmp(&b.name));
        Statement {
            statement_type: STATEMENT_TYPE.into(),
            subject,
            predicate_type: PREDICATE_TYPE.into(),
            predicate,
        }
    }

    /// What the verifier needs of the statement, after checking it is a cuda-aot build's
    /// provenance: the predicate and build types, and that every subject is named for its
    /// module, target and kind, has a blake3 digest, and that blobs and manifests pair up.
    pub fn attested(&self, what: &str) -> Result<Attestation> {
        let bad = |message: String| Error::Json {
            what: what.into(),
            message,
        };
        if self.predicate_type != PREDICATE_TYPE {
            return Err(bad(format!(
                "predicate type {:?}, expected {PREDICATE_TYPE:?}",
                crate::error::escape_untrusted(&self.predicate_type)
            )));
        }
        let def = &self.predicate.build_definition;
        if def.build_type != BUILD_TYPE {
            return Err(bad(format!(
                "build type {:?}, expected {BUILD_TYPE:?}",
                crate::error::escape_untrusted(&def.build_type)
            )));
        }
        let mut manifests = Vec::new();
        let mut blobs: BTreeMap<(ModuleName, Target, Kind), (Digest, u64)> = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for s in &self.subject {
            let a = &s.annotations;
            let [blob_name, manifest_name] = subject_names(&a.module, a.sm, a.kind);
            let is_manifest = s.media_type == MANIFEST_MEDIA_TYPE;
            let (expected_name, expected_type) = if is_manifest {
                (manifest_name, MANIFEST_MEDIA_TYPE)
            } else {
                (blob_name, blob_media_type(a.kind))
            };
            if s.name != expected_name || s.media_type != expected_type {
                return Err(bad(format!(
                    "subject {:?} ({:?}) is not named for {} {} {} (expected {expected_name:?}, {expected_type:?})",
                    crate::error::escape_untrusted(&s.name),
                    crate::error::escape_untrusted(&s.media_type),
                    a.module,
                    a.sm,
                    a.kind
                )));
            }
            if !seen.insert(s.name.clone()) {
                return Err(bad(format!(
                    "subject {:?} is listed twice",
                    crate::error::escape_untrusted(&s.name)
                )));
            }
            let Some(d) = s.digest.blake3() else {
                return Err(bad(format!(
                    "subject {:?} has no blake3 digest",
                    crate::error::escape_untrusted(&s.name)
                )));
            };
            if is_manifest {
                manifests.push(Attested {
                    module: a.module.clone(),
                    sm: a.sm,
                    kind: a.kind,
                    manifest: d,
                    manifest_size: a.size,
                });
            } else {
                blobs.insert((a.module.clone(), a.sm, a.kind), (d, a.size));
            }
        }
        let mut blob_of = BTreeMap::new();
        for m in &manifests {
            let Some(b) = blobs.remove(&(m.module.clone(), m.sm, m.kind)) else {
                return Err(bad(format!(
                    "the manifest of {} {} {} has no blob subject",
                    m.module, m.sm, m.kind
                )));
            };
            blob_of.insert(m.manifest, b);
        }
        if let Some(((module, sm, kind), _)) = blobs.into_iter().next() {
            return Err(bad(format!(
                "the blob of {module} {sm} {kind} has no manifest subject"
            )));
        }
        manifests.sort();
        Ok(Attestation {
            channel: def.external_parameters.channel,
            manifests,
            blobs: blob_of,
        })
    }
}

impl Document for Statement {
    const PAYLOAD_TYPE: PayloadType = PayloadType::InToto;
    const SCHEMA: &'static str = STATEMENT_TYPE;
    const SIGNER: RoleName = RoleName::Builder;
    fn schema(&self) -> &str {
        &self.statement_type
    }
}

/// What a build statement attests, whichever form it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attestation {
    /// The channel of every manifest attested.
    pub channel: Channel,
    /// Every manifest of the build, sorted.
    pub manifests: Vec<Attested>,
    /// The in-toto form: each manifest's (by its blake3) blob digest and size, which the
    /// manifest must name too (so the digest a third-party tool checks is the one loaded).
    /// Empty for the earlier form, which attests blobs only through the manifests.
    pub blobs: BTreeMap<Digest, (Digest, u64)>,
}

/// A build statement whose builder threshold was met.
#[derive(Debug, Clone)]
pub struct OpenedBuild {
    /// What it attests.
    pub attestation: Attestation,
    /// The distinct builder keys whose signatures verified.
    pub signers: Vec<KeyId>,
    /// The in-toto statement (`None` for the earlier `cuda-aot/build/v1` form).
    pub statement: Option<Statement>,
}

/// Opens a build statement file with `root`'s builder threshold: the in-toto form
/// (`application/vnd.in-toto+json`), or the earlier `cuda-aot/build/v1` form registries
/// published before it still hold. The one reader of build statements.
pub fn open_build(
    root: &VerifiedRoot,
    bytes: &[u8],
    limit: u64,
    what: &str,
) -> Result<OpenedBuild> {
    open_build_by(root, None, bytes, limit, what)
}

/// [`open_build`] against `keys`, a delegated team's builder keys (issue 46), or the trust
/// root's builder role when None.
pub fn open_build_by(
    root: &VerifiedRoot,
    keys: Option<&crate::metadata::Role>,
    bytes: &[u8],
    limit: u64,
    what: &str,
) -> Result<OpenedBuild> {
    let open_statement = || match keys {
        None => root.open::<Statement>(bytes, limit, what),
        Some(k) => root.open_delegated::<Statement>(bytes, k, limit, what),
    };
    match open_statement() {
        Ok(o) => Ok(OpenedBuild {
            attestation: o.doc.attested(what)?,
            signers: o.signers,
            statement: Some(o.doc),
        }),
        Err(Error::WrongPayloadType { actual, .. }) if actual == PayloadType::Build.as_str() => {
            let o = match keys {
                None => root.open::<BuildStatement>(bytes, limit, what)?,
                Some(k) => root.open_delegated::<BuildStatement>(bytes, k, limit, what)?,
            };
            Ok(OpenedBuild {
                attestation: Attestation {
                    channel: o.doc.channel,
                    manifests: o.doc.manifests,
                    blobs: BTreeMap::new(),
                },
                signers: o.signers,
                statement: None,
            })
        }
        Err(e) => Err(e),
    }
}
