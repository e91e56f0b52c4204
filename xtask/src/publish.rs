//! `cargo xtask publish`: publish a signed build output into a registry.

use anyhow::{Context, Result};
use cuda_aot::state::TrustState;
use cuda_aot::{Channel, SecretKey};
use cuda_aot_registry::{DirRegistry, PublishOptions, Published, Release, SignedBuild, Store};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::advice::{fail, refix};
use crate::args::{FormatArgs, RegistryArgs};
use crate::endpoint::{RemoteArgs, Target};
use crate::{anchor, devkeys, message, outdir, paths};

/// Publish a signed build output into a registry: a folder, a publishing
/// `cuda-aot-registry serve` (http(s)://…, with --token-file), a bucket of an S3 or
/// S3-compatible store (s3://BUCKET/PREFIX, credentials in the standard AWS variables), or
/// an OCI tag (oci://…).
///
/// The build statement's builder signatures are checked against the trust root first, and
/// every manifest and blob against the statement; then blobs, manifests and the statement
/// are written content-addressed, the next index is created (create-new: a concurrent
/// publisher of the same version gets a conflict and can simply retry) and timestamp.json
/// is replaced last, so readers never see a half-published release. On S3 the index is
/// created with If-None-Match: * and timestamp.json replaced with If-Match on its ETag; a
/// store that ignores those conditions is refused before anything is written.
///
/// The next index lists exactly this build: modules or targets dropped from the spec leave
/// the registry (keep them with --keep-unlisted). Publishing what the registry already
/// serves commits nothing ("unchanged: index vN").
///
/// Promotion records (reviewer-signed, written by `cargo xtask promote`) are published with
/// the build: every `<out>/promotions/*.json`, and each --promotion FILE. A production
/// registry refuses any module no promotion covers.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    at: RegistryArgs,
    /// The signed build output [default: .cuda-aot/build of the project].
    #[arg(value_name = "DIR")]
    out: Option<PathBuf>,
    /// The publisher's private key file [default: the dev publisher key, for a dev root
    /// only].
    #[arg(long, value_name = "FILE", env = "CUDA_AOT_PUBLISHER_KEY")]
    publisher_key: Option<PathBuf>,
    /// Lifetime of the timestamp, in days.
    #[arg(long, value_name = "N", default_value_t = 7)]
    timestamp_days: u64,
    /// Only re-sign the timestamp of the current index with a new expiry (run this
    /// periodically: clients refuse a registry whose timestamp has expired).
    #[arg(long)]
    refresh_timestamp: bool,
    /// Keep the current index's entries for modules and targets this build does not hold
    /// (default: the next index lists exactly this build).
    #[arg(long)]
    keep_unlisted: bool,
    /// A promotion record to publish with the build (repeat for several), besides those in
    /// `<out>/promotions/`.
    #[arg(long = "promotion", value_name = "FILE")]
    promotions: Vec<PathBuf>,
    /// Publish a build statement that one listed builder signed although the trust root
    /// wants more builders: a candidate registry folder for independent rebuilders
    /// (`cargo xtask rebuild`). Clients refuse it until the co-signed output is published.
    #[arg(long)]
    awaiting_rebuild: bool,
    /// Publish this build as delegated role NAME (issue 46): its modules must be names the
    /// registry's delegations give NAME, its build statement signed by NAME's builder keys
    /// (`cargo xtask sign --builder-key`), and the team's metadata is signed with
    /// --team-key. The other teams' modules stay in the index as they are.
    #[arg(long, value_name = "NAME", requires = "team_keys")]
    team: Option<String>,
    /// The team's publisher key file (repeat up to its threshold).
    #[arg(long = "team-key", value_name = "FILE", requires = "team")]
    team_keys: Vec<PathBuf>,
    /// A delegations file (`cargo xtask delegations sign`) to put in force with this
    /// publish: a team rotating its keys publishes its release with the delegations that
    /// list them, so both land at once.
    #[arg(long, value_name = "FILE")]
    delegations: Option<PathBuf>,
    /// The team's own delegations (a spec as `cargo xtask delegations --help` shows), one
    /// level below it and within its patterns, signed into its metadata with --team-key.
    /// Without it the team's current delegations are kept.
    #[arg(long, value_name = "FILE", requires = "team")]
    team_delegations: Option<PathBuf>,
    #[command(flatten)]
    remote: RemoteArgs,
    #[command(flatten)]
    pub(crate) format: FormatArgs,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        let trust = self.at.trust_file()?;
        let registry = self.at.registry();
        #[cfg(not(feature = "net"))]
        if !matches!(Target::of(&registry), Target::Dir(_)) {
            return crate::features::rerun("publishing to an HTTP, S3 or OCI registry", "net");
        }
        let anchor = anchor::read_bytes(&trust)?;
        let key = match &self.publisher_key {
            Some(p) => devkeys::read_key(p)?,
            None => dev_publisher_for(&anchor, &trust)?,
        };
        let opts = PublishOptions {
            timestamp_ttl: Duration::from_secs(self.timestamp_days.saturating_mul(86_400)),
            keep_unlisted: self.keep_unlisted,
            awaiting_rebuild: self.awaiting_rebuild,
            ..PublishOptions::default()
        };
        if self.awaiting_rebuild && !matches!(Target::of(&registry), Target::Dir(_)) {
            return Err(fail(
                format!(
                    "--awaiting-rebuild publishes a candidate registry folder, not {}",
                    registry.display()
                ),
                "publish the candidate into a folder the rebuilders read; publish the co-signed output to the served registry",
            ));
        }
        if self.refresh_timestamp {
            let ts = match Target::of(&registry) {
                #[cfg(feature = "net")]
                Target::Http(url) => cuda_aot_registry::publish::refresh_timestamp(
                    &self.remote.http_store(url)?,
                    &anchor,
                    &[&key],
                    &opts,
                )?,
                #[cfg(feature = "net")]
                Target::S3(url) => cuda_aot_registry::publish::refresh_timestamp(
                    &cuda_aot_registry::s3::S3Store::open(url, &Default::default())?,
                    &anchor,
                    &[&key],
                    &opts,
                )?,
                _ => DirRegistry::new(&registry).refresh_timestamp(&anchor, &[&key], &opts)?,
            };
            eprintln!(
                "refreshed {}: timestamp v{} for index v{}, expires {}",
                registry.display(),
                ts.version,
                ts.index.version,
                ts.expires
            );
            if message::json() {
                message::emit(
                    "timestamp-refreshed",
                    serde_json::json!({
                        "registry": registry,
                        "timestamp_version": ts.version,
                        "index_version": ts.index.version,
                        "expires": ts.expires.to_string(),
                    }),
                );
            }
            return Ok(());
        }
        let out = self.out.clone().unwrap_or_else(paths::default_build_out);
        let extra = &self.promotions;
        let team = TeamOpts::read(
            self.team.clone(),
            &self.team_keys,
            self.delegations.as_deref(),
            self.team_delegations.as_deref(),
        )?;
        let p = match Target::of(&registry) {
            Target::Dir(dir) => publish_dir(dir, &out, &trust, &key, &team, &opts, extra)?,
            #[cfg(not(feature = "net"))]
            Target::Http(_) | Target::Oci(_) | Target::S3(_) => {
                unreachable!("run again with the net feature above")
            }
            #[cfg(feature = "net")]
            Target::Http(url) => {
                let store = self.remote.http_store(url)?;
                publish_output_as(&store, &out, &trust, &key, &team, &opts, extra)?
            }
            #[cfg(feature = "net")]
            Target::S3(url) => {
                let store = cuda_aot_registry::s3::S3Store::open(url, &Default::default())?;
                publish_output_as(&store, &out, &trust, &key, &team, &opts, extra)?
            }
            #[cfg(feature = "net")]
            Target::Oci(reference) => {
                let publish = |work: &Path| {
                    publish_output_as(
                        &DirRegistry::new(work),
                        &out,
                        &trust,
                        &key,
                        &team,
                        &opts,
                        extra,
                    )
                };
                self.publish_oci(reference, &anchor, team.name.is_some(), publish)?
            }
        };
        eprintln!("{}", describe(&p, &registry));
        if self.awaiting_rebuild && !p.unchanged {
            eprintln!(
                "awaiting rebuild: clients refuse this registry until its build statement has the builder signatures the trust root wants.\nnext: an independent builder runs `{} rebuild --registry {} --builder-key KEY`, and the co-signed output it writes is published",
                crate::advice::tool(),
                registry.display()
            );
        }
        if message::json() {
            message::emit("publish-finished", json_fields(&p, &registry));
        }
        Ok(())
    }

    /// Publishes into the OCI tag `reference` (`publish` into the work folder it brings the
    /// tag's release into, then the push). A team's publish that another publisher beat to
    /// the tag builds again on what the tag holds then (a tag has no compare-and-swap: the
    /// conflict is seen before or just after the push), as a team's publish does on every
    /// other store.
    #[cfg(feature = "net")]
    fn publish_oci(
        &self,
        reference: &str,
        anchor: &[u8],
        team: bool,
        publish: impl Fn(&Path) -> Result<Published>,
    ) -> Result<Published> {
        let (attempt, retries) = cuda_aot_registry::publish::retry_lost_races(
            || self.remote.publish_oci(reference, anchor, &publish),
            |e| {
                team && matches!(
                    e.downcast_ref::<cuda_aot_registry::Error>(),
                    Some(cuda_aot_registry::Error::Conflict { .. })
                )
            },
        );
        let (p, pushed) = attempt?;
        let p = Published {
            retries: p.retries + retries,
            ..p
        };
        if let Some(o) = pushed {
            eprintln!(
                "pushed {} OCI layers ({} bytes) to {}, and {} attestation(s) as OCI referrers of it ({})",
                o.layers,
                o.bytes,
                o.reference,
                o.attestations,
                match o.listing {
                    cuda_aot_registry::oci_referrers::Listing::Api =>
                        "listed by the registry's referrers API",
                    cuda_aot_registry::oci_referrers::Listing::TagSchema =>
                        "listed through the referrers tag schema: the registry has no referrers API",
                }
            );
        }
        Ok(p)
    }
}

