//! The runtime loader: the one owner of device-global state. It verifies a registry once,
//! picks each module's binary for exactly this device's SM, checks the driver floor, and
//! loads each module once per process and device.

mod cache;
mod counters;
mod doctor;
mod policy;
mod select;

pub use counters::Counters;
pub use doctor::{DeviceSpec, Diagnosis, DoctorReport};
pub use policy::{Policy, RollbackState};

use cache::{Slot, shared_slot};
use counters::AtomicCounters;
use select::{Pick, verify_registry_metadata};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::bundle::Embedded;
use crate::cuda::{CudaStream, Device, DeviceGlobal, DeviceInfo, Kernel, LoadedModule, SignedAbi};
use crate::error::{Error, Result};
use crate::identity::Kind;
use crate::lookup::{describe_functions, describe_globals, resolve_function, resolve_global};
use crate::manifest::Manifest;
use crate::metadata::Time;
use crate::source::{DirSource, RegistrySource};
use crate::verify::{Select, VerifiedModule};

struct Selected {
    module: VerifiedModule,
    /// Shared with every [`Module`] handed out: no per-call copy.
    manifest: Arc<Manifest>,
    slot: Slot,
}

/// A loaded module: its verified manifest and the driver's handle.
#[derive(Clone)]
pub struct Module {
    manifest: Arc<Manifest>,
    loaded: Arc<LoadedModule>,
}

impl Module {
    /// The manifest the loaded bytes were verified against.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    /// A kernel of this module by its symbol, its demangled C++ name without parameters
    /// (`ntt::bit_rev<gl64_t>`) or its full demangled signature, matched against the names
    /// the signed manifest records (no demangler runs here). The kernel carries its signed
    /// launch ABI, which every launch is checked against; the driver's own report of the
    /// parameter layout must equal it. An unknown name lists the module's kernels by their
    /// demangled names; a name matching several kernels (overloads, template instances of
    /// one name) lists the candidates.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let module = &self.manifest.identity.module;
        let f = resolve_function(&self.manifest.functions, name).map_err(|candidates| {
            if candidates.is_empty() {
                Error::Unknown {
                    kind: "kernel",
                    name: format!("{module}::{name}"),
                    available: describe_functions(&self.manifest.functions),
                }
            } else {
                Error::AmbiguousKernel {
                    module: module.to_string(),
                    name: name.to_string(),
                    candidates: describe_functions(candidates),
                }
            }
        })?;
        let abi = SignedAbi::of(f);
        Ok(self
            .loaded
            .function(f.symbol.as_str())?
            .with_signed_abi(abi)?)
    }
    /// A device global of this module (a `__constant__` or `__device__` variable) by its
    /// symbol or its demangled name (`poseidon::ROUND_CONSTANTS`), matched against the
    /// globals the signed manifest lists (the same rule as [`Module::kernel`]). The handle
    /// has the device address and the signed size, which must equal the size the driver
    /// reports (`cuModuleGetGlobal` / `cuLibraryGetGlobal`); every copy through it must be
    /// exactly that size, or it is refused before the driver runs.
    ///
    /// Provers fill their tables once after [`Runtime::preload`], before the first launch
    /// (docs/runtime.md). With [`Runtime::open_devices`], each device's runtime has its own
    /// module and so its own copy of every global: fill each.
    ///
    /// Refused: an unknown name (listing the module's globals), a name matching several
    /// globals, and every name of a module whose manifest is schema v1 (signed before
    /// globals were: [`Error::GlobalsNotSigned`]).
    pub fn global(&self, name: &str) -> Result<DeviceGlobal> {
        let g = signed_global(&self.manifest, name)?;
        Ok(self.loaded.global(g.symbol.as_str())?.with_signed_size(
            &self.manifest.label(),
            g.name.as_str(),
            g.size,
        )?)
    }
    /// True when this module runs as PTX through the driver JIT (compatibility mode).
    pub fn is_compatibility_mode(&self) -> bool {
        self.manifest.identity.kind == Kind::Ptx
    }
}

