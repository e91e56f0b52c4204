//! Fixtures shared by the integration tests of the `cuda-aot` and `cuda-aot-registry`
//! crates (included by both `tests/common/mod.rs` and `registry/tests/common/mod.rs`):
//! generated keys, signed documents, and manifests as the build writes them.

use std::collections::BTreeMap;
use std::time::Duration;

use cuda_aot::metadata::{Document, MaxExpiry, Role, Roles, Root, Time};
use cuda_aot::*;

/// A fresh random key (tests generate keys; none is ever committed).
/// Makes a FIFO (named pipe) at `path`, creating its folder: what an attacker or a stray
/// tool leaves where a registry file belongs.
pub fn mkfifo(path: &std::path::Path) {
    std::fs::create_dir_all(path.parent().expect("a parent folder")).unwrap();
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.unwrap().success(), "mkfifo {}", path.display());
}

pub fn key() -> SecretKey {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).unwrap();
    SecretKey::from_seed(seed)
}

/// Signs any document with `signers`.
pub fn sign_doc<T: Document>(doc: &T, signers: &[&SecretKey]) -> Vec<u8> {
    cuda_aot::metadata::sign_doc(doc, signers).to_bytes()
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

/// A root payload listing `keys` with threshold 1 each, valid for a year.
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
        max_expiry: MaxExpiry::DEFAULT,
        roles: Roles {
            root: one(&keys.root),
            builder: one(&keys.builder),
            reviewer: one(&keys.reviewer),
            publisher: one(&keys.publisher),
        },
    }
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

/// A manifest for `blob` of module `module` built for `target`, as the build would write it
/// (`compute_*` targets are PTX, `sm_*` cubins).
pub fn manifest(module: &str, target: &str, blob: &[u8], channel: Channel) -> Manifest {
    let ptx = target.starts_with("compute_");
    Manifest {
        schema: Manifest::SCHEMA.into(),
        identity: Identity {
            module: ModuleName::new(module).unwrap(),
            sm: target.parse().unwrap(),
            kind: if ptx { Kind::Ptx } else { Kind::Cubin },
            toolkit: Toolkit {
                nvcc: "13.0.88".into(),
                digest: Digest::of(b"toolkit"),
                source: "pinned-wheels".into(),
            },
            driver_floor: "13.0".parse().unwrap(),
            host_toolchain: "g++ 12.2.0".into(),
            flags: vec![
                if ptx { "-ptx" } else { "-cubin" }.into(),
                format!("-arch={target}"),
            ],
            include_dirs: vec![],
            source_digest: Digest::of(b"add.cu"),
            sources: Vec::new(),
            link_flags: Vec::new(),
            protocol: "test-v1".into(),
            geometry: BTreeMap::from([("block".to_string(), 256)]),
            schedule_version: 1,
        },
        module_digest: Digest::of(blob),
        size: blob.len() as u64,
        functions: functions_of(blob),
        // add.cu defines no device globals.
        globals: Some(Vec::new()),
        channel,
    }
}
