//! The parity report: what the parity runner wrote on the GPU host, and what a promotion
//! binds by its blake3. JSON, `cuda-aot/parity-report/v1`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use cuda_aot::Digest;

use super::compare::Difference;
use super::spec::Element;

/// A parity report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParityReport {
    /// Always [`ParityReport::SCHEMA`].
    pub schema: String,
    /// The module.
    pub module: String,
    /// Its schedule version (from the AOT manifests).
    pub schedule_version: u32,
    /// `pass` when every output of every case equalled the CPU reference byte for byte on
    /// every build, after every launch and at the end.
    pub verdict: Verdict,
    /// The first difference, when the verdict is `fail`.
    pub first_difference: Option<Difference>,
    /// Why the run stopped before comparing (a compile or launch error), if it did.
    pub error: Option<String>,
    /// blake3 of the parity spec as run (canonical JSON of `[module.parity]`) and geometry.
    pub spec_digest: Digest,
    /// blake3 of the source file NVRTC compiled.
    pub source_digest: Digest,
    /// The device.
    pub device: DeviceRecord,
    /// The research build: NVRTC straight to a cubin for the device. (Named without the
    /// compiler's name: the default build's binaries carry no NVRTC name at all,
    /// `tests/no_nvrtc.rs`.)
    pub research_build: ResearchBuildRecord,
    /// The AOT cubins run: each one built for exactly this device.
    pub aot: Vec<AotRecord>,
    /// blake3 of every manifest file of the module in the AOT build output (every target):
    /// what a promotion based on this report binds.
    pub manifests: Vec<Digest>,
    /// Per case: inputs, outputs, timings.
    pub cases: Vec<CaseRecord>,
    /// Per entry point and build: resources from the cubin and from the driver.
    pub resources: Vec<ResourceRecord>,
    /// When the run started and finished (RFC 3339).
    pub started: String,
    /// See `started`.
    pub finished: String,
    /// The command line that produced the report.
    pub command: Vec<String>,
}

impl ParityReport {
    /// The schema tag.
    pub const SCHEMA: &'static str = "cuda-aot/parity-report/v1";
}

/// pass / fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every comparison equal.
    Pass,
    /// A difference or an error.
    Fail,
}

/// The GPU host's device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceRecord {
    /// `NVIDIA H200`.
    pub name: String,
    /// `GPU-xxxxxxxx-...`.
    pub uuid: String,
    /// `sm_90`.
    pub sm: String,
    /// Driver API version, e.g. `13.0`.
    pub driver: String,
}

/// The NVRTC build run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResearchBuildRecord {
    /// NVRTC's version (`nvrtcVersion`), e.g. `13.0`.
    pub version: String,
    /// The target it compiled for (the device's SM).
    pub target: String,
    /// Its options.
    pub options: Vec<String>,
    /// blake3 of the cubin.
    pub module_digest: Digest,
    /// Cubin size.
    pub size: u64,
    /// Compile time in milliseconds.
    pub compile_ms: f64,
}

/// An AOT cubin run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AotRecord {
    /// Its target (`sm_90`, `sm_90a`).
    pub target: String,
    /// blake3 of its manifest file.
    pub manifest: Digest,
    /// blake3 of the cubin.
    pub module_digest: Digest,
    /// nvcc version and toolkit digest from the manifest.
    pub toolkit: String,
}

/// One buffer's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferRecord {
    /// Name.
    pub name: String,
    /// Element type.
    pub element: Element,
    /// Element count.
    pub elements: u64,
    /// blake3 of the bytes.
    pub blake3: Digest,
}

/// One case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseRecord {
    /// Case name.
    pub name: String,
    /// Seed.
    pub seed: u64,
    /// Geometry and case variables.
    pub vars: BTreeMap<String, u64>,
    /// Launches run per build.
    pub launches: usize,
    /// Input buffers (generated from the seed).
    pub inputs: Vec<BufferRecord>,
    /// Outputs (equal across the CPU and every build when the case passed).
    pub outputs: Vec<BufferRecord>,
    /// Wall time of the whole program per build (`cpu`, `nvrtc sm_90`, `aot sm_90a`), ms:
    /// launches only, excluding the copies made for the per-launch comparisons.
    pub time_ms: BTreeMap<String, f64>,
    /// Whether this case passed.
    pub pass: bool,
}

/// Resources of one entry point in one build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceRecord {
    /// Entry point symbol.
    pub entry: String,
    /// `nvrtc sm_90`, `aot sm_90a`.
    pub build: String,
    /// From the cubin's `.nv.info` attributes.
    pub cubin: Resources,
    /// From the driver (`cuFuncGetAttribute`), the cross-check.
    pub device: Resources,
}

/// What a kernel uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// Registers per thread.
    pub registers: Option<u32>,
    /// Static shared memory per block, bytes.
    pub shared_bytes: Option<u32>,
    /// Local memory (stack, spills) per thread, bytes.
    pub local_bytes: Option<u32>,
    /// The whole stack per thread with the calls it makes, bytes (the cubin's
    /// `EIATTR_MIN_STACK_SIZE`; the driver's `CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_bytes: Option<u32>,
    /// Max threads per block (launch bound; the driver's limit for this kernel).
    pub max_threads: Option<u32>,
}

impl Resources {
    /// From a signed or read launch ABI.
    pub fn of_abi(a: &cuda_aot::LaunchAbi) -> Resources {
        Resources {
            registers: a.registers,
            shared_bytes: a.shared_bytes,
            local_bytes: a.local_bytes,
            stack_bytes: a.stack_bytes,
            max_threads: a.max_threads,
        }
    }
}