/// The fields of the `publish-finished` message (and of `release-finished`'s `publish`).
pub fn json_fields(p: &Published, registry: &Path) -> serde_json::Value {
    serde_json::json!({
        "registry": registry,
        "unchanged": p.unchanged,
        "index_version": p.index_version,
        "timestamp_version": p.timestamp_version,
        "entries": p.entries,
        "removed": p.removed,
        "blobs_written": p.blobs_written,
        "blobs_reused": p.blobs_reused,
        "recovered": p.recovered,
        "continued_after": p.continued_after,
        "retries": p.retries,
    })
}

/// The dev publisher key, refused for a production trust root: a production publish needs
/// its publisher key given explicitly.
pub fn dev_publisher_for(anchor: &[u8], trust: &Path) -> Result<SecretKey> {
    let root = cuda_aot::trust::verify_anchor(
        anchor,
        &crate::limits::limits(),
        &trust.display().to_string(),
    )
    .map_err(|e| anchor::bad_root(e, trust))?;
    if root.root().channel == Channel::Production {
        return Err(fail(
            format!(
                "{} is a production trust root and no publisher key was given; the development key is never used for production",
                trust.display()
            ),
            "pass --publisher-key FILE (or CUDA_AOT_PUBLISHER_KEY) with a publisher key listed in that root",
        ));
    }
    Ok(devkeys::ensure()?.publisher)
}

