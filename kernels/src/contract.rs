//! The contract between the CUDA sources and the build system: which modules
//! exist, where their sources are, which entry points each exports, and the
//! default block size each is built for.

use std::path::{Path, PathBuf};

/// One CUDA module of the release set, compiled from one `.cu` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleContract {
    /// The module name, e.g. `"ntt"`.
    pub name: &'static str,
    /// The `.cu` source, relative to the `kernels/` directory.
    pub source: &'static str,
    /// The `extern "C" __global__` functions the module exports.
    pub entry_points: &'static [&'static str],
    /// The default block size, passed as `-DCUDA_AOT_BLOCK=<block>`; every
    /// entry point is declared `__launch_bounds__(CUDA_AOT_BLOCK)`, so a
    /// launch must use at most this many threads per block.
    pub block: u32,
}

impl ModuleContract {
    /// The absolute path of [`source`](Self::source).
    pub fn path(&self) -> PathBuf {
        kernels_dir().join(self.source)
    }
}

/// The modules of the release set.
pub const MODULES: &[ModuleContract] = &[
    ModuleContract {
        name: "field_ops",
        source: "cuda/field_ops.cu",
        entry_points: &["gl_add", "gl_mul", "gl_axpy"],
        block: 256,
    },
    ModuleContract {
        name: "ntt",
        source: "cuda/ntt.cu",
        entry_points: &["ntt_bit_reverse", "ntt_butterfly", "ntt_scale"],
        block: 256,
    },
    ModuleContract {
        name: "merkle",
        source: "cuda/merkle.cu",
        entry_points: &["merkle_layer"],
        block: 128,
    },
];

/// The absolute path of `kernels/`.
fn kernels_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The absolute path of `kernels/cuda`, the include directory (`-I`) of
/// every module.
pub fn cuda_dir() -> PathBuf {
    kernels_dir().join("cuda")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::fs;

    /// The names of the `extern "C" __global__` functions defined in `source`.
    fn kernels_in(source: &str) -> BTreeSet<String> {
        source
            .split("extern \"C\" __global__")
            .skip(1)
            .map(|rest| {
                let rest = rest
                    .trim_start()
                    .strip_prefix("void")
                    .expect("kernels return void")
                    .trim_start();
                let rest = match rest.strip_prefix("__launch_bounds__(") {
                    Some(bounds) => &bounds[bounds.find(')').expect("closed launch bounds") + 1..],
                    None => panic!(
                        "kernel without __launch_bounds__: {}",
                        &rest[..40.min(rest.len())]
                    ),
                };
                rest.trim_start()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            })
            .collect()
    }

    /// The value of the `#define CUDA_AOT_BLOCK` default in `source`.
    fn default_block(source: &str) -> u32 {
        let line = source
            .lines()
            .find_map(|line| line.trim().strip_prefix("#define CUDA_AOT_BLOCK "))
            .expect("a default CUDA_AOT_BLOCK");
        line.trim().parse().expect("a numeric default block")
    }

    fn read(module: &ModuleContract) -> String {
        fs::read_to_string(module.path())
            .unwrap_or_else(|e| panic!("{}: {e}", module.path().display()))
    }

    #[test]
    fn paths_are_absolute_and_exist() {
        assert!(cuda_dir().is_absolute());
        assert!(cuda_dir().join("goldilocks.cuh").is_file());
        assert!(cuda_dir().join("sha256.cuh").is_file());
        for module in MODULES {
            assert!(module.path().is_file(), "{}", module.path().display());
            assert_eq!(module.path().parent().unwrap(), cuda_dir());
            assert_eq!(module.path().file_stem().unwrap(), module.name);
        }
    }

    #[test]
    fn names_are_unique() {
        let names: BTreeSet<_> = MODULES.iter().map(|m| m.name).collect();
        assert_eq!(names.len(), MODULES.len());
        let entry_points: Vec<_> = MODULES.iter().flat_map(|m| m.entry_points).collect();
        let unique: BTreeSet<_> = entry_points.iter().collect();
        assert_eq!(unique.len(), entry_points.len());
    }

    #[test]
    fn entry_points_are_exactly_the_kernels_in_the_source() {
        for module in MODULES {
            let declared: BTreeSet<String> =
                module.entry_points.iter().map(|e| e.to_string()).collect();
            assert_eq!(
                kernels_in(&read(module)),
                declared,
                "module {}",
                module.name
            );
        }
    }

    #[test]
    fn default_block_matches_the_source() {
        for module in MODULES {
            assert_eq!(
                default_block(&read(module)),
                module.block,
                "module {}",
                module.name
            );
        }
    }

    #[test]
    fn shared_header_is_used_by_field_ops_and_ntt() {
        let includes = |name: &str, header: &str| {
            let module = MODULES.iter().find(|m| m.name == name).unwrap();
            read(module).contains(&format!("#include \"{header}\""))
        };
        assert!(includes("field_ops", "goldilocks.cuh"));
        assert!(includes("ntt", "goldilocks.cuh"));
        assert!(includes("merkle", "sha256.cuh"));
        assert!(!includes("merkle", "goldilocks.cuh"));
    }

    #[test]
    fn parser_sees_every_kernel() {
        let source = "extern \"C\" __global__ void __launch_bounds__(X)\nfoo(int a) {}\n\
                      extern \"C\" __global__ void __launch_bounds__(X) bar_2(int a) {}";
        assert_eq!(
            kernels_in(source),
            BTreeSet::from(["foo".to_string(), "bar_2".to_string()])
        );
    }
}
