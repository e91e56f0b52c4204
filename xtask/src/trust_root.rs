//! `cargo xtask trust-root`: write a signed trust root (first version or a rotation).

use anyhow::{Context, Result, bail};
use cuda_aot::metadata::{MaxExpiry, Role, Roles, Root, Time};
use cuda_aot::{Channel, PublicKey};
use std::path::PathBuf;
use std::time::Duration;

use crate::args::ChannelArg;
use crate::devkeys;

/// Write a signed trust root (version 1, or a rotation N -> N+1).
///
/// A trust root names the role keys, thresholds, version and expiry that clients
/// trust. Version 1 is signed by a threshold of its own root keys; version N+1 (rotation,
/// with --previous) must be signed by a threshold of the previous root's root keys AND of
/// its own, so pass every needed private key with --sign-with. The result is checked the
/// way a client checks it before it is written.
///
/// Example: cargo xtask trust-root --out keys/root.json --channel production
///   --root ed25519:… --builder ed25519:… --reviewer ed25519:… --publisher ed25519:…
///   --sign-with ~/keys/root-1.key
#[derive(clap::Args)]
pub struct Args {
    /// Where to write the signed root (must not exist).
    #[arg(value_name = "FILE", long)]
    out: PathBuf,
    /// The root this one replaces (rotation): the new version is its version + 1.
    #[arg(value_name = "FILE", long)]
    previous: Option<PathBuf>,
    /// Root role public keys (repeat for several).
    #[arg(value_name = "KEY", long = "root", required = true)]
    root_keys: Vec<PublicKey>,
    /// Builder role public keys.
    #[arg(value_name = "KEY", long = "builder", required = true)]
    builder_keys: Vec<PublicKey>,
    /// Reviewer role public keys (must differ from builder keys).
    #[arg(value_name = "KEY", long = "reviewer", required = true)]
    reviewer_keys: Vec<PublicKey>,
    /// Publisher role public keys.
    #[arg(value_name = "KEY", long = "publisher", required = true)]
    publisher_keys: Vec<PublicKey>,
    /// Delegations role public keys (issue 46): this role signs which module-name patterns
    /// each team's own keys own (`cargo xtask delegations`), and re-signs them when a team
    /// rotates or revokes its keys, without a new trust root. Omit it to delegate nothing.
    #[arg(value_name = "KEY", long = "delegations")]
    delegations_keys: Vec<PublicKey>,
    /// Signatures needed from delegations keys.
    #[arg(value_name = "N", long, default_value_t = 1)]
    delegations_threshold: u32,
    /// Signatures needed from root keys.
    #[arg(value_name = "N", long, default_value_t = 1)]
    root_threshold: u32,
    /// Signatures needed from builder keys.
    #[arg(value_name = "N", long, default_value_t = 1)]
    builder_threshold: u32,
    /// Signatures needed from reviewer keys.
    #[arg(value_name = "N", long, default_value_t = 1)]
    reviewer_threshold: u32,
    /// Signatures needed from publisher keys.
    #[arg(value_name = "N", long, default_value_t = 1)]
    publisher_threshold: u32,
    /// Days until the root expires.
    #[arg(value_name = "N", long, default_value_t = 365)]
    expires_days: u64,
    /// dev or production.
    #[arg(value_name = "CHANNEL", long, value_enum)]
    channel: ChannelArg,
    /// Freeze bound: the longest a timestamp may be valid (clients refuse one expiring later).
    #[arg(value_name = "N", long, default_value_t = MaxExpiry::DEFAULT.timestamp_days)]
    max_timestamp_days: u32,
    /// Freeze bound: the longest an index may be valid.
    #[arg(value_name = "N", long, default_value_t = MaxExpiry::DEFAULT.index_days)]
    max_index_days: u32,
    /// Private root key files to sign with (repeat; old and new keys for a rotation).
    #[arg(value_name = "FILE", long = "sign-with", required = true)]
    sign_with: Vec<PathBuf>,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let limits = crate::limits::limits();
        let previous = match &self.previous {
            Some(p) => Some(cuda_aot::trust::verify_anchor(
                &cuda_aot::fs::read_capped(p, limits.root, "previous trust root")?,
                &limits,
                &p.display().to_string(),
            )?),
            None => None,
        };
        let version = match &previous {
            None => 1,
            Some(p) => p
                .root()
                .version
                .checked_add(1)
                .context("the previous root's version cannot be incremented")?,
        };
        let root = Root {
            schema: Root::SCHEMA.into(),
            version,
            expires: Time::now().plus(Duration::from_secs(
                self.expires_days.saturating_mul(86_400),
            )),
            channel: Channel::from(self.channel),
            max_expiry: MaxExpiry {
                timestamp_days: self.max_timestamp_days,
                index_days: self.max_index_days,
            },
            delegations: (!self.delegations_keys.is_empty()).then(|| Role {
                keys: self.delegations_keys.clone(),
                threshold: self.delegations_threshold,
            }),
            roles: Roles {
                root: Role {
                    keys: self.root_keys,
                    threshold: self.root_threshold,
                },
                builder: Role {
                    keys: self.builder_keys,
                    threshold: self.builder_threshold,
                },
                reviewer: Role {
                    keys: self.reviewer_keys,
                    threshold: self.reviewer_threshold,
                },
                publisher: Role {
                    keys: self.publisher_keys,
                    threshold: self.publisher_threshold,
                },
            },
        };
        let keys = self
            .sign_with
            .iter()
            .map(|p| devkeys::read_key(p))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<_> = keys.iter().collect();
        // Checked exactly as a client will, before anything is written.
        let file = cuda_aot::trust::sign_root(&root, &refs, previous.as_ref(), &limits)?;
        match cuda_aot::fs::create_new_atomic(&self.out, &file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
                "{} exists; refusing to overwrite a trust root",
                self.out.display()
            ),
            Err(e) => {
                return Err(e).with_context(|| format!("writing {}", self.out.display()));
            }
        }
        eprintln!(
            "wrote trust root v{version} ({}) to {}",
            root.channel,
            self.out.display()
        );
        Ok(())
    }
}
