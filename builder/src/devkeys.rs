//! Private key files, and the development keys and trust root that a fresh clone generates
//! on first use (labelled `dev` everywhere).

use anyhow::{Context, Result, bail};
use cuda_aot::metadata::{MaxExpiry, Role, RoleName, Roles, Root, Time};
use cuda_aot::{Channel, SecretKey};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::advice::Fix;
use crate::paths;

const KEY_HEADER: &str = "# cuda-aot private key: keep secret, never commit.";

/// Generates a fresh key from the OS random source.
pub fn generate() -> Result<SecretKey> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("OS random source failed: {e}"))?;
    Ok(SecretKey::from_seed(seed))
}

/// Writes a private key file with mode 0600; never overwrites.
pub fn write_key(path: &Path, role: RoleName, key: &SecretKey, label: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| {
            format!(
                "creating key file {} (it must not exist yet)",
                path.display()
            )
        })?;
    let text = format!(
        "{KEY_HEADER}\nrole: {role}\nlabel: {label}\npublic: {}\nseed: {}\n",
        key.public(),
        hex::encode(key.seed())
    );
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

/// Reads a private key file; refuses one readable by group or others.
pub fn read_key(path: &Path) -> Result<SecretKey> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("reading key file {}", path.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(anyhow::Error::new(Fix(format!(
            "chmod 600 {}",
            path.display()
        ))))
        .context(format!(
            "key file {} is readable by other users (mode {:o})",
            path.display(),
            meta.permissions().mode() & 0o777
        ));
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading key file {}", path.display()))?;
    let seed_hex = text
        .lines()
        .find_map(|l| l.strip_prefix("seed: "))
        .with_context(|| {
            format!(
                "{}: no `seed:` line; not a cuda-aot key file",
                path.display()
            )
        })?;
    let mut seed = [0u8; 32];
    hex::decode_to_slice(seed_hex.trim(), &mut seed)
        .with_context(|| format!("{}: bad seed", path.display()))?;
    let key = SecretKey::from_seed(seed);
    if let Some(public) = text.lines().find_map(|l| l.strip_prefix("public: "))
        && public.trim() != key.public().to_string()
    {
        bail!(
            "{}: the public key line does not match the seed (file altered?)",
            path.display()
        );
    }
    Ok(key)
}

/// The development keys and their signed trust root.
pub struct DevKeys {
    /// Signs manifests.
    pub builder: SecretKey,
    /// Signs the index and timestamp.
    pub publisher: SecretKey,
    /// The signed dev trust root file.
    pub root_file: PathBuf,
}

/// Loads the dev keys, generating them (and a dev trust root) on first use.
pub fn ensure() -> Result<DevKeys> {
    let dir = paths::dev_keys_dir();
    let key_path = |r: RoleName| dir.join(format!("{r}.key"));
    let root_file = dir.join("root.json");
    if !root_file.exists() {
        eprintln!(
            "dev keys: generating development keys into {} (label: dev; refused by production trust roots)",
            dir.display()
        );
        let tmp = tempfile::Builder::new()
            .prefix(".dev-keys.")
            .tempdir_in(paths::work_dir_created()?)?;
        let keys: Vec<(RoleName, SecretKey)> = RoleName::ALL
            .into_iter()
            .map(|r| Ok((r, generate()?)))
            .collect::<Result<_>>()?;
        for (r, k) in &keys {
            write_key(&tmp.path().join(format!("{r}.key")), *r, k, "dev")?;
        }
        let role = |r: RoleName| Role {
            keys: vec![
                keys.iter()
                    .find(|(n, _)| *n == r)
                    .expect("all roles")
                    .1
                    .public(),
            ],
            threshold: 1,
        };
        let root = Root {
            schema: Root::SCHEMA.into(),
            version: 1,
            expires: Time::now().plus(Duration::from_secs(5 * 365 * 86_400)),
            channel: Channel::Dev,
            max_expiry: MaxExpiry::DEFAULT,
            delegations: None,
            roles: Roles {
                root: role(RoleName::Root),
                builder: role(RoleName::Builder),
                reviewer: role(RoleName::Reviewer),
                publisher: role(RoleName::Publisher),
            },
        };
        let root_key = &keys[0].1;
        let file = cuda_aot::trust::sign_root(&root, &[root_key], None, &crate::limits::limits())?;
        cuda_aot::fs::write_atomic(&tmp.path().join("root.json"), &file)?;
        let tmp = tmp.keep();
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("removing incomplete {}", dir.display()))?;
        }
        std::fs::rename(&tmp, &dir)
            .with_context(|| format!("moving dev keys into {}", dir.display()))?;
    }
    Ok(DevKeys {
        builder: read_key(&key_path(RoleName::Builder))?,
        publisher: read_key(&key_path(RoleName::Publisher))?,
        root_file,
    })
}
