//! The runtime loader: CPU-side behaviour in CI, and GPU tests (ignored without a device)
//! that run on the H200 host with `--ignored`.

mod common;

use common::*;
use cuda_aot::cuda::{self, LoadApi};
use cuda_aot::{Channel, Error, Policy, Runtime};
use cuda_aot_registry::PublishOptions;
use std::sync::{Arc, Barrier};

/// Without a driver, a clear error (not a panic); with one (the GPU host), the same open
/// gets past the driver probe. Either way something is checked.
#[test]
fn open_without_a_driver_is_a_clear_error_not_a_panic() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let opened = Runtime::open(f.reg_path(), &f.root_file, f.policy());
    match (cuda::driver_present(), opened) {
        (false, Err(err)) => {
            assert!(
                matches!(&err, Error::Cuda(e) if e.is_driver_missing()),
                "{err}"
            );
            assert!(err.to_string().contains("libcuda"), "{err}");
            assert!(err.fix().contains("driver"), "{}", err.fix());
        }
        (false, Ok(_)) => panic!("opened a runtime without a CUDA driver"),
        (true, Err(err)) => assert!(
            !matches!(&err, Error::Cuda(e) if e.is_driver_missing()),
            "libcuda is present but open says it is missing: {err}"
        ),
        (true, Ok(rt)) => assert_eq!(rt.counters().modules_verified, 1),
    }
}

/// Issue 11: a prover on a host without a GPU still learns that its registry is wrong:
/// registry and verification errors come before the driver is probed.
#[test]
fn issue_11_registry_errors_come_before_the_driver_probe() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    f.write(cuda_aot::source::layout::TIMESTAMP, b"{ not a timestamp");
    let err = Runtime::open(f.reg_path(), &f.root_file, f.policy())
        .err()
        .unwrap();
    assert!(
        matches!(&err, Error::Json { what, .. } if what == "timestamp.json"),
        "{err}"
    );
    // Under another trust root the broken timestamp is still the error: the root is only
    // the anchor, and the registry's own files are read before anything is checked
    // against it.
    let other = Fixture::new();
    let err = Runtime::open(f.reg_path(), &other.root_file, other.policy())
        .err()
        .unwrap();
    assert!(
        matches!(&err, Error::Json { what, .. } if what == "timestamp.json"),
        "{err}"
    );
}

/// The registry made by `cargo xtask release` (copied to the GPU host): env
/// CUDA_AOT_TEST_REGISTRY and CUDA_AOT_TEST_TRUST, defaulting to the repo's .cuda-aot/.
fn release_registry() -> (std::path::PathBuf, Vec<u8>) {
    let reg = std::env::var_os("CUDA_AOT_TEST_REGISTRY")
        .map(Into::into)
        .unwrap_or_else(|| ".cuda-aot/registry".into());
    let trust: std::path::PathBuf = std::env::var_os("CUDA_AOT_TEST_TRUST")
        .map(Into::into)
        .unwrap_or_else(|| ".cuda-aot/dev-keys/root.json".into());
    let trust = std::fs::read(&trust)
        .unwrap_or_else(|e| panic!("{}: {e} (run cargo xtask release first)", trust.display()));
    (reg, trust)
}

