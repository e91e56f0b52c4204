//! `cargo xtask verify`: verify a registry offline and print what it holds.

use anyhow::Result;
use cuda_aot::Channel;
use cuda_aot::source::{DirSource, layout};
use cuda_aot::state::TrustState;
use cuda_aot::verify::{Freshness, Options, Select, VerifiedIndex, verify_metadata};
use std::path::Path;
use std::time::Duration;

use crate::advice::Subject;
use crate::args::{CheckArgs, FormatArgs, RegistryArgs, parse_later_time};
use crate::{anchor, message};

/// Verify a registry offline against a trust root and print what it holds.
///
/// Checks it the way a prover does at startup: trust root and its rotation chain, timestamp (expiry, no rollback), index, every
/// manifest (builder signatures, listed digest), every blob (size, blake3, ELF SM). Then
/// every file a prover never reads: the registry's root chain from version 1, each build
/// statement subject's sha256, and each rebuild source (size, blake3, no links).
///
/// Prints one row per module and target and exits 0, or names the first failure (file,
/// module/SM/key, why, Fix:) and exits 1. The versions seen are remembered in a state
/// file, so a later replay of older metadata is refused.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    at: RegistryArgs,
    #[command(flatten)]
    check: CheckArgs,
    /// Verify as a production prover does (`--channel production`): production trust root,
    /// every module promoted. A refusal lists every manifest that lacks a promotion.
    #[arg(long, conflicts_with = "channel")]
    production: bool,
    /// Accept an expired timestamp up to this many days after the last fresh verification
    /// recorded in the state file (offline grace, as a prover policy may allow). Logged.
    #[arg(long, value_name = "N", default_value_t = 0)]
    offline_grace_days: u64,
    /// Check expiry as of this later time (RFC 3339, e.g. 2027-01-01T00:00:00Z): will the
    /// registry still verify on the day of a deployment? Saves no state. A time before
    /// now is refused, as it would accept expired documents.
    #[arg(long = "at", value_name = "TIME", value_parser = parse_later_time)]
    at_time: Option<cuda_aot::metadata::Time>,
    #[command(flatten)]
    pub(crate) format: FormatArgs,
}

/// Whether `verify_registry` records the versions it saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveState {
    /// Save them when every step passed (a real check, now).
    Yes,
    /// A what-if check (`--at`): the state is read for the rollback floor, never written.
    No,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let trust = self.at.trust_file()?;
        let registry = self.at.registry();
        let state = self.check.state_path(&registry)?;
        let base = self.check.options();
        let opts = Options {
            offline_grace: Duration::from_secs(self.offline_grace_days.saturating_mul(86_400)),
            required_channel: match self.production {
                true => Some(Channel::Production),
                false => base.required_channel,
            },
            now: self.at_time.unwrap_or(base.now),
            ..base
        };
        let save = match self.at_time {
            Some(_) => SaveState::No,
            None => SaveState::Yes,
        };
        let v = match verify_registry(&registry, &trust, &state, &opts, save) {
            Ok(v) => v,
            Err(e) if opts.required_channel == Some(Channel::Production) => {
                return Err(with_promotion_gaps(e, &registry, &trust));
            }
            Err(e) => return Err(e),
        };
        if message::json() {
            message::emit("verify-finished", json_fields(&v, &registry));
        } else {
            print!("{}", render_table(&v));
        }
        Ok(())
    }
}