/// The global `name` of `manifest` ([`resolve_global`]), or why there is none: the manifest
/// predates signed globals (v1), no global has that name (the error lists the module's
/// globals), or several do.
fn signed_global<'a>(manifest: &'a Manifest, name: &str) -> Result<&'a crate::Global> {
    let module = manifest.label();
    let Some(globals) = &manifest.globals else {
        return Err(Error::GlobalsNotSigned {
            module,
            name: name.to_string(),
            schema: manifest.schema.clone(),
        });
    };
    resolve_global(globals, name).map_err(|candidates| {
        if candidates.is_empty() {
            Error::Unknown {
                kind: "global",
                name: format!("{}::{name}", manifest.identity.module),
                available: describe_globals(globals),
            }
        } else {
            let v: Vec<String> = candidates
                .iter()
                .map(|g| format!("{} ({})", g.name, g.symbol))
                .collect();
            Error::AmbiguousGlobal {
                module,
                name: name.to_string(),
                candidates: v.join(", "),
            }
        }
    })
}

/// The runtime: verified bundle, device, selected modules and counters.
pub struct Runtime {
    device: Device,
    policy: Policy,
    index_version: u64,
    modules: BTreeMap<String, Selected>,
    counters: AtomicCounters,
}

impl Runtime {
    /// Verifies the registry at `registry` against the trust root file bytes `trust_root`
    /// (one pass: root chain, timestamp, index, build statements, promotions) while the
    /// device's primary context is created, then selects each module's binary for exactly
    /// this device, checks the driver floor and verifies the selected manifests and blobs
    /// (size, blake3, ELF SM). A registry or verification error is reported before any
    /// driver error, so a host without a GPU still learns that its registry is wrong.
    /// Nothing is loaded yet; see [`Runtime::preload`] and [`Runtime::module`].
    pub fn open(registry: impl AsRef<Path>, trust_root: &[u8], policy: Policy) -> Result<Runtime> {
        let device = policy.device;
        let mut v = Runtime::open_devices(registry, trust_root, policy, &[device])?;
        Ok(v.remove(0))
    }

    /// [`Runtime::open`] for several devices of one process: the registry is verified
    /// once, every device's primary context is created in parallel (and in parallel with
    /// verification), then each device gets its own selection, driver-floor check, modules
    /// (each loaded exactly once per device) and counters. Blobs shared by devices of the
    /// same SM are read and hashed once. `policy.device` is ignored.
    pub fn open_devices(
        registry: impl AsRef<Path>,
        trust_root: &[u8],
        policy: Policy,
        devices: &[usize],
    ) -> Result<Vec<Runtime>> {
        let registry = registry.as_ref();
        let state = policy.state_path(registry)?;
        Runtime::open_source(
            &DirSource::new(registry),
            state,
            trust_root,
            policy,
            devices,
        )
    }

    /// [`Runtime::open`] of a bundle compiled into the program
    /// ([`crate::include_bundle!`] of what the build script of `cuda-aot-build` wrote):
    /// the same verification, the same rollback rules (the state kept per trust root and
    /// registry the bundle came from), no file read. The cubins are used in place: the
    /// driver is handed the program's own bytes, never a copy.
    ///
    /// A bundle that is empty or damaged ([`Error::BadBundle`]), or made for another trust
    /// root than `trust_root` ([`Error::BundleOtherRoot`]), is refused before the driver is
    /// touched.
    pub fn open_embedded(
        bundle: &'static [u8],
        trust_root: &[u8],
        policy: Policy,
    ) -> Result<Runtime> {
        let device = policy.device;
        let mut v = Runtime::open_embedded_devices(bundle, trust_root, policy, &[device])?;
        Ok(v.remove(0))
    }

    /// [`Runtime::open_embedded`] for several devices ([`Runtime::open_devices`]).
    pub fn open_embedded_devices(
        bundle: &'static [u8],
        trust_root: &[u8],
        policy: Policy,
        devices: &[usize],
    ) -> Result<Vec<Runtime>> {
        let embedded = Embedded::parse(bundle)?;
        embedded.check_trust_root(trust_root)?;
        let state = policy.embedded_state_path(&embedded)?;
        Runtime::open_source(&embedded, state, trust_root, policy, devices)
    }

