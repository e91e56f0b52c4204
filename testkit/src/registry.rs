//! A test registry: a temporary folder holding a directory registry under a generated trust
//! root, published into with the real publisher, forged into for attack tests, and
//! verified with the one verification pipeline.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cuda_aot::metadata::{DocRef, Index, IndexEntry, IndexRef, Role, Time, Timestamp};
use cuda_aot::source::{DirSource, layout};
use cuda_aot::state::TrustState;
use cuda_aot::verify::{Options, Verified, VerifiedModule, verify_all};
use cuda_aot::{Channel, Digest, Limits, Manifest, SecretKey, json};
use cuda_aot_registry::{DirRegistry, PublishOptions, Published, Release};

use crate::blobs::{Module, add_module, big_ptx, cubin, manifest, ptx};
use crate::build::{Build, promotion};
use crate::keys::{Keys, root_file, root_payload, sign_doc};

/// A temporary registry (`<dir>/registry`) holding a trust root made from generated keys.
pub struct Fixture {
    /// The temporary folder; the registry, the trust state and anything a test adds live in
    /// it.
    pub dir: tempfile::TempDir,
    /// The keys of the trust root.
    pub keys: Keys,
    /// The signed trust root the registry holds and verifiers anchor on.
    pub root_file: Vec<u8>,
    /// The channel of the root and of every module published.
    pub channel: Channel,
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture::new()
    }
}

impl Fixture {
    /// An empty registry holding root v1 (dev channel).
    pub fn new() -> Self {
        Fixture::with_channel(Channel::Dev)
    }

