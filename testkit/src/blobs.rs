//! The real test blobs of `tests/data/` (cubins and PTX of `tests/data/elf/add.cu`) and the
//! manifests the build writes for them.

use std::collections::BTreeMap;
use std::path::Path;

use cuda_aot::{
    Channel, Digest, Function, FunctionName, Identity, KernelName, Kind, LaunchAbi, Manifest,
    ModuleName, Toolkit,
};

/// A module as the build writes it: its manifest and blob.
pub type Module = (Manifest, Vec<u8>);

/// A manifest file and its blob, as a signed build holds them.
pub type ManifestAndBlob = (Vec<u8>, Vec<u8>);

/// A file under the workspace's `tests/data/`: from the source tree, else relative to the
/// working folder (test binaries copied to the GPU host run from a checkout elsewhere).
pub fn data(rel: &str) -> Vec<u8> {
    let built = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data")
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

/// PTX text of `add.cu` for `arch` (compute_80, compute_90).
pub fn ptx(arch: &str) -> Vec<u8> {
    data(&format!("elf/add_{arch}.ptx"))
}

/// PTX text of `add.cu` (compute_90) padded with comment lines to about `size` bytes: a
/// large module whose transfer takes long enough to be interrupted. `salt` varies the pad.
pub fn big_ptx(size: usize, salt: u64) -> Vec<u8> {
    let mut b = ptx("compute_90");
    let mut n = salt;
    while b.len() < size {
        n = n
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        b.extend_from_slice(format!("// pad {n:016x}\n").as_bytes());
    }
    b
}

/// The manifest and blob of `add` for `target` (cubin for sm_*, PTX for compute_*).
pub fn add_module(target: &str, channel: Channel) -> Module {
    let blob = if target.starts_with("compute_") {
        ptx(target)
    } else {
        cubin(target)
    };
    (manifest("add", target, &blob, channel), blob)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_of_a_real_cubin_lists_its_kernel() {
        let (m, blob) = add_module("sm_90", Channel::Dev);
        assert_eq!(m.module_digest, Digest::of(&blob));
        assert_eq!(m.identity.kind, Kind::Cubin);
        assert!(!m.functions.is_empty());
    }

    #[test]
    fn big_ptx_is_ptx_of_about_the_size_asked() {
        let b = big_ptx(1 << 16, 7);
        assert!(b.len() >= 1 << 16 && b.len() < (1 << 16) + 64);
        assert!(b.starts_with(&ptx("compute_90")));
        assert_eq!(
            manifest("add", "compute_90", &b, Channel::Dev)
                .identity
                .kind,
            Kind::Ptx
        );
    }
}