    /// The one open: verifies `src` (rollback state in `state`) while the devices' primary
    /// contexts are created, then selects, checks and verifies what each device loads.
    fn open_source(
        src: &(dyn RegistrySource + Sync),
        state_path: Option<PathBuf>,
        trust_root: &[u8],
        policy: Policy,
        devices: &[usize],
    ) -> Result<Vec<Runtime>> {
        let started = Instant::now();
        let (verified, opened) = std::thread::scope(|s| {
            let handles: Vec<_> = devices
                .iter()
                .map(|&d| s.spawn(move || Device::open(d)))
                .collect();
            let verified = verify_registry_metadata(
                src,
                state_path.as_deref(),
                trust_root,
                &policy,
                Time::now(),
            );
            let opened: Vec<_> = handles
                .into_iter()
                .map(|h| h.join().expect("device thread"))
                .collect();
            (verified, opened)
        });
        // Registry and verification errors first, then driver errors.
        let (index, metadata_time) = verified?;
        let devices = opened
            .into_iter()
            .collect::<std::result::Result<Vec<_>, _>>()?;
        // Each device's pick, then steps 6-8 once for all of them (a blob two devices of one
        // SM share is read and hashed once), the driver floor of every device that picked a
        // module checked before any blob is read. A device that cannot run some modules (no
        // binary for its SM, a driver below their floor) is refused naming all of them.
        let picks: Vec<Pick> = devices
            .iter()
            .map(|d| Pick::for_device(&index.index().entries, src, d.info(), &policy))
            .collect();
        let floor = |ms: &[(usize, &crate::verify::VerifiedManifest)]| -> Result<()> {
            for (pick, device) in picks.iter().zip(&devices) {
                pick.refuse_unrunnable(ms, device.info())?;
            }
            Ok(())
        };
        let union: Vec<usize> = picks
            .iter()
            .flat_map(|p| p.entries.iter())
            .copied()
            .collect();
        let verified = index.complete(
            src,
            Select::entries(union).before_blobs(&floor).keep_bytes(),
        )?;
        let picks: Vec<Vec<usize>> = picks.into_iter().map(|p| p.entries).collect();
        let mut hashed: std::collections::HashSet<usize> = std::collections::HashSet::new();
        let mut runtimes = Vec::with_capacity(devices.len());
        for (device, picked) in devices.into_iter().zip(picks) {
            let t = Instant::now();
            let info = device.info().clone();
            let counters = AtomicCounters::default();
            let mut modules = BTreeMap::new();
            for i in picked {
                let module = verified
                    .module(i)
                    .expect("complete keeps every selected module")
                    .clone();
                let entry = &verified.index().entries[i];
                let man = module.manifest();
                if hashed.insert(i) {
                    counters.bytes_hashed.fetch_add(man.size, Ordering::Relaxed);
                }
                if man.identity.kind == Kind::Ptx {
                    log::warn!(
                        "cuda-aot: {} selected in PTX COMPATIBILITY MODE (driver JIT) on device {} ({})",
                        man.label(),
                        info.ordinal,
                        info.sm()
                    );
                }
                // The verifier checked the entry's identity digest against the manifest.
                let key = (info.ordinal, entry.identity, man.module_digest);
                modules.insert(
                    man.identity.module.to_string(),
                    Selected {
                        manifest: Arc::new(man.clone()),
                        module,
                        slot: shared_slot(key),
                    },
                );
            }
            counters
                .modules_verified
                .store(modules.len() as u64, Ordering::Relaxed);
            counters
                .signatures_checked
                .store(verified.signature_checks(), Ordering::Relaxed);
            let verify_time = metadata_time + t.elapsed();
            counters
                .verify_ns
                .store(verify_time.as_nanos() as u64, Ordering::Relaxed);
            log::info!(
                "cuda-aot: verified index v{} ({} modules for device {} {} {}, {} signature checks) in {:?}",
                verified.index().version,
                modules.len(),
                info.ordinal,
                info.name,
                info.sm(),
                verified.signature_checks(),
                verify_time
            );
            runtimes.push(Runtime {
                device,
                policy: policy.clone(),
                index_version: verified.index().version,
                modules,
                counters,
            });
        }
        // Everything every device uses passed: only now is the state saved.
        if let Some(p) = &state_path {
            verified.state().save(p)?;
        }
        log::info!(
            "cuda-aot: {} device(s) ready to load in {:?}",
            runtimes.len(),
            started.elapsed()
        );
        Ok(runtimes)
    }

