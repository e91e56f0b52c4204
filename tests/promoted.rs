//! Issue 7 on the GPU host: the research kernel, promoted (parity report, resource review,
//! reviewer signatures) and published into a production-channel registry, loaded and run
//! under `Policy::production()`; a research module (NVRTC) refused by that runtime.
//!
//! The registry and trust root come from the GPU review (`gpu-bundle --review`, then
//! `gpu-run`), which promotes `ntt_fused` on the GPU host with generated production keys:
//! `CUDA_AOT_PROMOTED_REGISTRY`, `CUDA_AOT_PROMOTED_TRUST`.

use std::path::{Path, PathBuf};

use cuda_aot::{Channel, Policy, Runtime};
use cuda_aot_kernels::gpu::NttFused;
use cuda_aot_kernels::{goldilocks, ntt};

fn promoted() -> (PathBuf, Vec<u8>) {
    let var = |k: &str| {
        std::env::var_os(k)
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("{k} is not set: run it through `cargo xtask gpu-bundle --review`, then `gpu-run` on the GPU host"))
    };
    let reg = var("CUDA_AOT_PROMOTED_REGISTRY");
    let trust = var("CUDA_AOT_PROMOTED_TRUST");
    let trust = std::fs::read(&trust).unwrap_or_else(|e| panic!("{}: {e}", trust.display()));
    (reg, trust)
}

fn open(state: &Path) -> Runtime {
    let (reg, trust) = promoted();
    Runtime::open(&reg, &trust, Policy::production().with_state_file(state))
        .unwrap_or_else(|e| panic!("{e}\nFix: {}", e.fix()))
}

/// Canonical field elements from a fixed xorshift stream.
fn inputs(n: usize, seed: u64) -> Vec<u64> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % goldilocks::P
        })
        .collect()
}

#[test]
#[ignore = "needs a CUDA device"]
fn issue_7_the_promoted_research_kernel_runs_under_the_production_policy() {
    let dir = tempfile::tempdir().unwrap();
    let rt = open(&dir.path().join("state.json"));
    let m = rt
        .selected()
        .find(|m| m.identity.module.as_str() == "ntt_fused")
        .expect("ntt_fused in the promoted registry")
        .clone();
    assert_eq!(m.channel, Channel::Production);
    println!(
        "device {} ({}): selected {} ({} bytes, schedule v{})",
        rt.device().name,
        rt.device().sm(),
        m.label(),
        m.size,
        m.identity.schedule_version
    );
    rt.preload().unwrap();
    let fused = NttFused::new(&rt).unwrap();
    let stream = rt.stream().unwrap();
    for (log_n, seed) in [(1u32, 3u64), (10, 5), (13, 7), (20, 11)] {
        let host = inputs(1 << log_n, seed);
        let mut want = host.clone();
        ntt::forward(&mut want);
        let mut data = stream.clone_htod(&host).unwrap();
        let tw = stream.clone_htod(&ntt::twiddles(log_n, false)).unwrap();
        fused.forward(&stream, &mut data, &tw).unwrap();
        let got = stream.clone_dtoh(&data).unwrap();
        assert_eq!(got, want, "2^{log_n}");
        println!("ntt_fused forward 2^{log_n}: equal to the CPU reference (ntt::forward)");
    }
    let c = rt.counters();
    println!("{c:?}");
    assert_eq!(
        (c.modules_loaded, c.compat_loads, c.research_loads),
        (1, 0, 0)
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn issue_7_a_dev_policy_refuses_the_production_registry() {
    let (reg, trust) = promoted();
    let dir = tempfile::tempdir().unwrap();
    let err = Runtime::open(
        &reg,
        &trust,
        Policy::development().with_state_file(dir.path().join("s.json")),
    )
    .err()
    .expect("refused");
    assert!(
        matches!(&err, cuda_aot::Error::Channel { required, found, .. } if required == "dev" && found == "production"),
        "{err}"
    );
}

/// The research kernel compiled with NVRTC for this device (a research-channel module) is
/// refused by the production runtime before the driver sees it.
#[cfg(feature = "research")]
#[test]
#[ignore = "needs a CUDA device"]
fn issue_7_a_research_module_is_refused_by_the_production_runtime() {
    use cuda_aot::ModuleName;
    use cuda_aot::research::{ResearchModule, ResearchSource};
    use std::collections::BTreeMap;

    let dir = tempfile::tempdir().unwrap();
    let rt = open(&dir.path().join("state.json"));
    let root = {
        let built = Path::new(env!("CARGO_MANIFEST_DIR"));
        if built.join("kernels").exists() {
            built.to_path_buf()
        } else {
            PathBuf::from(".")
        }
    };
    let source = std::fs::read_to_string(root.join("kernels/research/ntt_fused.cu")).unwrap();
    let geometry = BTreeMap::from([("block".to_string(), 256), ("tile_log".to_string(), 10)]);
    let options = vec![
        format!("--include-path={}", root.join("kernels/cuda").display()),
        "--std=c++17".to_string(),
        "-DCUDA_AOT_BLOCK=256".to_string(),
        "-DCUDA_AOT_TILE_LOG=10".to_string(),
    ];
    let name = ModuleName::new("ntt_fused").unwrap();
    let research = ResearchModule::compile(&ResearchSource {
        module: &name,
        source: &source,
        file: "ntt_fused.cu",
        target: rt.device().sm().parse().unwrap(),
        options: &options,
        protocol: "goldilocks-ntt-radix2-v1",
        geometry: &geometry,
        schedule_version: 1,
    })
    .unwrap();
    assert_eq!(research.manifest().channel, Channel::Research);
    println!(
        "NVRTC built {} ({}), {} bytes",
        research.manifest().label(),
        research.manifest().identity.toolkit.nvcc,
        research.bytes().len()
    );
    let err = rt.load_research(&research).err().expect("refused");
    assert!(
        matches!(&err, cuda_aot::Error::ResearchRefused { policy, .. } if policy == "production"),
        "{err}"
    );
    println!("refused: {err}\nFix: {}", err.fix());
    assert_eq!(rt.counters().research_loads, 0);
}
