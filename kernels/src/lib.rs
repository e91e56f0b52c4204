//! The kernels of the release set: CUDA sources, CPU references and contracts.
