//! The kernels of the release set: CUDA sources, CPU references and contracts.
//!
//! Each CUDA module under `kernels/cuda/` has a CPU reference here that
//! computes exactly what its entry points compute, so a GPU result can be
//! checked element for element. [`MODULES`] lists the modules, their entry
//! points and default block sizes for the build system.
//!
//! ```
//! use cuda_aot_kernels::{goldilocks, merkle, ntt, MODULES};
//!
//! // Forward then inverse NTT over Goldilocks is the identity.
//! let mut data = vec![1, 2, 3, 4, 5, 6, 7, 8];
//! ntt::forward(&mut data);
//! ntt::inverse(&mut data);
//! assert_eq!(data, [1, 2, 3, 4, 5, 6, 7, 8]);
//!
//! // -1 * -1 = 1 in the field.
//! assert_eq!(goldilocks::mul(goldilocks::P - 1, goldilocks::P - 1), 1);
//!
//! // Two children make one parent.
//! assert_eq!(merkle::layer(&[[0u8; 32], [1u8; 32]]).len(), 1);
//!
//! let ntt_module = MODULES.iter().find(|m| m.name == "ntt").unwrap();
//! assert!(ntt_module.path().exists());
//! ```
#![deny(unsafe_code)] // allowed only in `gpu` and `parity::gpu`, where launches happen

pub mod contract;
pub mod foreign;
pub mod goldilocks;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod merkle;
pub mod ntt;
pub mod parity;
pub mod research;
pub mod sponge;

#[cfg(test)]
mod test_rng;

pub use contract::{MODULES, ModuleContract, cuda_dir};