/// One line saying what a publish did.
pub fn describe(p: &Published, registry: &Path) -> String {
    if p.unchanged {
        return format!(
            "unchanged: index v{} of {} already holds this release ({} entries); nothing published",
            p.index_version,
            registry.display(),
            p.entries
        );
    }
    format!(
        "published index v{} (timestamp v{}) to {}: {} entries ({} removed), {} blob(s) written, {} already present{}",
        p.index_version,
        p.timestamp_version,
        registry.display(),
        p.entries,
        p.removed,
        p.blobs_written,
        p.blobs_reused,
        if p.recovered {
            "; the old timestamp was signed by a key the trust root no longer lists: a new version line started".to_string()
        } else if let Some(v) = p.continued_after {
            format!(
                "; a new registry: its versions continue above index v{v}, which this checkout has already verified there"
            )
        } else if p.retries > 0 {
            format!(
                "; another publisher committed first {} time(s), and this release was built again on the newer index",
                p.retries
            )
        } else {
            String::new()
        }
    )
}

/// Checks the build statement of `out` against the trust root and publishes the build,
/// with the promotion records in `<out>/promotions/`, into the directory registry
/// `registry`.
pub fn publish_output(
    registry: &Path,
    out: &Path,
    trust: &Path,
    publisher: &SecretKey,
    opts: &PublishOptions,
) -> Result<Published> {
    publish_dir(
        registry,
        out,
        trust,
        publisher,
        &TeamOpts::default(),
        opts,
        &[],
    )
}

