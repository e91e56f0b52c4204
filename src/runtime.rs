//! The runtime loader: the one owner of device-global state. It verifies a registry once,
//! picks each module's binary for exactly this device's SM, checks the driver floor, and
//! loads each module once per process and device.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::Digest;
use crate::cuda::{
    CudaStream, Device, DeviceGlobal, DeviceInfo, Kernel, LoadApi, LoadedModule, SignedAbi,
};
use crate::error::{Error, Result};
use crate::identity::{
    Channel, DriverVersion, Kind, Manifest, describe_functions, describe_globals, resolve_function,
    resolve_global,
};
use crate::limits::Limits;
use crate::metadata::{IndexEntry, Time};
use crate::name::Target;
use crate::source::{DirSource, RegistrySource};
use crate::state::TrustState;
use crate::verify::{Freshness, Options, Select, VerifiedModule, verify_metadata};

/// Where the runtime keeps its rollback-protection state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollbackState {
    /// The per-user default ([`TrustState::default_path`]): one file per registry under
    /// `$XDG_STATE_HOME/cuda-aot/trust/` (or `~/.local/state/cuda-aot/trust/`).
    PerUser,
    /// This file.
    File(PathBuf),
    /// No state is kept: rollback is only caught against [`Policy::minimum_versions`].
    /// Explicit, and logged as a warning at every open.
    Disabled,
}

/// What a runtime accepts and how it loads.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The channel the registry must be signed for (`Production` refuses dev keys).
    pub channel: Channel,
    /// Allow PTX (driver JIT) for modules without an exact cubin: the labelled
    /// compatibility mode. Off in production.
    pub allow_ptx: bool,
    /// Prefer the arch-specific cubin (`sm_90a`) over the plain one on its own device.
    pub prefer_arch_specific: bool,
    /// Driver entry point used to load modules.
    pub load_api: LoadApi,
    /// CUDA device ordinal.
    pub device: usize,
    /// Rollback protection: on by default, with the state in a per-user file.
    pub rollback: RollbackState,
    /// Versions below which nothing is accepted even without saved state (a prover can
    /// compile in the release it was built against).
    pub minimum_versions: TrustState,
    /// Accepted clock skew past expiry (explicit; logged at open).
    pub clock_skew: Duration,
    /// Offline grace: an expired timestamp is still accepted this long after the last
    /// fresh verification recorded in the rollback state, with a warning naming the
    /// deadline. Zero by default.
    pub offline_grace: Duration,
    /// Byte caps.
    pub limits: Limits,
    /// Admit research modules (NVRTC builds, channel `research`) beside the registry's
    /// modules: only [`Policy::research`] does; production and development never do.
    pub allow_research: bool,
}

