//! Parity: a research kernel's NVRTC build, its AOT cubins and its CPU reference, run on
//! the same seeded inputs and compared byte for byte after every launch — what `cargo
//! xtask promote` requires before a reviewer signs a promotion.
//!
//! - [`spec`]: the parity spec of a module (`[module.parity]` in its spec file), expanded
//!   into concrete [`spec::Program`]s, one per case;
//! - [`expr`]: the integer expressions of a spec;
//! - [`cpu`]: seeded generators, the CPU steps by name, running a program on the CPU;
//! - [`compare`]: byte-for-byte comparison and the first difference;
//! - [`report`]: the JSON report the parity runner writes;
//! - `gpu` (feature `research`): running a program on a loaded module.
//!
//! The runner is the binary `parity-runner` (feature `research`), built on the build host
//! and run on the GPU host (`docs/review.md`).
//!
//! ```
//! use cuda_aot_kernels::parity::{cpu, spec::ParitySpec};
//! use std::collections::BTreeMap;
//!
//! let text = std::fs::read_to_string(
//!     concat!(env!("CARGO_MANIFEST_DIR"), "/research/research.toml")).unwrap();
//! let spec: toml::Value = toml::from_str(&text).unwrap();
//! let module = &spec["module"][0];
//! let parity = ParitySpec::from_toml(&module["parity"]).unwrap();
//! let geometry: BTreeMap<String, u64> = module["geometry"].clone().try_into().unwrap();
//! let p = parity.programs(&geometry).unwrap().remove(0);
//! let inputs = cpu::inputs(&p).unwrap();
//! let want = cpu::reference(&p, inputs.clone()).unwrap();       // ntt::forward
//! let got = cpu::run::<String>(&p, inputs, |_, _| Ok(())).unwrap(); // the fused steps
//! assert_eq!(got["data"], want["data"]);
//! ```

pub mod compare;
pub mod cpu;
pub mod expr;
#[cfg(feature = "research")]
pub mod gpu;
pub mod module;
pub mod report;
pub mod spec;
