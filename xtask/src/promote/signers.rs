//! Who signs a promotion: the reviewer keys given (or the dev root's), the dev keys of a
//! dev root for --publish, and the check that a co-signed record promises what this run
//! derived.

use anyhow::Result;
use cuda_aot::SecretKey;
use cuda_aot::metadata::{Promotion, RoleName};
use cuda_aot::trust::VerifiedRoot;
use std::path::{Path, PathBuf};

use crate::advice::fail;
use crate::{devkeys, paths};

/// Co-signing: the partial record must promise exactly what this run derived.
pub(super) fn check_cosign(theirs: &Promotion, ours: &Promotion, path: &Path) -> Result<()> {
    let differs = if theirs.module != ours.module {
        Some(("module", theirs.module.to_string(), ours.module.to_string()))
    } else if theirs.schedule_version != ours.schedule_version {
        Some((
            "schedule version",
            theirs.schedule_version.to_string(),
            ours.schedule_version.to_string(),
        ))
    } else if theirs.manifests != ours.manifests {
        Some((
            "manifests",
            format!("{} digest(s)", theirs.manifests.len()),
            format!("{} other digest(s)", ours.manifests.len()),
        ))
    } else if theirs.parity_report != ours.parity_report {
        Some((
            "parity report",
            theirs.parity_report.to_string(),
            ours.parity_report.to_string(),
        ))
    } else if theirs.resource_review != ours.resource_review {
        Some((
            "resource review",
            theirs.resource_review.to_string(),
            ours.resource_review.to_string(),
        ))
    } else {
        None
    };
    match differs {
        None => Ok(()),
        Some((what, t, o)) => Err(fail(
            format!(
                "{}: the partial record promises {what} {t}, this run derived {o}: a reviewer co-signs only what they derived themselves",
                path.display()
            ),
            "run with the same build, parity report and registry as the first reviewer, or start a new record",
        )),
    }
}

/// The reviewer keys of step 4, checked against the trust root before anything is signed:
/// each must be a reviewer key (a builder key is named as such), and together they must
/// meet the reviewer threshold (unless the record is partial or co-signed: then the
/// threshold is checked on the record's signatures).
pub(super) fn reviewer_keys(
    files: &[PathBuf],
    root: &VerifiedRoot,
    trust: &Path,
    team: Option<&str>,
    partial: bool,
) -> Result<Vec<SecretKey>> {
    let roles = &root.root().roles;
    // Whose reviewer role: the trust root's, or a team's as the delegations list it.
    let whose = team.map_or(format!("trust root v{}", root.root().version), |t| {
        format!("delegated role {t:?} (as the registry's delegations list it)")
    });
    let keys: Vec<SecretKey> = if files.is_empty() {
        vec![dev_key_for(root, trust, "reviewer", "--reviewer-key")?.reviewer]
    } else {
        files
            .iter()
            .map(|p| devkeys::read_key(p))
            .collect::<Result<_>>()?
    };
    let mut distinct = Vec::new();
    for (k, file) in keys
        .iter()
        .zip(files.iter().map(Some).chain(std::iter::repeat(None)))
    {
        let pk = k.public();
        let name = file.map_or("the dev reviewer key".to_string(), |f| {
            f.display().to_string()
        });
        if roles.builder.keys.contains(&pk) {
            return Err(fail(
                format!(
                    "{name} (key {}) is a builder key, not a reviewer key: a builder never promotes a build (builder and reviewer keys are disjoint in trust root v{})",
                    pk.key_id().short(),
                    root.root().version
                ),
                "sign with a reviewer's own key (cargo xtask keygen --role reviewer), listed in the trust root's reviewer role",
            ));
        }
        if !roles.reviewer.keys.contains(&pk) {
            return Err(fail(
                format!(
                    "{name} (key {}) is not a reviewer key of {whose} (reviewers: {})",
                    pk.key_id().short(),
                    roles
                        .reviewer
                        .keys
                        .iter()
                        .map(|k| k.key_id().short())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "pass the private key of a reviewer the trust root lists, or add the key to the root (cargo xtask trust-root --previous ...)",
            ));
        }
        if !distinct.contains(&pk) {
            distinct.push(pk);
        }
    }
    let threshold = roles.reviewer.threshold as usize;
    if distinct.len() < threshold && !partial {
        return Err(fail(
            format!(
                "{} distinct reviewer key(s) given, under the reviewer threshold {threshold} of {whose}: a promotion needs {threshold} reviewers",
                distinct.len(),
            ),
            format!(
                "pass --reviewer-key once per reviewer, {threshold} different reviewer keys; reviewers on different machines sign one after the other (--partial, then --cosign FILE)"
            ),
        ));
    }
    Ok(keys)
}

/// The dev keys, refused for a production root (`flag` names the key to pass instead).
pub(super) fn dev_key_for(
    root: &VerifiedRoot,
    trust: &Path,
    role: &str,
    flag: &str,
) -> Result<DevKeysAll> {
    if root.root().channel == cuda_aot::Channel::Production {
        return Err(fail(
            format!(
                "{} is a production trust root and no {role} key was given; development keys never sign for production",
                trust.display()
            ),
            format!("pass {flag} FILE with a {role} key listed in that root"),
        ));
    }
    let dev = devkeys::ensure()?;
    let reviewer =
        devkeys::read_key(&paths::dev_keys_dir().join(format!("{}.key", RoleName::Reviewer)))?;
    Ok(DevKeysAll {
        builder: dev.builder,
        reviewer,
    })
}

/// The dev keys promote may use.
pub(super) struct DevKeysAll {
    pub(super) builder: SecretKey,
    pub(super) reviewer: SecretKey,
}