impl Policy {
    /// Production: production-signed registries only, cubins only, exact SM.
    pub fn production() -> Policy {
        Policy {
            channel: Channel::Production,
            allow_ptx: false,
            prefer_arch_specific: true,
            load_api: LoadApi::Module,
            device: 0,
            rollback: RollbackState::PerUser,
            minimum_versions: TrustState::default(),
            clock_skew: Duration::ZERO,
            offline_grace: Duration::ZERO,
            limits: Limits::default(),
            allow_research: false,
        }
    }
    /// Development: dev-signed registries (e.g. from `cargo xtask release` on a fresh clone).
    pub fn development() -> Policy {
        Policy {
            channel: Channel::Dev,
            ..Policy::production()
        }
    }
    /// Research: a development registry plus research modules compiled with NVRTC
    /// (`Runtime::load_research`, feature `research`), each labelled `research` in its
    /// manifest, its log lines and the `research_loads` counter. Never for production.
    pub fn research() -> Policy {
        Policy {
            allow_research: true,
            ..Policy::development()
        }
    }
    /// Whether this policy accepts a module of `manifest`'s channel: the registry's channel
    /// for registry modules; research modules only under [`Policy::research`] (never with
    /// the production channel).
    pub fn admit(&self, manifest: &Manifest) -> Result<()> {
        let name = match (self.channel, self.allow_research) {
            (Channel::Production, _) => "production",
            (_, true) => "research",
            _ => "development",
        };
        match manifest.channel {
            Channel::Research if self.allow_research && self.channel == Channel::Dev => Ok(()),
            Channel::Research => Err(Error::ResearchRefused {
                module: manifest.identity.module.to_string(),
                target: manifest.identity.sm.to_string(),
                origin: manifest.identity.toolkit.nvcc.clone(),
                policy: name.into(),
            }),
            c if c == self.channel => Ok(()),
            c => Err(Error::Channel {
                what: manifest.label(),
                required: self.channel.to_string(),
                found: c.to_string(),
            }),
        }
    }
    /// The same policy with the PTX compatibility mode allowed.
    pub fn with_ptx_compatibility(self) -> Policy {
        Policy {
            allow_ptx: true,
            ..self
        }
    }
    /// The same policy keeping its rollback state in `path`.
    pub fn with_state_file(self, path: impl Into<PathBuf>) -> Policy {
        Policy {
            rollback: RollbackState::File(path.into()),
            ..self
        }
    }
    /// The same policy keeping no rollback state (logged as a warning at every open).
    pub fn without_rollback_protection(self) -> Policy {
        Policy {
            rollback: RollbackState::Disabled,
            ..self
        }
    }
    /// The same policy with an offline grace period for expired timestamps.
    pub fn with_offline_grace(self, grace: Duration) -> Policy {
        Policy {
            offline_grace: grace,
            ..self
        }
    }
    /// The rollback-state file this policy uses for `registry`, if any.
    pub fn state_path(&self, registry: &Path) -> Result<Option<PathBuf>> {
        match &self.rollback {
            RollbackState::File(p) => Ok(Some(p.clone())),
            RollbackState::Disabled => Ok(None),
            RollbackState::PerUser => {
                TrustState::default_path(registry)
                    .map(Some)
                    .ok_or_else(|| Error::Missing {
                        what: "per-user folder for the rollback state (HOME is not set)".into(),
                        path: "$XDG_STATE_HOME or $HOME".into(),
                    })
            }
        }
    }
}

/// A snapshot of the runtime's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Manifests verified (signatures, index entry) at open.
    pub modules_verified: u64,
    /// Modules handed to the driver (in this process, by this runtime).
    pub modules_loaded: u64,
    /// Requests for a module that was already loaded in this process.
    pub cache_hits: u64,
    /// Blob bytes hashed during verification.
    pub bytes_hashed: u64,
    /// Time spent verifying (metadata, signatures, blob digests, ELF checks).
    pub verify_time: Duration,
    /// Time spent in the driver's load calls.
    pub driver_time: Duration,
    /// Modules loaded as PTX through the driver JIT (compatibility mode).
    pub compat_loads: u64,
    /// Signed documents whose signature threshold was checked at open (constant in the
    /// number of modules).
    pub signatures_checked: u64,
    /// Research modules (NVRTC builds) loaded ([`Policy::research`] only).
    pub research_loads: u64,
}

#[derive(Default)]
struct AtomicCounters {
    modules_verified: AtomicU64,
    modules_loaded: AtomicU64,
    cache_hits: AtomicU64,
    bytes_hashed: AtomicU64,
    verify_ns: AtomicU64,
    driver_ns: AtomicU64,
    compat_loads: AtomicU64,
    signatures_checked: AtomicU64,
    research_loads: AtomicU64,
}

/// One module slot of the process-wide cache, keyed by device and identity.
type SlotInner = Mutex<Option<Arc<LoadedModule>>>;
type Slot = Arc<SlotInner>;
type ProcessCache = Mutex<HashMap<CacheKey, Weak<SlotInner>>>;
type CacheKey = (usize, Digest, Digest);

/// The process-wide module cache: `(device ordinal, identity digest, blob digest)` → slot.
/// Runtimes hold the slots; the cache holds weak references, so a module is unloaded
/// when the last runtime (and kernel handle) using it is dropped.
fn process_cache() -> &'static ProcessCache {
    static CACHE: OnceLock<ProcessCache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The shared slot for `key`, created if no live runtime holds one.
