//! `cargo xtask delegations`: sign the delegations (which module-name patterns each team's
//! own keys own, issue 46) and put them in force in a registry.

use anyhow::{Context, Result};
use cuda_aot::delegation::{TeamMetadata, check_list, role_file};
use cuda_aot::metadata::Time;
use cuda_aot::verify::DELEGATIONS;
use cuda_aot_registry::{DirRegistry, PublishOptions};
use std::path::PathBuf;
use std::time::Duration;

use crate::advice::fail;
use crate::args::RegistryArgs;
use crate::endpoint::Target;
use crate::{anchor, devkeys, publish};

/// Delegate module-name patterns to teams' own keys (TUF's delegated targets).
///
/// A trust root with a delegations role (`cargo xtask trust-root --delegations KEY`) lets
/// that role hand patterns such as `risc0_*` to a team's publisher, builder and reviewer
/// keys. A module a pattern names is then accepted only when its build statement carries a
/// threshold of the owning team's builder keys (and, in production, its promotion the
/// team's reviewer keys); no other key, not even the root's builders, signs for it. A team
/// rotates or revokes its keys by a new delegations version, without a new trust root.
///
/// `sign` checks the list before signing (patterns that match nothing, two teams claiming
/// one name without a terminating delegation to decide it, reserved or repeated role names,
/// a team delegating to itself) and names the pattern it refuses. `publish` puts a signed
/// file in force; a team whose keys change publishes its release with the file instead
/// (`cargo xtask publish --team NAME --team-key FILE --delegations FILE`), so both land at
/// once.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  cargo xtask delegations sign --spec delegations.toml --key ~/keys/delegations.key --version 1 --out delegations.json
  cargo xtask delegations publish delegations.json --registry DIR --publisher-key ~/keys/publisher.key

A spec lists the delegations in search order:
  [[delegation]]
  name = \"risc0\"
  paths = [\"risc0_*\"]
  terminating = true
  publisher = { keys = [\"ed25519:<64 hex>\"], threshold = 1 }
  builder = { keys = [\"ed25519:<64 hex>\"], threshold = 1 }
  reviewer = { keys = [\"ed25519:<64 hex>\"], threshold = 1 }")]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    Sign(SignArgs),
    Publish(PublishArgs),
}

/// Sign a delegations file from a spec (TOML), with keys of the trust root's delegations
/// role.
#[derive(clap::Args)]
#[command(disable_version_flag = true)]
struct SignArgs {
    /// The spec: `[[delegation]]` tables in search order (see `delegations --help`).
    #[arg(long, value_name = "FILE")]
    spec: PathBuf,
    /// A private key of the trust root's delegations role (repeat up to its threshold).
    #[arg(long = "key", value_name = "FILE", required = true)]
    keys: Vec<PathBuf>,
    /// The version: one above the delegations in force (1 for the first).
    #[arg(long, value_name = "N")]
    version: u64,
    /// Days until the delegations expire (clients refuse them after).
    #[arg(long, value_name = "N", default_value_t = 365)]
    expires_days: u64,
    /// Where to write the signed file [default: `<version>.delegations.json` here]. It must
    /// not exist.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Put a signed delegations file in force in a registry (the next index lists it).
#[derive(clap::Args)]
struct PublishArgs {
    /// The signed delegations file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    #[command(flatten)]
    at: RegistryArgs,
    /// The publisher's private key file [default: the dev publisher key, for a dev root
    /// only].
    #[arg(long, value_name = "FILE", env = "CUDA_AOT_PUBLISHER_KEY")]
    publisher_key: Option<PathBuf>,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        match self.action {
            Action::Sign(a) => a.run(),
            Action::Publish(a) => a.run(),
        }
    }
}

impl SignArgs {
    fn run(self) -> Result<()> {
        let list = crate::delegation_spec::read(&self.spec)?;
        check_list(DELEGATIONS, 1, None, &list).map_err(|r| {
            fail(
                format!("{}: {r}", self.spec.display()),
                "fix the patterns: each must match some module name (lower case, no `/`), and two delegations may claim one name only when the earlier is `terminating = true`, which decides it",
            )
        })?;
        let keys = self
            .keys
            .iter()
            .map(|p| devkeys::read_key(p))
            .collect::<Result<Vec<_>>>()?;
        let doc = TeamMetadata {
            schema: TeamMetadata::SCHEMA.into(),
            name: DELEGATIONS.into(),
            version: self.version,
            expires: Time::now().plus(Duration::from_secs(
                self.expires_days.saturating_mul(86_400),
            )),
            modules: Vec::new(),
            delegations: list,
        };
        let refs: Vec<_> = keys.iter().collect();
        let bytes = cuda_aot::metadata::sign_doc(&doc, &refs).to_bytes();
        let out = self
            .out
            .unwrap_or_else(|| PathBuf::from(role_file(DELEGATIONS, self.version)));
        match cuda_aot::fs::create_new_atomic(&out, &bytes) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(fail(
                    format!("{} exists", out.display()),
                    "choose another --out: a signed delegations file is never overwritten",
                ));
            }
            Err(e) => return Err(e).with_context(|| format!("writing {}", out.display())),
        }
        eprintln!(
            "signed delegations v{} ({} team(s): {}) with {} key(s) into {}",
            doc.version,
            doc.delegations.len(),
            doc.delegations
                .iter()
                .map(|d| format!("{} {:?}", d.name, d.paths))
                .collect::<Vec<_>>()
                .join(", "),
            refs.len(),
            out.display()
        );
        Ok(())
    }
}

impl PublishArgs {
    fn run(self) -> Result<()> {
        let trust = self.at.trust_file()?;
        let registry = self.at.registry();
        let anchor = anchor::read_bytes(&trust)?;
        let key = match &self.publisher_key {
            Some(p) => devkeys::read_key(p)?,
            None => publish::dev_publisher_for(&anchor, &trust)?,
        };
        let limits = crate::limits::limits();
        let file = cuda_aot::fs::read_capped(&self.file, limits.index, "delegations file")?;
        let opts = PublishOptions::default();
        let run = |store: &dyn cuda_aot_registry::Store| {
            cuda_aot_registry::publish::ensure_root(store, &anchor, &limits)?;
            cuda_aot_registry::publish::publish_delegations(store, &anchor, &file, &[&key], &opts)
        };
        let p = match Target::of(&registry) {
            Target::Dir(dir) => run(&DirRegistry::new(dir))?,
            #[cfg(feature = "net")]
            Target::S3(url) => run(&cuda_aot_registry::s3::S3Store::open(
                url,
                &Default::default(),
            )?)?,
            _ => {
                return Err(fail(
                    format!(
                        "delegations publish writes a registry folder or an S3 store, not {}",
                        registry.display()
                    ),
                    "publish the delegations with the next release there: cargo xtask publish --delegations FILE",
                ));
            }
        };
        eprintln!("delegations in force: {}", publish::describe(&p, &registry));
        Ok(())
    }
}
