//! Shared fixtures of the integration tests: generated keys, a trust root, real cubins,
//! and a directory registry published with the real publisher.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cuda_aot::envelope::{Envelope, PayloadType};
use cuda_aot::metadata::{Role, Roles, Root, Time};
use cuda_aot::source::DirSource;
use cuda_aot::state::TrustState;
use cuda_aot::verify::{Options, VerifiedIndex, VerifiedModule, verify_index};
use cuda_aot::*;
use cuda_aot_registry::{DirRegistry, PublishOptions, Published, SignedModule};

/// A fresh random key (tests generate keys; none is ever committed).
pub fn key() -> SecretKey {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).unwrap();
    SecretKey::from_seed(seed)
}

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

/// The keys of one trust root.
pub struct Keys {
    pub root: SecretKey,
    pub builder: SecretKey,
    pub reviewer: SecretKey,
    pub publisher: SecretKey,
}

impl Keys {
    pub fn new() -> Self {
        Keys {
            root: key(),
            builder: key(),
            reviewer: key(),
            publisher: key(),
        }
    }
}

/// A root payload listing `keys` with threshold 1 each.
pub fn root_payload(keys: &Keys, version: u64, channel: Channel) -> Root {
    let one = |k: &SecretKey| Role {
        keys: vec![k.public()],
        threshold: 1,
    };
    Root {
        schema: Root::SCHEMA.into(),
        version,
        expires: Time::now().plus(Duration::from_secs(86_400 * 365)),
        channel,
        roles: Roles {
            root: one(&keys.root),
            builder: one(&keys.builder),
            reviewer: one(&keys.reviewer),
            publisher: one(&keys.publisher),
        },
    }
}

/// Signs a root payload with `signers`.
pub fn sign_root(root: &Root, signers: &[&SecretKey]) -> Vec<u8> {
    Envelope::sign(PayloadType::Root, &json::to_vec(root), signers).to_bytes()
}

/// PTX text of `add.cu` for `arch` (compute_80, compute_90).
pub fn ptx(arch: &str) -> Vec<u8> {
    data(&format!("elf/add_{arch}.ptx"))
}

/// A signed module of `add` for `target` (cubin for sm_*, PTX for compute_*).
pub fn signed_add(target: &str, builder: &SecretKey, channel: Channel) -> SignedModule {
    let (blob, kind) = if target.starts_with("compute_") {
        (ptx(target), Kind::Ptx)
    } else {
        (cubin(target), Kind::Cubin)
    };
    let mut m = manifest("add", target, &blob, channel);
    m.identity.kind = kind;
    if kind == Kind::Ptx {
        m.functions = functions_of(&blob);
        m.identity.driver_floor = "13.0".parse().unwrap();
    }
    SignedModule::new(sign_manifest(&m, &[builder]), blob).unwrap()
}

/// The kernels of a cubin or PTX blob, as the build records them (C names only: the test
/// blobs hold `extern "C"` kernels).
pub fn functions_of(blob: &[u8]) -> Vec<Function> {
    let kernels: Vec<(String, LaunchAbi)> = match cuda_aot::elf::inspect(blob) {
        Ok(info) => info
            .kernels
            .into_iter()
            .map(|k| (k.symbol, k.abi))
            .collect(),
        Err(_) => cuda_aot::ptx::inspect(blob)
            .map(|p| p.kernels)
            .unwrap_or_default(),
    };
    kernels
        .into_iter()
        .map(|(symbol, abi)| Function {
            symbol: FunctionName::new(&symbol).unwrap(),
            name: KernelName::new(&symbol).unwrap(),
            signature: None,
            abi,
        })
        .collect()
}

/// A manifest for a blob, as the build would write it.
pub fn manifest(module: &str, sm: &str, blob: &[u8], channel: Channel) -> Manifest {
    Manifest {
        schema: Manifest::SCHEMA.into(),
        identity: Identity {
            module: ModuleName::new(module).unwrap(),
            sm: sm.parse().unwrap(),
            kind: Kind::Cubin,
            toolkit: Toolkit {
                nvcc: "13.0.88".into(),
                digest: Digest::of(b"toolkit"),
                source: "pinned-wheels".into(),
            },
            driver_floor: "13.0".parse().unwrap(),
            host_toolchain: "g++ 12.2.0".into(),
            flags: vec!["-cubin".into(), format!("-arch={sm}")],
            include_dirs: vec![],
            source_digest: Digest::of(b"add.cu"),
            protocol: "test-v1".into(),
            geometry: BTreeMap::from([("block".to_string(), 256)]),
            schedule_version: 1,
        },
        module_digest: Digest::of(blob),
        size: blob.len() as u64,
        functions: functions_of(blob),
        channel,
    }
}

/// A signed manifest file.
pub fn sign_manifest(m: &Manifest, signers: &[&SecretKey]) -> Vec<u8> {
    Envelope::sign(PayloadType::Manifest, &json::to_vec(m), signers).to_bytes()
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

    /// Publishes `add` for each SM, signed by the fixture's builder and publisher.
    pub fn publish_sms(&self, sms: &[&str]) -> Published {
        let mods: Vec<SignedModule> = sms
            .iter()
            .map(|sm| {
                let blob = cubin(sm);
                let m = manifest("add", sm, &blob, self.channel);
                SignedModule::new(sign_manifest(&m, &[&self.keys.builder]), blob).unwrap()
            })
            .collect();
        self.publish(&mods, PublishOptions::default())
    }

    pub fn publish(&self, mods: &[SignedModule], opts: PublishOptions) -> Published {
        self.registry()
            .publish(mods, &[&self.keys.publisher], &opts)
            .unwrap()
    }

    /// Verifies metadata and every blob with `opts`, saving the trust state on success.
    pub fn verify_with(&self, opts: &Options) -> Result<(VerifiedIndex, Vec<VerifiedModule>)> {
        let src = DirSource::new(self.reg_path());
        let seen = TrustState::load(&self.state_path(), 4096)?;
        let idx = verify_index(&src, &self.root_file, seen, opts)?;
        let mods = idx
            .manifests()
            .iter()
            .map(|m| idx.load_module(&src, m, &opts.limits))
            .collect::<Result<Vec<_>>>()?;
        idx.state().save(&self.state_path())?;
        Ok((idx, mods))
    }

    pub fn verify(&self) -> Result<(VerifiedIndex, Vec<VerifiedModule>)> {
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