fn shared_slot(key: CacheKey) -> Slot {
    let mut cache = process_cache().lock().expect("module cache lock");
    if let Some(slot) = cache.get(&key).and_then(Weak::upgrade) {
        return slot;
    }
    cache.retain(|_, w| w.strong_count() > 0);
    let slot = Slot::default();
    cache.insert(key, Arc::downgrade(&slot));
    slot
}

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
        let started = Instant::now();
        let registry = registry.as_ref();
        let (verified, opened) = std::thread::scope(|s| {
            let handles: Vec<_> = devices
                .iter()
                .map(|&d| s.spawn(move || Device::open(d)))
                .collect();
            let verified = verify_registry_metadata(registry, trust_root, &policy, Time::now());
            let opened: Vec<_> = handles
                .into_iter()
                .map(|h| h.join().expect("device thread"))
                .collect();
            (verified, opened)
        });
        // Registry and verification errors first, then driver errors.
        let (index, state_path, metadata_time) = verified?;
        let devices = opened
            .into_iter()
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let src = DirSource::new(registry);
        // Each device's pick, then steps 6-8 once for all of them (a blob two devices of one
        // SM share is read and hashed once), the driver floor of every device that picked a
        // module checked before any blob is read.
        let picks = devices
            .iter()
            .map(|d| {
                let info = d.info();
                pick_for_device(
                    &index.index().entries,
                    (info.cc_major, info.cc_minor),
                    &info.name,
                    &policy,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let drivers: Vec<DriverVersion> = devices
            .iter()
            .map(|d| DriverVersion::from_cuda(d.info().driver_version))
            .collect();
        let floor = |i: usize, m: &crate::verify::VerifiedManifest| -> Result<()> {
            for (pick, driver) in picks.iter().zip(&drivers) {
                if pick.contains(&i) {
                    check_driver_floor(m.manifest(), *driver)?;
                }
            }
            Ok(())
        };
        let union: Vec<usize> = picks.iter().flatten().copied().collect();
        let verified = index.complete(
            &src,
            Select::entries(union).before_blobs(&floor).keep_bytes(),
        )?;
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
    pub fn verified_bytes(&self, name: &str) -> Option<&Arc<[u8]>> {
        self.modules.get(name).map(|s| s.module.bytes())
    }

    /// The verified index version.
    pub fn index_version(&self) -> u64 {
        self.index_version
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> Counters {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counters {
            modules_verified: get(&c.modules_verified),
            modules_loaded: get(&c.modules_loaded),
            cache_hits: get(&c.cache_hits),
            bytes_hashed: get(&c.bytes_hashed),
            verify_time: Duration::from_nanos(get(&c.verify_ns)),
            driver_time: Duration::from_nanos(get(&c.driver_ns)),
            compat_loads: get(&c.compat_loads),
            signatures_checked: get(&c.signatures_checked),
            research_loads: get(&c.research_loads),
        }
    }
}

/// A device described without opening it: what [`Runtime::diagnose`] checks a registry
/// against (`cargo xtask doctor --device sm_89 --driver 12.4`, or a probed device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// How messages name it (`NVIDIA L40S`, or `sm_89 (--device)`).
    pub name: String,
    /// Compute capability (8, 9 for sm_89).
    pub cc: (u32, u32),
    /// The driver's CUDA version; `None`: not known, the driver floor is not checked.
    pub driver: Option<DriverVersion>,
}

impl DeviceSpec {
    /// An opened device as [`Runtime::open`] sees it: its name (as open's messages give
    /// it), compute capability and this host's driver (what `cargo xtask doctor` probes
    /// without `--device`).
    pub fn of_device(info: &DeviceInfo) -> DeviceSpec {
        DeviceSpec {
            name: info.name.clone(),
            cc: (info.cc_major, info.cc_minor),
            driver: Some(DriverVersion::from_cuda(info.driver_version)),
        }
    }
}

/// What [`Runtime::open`] would do with one module of a registry on a device: the manifest
/// of the blob it would load, or the error it would refuse the module with (the same error,
/// from the same selection and checks).
#[derive(Debug)]
pub struct Diagnosis {
    /// The module.
    pub module: String,
    /// Every (target, kind) the registry has for it.
    pub available: Vec<(Target, Kind)>,
    /// The verified manifest of the blob that would load, or why none would.
    pub outcome: std::result::Result<Manifest, Error>,
}

impl Runtime {
    /// For every module of `registry`, what [`Runtime::open`] under `policy` would load on
    /// `device`, or why it would load nothing: no binary for the device (no exact cubin, a
    /// family or arch-specific mismatch, PTX only and the policy refuses it), a driver below
    /// the module's floor (for PTX, an ISA newer than the driver), or a module whose
    /// manifest, promotion or blob fails verification. Needs no GPU and changes nothing (no
    /// rollback state is saved). A registry whose metadata fails (bad signature, expired or
    /// frozen timestamp, rollback, channel) is the `Err`, as `open` would fail as a whole.
    pub fn diagnose(
        registry: impl AsRef<Path>,
        trust_root: &[u8],
        policy: &Policy,
        device: &DeviceSpec,
    ) -> Result<Vec<Diagnosis>> {
        Runtime::diagnose_at(registry, trust_root, policy, device, Time::now())
    }

    /// [`Runtime::diagnose`] with the verifier's clock at `at` (expiry and the freeze bound
    /// are checked as of then): will the registry still load on the day of a deployment?
    /// A time before now would accept what has already expired: callers pass now or later
    /// (`cargo xtask doctor --at` refuses an earlier one, as `verify --at` does).
    pub fn diagnose_at(
        registry: impl AsRef<Path>,
        trust_root: &[u8],
        policy: &Policy,
        device: &DeviceSpec,
        at: Time,
    ) -> Result<Vec<Diagnosis>> {
        let registry = registry.as_ref();
        let (index, _state, _) = verify_registry_metadata(registry, trust_root, policy, at)?;
        let src = DirSource::new(registry);
        let entries = &index.index().entries;
        let mut out = Vec::new();
        for (name, idx) in modules_of(entries) {
            let available: Vec<(Target, Kind)> = idx
                .iter()
                .map(|i| (entries[*i].sm, entries[*i].kind))
                .collect();
            let outcome = select(name, &available, device.cc, &device.name, policy).and_then(|j| {
                let i = idx[j];
                let floor = |_: usize, m: &crate::verify::VerifiedManifest| match device.driver {
                    Some(driver) => check_driver_floor(m.manifest(), driver),
                    None => Ok(()),
                };
                let verified = index
                    .clone()
                    .complete(
                        &src,
                        Select::entries(vec![i]).before_blobs(&floor).keep_bytes(),
                    )
                    .map_err(|f| *f.error)?;
                Ok(verified
                    .module(i)
                    .expect("complete keeps the selected module")
                    .manifest()
                    .clone())
            });
            out.push(Diagnosis {
                module: name.to_string(),
                available,
                outcome,
            });
        }
        Ok(out)
    }
}

/// The index's entries grouped by module name (positions in `entries`), in name order.
fn modules_of(entries: &[IndexEntry]) -> BTreeMap<&str, Vec<usize>> {
    let mut by_module: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        by_module.entry(e.module.as_str()).or_default().push(i);
    }
    by_module
}

/// Steps 1-5 of verification for `registry` under `policy` with the clock at `now` (no
/// device needed): the verified metadata, the rollback-state file to save once the blobs
/// passed, and the time it took.
fn verify_registry_metadata(
    registry: &Path,
    trust_root: &[u8],
    policy: &Policy,
    now: Time,
) -> Result<(crate::verify::VerifiedIndex, Option<PathBuf>, Duration)> {
    let started = Instant::now();
    let src = DirSource::new(registry);
    let state_path = policy.state_path(registry)?;
    let seen = match &state_path {
        Some(p) => TrustState::load(p, policy.limits.state)?,
        None => {
            log::warn!(
                "cuda-aot: rollback protection is OFF for {} (Policy::without_rollback_protection): an older release would be accepted",
                src.describe()
            );
            TrustState::default()
        }
    }
    .max(policy.minimum_versions);
    let opts = Options {
        now,
        skew: policy.clock_skew,
        offline_grace: policy.offline_grace,
        limits: policy.limits,
        required_channel: Some(policy.channel),
        // A release awaiting its independent rebuild is never loadable.
        awaiting_rebuild: false,
    };
    log::info!(
        "cuda-aot: verifying {} (channel {}, clock skew allowance {}s, offline grace {}s)",
        src.describe(),
        policy.channel,
        policy.clock_skew.as_secs(),
        policy.offline_grace.as_secs()
    );
    let index = verify_metadata(&src, trust_root, seen, &opts)?;
    if let Some(old) = index.discarded_state() {
        log::warn!(
            "cuda-aot: the trust root rotated the publisher keys: discarded saved timestamp v{} and index v{}",
            old.timestamp,
            old.index
        );
    }
    if let Freshness::Grace { expired, deadline } = index.freshness() {
        log::warn!(
            "cuda-aot: {}: timestamp expired at {expired}; accepted in OFFLINE GRACE until {deadline} (last fresh verification {}). Sync the registry before then.",
            src.describe(),
            index
                .last_fresh()
                .map_or_else(|| "unknown".to_string(), |t| t.to_string())
        );
    }
    Ok((index, state_path, started.elapsed()))
}

/// The index entries to load on a device of compute capability `cc`: one per module (see
/// [`select`]).
fn pick_for_device(
    entries: &[IndexEntry],
    cc: (u32, u32),
    device: &str,
    policy: &Policy,
) -> Result<Vec<usize>> {
    modules_of(entries)
        .iter()
        .map(|(name, idx)| {
            let cands: Vec<(Target, Kind)> = idx
                .iter()
                .map(|i| (entries[*i].sm, entries[*i].kind))
                .collect();
            select(name, &cands, cc, device, policy).map(|j| idx[j])
        })
        .collect()
}

/// Picks the binary of `module` for a device of compute capability `cc`: a cubin for
/// exactly its SM (the `a` variant first when preferred); else a family cubin of the
/// device's family (`sm_100f` on a 10.3 device; the closest, i.e. highest, minor first);
/// else, only if the policy allows, the newest PTX the device can JIT. Never another SM's
/// plain cubin. Returns an index into `candidates`.
fn select(
    module: &str,
    candidates: &[(Target, Kind)],
    cc: (u32, u32),
    device: &str,
    policy: &Policy,
) -> Result<usize> {
    let (major, minor) = cc;
    let device_sm = Target::sm(major, minor);
    let ids = || candidates.iter().enumerate().map(|(i, (t, k))| (i, *t, *k));
    let exact: Vec<(usize, Target)> = ids()
        .filter(|(_, t, k)| *k == Kind::Cubin && t.is_exact_for(major, minor))
        .map(|(i, t, _)| (i, t))
        .collect();
    if let Some((i, _)) = exact
        .iter()
        .find(|(_, t)| t.arch_specific == policy.prefer_arch_specific)
        .or(exact.first())
    {
        return Ok(*i);
    }
    if let Some((i, _, _)) = ids()
        .filter(|(_, t, k)| *k == Kind::Cubin && t.is_family_for(major, minor))
        .max_by_key(|(_, t, _)| t.minor)
    {
        return Ok(i);
    }
    let ptx: Vec<(usize, Target)> = ids()
        .filter(|(_, t, k)| *k == Kind::Ptx && t.can_jit_on(major, minor))
        .map(|(i, t, _)| (i, t))
        .collect();
    if policy.allow_ptx
        && let Some((i, _)) = ptx.iter().max_by_key(|(_, t)| t.number())
    {
        return Ok(*i);
    }
    let mut available: Vec<String> = candidates.iter().map(|(t, _)| t.to_string()).collect();
    available.sort();
    Err(Error::NoExactTarget {
        module: module.to_string(),
        device_sm: device_sm.to_string(),
        device: device.to_string(),
        available: available.join(" "),
        ptx_available: !ptx.is_empty(),
    })
}

/// Refuses a module whose driver floor is above the installed driver's CUDA version. For
/// PTX the floor is its toolkit's major.minor, so this is also where PTX of an ISA newer
/// than the driver's JIT is refused; the error names the toolkit whose PTX ISA it is.
fn check_driver_floor(man: &Manifest, driver: DriverVersion) -> Result<()> {
    let id = &man.identity;
    if id.driver_floor > driver {
        return Err(Error::DriverTooOld {
            what: man.label(),
            need: id.driver_floor.to_string(),
            have: driver.to_string(),
            ptx_isa_of: (id.kind == Kind::Ptx).then(|| id.toolkit.nvcc.clone()),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::tests::sample_identity;

    #[test]
    fn a_module_needing_a_newer_driver_is_refused_before_loading() {
        let mut man = m("sm_90", Kind::Cubin);
        man.identity.driver_floor = "13.1".parse().unwrap();
        let err = check_driver_floor(&man, DriverVersion::from_cuda(13000)).unwrap_err();
        assert!(
            matches!(&err, Error::DriverTooOld { need, have, .. } if need == "13.1" && have == "13.0"),
            "{err}"
        );
        assert!(err.fix().contains("13.1"), "{}", err.fix());
        assert!(check_driver_floor(&man, DriverVersion::from_cuda(13010)).is_ok());
        assert!(check_driver_floor(&man, DriverVersion::from_cuda(12080)).is_err());
        assert_eq!(
            err.to_string(),
            "ntt sm_90: needs CUDA driver 13.1 or newer; this driver is 13.0"
        );
    }

    /// Issue 22: PTX whose ISA is newer than the driver's JIT is refused at the driver floor
    /// (the toolkit's major.minor), the one check `open` and `diagnose` share, naming the
    /// toolkit whose PTX ISA it is and the driver.
    #[test]
    fn issue_22_ptx_of_an_isa_newer_than_the_driver_is_refused_naming_the_isa() {
        let mut man = m("compute_80", Kind::Ptx);
        man.identity.driver_floor = "13.0".parse().unwrap();
        let err = check_driver_floor(&man, DriverVersion::from_cuda(12040)).unwrap_err();
        assert!(
            matches!(&err, Error::DriverTooOld { need, have, ptx_isa_of: Some(nvcc), .. }
                if need == "13.0" && have == "12.4" && nvcc == "13.0.88"),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "ntt compute_80 (ptx, compatibility mode): needs CUDA driver 13.0 or newer to JIT its PTX (the PTX ISA of nvcc 13.0.88); this driver is 12.4"
        );
        assert!(err.fix().contains("CUDA 13.0 or newer"), "{}", err.fix());
        assert!(check_driver_floor(&man, DriverVersion::from_cuda(13000)).is_ok());
    }

    fn m(sm: &str, kind: Kind) -> Manifest {
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

    /// Issue 7: research modules (NVRTC builds, channel research) are refused by the
    /// production and development policies, before any driver call; only the research
    /// policy admits them, and never a production-channel one.
    #[test]
    fn issue_7_a_research_channel_module_under_the_production_policy_is_refused() {
        let mut research = m("sm_90", Kind::Cubin);
        research.channel = Channel::Research;
        research.identity.toolkit.nvcc = "NVRTC 13.0".into();
        for (policy, name) in [
            (Policy::production(), "production"),
            (Policy::development(), "development"),
            (
                Policy {
                    allow_research: true,
                    ..Policy::production()
                },
                "production",
            ),
        ] {
            let err = policy.admit(&research).unwrap_err();
            assert!(
                matches!(&err, Error::ResearchRefused { module, target, origin, policy }
                    if module == "ntt" && target == "sm_90" && origin == "NVRTC 13.0" && policy == name),
                "{err}"
            );
            assert!(err.to_string().contains("channel research"), "{err}");
            assert!(
                err.fix().contains("cargo xtask promote ntt"),
                "{}",
                err.fix()
            );
        }
        Policy::research().admit(&research).unwrap();
        // Registry modules: the policy's own channel only.
        let dev = m("sm_90", Kind::Cubin);
        Policy::development().admit(&dev).unwrap();
        Policy::research().admit(&dev).unwrap();
        assert!(matches!(
            Policy::production().admit(&dev).unwrap_err(),
            Error::Channel { .. }
        ));
        assert_eq!(Channel::Research.to_string(), "research");
    }

    fn pick(cands: &[Manifest], cc: (u32, u32), policy: &Policy) -> Result<String> {
        let refs: Vec<(Target, Kind)> = cands
            .iter()
            .map(|m| (m.identity.sm, m.identity.kind))
            .collect();
        select("ntt", &refs, cc, "test GPU", policy).map(|i| cands[i].label())
    }

    #[test]
    fn selection_takes_only_the_exact_sm() {
        let set = [
            m("sm_80", Kind::Cubin),
            m("sm_90", Kind::Cubin),
            m("sm_90a", Kind::Cubin),
            m("sm_120", Kind::Cubin),
        ];
        let p = Policy::development();
        assert_eq!(pick(&set, (9, 0), &p).unwrap(), "ntt sm_90a");
        assert_eq!(
            pick(
                &set,
                (9, 0),
                &Policy {
                    prefer_arch_specific: false,
                    ..p.clone()
                }
            )
            .unwrap(),
            "ntt sm_90"
        );
        assert_eq!(pick(&set, (8, 0), &p).unwrap(), "ntt sm_80");
        // An sm_86 device gets no sm_80 cubin, though it would run: exact SM only.
        let err = pick(&set, (8, 6), &p).unwrap_err();
        assert!(
            matches!(&err, Error::NoExactTarget { device_sm, available, ptx_available: false, .. } if device_sm == "sm_86" && available == "sm_120 sm_80 sm_90 sm_90a"),
            "{err}"
        );
    }

    #[test]
    fn an_arch_specific_cubin_is_exact_only_on_its_own_device() {
        let set = [m("sm_90a", Kind::Cubin)];
        assert_eq!(
            pick(&set, (9, 0), &Policy::development()).unwrap(),
            "ntt sm_90a"
        );
        assert!(pick(&set, (10, 0), &Policy::development()).is_err());
    }

    #[test]
    fn family_cubins_come_after_an_exact_cubin_and_only_in_their_family() {
        let p = Policy::development();
        let set = [
            m("sm_100", Kind::Cubin),
            m("sm_100f", Kind::Cubin),
            m("sm_103f", Kind::Cubin),
            m("sm_120f", Kind::Cubin),
        ];
        // Exact first: a 10.0 device takes sm_100, not sm_100f.
        assert_eq!(pick(&set, (10, 0), &p).unwrap(), "ntt sm_100");
        // A 10.3 device has no exact cubin: the closest family build, sm_103f.
        assert_eq!(pick(&set, (10, 3), &p).unwrap(), "ntt sm_103f");
        assert_eq!(pick(&set[..2], (10, 3), &p).unwrap(), "ntt sm_100f");
        // sm_120f on 12.0 and 12.1; never on another family.
        assert_eq!(pick(&set, (12, 1), &p).unwrap(), "ntt sm_120f");
        assert!(pick(&set, (9, 0), &p).is_err());
        assert!(pick(&set[1..3], (12, 0), &p).is_err());
        // sm_103f does not run on 10.0.
        let err = pick(&set[2..3], (10, 0), &p).unwrap_err();
        assert!(
            matches!(&err, Error::NoExactTarget { available, .. } if available == "sm_103f"),
            "{err}"
        );
    }

    #[test]
    fn ptx_only_with_the_compatibility_policy() {
        let set = [
            m("sm_80", Kind::Cubin),
            m("compute_80", Kind::Ptx),
            m("compute_90", Kind::Ptx),
        ];
        let err = pick(&set, (9, 0), &Policy::development()).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::NoExactTarget {
                    ptx_available: true,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("only in compatibility mode")
                && err.fix().contains("compatibility"),
            "{err}"
        );
        let p = Policy::development().with_ptx_compatibility();
        assert_eq!(
            pick(&set, (9, 0), &p).unwrap(),
            "ntt compute_90 (ptx, compatibility mode)"
        );
        // A device older than every PTX target cannot JIT it.
        assert!(pick(&[m("compute_90", Kind::Ptx)], (8, 0), &p).is_err());
        // An exact cubin always wins over PTX.
        assert_eq!(pick(&set, (8, 0), &p).unwrap(), "ntt sm_80");
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