/// What a publish does about delegations (issue 46): the team it is for, with its
/// publisher keys, and a delegations file to put in force with it.
#[derive(Default)]
pub struct TeamOpts {
    /// The delegated role the build is published as.
    pub name: Option<String>,
    /// Its publisher keys.
    pub keys: Vec<SecretKey>,
    /// A signed delegations file to publish with the build.
    pub delegations: Option<Vec<u8>>,
    /// The team's own delegations to sign into its metadata (None: keep its current ones).
    pub sub: Option<Vec<cuda_aot::delegation::Delegation>>,
}

impl TeamOpts {
    /// Team `name` with the publisher key files `keys`, the signed delegations file
    /// `delegations` and the spec of its own delegations `sub`, each read (and the spec
    /// parsed) here.
    pub fn read(
        name: Option<String>,
        keys: &[PathBuf],
        delegations: Option<&Path>,
        sub: Option<&Path>,
    ) -> Result<TeamOpts> {
        Ok(TeamOpts {
            name,
            keys: keys
                .iter()
                .map(|p| devkeys::read_key(p))
                .collect::<Result<_>>()?,
            delegations: match delegations {
                Some(p) => Some(cuda_aot::fs::read_capped(
                    p,
                    crate::limits::limits().index,
                    "delegations file",
                )?),
                None => None,
            },
            sub: sub.map(crate::delegation_spec::read).transpose()?,
        })
    }
}

/// [`publish_output_as`] a directory registry, continuing above the versions this checkout
/// has seen of it ([`seen_here`]) if it is empty.
pub(crate) fn publish_dir(
    registry: &Path,
    out: &Path,
    trust: &Path,
    publisher: &SecretKey,
    team: &TeamOpts,
    opts: &PublishOptions,
    extra: &[PathBuf],
) -> Result<Published> {
    let opts = PublishOptions {
        seen: seen_here(registry)?,
        ..opts.clone()
    };
    publish_output_as(
        &DirRegistry::new(registry),
        out,
        trust,
        publisher,
        team,
        &opts,
        extra,
    )
    .map_err(|e| match e.downcast_ref::<cuda_aot_registry::Error>() {
        // Name the state file those versions come from.
        Some(cuda_aot_registry::Error::SeenExhausted { .. }) => {
            match crate::paths::state_file(registry) {
                Ok(state) => e.context(format!("trust state {}", state.display())),
                Err(_) => e,
            }
        }
        _ => e,
    })
}

/// The versions of the registry folder `registry` that this checkout's verifier has seen
/// (its default state file): a registry deleted and published again continues above them.
fn seen_here(registry: &Path) -> Result<TrustState> {
    let state = crate::paths::state_file(registry)?;
    Ok(TrustState::load(&state, crate::limits::limits().state)?)
}