    /// [`Runtime::preload`] for every runtime of [`Runtime::open_devices`], one thread per
    /// device.
    pub fn preload_all(runtimes: &[Runtime]) -> Result<()> {
        std::thread::scope(|s| {
            let handles: Vec<_> = runtimes.iter().map(|rt| s.spawn(|| rt.preload())).collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("preload thread"))
                .collect::<Result<Vec<()>>>()
        })?;
        Ok(())
    }

    /// Loads every selected module now (at startup, before the first request).
    pub fn preload(&self) -> Result<()> {
        // One clock around every load: a clock read can cost a system call on a virtual
        // machine, a visible share of a 40 µs module load.
        let started = Instant::now();
        let loaded = self
            .modules
            .values()
            .try_for_each(|sel| self.ensure_loaded(sel, false).map(drop));
        self.counters
            .driver_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        loaded
    }

    /// The loaded module `name`, loading it on first use: exactly once per process and
    /// device, however many threads ask at once.
    pub fn module(&self, name: &str) -> Result<Module> {
        let sel = self.modules.get(name).ok_or_else(|| Error::Unknown {
            kind: "module",
            name: name.to_string(),
            available: self.modules.keys().cloned().collect::<Vec<_>>().join(", "),
        })?;
        Ok(Module {
            manifest: sel.manifest.clone(),
            loaded: self.ensure_loaded(sel, true)?,
        })
    }

    /// The driver's handle of `sel`, loading it from the verified bytes if no live runtime
    /// of this process has (the slot's lock makes concurrent first uses load once). With
    /// `clock`, the load's time is added to the driver-time counter here.
    fn ensure_loaded(&self, sel: &Selected, clock: bool) -> Result<Arc<LoadedModule>> {
        let mut slot = sel.slot.lock().expect("module slot lock");
        if let Some(loaded) = slot.as_ref() {
            self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(loaded.clone());
        }
        let manifest = &sel.manifest;
        if manifest.identity.kind == Kind::Ptx {
            self.counters.compat_loads.fetch_add(1, Ordering::Relaxed);
            log::warn!(
                "cuda-aot: loading {} through the driver JIT (PTX compatibility mode)",
                manifest.label()
            );
        }
        let started = clock.then(Instant::now);
        let loaded =
            LoadedModule::load_verified(self.device.context(), &sel.module, self.policy.load_api);
        if let Some(t) = started {
            self.counters
                .driver_ns
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        let loaded = Arc::new(loaded.map_err(|source| Error::Load {
            what: manifest.label(),
            source: source.into(),
        })?);
        self.counters.modules_loaded.fetch_add(1, Ordering::Relaxed);
        *slot = Some(loaded.clone());
        Ok(loaded)
    }

    /// Loads a research module (an NVRTC build, channel `research`) into this runtime's
    /// device, beside the registry's modules: only under [`Policy::research`]; the
    /// production and development policies refuse it ([`Error::ResearchRefused`]) before
    /// the driver sees it. Logged as RESEARCH and counted in `research_loads`; not cached
    /// (every call loads: research modules change between runs).
    #[cfg(feature = "research")]
    pub fn load_research(&self, module: &crate::research::ResearchModule) -> Result<Module> {
        let manifest = module.manifest();
        self.policy.admit(manifest)?;
        log::warn!(
            "cuda-aot: loading RESEARCH module {} ({}; channel research, never for production) on device {}",
            manifest.label(),
            manifest.identity.toolkit.nvcc,
            self.device.info().ordinal
        );
        let started = Instant::now();
        let loaded =
            LoadedModule::load_cubin(self.device.context(), module.bytes(), self.policy.load_api);
        self.counters
            .driver_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let loaded = loaded.map_err(|source| Error::Load {
            what: format!("{} (research)", manifest.label()),
            source: source.into(),
        })?;
        self.counters.research_loads.fetch_add(1, Ordering::Relaxed);
        Ok(Module {
            manifest: Arc::new(manifest.clone()),
            loaded: Arc::new(loaded),
        })
    }

    /// A kernel of module `module`, named by symbol, demangled name or full signature
    /// ([`Module::kernel`]).
    pub fn kernel(&self, module: &str, function: &str) -> Result<Kernel> {
        self.module(module)?.kernel(function)
    }

    /// The device this runtime owns.
    pub fn device(&self) -> &DeviceInfo {
        self.device.info()
    }

    /// The device's primary context, which every module of this runtime is loaded into:
    /// the context the CUDA runtime API (`cudaMalloc`, `cudaStream_t`) uses on this device
    /// too, so a host's own allocations and streams work with this runtime's kernels.
    pub fn context(&self) -> &Arc<cudarc::driver::CudaContext> {
        self.device.context()
    }

    /// A new stream on this runtime's device.
    pub fn stream(&self) -> Result<Arc<CudaStream>> {
        Ok(self.device.new_stream()?)
    }

    /// The manifests selected for this device, by module name.
    pub fn selected(&self) -> impl Iterator<Item = &Manifest> {
        self.modules.values().map(|s| s.module.manifest())
    }

    /// The verified bytes selected for module `name` (what the driver is handed).
    pub fn verified_bytes(&self, name: &str) -> Option<&[u8]> {
        self.modules.get(name).map(|s| &s.module.bytes()[..])
    }

    /// The verified index version.
    pub fn index_version(&self) -> u64 {
        self.index_version
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> Counters {
        self.counters.snapshot()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::identity::tests::sample_identity;
    use crate::{Channel, Digest};

    /// A manifest of module `ntt` for `sm` and `kind` (the runtime's tests share it).
    pub(crate) fn m(sm: &str, kind: Kind) -> Manifest {
        let mut identity = sample_identity();
        identity.sm = sm.parse().unwrap();
        identity.kind = kind;
        Manifest {
            schema: Manifest::SCHEMA.into(),
            identity,
            module_digest: Digest::of(b"x"),
            size: 1,
            functions: vec![],
            globals: Some(vec![]),
            channel: Channel::Dev,
        }
    }

    /// Issue 19, item 4: globals resolve by symbol or demangled name; an unknown name lists
    /// the module's globals; a v1 manifest is refused with advice to rebuild.
    #[test]
    fn issue_19_globals_resolve_against_the_signed_list() {
        use crate::identity::GlobalSpace;
        use crate::identity::tests::global;
        let mut man = m("sm_90", Kind::Cubin);
        man.globals = Some(vec![
            global(
                "_ZN8poseidon3MDSE",
                "poseidon::MDS",
                256,
                GlobalSpace::Constant,
            ),
            global(
                "_ZN8poseidon7SCRATCHE",
                "poseidon::SCRATCH",
                4096,
                GlobalSpace::Device,
            ),
        ]);
        assert_eq!(signed_global(&man, "poseidon::MDS").unwrap().size, 256);
        assert_eq!(
            signed_global(&man, "_ZN8poseidon7SCRATCHE").unwrap().size,
            4096
        );
        let err = signed_global(&man, "poseidon::TWIDDLES").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown global \"ntt::poseidon::TWIDDLES\"; available: poseidon::MDS (256 bytes, constant), poseidon::SCRATCH (4096 bytes, device)"
        );
        assert!(
            err.fix().contains("global name listed above"),
            "{}",
            err.fix()
        );
        man.schema = Manifest::SCHEMA_V1.into();
        man.globals = None;
        let err = signed_global(&man, "poseidon::MDS").unwrap_err();
        assert!(
            matches!(&err, Error::GlobalsNotSigned { module, .. } if module == "ntt sm_90"),
            "{err}"
        );
        assert!(err.to_string().contains("predates signed globals"), "{err}");
        assert!(err.fix().contains("rebuild and republish"), "{}", err.fix());
    }
}
