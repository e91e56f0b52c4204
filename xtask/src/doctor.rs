//! `cargo xtask doctor`: which blob of every module would load on a device (described, or
//! probed on a GPU host), and why none would: the runtime's own selection and checks
//! (`Runtime::diagnose`), never a second copy of the rules.

use cuda_aot::{DriverVersion, Target};

use crate::args::{FormatArgs, RegistryArgs, parse_later_time};

#[cfg(feature = "driver")]
mod run;

/// Say, for every module of a registry, which blob would load on a device, or why none.
///
/// Offline: `--device sm_89 [--driver 12.4]` describes the device; without `--device` the
/// real devices and driver of this host are probed. Each module gets the blob
/// `Runtime::open` would load (target, kind, driver floor) or the reason it would refuse
/// the module: no exact target (with the targets that exist), driver below the floor, PTX
/// newer than the driver, family or arch-specific mismatch, PTX not allowed by the policy,
/// no promotion under production, a manifest or blob that fails verification. A registry
/// whose metadata fails (signature, a timestamp expired now or as of `--at`, or frozen:
/// expiring past the trust root's freeze bound, rollback, channel) is refused as a whole,
/// as `open` would. Nothing is changed: no rollback state is saved.
#[derive(clap::Args)]
#[command(after_long_help = "\
The reasons are the runtime's own: doctor calls Runtime::diagnose, which runs the selection
and the checks of Runtime::open for one module at a time, without a driver. Exit status 0
when every module would load, 1 when any would not (each with its Fix: line) or the registry
is refused.

Examples:
  cargo xtask doctor --device sm_89 --driver 12.4                 an L40S with a 12.4 driver
  cargo xtask doctor --device sm_90 --policy production --registry R --trust keys/root.json
  cargo xtask doctor --device sm_90 --at 2027-01-01T00:00:00Z     still loadable on that day?
  cargo xtask doctor --json                                       on a GPU host: its devices")]
pub struct Args {
    #[command(flatten)]
    at: RegistryArgs,
    /// The device, as its exact SM (`sm_89`, `sm_90`, `sm_100`); probed when left out.
    #[arg(long, value_name = "SM")]
    device: Option<Target>,
    /// The driver's CUDA version (`12.4`, `13.0`); with --device: not checked when left out.
    #[arg(long, value_name = "X.Y", requires = "device")]
    driver: Option<DriverVersion>,
    /// The policy the prover opens with.
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = PolicyArg::Development)]
    policy: PolicyArg,
    /// Allow PTX (the labelled compatibility mode), as `Policy::with_ptx_compatibility`.
    #[arg(long)]
    allow_ptx: bool,
    /// Check expiry as of this later time (RFC 3339, e.g. 2027-01-01T00:00:00Z): will the
    /// registry still load on the day of a deployment? A time before now is refused, as
    /// by `verify --at`.
    #[arg(long = "at", value_name = "TIME", value_parser = parse_later_time)]
    at_time: Option<cuda_aot::metadata::Time>,
    #[command(flatten)]
    pub(crate) format: FormatArgs,
}

/// `Policy::development()` or `Policy::production()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PolicyArg {
    /// Dev-signed registries (`cargo xtask release` on a fresh clone).
    Development,
    /// Production-signed registries, promoted modules only.
    Production,
}

#[cfg(not(feature = "driver"))]
impl Args {
    /// Runs the task: under a build with the runtime (`Runtime::diagnose` is the runtime's).
    pub fn run(self) -> anyhow::Result<()> {
        crate::features::rerun("doctor", "driver")
    }
}