/// Checks the build statement of `out` against the trust root and publishes the build, with
/// the promotion records in `<out>/promotions/` and `extra`, through `store` (a folder, a
/// publishing HTTP server, S3, an OCI work folder); for the team `team` names (its build
/// statement checked against the team's builder keys as the registry's delegations give
/// them), with the delegations file it carries.
pub fn publish_output_as(
    store: &dyn Store,
    out: &Path,
    trust: &Path,
    publisher: &SecretKey,
    team: &TeamOpts,
    opts: &PublishOptions,
    extra: &[PathBuf],
) -> Result<Published> {
    let limits = crate::limits::limits();
    let anchor = anchor::read_bytes(trust)?;
    let root = cuda_aot::trust::verify_anchor(&anchor, &limits, &trust.display().to_string())
        .map_err(|e| anchor::bad_root(e, trust))?;
    let statement_path = outdir::statement_path(out);
    let statement = match cuda_aot::fs::read_at_most(&statement_path, limits.statement)? {
        Some(b) => b,
        None => {
            return Err(fail(
                format!("{}: not signed", statement_path.display()),
                "run `cargo xtask sign` (it signs one build statement over the build output)",
            ));
        }
    };
    let files = outdir::read_output(out)?
        .into_iter()
        .map(|(_, manifest, blob)| (manifest, blob))
        .collect();
    let (root, delegation) = match &team.name {
        None => (root, None),
        Some(name) => {
            let (root, d) = cuda_aot_registry::publish::team_root(
                store,
                &anchor,
                name,
                team.delegations.as_deref(),
                &limits,
            )?;
            (root, Some(d))
        }
    };
    let builders = match opts.awaiting_rebuild {
        false => root,
        true => root.awaiting_builders(),
    };
    // Under a team's keys, a refusal names the team (not another trust root).
    let signed = SignedBuild::new(&builders, statement, files, &limits).map_err(|e| {
        match (&delegation, e) {
            (Some(d), cuda_aot_registry::Error::Core(e)) => cuda_aot_registry::Error::Core(
                cuda_aot::delegation::team::refused_by_team(e, d, "build statement"),
            ),
            (_, e) => e,
        }
    });
    let mut build = signed.map_err(|e| {
        let fix = format!(
            "{}; if the build output changed since it was signed, run cargo xtask sign again",
            e.fix()
        );
        let message = format!("{}: {e}", statement_path.display());
        refix(e, fix).context(message)
    })?;
    // The sources the provenance names, kept by the build beside its outputs.
    for (name, digest, size) in build.sources_named() {
        let path = outdir::source_path(out, &digest);
        let bytes = match cuda_aot::fs::read_at_most(&path, size)? {
            Some(b) => b,
            None => {
                return Err(fail(
                    format!(
                        "{}: the build statement names source {name} ({}), which is not in {}",
                        statement_path.display(),
                        digest.short(),
                        outdir::sources_dir(out).display()
                    ),
                    "build and sign the output again (`cargo xtask build`, then `cargo xtask sign`)",
                ));
            }
        };
        build.add_source(bytes).map_err(|e| {
            fail(
                format!("{}: source {name}: {e}", path.display()),
                "build and sign the output again (`cargo xtask build`, then `cargo xtask sign`)",
            )
        })?;
    }
    cuda_aot_registry::publish::ensure_root(store, &anchor, &limits)?;
    let mut promotions = Vec::new();
    for p in outdir::promotion_files(out)?.iter().chain(extra) {
        let file = cuda_aot::fs::read_capped(p, limits.promotion, "promotion record")
            .with_context(|| format!("reading promotion record {}", p.display()))?;
        if !promotions.contains(&file) {
            promotions.push(file);
        }
    }
    let release = Release { build, promotions };
    let delegated = cuda_aot_registry::publish::Delegated {
        delegations: team.delegations.clone(),
        team: team
            .name
            .as_ref()
            .map(|name| cuda_aot_registry::publish::TeamPublish {
                name: name.clone(),
                keys: team.keys.iter().collect(),
                delegations: team.sub.clone(),
            }),
    };
    Ok(cuda_aot_registry::publish::publish_as(
        store,
        &anchor,
        &release,
        &[publisher],
        &delegated,
        opts,
    )?)
}