#[test]
#[ignore = "needs a CUDA device"]
fn gpu_release_set_kernels_match_their_cpu_references() {
    use cuda_aot_kernels::gpu::{FieldOps, Merkle, Ntt};
    use cuda_aot_kernels::{goldilocks, merkle, ntt};
    let (reg, trust) = release_registry();
    let rt = Runtime::open(&reg, &trust, Policy::development()).unwrap();
    rt.preload().unwrap();
    println!(
        "device: {} {} driver {}",
        rt.device().name,
        rt.device().sm(),
        rt.device().driver_version_string()
    );
    for m in rt.selected() {
        assert!(
            m.identity
                .sm
                .is_exact_for(rt.device().cc_major, rt.device().cc_minor),
            "{}",
            m.label()
        );
        println!("selected {}", m.label());
    }
    let stream = rt.stream().unwrap();
    let n = 1 << 16;
    let x: Vec<u64> = (0..n as u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % goldilocks::P)
        .collect();
    let y: Vec<u64> = (0..n as u64)
        .map(|i| (i ^ 0xdead_beef) * 0x1000_0001 % goldilocks::P)
        .collect();
    let f = FieldOps::new(&rt).unwrap();
    let (dx, dy) = (
        stream.clone_htod(&x).unwrap(),
        stream.clone_htod(&y).unwrap(),
    );
    let mut out = stream.alloc_zeros::<u64>(n).unwrap();
    f.mul(&stream, &dx, &dy, &mut out).unwrap();
    assert_eq!(
        stream.clone_dtoh(&out).unwrap(),
        x.iter()
            .zip(&y)
            .map(|(a, b)| goldilocks::mul(*a, *b))
            .collect::<Vec<_>>()
    );
    f.axpy(&stream, 12345, &dx, &dy, &mut out).unwrap();
    assert_eq!(
        stream.clone_dtoh(&out).unwrap(),
        goldilocks::axpy(12345, &x, &y)
    );
    // The host-filled __constant__ table: unfilled it is zero (the polynomial 0), filled
    // it is what gl_poly_eval evaluates.
    f.poly_eval(&stream, &dx, &mut out).unwrap();
    assert!(stream.clone_dtoh(&out).unwrap().iter().all(|v| *v == 0));
    let coeffs = [3, 1, 4, 1, 5, 9, 2, goldilocks::P - 6];
    f.set_poly(&coeffs).unwrap();
    f.poly_eval(&stream, &dx, &mut out).unwrap();
    assert_eq!(
        stream.clone_dtoh(&out).unwrap(),
        goldilocks::poly_eval(&coeffs, &x)
    );
    let t = Ntt::new(&rt).unwrap();
    let log_n = 14;
    let mut d = stream.clone_htod(&x[..1 << log_n]).unwrap();
    t.forward(
        &stream,
        &mut d,
        &stream.clone_htod(&ntt::twiddles(log_n, false)).unwrap(),
    )
    .unwrap();
    let mut want = x[..1 << log_n].to_vec();
    ntt::forward(&mut want);
    assert_eq!(stream.clone_dtoh(&d).unwrap(), want);
    t.inverse(
        &stream,
        &mut d,
        &stream.clone_htod(&ntt::twiddles(log_n, true)).unwrap(),
    )
    .unwrap();
    assert_eq!(stream.clone_dtoh(&d).unwrap(), x[..1 << log_n]);
    let children: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mk = Merkle::new(&rt).unwrap();
    let mut parents = stream.alloc_zeros::<u8>(children.len() / 2).unwrap();
    mk.layer(
        &stream,
        &stream.clone_htod(&children).unwrap(),
        &mut parents,
    )
    .unwrap();
    assert_eq!(
        stream.clone_dtoh(&parents).unwrap(),
        merkle::layer_bytes(&children)
    );
    println!("counters: {:?}", rt.counters());
}

#[test]
#[ignore = "needs an sm_90 CUDA device (the fixture cubins are sm_90)"]
fn gpu_a_tampered_blob_is_refused_before_the_driver_sees_it() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let p = f.blob_path("sm_90");
    let mut b = std::fs::read(&p).unwrap();
    b[200] ^= 0x40;
    std::fs::write(&p, b).unwrap();
    let err = Runtime::open(f.reg_path(), &f.root_file, f.policy())
        .err()
        .unwrap();
    assert!(
        matches!(&err, Error::DigestMismatch { what, .. } if what.contains("add sm_90")),
        "{err}"
    );
    println!("refused: {err}");
}