    /// An empty registry holding root v1 of `channel`.
    pub fn with_channel(channel: Channel) -> Self {
        let keys = Keys::new();
        let root_file = root_file(&keys, channel);
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

    /// `rel` inside the fixture's temporary folder.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The registry folder.
    pub fn reg_path(&self) -> PathBuf {
        self.path("registry")
    }

    /// The registry as the publisher writes it.
    pub fn registry(&self) -> DirRegistry {
        DirRegistry::new(self.reg_path())
    }

    /// The trust state file of [`Fixture::verify`].
    pub fn state_path(&self) -> PathBuf {
        self.path("state.json")
    }

    /// A module of `add` in the fixture's channel: the real cubin for `sm_*`, or PTX for
    /// `compute_*` (padded to `pad` bytes when given, see [`big_ptx`]).
    pub fn module(&self, target: &str, pad: Option<usize>) -> Module {
        let blob = match (target.starts_with("compute_"), pad) {
            (true, Some(n)) => big_ptx(n, 7),
            (true, None) => ptx(target),
            (false, _) => cubin(target),
        };
        (manifest("add", target, &blob, self.channel), blob)
    }

    /// Publishes `add` for each SM, signed by the fixture's builder and publisher (and, in
    /// the production channel, promoted by its reviewer).
    pub fn publish_sms(&self, sms: &[&str]) -> Published {
        let mods: Vec<Module> = sms.iter().map(|sm| add_module(sm, self.channel)).collect();
        self.publish_modules(&mods, PublishOptions::default())
    }

    /// Publishes `mods` as one in-toto build signed by the fixture's builder (promoted by
    /// its reviewer outside the dev channel).
    pub fn publish_modules(&self, mods: &[Module], opts: PublishOptions) -> Published {
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

    /// Publishes a build with the real publisher (which checks the builder threshold),
    /// signed by the fixture's publisher.
    pub fn publish(
        &self,
        build: Build,
        promotions: Vec<Vec<u8>>,
        opts: PublishOptions,
    ) -> cuda_aot_registry::Result<Published> {
        self.publish_as(build, promotions, &self.keys.publisher, &opts)
    }

    /// Publishes `add` for each target as one more build, keeping the entries of earlier
    /// builds; see [`Fixture::append_modules_as`].
    pub fn append(&self, targets: &[&str]) -> Published {
        let mods: Vec<Module> = targets.iter().map(|t| self.module(t, None)).collect();
        self.append_modules(&mods)
    }

    /// Publishes `mods` as one more build; see [`Fixture::append_modules_as`].
    pub fn append_modules(&self, mods: &[Module]) -> Published {
        self.append_modules_as(mods, &self.keys.publisher)
    }

    /// Publishes `mods` as one more build signed by the fixture's builder, its statement of
    /// the earlier `cuda-aot/build/v1` form, keeping the entries of earlier builds (so each
    /// publish adds to the registry), signed by `publisher` (a key a rotation introduced).
    pub fn append_modules_as(&self, mods: &[Module], publisher: &SecretKey) -> Published {
        let build = Build::legacy(mods, &[&self.keys.builder]);
        let opts = PublishOptions {
            keep_unlisted: true,
            ..PublishOptions::default()
        };
        self.publish_as(build, vec![], publisher, &opts).unwrap()
    }

    /// The one publish every helper above ends in: the real publisher, anchored on the
    /// fixture's root.
    fn publish_as(
        &self,
        build: Build,
        promotions: Vec<Vec<u8>>,
        publisher: &SecretKey,
        opts: &PublishOptions,
    ) -> cuda_aot_registry::Result<Published> {
        let root = cuda_aot::trust::verify_anchor(&self.root_file, &Limits::default(), "root")?;
        let release = Release {
            build: build.signed(&root)?,
            promotions,
        };
        self.registry()
            .publish(&self.root_file, &release, &[publisher], opts)
    }

    /// Root v`version` of the fixture's keys with `publisher` as the only publisher key,
    /// signed by the fixture's root key (the root keys stay: old and new root keys are the
    /// same), as `root/<version>.root.json` bytes.
    pub fn root_rotating_publisher(&self, version: u64, publisher: &SecretKey) -> Vec<u8> {
        let mut root = root_payload(&self.keys, version, self.channel);
        root.roles.publisher = Role {
            keys: vec![publisher.public()],
            threshold: 1,
        };
        sign_doc(&root, &[&self.keys.root])
    }

    /// The registry file of a module's blob.
    pub fn blob_rel(m: &Module) -> String {
        layout::blob(&m.0.module_digest)
    }

    /// The path of the blob of the cubin of `add` for `sm` as published.
    pub fn blob_path(&self, sm: &str) -> PathBuf {
        self.reg_path().join(layout::blob(&Digest::of(&cubin(sm))))
    }

    /// What a publisher holding only the publisher key could serve: writes the build's
    /// files and a publisher-signed index and timestamp listing them (and the delegated
    /// metadata the current index lists), WITHOUT checking the builder signatures (attack
    /// tests).
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
        // The delegated metadata in force is carried over: the forger cannot sign a team's.
        let teams = current.map_or(Vec::new(), |(_, i)| i.teams);
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
            teams,
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

    /// Verifies metadata and every blob with `opts`, saving the trust state on success.
    pub fn verify_with(&self, opts: &Options) -> cuda_aot::Result<(Verified, Vec<VerifiedModule>)> {
        let src = DirSource::new(self.reg_path());
        let seen = TrustState::load(&self.state_path(), 4096)?;
        let verified = verify_all(&src, &self.root_file, seen, opts)?;
        let mods = verified.modules().iter().map(|(_, m)| m.clone()).collect();
        verified.state().save(&self.state_path())?;
        Ok((verified, mods))
    }

    /// [`Fixture::verify_with`] the default options.
    pub fn verify(&self) -> cuda_aot::Result<(Verified, Vec<VerifiedModule>)> {
        self.verify_with(&Options::default())
    }

    /// Writes `bytes` at `rel` in the registry, creating its folder (tests of tampering).
    pub fn write(&self, rel: &str, bytes: &[u8]) {
        let p = self.reg_path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    /// The registry file at `rel`.
    pub fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.reg_path().join(rel)).unwrap()
    }
}

/// Verifies the registry folder `dir` fully (metadata and every blob) against `root_file`,
/// from an empty trust state, saving nothing.
pub fn verify_dir(dir: &Path, root_file: &[u8]) -> cuda_aot::Result<Verified> {
    let src = DirSource::new(dir);
    Ok(verify_all(
        &src,
        root_file,
        Default::default(),
        &Options::default(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_registry_verifies() {
        let f = Fixture::new();
        f.publish_sms(&["sm_80", "sm_90"]);
        let (_, mods) = f.verify().unwrap();
        assert_eq!(mods.len(), 2);
        assert!(f.blob_path("sm_90").is_file());
    }

    #[test]
    fn appended_builds_keep_the_earlier_entries() {
        let f = Fixture::new();
        f.append(&["sm_80"]);
        f.append_modules(&[f.module("compute_90", Some(1 << 14))]);
        let verified = verify_dir(&f.reg_path(), &f.root_file).unwrap();
        assert_eq!(verified.modules().len(), 2);
        assert_eq!(verified.index().version, 2);
    }

    #[test]
    fn a_production_registry_carries_its_promotion() {
        let f = Fixture::with_channel(Channel::Production);
        f.publish_sms(&["sm_90"]);
        let opts = Options {
            required_channel: Some(Channel::Production),
            ..Options::default()
        };
        assert_eq!(f.verify_with(&opts).unwrap().1.len(), 1);
    }
}