/// A production refusal, with every manifest of the registry that lacks a promotion named
/// (module, target, manifest digest, what is missing), found by verifying the registry
/// again without the channel requirement (and without saving any state).
fn with_promotion_gaps(e: anyhow::Error, registry: &Path, trust: &Path) -> anyhow::Error {
    let gaps = (|| -> Result<Vec<cuda_aot::Error>> {
        let bytes = anchor::read_bytes(trust)?;
        let src = DirSource::new(registry);
        let opts = Options::ignoring_expiry();
        let v = cuda_aot::verify::verify_metadata(&src, &bytes, TrustState::default(), &opts)?;
        Ok(v.promotion_gaps(&src)?)
    })();
    let gaps = match gaps {
        Ok(g) if !g.is_empty() => g,
        _ => return e,
    };
    let mut modules: Vec<String> = Vec::new();
    let mut text = format!(
        "{}\n  and {} manifest(s) lack the promotion a production verifier requires:",
        crate::advice::headline(&e),
        gaps.len()
    );
    for g in &gaps {
        if let cuda_aot::Error::NotPromoted {
            module,
            target,
            manifest,
            reason,
        } = g
        {
            text += &format!("\n    {module:<12} {target:<11} manifest {manifest}: {reason}");
            if !modules.contains(module) {
                modules.push(module.clone());
            }
        }
    }
    let fix = format!(
        "promote each module with a parity run and reviewer signatures ({}; docs/review.md), then publish it with its promotion to a registry of a production trust root",
        modules
            .iter()
            .map(|m| format!("cargo xtask promote {m}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    crate::advice::fail(text, fix)
}

/// A verified registry: metadata plus, per module, the signer and size.
pub struct Verified {
    /// The verified metadata.
    pub index: VerifiedIndex,
    /// Until when it stays loadable if nothing is republished.
    pub loadable_until: cuda_aot::metadata::Time,
}

/// Verifies everything, blobs included, and saves the state only if all passed.
pub fn verify_registry(
    registry: &Path,
    trust: &Path,
    state_path: &Path,
    opts: &Options,
    save: SaveState,
) -> Result<Verified> {
    // The anchor first, on its own: a bad trust root file gets advice about trust roots.
    let (anchor, _) = anchor::read(trust)?;
    let seen = TrustState::load(state_path, opts.limits.state)?;
    eprintln!(
        "verifying {} against {} (clock skew allowance {}s)",
        registry.display(),
        trust.display(),
        opts.skew.as_secs()
    );
    let src = DirSource::new(registry);
    // Steps 1-8: metadata, every manifest, every blob and its content, on several threads
    // when the bundle is large; the verified bytes are not kept (a prover loads them, this
    // command only checks). The first failure in index order names its module and file.
    let verified = verify_metadata(&src, &anchor, seen, opts)?
        .complete(&src, Select::all().parallel())
        .map_err(|f| {
            let subject = Subject {
                module: f.entry.as_ref().map(|e| e.module.to_string()),
                target: f.entry.as_ref().map(|e| e.sm.to_string()),
                file: f.blob.map(|d| registry.join(layout::blob(&d))).or_else(|| {
                    f.entry
                        .as_ref()
                        .map(|e| registry.join(layout::manifest(&e.manifest)))
                }),
            };
            match f.entry {
                Some(_) => subject.attach((*f.error).into()),
                None => anyhow::Error::from(*f.error),
            }
        })?;
    // What only auditors read: every subject's sha256 and every rebuild source.
    verified.metadata().audit(&src)?;
    if save == SaveState::Yes {
        verified.state().save(state_path)?;
    }
    let index = verified.metadata().clone();
    if let Some(old) = index.discarded_state() {
        eprintln!(
            "note: the trust root rotated the publisher keys: discarded the saved timestamp v{} and index v{}",
            old.timestamp, old.index
        );
    }
    if let Freshness::Grace { expired, deadline } = index.freshness() {
        eprintln!(
            "warning: timestamp expired at {expired}; accepted in OFFLINE GRACE until {deadline}. Refresh the registry ({} publish --refresh-timestamp) or sync it before then.",
            crate::advice::tool()
        );
    }
    Ok(Verified {
        loadable_until: index.loadable_until(opts.offline_grace),
        index,
    })
}

/// The fields of the `verify-finished` message: the versions, how long the registry stays
/// loadable, and one entry per module and target with its digests and signers.
pub fn json_fields(v: &Verified, registry: &Path) -> serde_json::Value {
    let idx = v.index.index();
    let root = v.index.root().root();
    let modules: Vec<serde_json::Value> = v
        .index
        .manifests()
        .iter()
        .map(|m| {
            let man = m.manifest();
            serde_json::json!({
                "module": man.identity.module,
                "target": man.identity.sm,
                "kind": man.identity.kind,
                "channel": man.channel.to_string(),
                "size": man.size,
                "module_digest": man.module_digest,
                "identity_digest": man.identity.digest(),
                "blob": registry.join(layout::blob(&man.module_digest)),
                "builders": m.signers().iter().map(|k| k.to_string()).collect::<Vec<_>>(),
                "reviewers": m.promoted_by().iter().map(|k| k.to_string()).collect::<Vec<_>>(),
                "team": m.team(),
            })
        })
        .collect();
    serde_json::json!({
        "registry": registry,
        "ok": true,
        "index_version": idx.version,
        "timestamp_version": v.index.timestamp().version,
        "timestamp_expires": v.index.timestamp().expires.to_string(),
        "index_expires": idx.expires.to_string(),
        "root_version": root.version,
        "root_expires": root.expires.to_string(),
        "channel": root.channel.to_string(),
        "loadable_until": v.loadable_until.to_string(),
        "delegated_expires": v.index.delegated_expiry().map(|t| t.to_string()),
        "signature_checks": v.index.signature_checks(),
        "modules": modules,
    })
}

/// The table `verify` prints: module × target, kind, size, digest prefix, signer; under
/// each row its kernels with their signed launch ABI (parameter layout, registers, static
/// shared and local memory, launch bound; `-` where the blob does not say, e.g. for PTX)
/// and its signed device globals (size, memory space, initialised).
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
    // Under delegations the teams' metadata expires too, and --refresh-timestamp does not
    // re-sign it: the line says which re-signs what.
    let delegated = match v.index.delegated_expiry() {
        Some(t) => format!(
            ", delegated metadata {t}; a team's metadata is re-signed by its next {tool} publish --team, the delegations by {tool} delegations publish",
            tool = crate::advice::tool()
        ),
        None => String::new(),
    };
    s += &format!(
        "loadable until {} (timestamp expires {}, index {}, trust root {}); refresh with {} publish --refresh-timestamp{delegated}\n",
        v.loadable_until,
        v.index.timestamp().expires,
        idx.expires,
        root.expires,
        crate::advice::tool()
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
            .chain(m.team().map(|t| format!("team {}", t.escape_debug())))
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
        for f in &man.functions {
            s += &format!(
                "    kernel {}
",
                render_abi(f)
            );
        }
        match &man.globals {
            Some(globals) => {
                for g in globals {
                    s += &format!(
                        "    global {}  {} B  {}{}\n",
                        g.name,
                        g.size,
                        g.space,
                        if g.initialised { "  initialised" } else { "" }
                    );
                }
            }
            None => {
                s += "    globals not signed (manifest v1: rebuild and republish to sign them)\n"
            }
        }
    }
    s
}

/// One kernel's signed launch ABI: name, parameter layout, resources.
fn render_abi(f: &cuda_aot::Function) -> String {
    let a = &f.abi;
    let opt = |v: Option<u32>, unit: &str| v.map_or("-".to_string(), |v| format!("{v}{unit}"));
    format!(
        "{}  params [{}] {} B  regs {}  shared {}  local {}  stack {}  max threads {}",
        f.display_name(),
        a.describe_params(),
        a.param_bytes,
        opt(a.registers, ""),
        opt(a.shared_bytes, " B"),
        opt(a.local_bytes, " B"),
        opt(a.stack_bytes, " B"),
        opt(a.max_threads, "")
    )
}
