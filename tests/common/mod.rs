//! Shared fixtures of the runtime crate's integration tests: generated keys, trust roots,
//! real cubins and registries published with the real publisher all come from
//! `cuda-aot-testkit`; what is the runtime's own is the loader policy of a fixture.

#![allow(dead_code)] // each test file uses a subset

pub use cuda_aot_testkit::*;

use std::ffi::c_void;

use cuda_aot::cuda::{CUdeviceptr, DevicePtr, DevicePtrMut};
use cuda_aot::{Channel, Policy, Runtime};

/// The runtime's view of a test registry.
pub trait RuntimeFixture {
    /// A policy for this fixture's registry: its channel, state in the fixture's folder.
    fn policy(&self) -> Policy;
}

impl RuntimeFixture for Fixture {
    fn policy(&self) -> Policy {
        let p = match self.channel {
            Channel::Dev => Policy::development(),
            Channel::Production => Policy::production(),
            Channel::Research => Policy::research(),
        };
        p.with_state_file(self.state_path())
    }
}

/// Launches `add(const u64* a, u64* b, int n)`: b[i] += a[i].
pub fn run_add(rt: &Runtime) -> Vec<u64> {
    let k = rt.kernel("add", "add").unwrap();
    let stream = rt.stream().unwrap();
    let a: Vec<u64> = (0..1000u64).map(|i| i * 3 + 1).collect();
    let b: Vec<u64> = (0..1000u64).map(|i| i * 7 + 5).collect();
    let da = stream.clone_htod(&a).unwrap();
    let mut db = stream.clone_htod(&b).unwrap();
    {
        let (mut pa, _g1) = da.device_ptr(&stream);
        let (mut pb, _g2) = db.device_ptr_mut(&stream);
        let mut n: i32 = 1000;
        let mut params = [
            (&mut pa as *mut CUdeviceptr).cast::<c_void>(),
            (&mut pb as *mut CUdeviceptr).cast(),
            (&mut n as *mut i32).cast(),
        ];
        // SAFETY: add(const u64*, u64*, int); both buffers hold 1000 elements on this stream.
        unsafe {
            k.launch(&stream, (4, 1, 1), (256, 1, 1), 0, &mut params)
                .unwrap()
        };
    }
    let got = stream.clone_dtoh(&db).unwrap();
    assert_eq!(
        got,
        a.iter().zip(&b).map(|(x, y)| x + y).collect::<Vec<_>>()
    );
    got
}

/// The layout paths of the registry folder `dir`.
pub fn layout_paths(dir: &std::path::Path) -> Vec<String> {
    cuda_aot::source::DirSource::new(dir)
        .layout_paths()
        .unwrap()
}

/// The fixture's registry packed into a bundle for its trust root, leaked as a program's
/// embedded bytes are `'static`.
pub fn embed(f: &Fixture) -> &'static [u8] {
    let paths = layout_paths(&f.reg_path());
    let packed = cuda_aot::bundle::Embedded::pack(
        &f.reg_path(),
        &paths,
        &cuda_aot::Digest::of(&f.root_file),
        "file:///fixture",
    )
    .unwrap();
    Box::leak(packed.into_boxed_slice())
}
