//! `cargo xtask verify`: verify a registry offline and print what it holds.

use anyhow::Result;
use cuda_aot::source::DirSource;
use cuda_aot::state::TrustState;
use cuda_aot::verify::{Freshness, Options, VerifiedIndex, verify_index};
use cuda_aot::{Channel, Limits};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::build::ChannelArg;
use crate::{paths, publish};

/// Verify a registry offline against a trust root and print what it holds.
///
/// Checks it the way a prover does at startup: trust root and its rotation chain, timestamp (expiry, no rollback), index, every
/// manifest (builder signatures, listed digest), every blob (size, blake3, ELF SM).
///
/// Prints one row per module and target and exits 0, or names the first failure (file,
/// module/SM/key, why, Fix:) and exits 1. The versions seen are remembered in a state
/// file, so a later replay of older metadata is refused.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    at: publish::RegistryArgs,
    /// Rollback-protection state file (default: one per registry under .cuda-aot/state/).
    #[arg(long)]
    state: Option<PathBuf>,
    /// Accept documents up to this many seconds past their expiry (clock skew). Logged.
    #[arg(long, default_value_t = 0)]
    clock_skew_secs: u64,
    /// Require this channel (production refuses dev-signed registries).
    #[arg(long, value_enum)]
    channel: Option<ChannelArg>,
    /// Accept an expired timestamp up to this many days after the last fresh verification
    /// recorded in the state file (offline grace, as a prover policy may allow). Logged.
    #[arg(long, default_value_t = 0)]
    offline_grace_days: u64,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let trust = self.at.trust_file()?;
        let state = self
            .state
            .unwrap_or_else(|| default_state_path(&self.at.registry));
        let opts = Options {
            skew: Duration::from_secs(self.clock_skew_secs),
            offline_grace: Duration::from_secs(self.offline_grace_days.saturating_mul(86_400)),
            required_channel: self.channel.map(Channel::from),
            ..Options::default()
        };
        let v = verify_registry(&self.at.registry, &trust, &state, &opts)?;
        print!("{}", render_table(&v));
        Ok(())
    }
}

/// A verified registry: metadata plus, per module, the signer and size.
pub struct Verified {
    /// The verified metadata.
    pub index: VerifiedIndex,
    /// Until when it stays loadable if nothing is republished.
    pub loadable_until: cuda_aot::metadata::Time,
}

/// The default state file for a registry: `.cuda-aot/state/<blake3 of its path>.json`.
pub fn default_state_path(registry: &Path) -> PathBuf {
    let abs = std::fs::canonicalize(registry).unwrap_or_else(|_| registry.to_path_buf());
    let key = blake3::hash(abs.to_string_lossy().as_bytes()).to_hex();
    paths::work_dir()
        .join("state")
        .join(format!("{}.json", &key[..16]))
}

/// Verifies everything, blobs included, and saves the state only if all passed.
pub fn verify_registry(
    registry: &Path,
    trust: &Path,
    state_path: &Path,
    opts: &Options,
) -> Result<Verified> {
    let limits = Limits::default();
    let anchor = publish::read_trust_root(trust)?;
    let seen = TrustState::load(state_path, limits.state)?;
    eprintln!(
        "verifying {} against {} (clock skew allowance {}s)",
        registry.display(),
        trust.display(),
        opts.skew.as_secs()
    );
    let src = DirSource::new(registry);
    let index = verify_index(&src, &anchor, seen, opts)?;
    for m in index.manifests() {
        index.load_module(&src, m, &limits)?;
    }
    index.state().save(state_path)?;
    if let Some(old) = index.discarded_state() {
        eprintln!(
            "note: the trust root rotated the publisher keys: discarded the saved timestamp v{} and index v{}",
            old.timestamp, old.index
        );
    }
    if let Freshness::Grace { expired, deadline } = index.freshness() {
        eprintln!(
            "warning: timestamp expired at {expired}; accepted in OFFLINE GRACE until {deadline}. Refresh the registry (cargo xtask publish --refresh-timestamp) or sync it before then."
        );
    }
    Ok(Verified {
        loadable_until: index.loadable_until(opts.offline_grace),
        index,
    })
}

/// The table `verify` prints: module × target, kind, size, digest prefix, signer.
pub fn render_table(v: &Verified) -> String {
    let idx = v.index.index();
    let root = v.index.root().root();
    let mut s = format!(
        "registry OK: index v{} (timestamp v{}, expires {}), trust root v{} [{}], {} module(s), {} signature check(s)\n",
        idx.version,
        v.index.timestamp().version,
        v.index.timestamp().expires,
        root.version,
        root.channel,
        idx.entries.len(),
        v.index.signature_checks()
    );
    s += &format!(
        "loadable until {} (timestamp expires {}, index {}, trust root {}); refresh with cargo xtask publish --refresh-timestamp\n",
        v.loadable_until,
        v.index.timestamp().expires,
        idx.expires,
        root.expires
    );
    s += &format!(
        "{:<12} {:<11} {:<6} {:>9}  {:<14} {}\n",
        "MODULE", "TARGET", "KIND", "SIZE", "BLAKE3", "SIGNED BY"
    );
    for m in v.index.manifests() {
        let man = m.manifest();
        let signers: Vec<String> = m
            .signers()
            .iter()
            .map(|k| format!("builder {}", k.short()))
            .chain(
                m.promoted_by()
                    .iter()
                    .map(|k| format!("reviewer {}", k.short())),
            )
            .collect();
        s += &format!(
            "{:<12} {:<11} {:<6} {:>9}  {:<14} {}{}{}\n",
            man.identity.module.as_str(),
            man.identity.sm.to_string(),
            man.identity.kind.to_string(),
            man.size,
            man.module_digest.short(),
            signers.join(", "),
            if man.channel == Channel::Dev {
                " [dev]"
            } else {
                ""
            },
            if man.identity.kind == cuda_aot::Kind::Ptx {
                " [compatibility mode: driver JIT]"
            } else {
                ""
            }
        );
    }
    s
}
