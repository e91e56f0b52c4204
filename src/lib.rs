//! cuda-aot: verify and load signed per-SM CUDA modules.
