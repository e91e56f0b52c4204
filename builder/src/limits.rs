//! The byte caps, the root-chain cap and the signature cap every command of the tool reads
//! and verifies with, decided here once for the whole tool.

/// The tool's limits: the library's defaults (the verifier's options of `verify` and
/// `sync`, the trust root reader, promote, publish, the benches all take them from here).
pub fn limits() -> cuda_aot::Limits {
    cuda_aot::Limits::default()
}