#[test]
#[ignore = "needs an sm_90 CUDA device (the fixture cubins are sm_90)"]
fn gpu_an_sm80_cubin_claimed_as_sm90_is_refused_by_the_elf_check() {
    let f = Fixture::new();
    let blob = cubin("sm_80");
    let m = manifest("add", "sm_90", &blob, Channel::Dev);
    f.publish_modules(&[(m, blob)], PublishOptions::default());
    let err = Runtime::open(f.reg_path(), &f.root_file, f.policy())
        .err()
        .unwrap();
    assert!(
        matches!(&err, Error::ElfSmMismatch { claimed, actual, .. } if claimed == "sm_90" && actual == "sm_80"),
        "{err}"
    );
    println!("refused: {err}");
}

#[test]
#[ignore = "needs an sm_90 CUDA device (the fixture cubins are sm_90)"]
fn gpu_only_another_sms_cubin_is_no_exact_target() {
    let f = Fixture::new();
    f.publish_sms(&["sm_80", "sm_120"]);
    let err = Runtime::open(f.reg_path(), &f.root_file, f.policy())
        .err()
        .unwrap();
    // Issue 36, item 4: the refusal names the device, its driver and every module
    // affected, and says what to add.
    let Error::Unsupported {
        sm,
        problems,
        locked_out: false,
        ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(sm, "sm_90");
    assert!(
        matches!(&problems[..], [Error::NoExactTarget { device_sm, available, .. }] if device_sm == "sm_90" && available == "sm_120 sm_80"),
        "{err}"
    );
    assert!(err.to_string().contains("CUDA driver"), "{err}");
    assert!(err.fix().contains("add sm_90"), "{}", err.fix());
    println!("refused: {err}\nFix: {}", err.fix());
}

/// Issue 22: `Runtime::diagnose` (what `cargo xtask doctor` runs) on this very device says
/// what `Runtime::open` does: the same blob for every module of the release, with and
/// without the PTX opt-in, and the same refusal where no exact cubin exists.
#[test]
#[ignore = "needs an sm_90 CUDA device (the fixture cubins are sm_90)"]
fn gpu_doctor_agrees_with_runtime_open_on_this_device() {
    use cuda_aot::DeviceSpec;
    let (reg, trust) = release_registry();
    for policy in [
        Policy::development(),
        Policy::development().with_ptx_compatibility(),
    ] {
        let rt = Runtime::open(&reg, &trust, policy.clone()).unwrap();
        let spec = DeviceSpec::of_device(rt.device());
        let opened: Vec<(String, String)> = rt
            .selected()
            .map(|m| (m.identity.module.to_string(), m.label()))
            .collect();
        let diagnosed: Vec<(String, String)> = Runtime::diagnose(&reg, &trust, &policy, &spec)
            .unwrap()
            .into_iter()
            .map(|d| {
                let m = d.outcome.unwrap_or_else(|e| panic!("{}: {e}", d.module));
                (d.module, m.label())
            })
            .collect();
        assert_eq!(diagnosed, opened, "{}", spec.name);
        println!("{}: doctor and open agree: {opened:?}", spec.name);
    }
    let f = Fixture::new();
    f.publish_sms(&["sm_80", "sm_120"]);
    let open = Runtime::open(f.reg_path(), &f.root_file, f.policy())
        .err()
        .unwrap();
    let rt_spec = {
        let d = cuda_aot::cuda::Device::open(0).unwrap();
        DeviceSpec::of_device(d.info())
    };
    let diag = Runtime::diagnose(f.reg_path(), &f.root_file, &f.policy(), &rt_spec).unwrap();
    let refused = diag[0].outcome.as_ref().expect_err("refused");
    let Error::Unsupported { problems, .. } = &open else {
        panic!("{open}");
    };
    assert_eq!(refused.to_string(), problems[0].to_string());
    assert_eq!(refused.kind(), open.kind());
    println!("both refuse: {open}");
}

#[test]
#[ignore = "needs an sm_90 CUDA device (the fixture cubins are sm_90)"]
fn gpu_sixteen_threads_first_use_gives_exactly_one_load() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let rt = Arc::new(Runtime::open(f.reg_path(), &f.root_file, f.policy()).unwrap());
    let barrier = Arc::new(Barrier::new(16));
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let (rt, barrier) = (rt.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                rt.module("add").unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let c = rt.counters();
    println!("after 16 concurrent first uses: {c:?}");
    assert_eq!((c.modules_loaded, c.cache_hits), (1, 15));
    run_add(&rt);
    // A second runtime in the same process shares the process-wide module cache.
    let rt2 = Runtime::open(f.reg_path(), &f.root_file, f.policy()).unwrap();
    rt2.module("add").unwrap();
    assert_eq!(
        (rt2.counters().modules_loaded, rt2.counters().cache_hits),
        (0, 1)
    );
}

#[test]
#[ignore = "needs an sm_90 CUDA device (the fixture cubins are sm_90)"]
fn gpu_ptx_is_refused_by_default_and_loaded_labelled_in_compatibility_mode() {
    for channel in [Channel::Production, Channel::Dev] {
        let f = Fixture::with_channel(channel);
        f.publish_modules(
            &[add_module("compute_90", channel)],
            PublishOptions::default(),
        );
        let base = f.policy();
        let err = Runtime::open(f.reg_path(), &f.root_file, base.clone())
            .err()
            .unwrap();
        assert!(
            matches!(
                &err,
                Error::Unsupported { problems, .. } if matches!(
                    &problems[..],
                    [Error::NoExactTarget { ptx_available: true, .. }]
                )
            ),
            "{err}"
        );
        println!("{channel} policy refused: {err}");
        let rt = Runtime::open(f.reg_path(), &f.root_file, base.with_ptx_compatibility()).unwrap();
        let module = rt.module("add").unwrap();
        assert!(module.is_compatibility_mode());
        assert!(module.manifest().label().contains("compatibility mode"));
        run_add(&rt);
        let c = rt.counters();
        assert_eq!((c.modules_loaded, c.compat_loads), (1, 1));
        println!(
            "compatibility policy loaded {} (driver JIT {:?}): {c:?}",
            module.manifest().label(),
            c.driver_time
        );
    }
}

#[test]
#[ignore = "needs an sm_90 CUDA device (the fixture cubins are sm_90)"]
fn gpu_module_and_library_loading_both_run_the_kernel() {
    for api in [LoadApi::Module, LoadApi::Library] {
        let f = Fixture::new();
        f.publish_sms(&["sm_90"]);
        let policy = Policy {
            load_api: api,
            ..f.policy()
        };
        let rt = Runtime::open(f.reg_path(), &f.root_file, policy).unwrap();
        run_add(&rt);
        println!("{api:?}: {:?}", rt.counters());
    }
}

/// Issue 12: a multi-GPU prover verifies once per process, creates the contexts in
/// parallel, and every device loads each module exactly once and runs it.
#[test]
#[ignore = "needs two sm_90 CUDA devices"]
fn gpu_two_devices_verify_once_and_load_each_module_once_per_device() {
    let n = cuda::device_count().unwrap();
    assert!(n >= 2, "this test needs two CUDA devices, the host has {n}");
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let rts = Runtime::open_devices(f.reg_path(), &f.root_file, f.policy(), &[0, 1]).unwrap();
    assert_eq!(rts.len(), 2);
    Runtime::preload_all(&rts).unwrap();
    for (i, rt) in rts.iter().enumerate() {
        assert_eq!(rt.device().ordinal, i);
        run_add(rt);
        rt.module("add").unwrap();
        let c = rt.counters();
        println!("device {i}: {c:?}");
        assert_eq!((c.modules_loaded, c.cache_hits), (1, 2), "device {i}");
        assert_eq!(c.signatures_checked, 4);
    }
}
