//! `cargo xtask keygen`: generate a signing key for one role, or export a public key in the
//! formats third-party verifiers read.

use anyhow::{Context, Result, bail};
use cuda_aot::PublicKey;
use cuda_aot::metadata::RoleName;
use ed25519_dalek::pkcs8::EncodePublicKey as _;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use std::path::{Path, PathBuf};

use crate::advice::fail;
use crate::devkeys;

/// Generate an ed25519 signing key for one role of the trust model.
///
/// The private key is written with mode 0600 to --out, which must not exist and must lie
/// outside the repository (or in a git-ignored folder of it): private keys are never
/// committed. The public key is printed on one line (`ed25519:<hex>`), ready to be listed
/// in a trust root.
///
/// With --export-public, prints an existing public key instead, in the format a
/// third-party verifier reads (docs/trust.md, "Checking a statement with in-toto tools").
#[derive(clap::Args)]
#[command(after_long_help = "\
Export formats (--format):
  line   ed25519:<64 hex>, as trust roots list keys
  pem    SubjectPublicKeyInfo PEM (RFC 8410), for OpenSSL, cosign and other PKIX tools
  sslib  a securesystemslib / in-toto key: {\"keyid\", \"keytype\": \"ed25519\",
         \"scheme\": \"ed25519\", \"keyval\": {\"public\": <hex>}}, whose keyid is the key id
         cuda-aot writes in its signatures (securesystemslib only counts a signature whose
         keyid matches)

Examples:
  cargo xtask keygen --role builder --out ~/.config/cuda-aot/keys/builder.key
  cargo xtask keygen --export-public .cuda-aot/dev-keys/builder.key --format sslib
  cargo xtask keygen --export-public ed25519:<64 hex> --format pem")]
pub struct Args {
    /// The role the key is for: root, builder, reviewer or publisher.
    #[arg(long, value_name = "ROLE", required_unless_present = "export_public")]
    role: Option<RoleName>,
    /// Where to write the private key file.
    #[arg(long, value_name = "FILE", required_unless_present = "export_public")]
    out: Option<PathBuf>,
    /// A free-text label stored in the key file (e.g. "release-2026").
    #[arg(long, value_name = "TEXT", default_value = "")]
    label: String,
    /// Print this public key instead of generating one: a key file written by keygen
    /// (only its public half is read) or a public key `ed25519:<64 hex>` (as a trust root
    /// lists it).
    #[arg(long, value_name = "KEY", conflicts_with_all = ["role", "out"])]
    export_public: Option<String>,
    /// The format --export-public prints: line, pem or sslib.
    #[arg(
        long,
        value_name = "FMT",
        default_value = "line",
        requires = "export_public"
    )]
    format: Format,
}

/// The formats a public key is exported in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// One line, as trust roots list keys.
    Line,
    /// SubjectPublicKeyInfo PEM.
    Pem,
    /// A securesystemslib key object with its key id.
    Sslib,
}

impl Args {
    /// Runs the task.
    pub fn run(self) -> Result<()> {
        if let Some(key) = &self.export_public {
            print!("{}", export(&read_public(key)?, self.format)?);
            return Ok(());
        }
        let (Some(role), Some(out)) = (self.role, self.out) else {
            bail!("keygen needs --role and --out (or --export-public)");
        };
        refuse_tracked_location(&out)?;
        let key = devkeys::generate()?;
        devkeys::write_key(&out, role, &key, &self.label)?;
        eprintln!(
            "wrote {} key {} (mode 0600), key id {}",
            role,
            out.display(),
            key.public().key_id().short()
        );
        println!("{}", key.public());
        Ok(())
    }
}

/// The public key `arg` names: `ed25519:<hex>`, or a key file (its seed, checked against
/// its `public:` line by [`devkeys::read_key`]).
fn read_public(arg: &str) -> Result<PublicKey> {
    if arg.starts_with("ed25519:") {
        return arg.parse().map_err(|e: cuda_aot::Error| {
            fail(
                format!("--export-public {arg}: {e}"),
                "give a public key as ed25519:<64 hex> (as a trust root lists it) or a key file written by keygen",
            )
        });
    }
    let path = Path::new(arg);
    if !path.is_file() {
        return Err(fail(
            format!(
                "--export-public {arg}: no such key file, and not an ed25519:<64 hex> public key"
            ),
            "give a key file written by `cargo xtask keygen`, or a public key ed25519:<64 hex> from the trust root",
        ));
    }
    Ok(devkeys::read_key(path)?.public())
}

/// `key` in `format`, ending in a newline.
fn export(key: &PublicKey, format: Format) -> Result<String> {
    Ok(match format {
        Format::Line => format!("{key}\n"),
        Format::Pem => ed25519_dalek::VerifyingKey::from_bytes(key.as_bytes())
            .context("the key is not an ed25519 point")?
            .to_public_key_pem(LineEnding::LF)
            .context("encoding the key as PEM")?,
        Format::Sslib => {
            let doc = serde_json::json!({
                "keyid": key.key_id().hex(),
                "keytype": "ed25519",
                "scheme": "ed25519",
                "keyval": { "public": hex::encode(key.as_bytes()) },
            });
            format!("{}\n", serde_json::to_string_pretty(&doc)?)
        }
    })
}

/// Refuses a key path inside a git working tree (any repository, not only this one) unless
/// git ignores it.
fn refuse_tracked_location(out: &Path) -> Result<()> {
    let abs = std::path::absolute(out)?;
    let parent = abs.parent().context("--out has no parent folder")?;
    let parent = std::fs::canonicalize(parent)
        .with_context(|| format!("folder {} does not exist", parent.display()))?;
    let target = parent.join(abs.file_name().context("--out names no file")?);
    if target.exists() {
        bail!("{} exists; keygen never overwrites a key", target.display());
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&parent)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let in_work_tree = git(&["rev-parse", "--is-inside-work-tree"]);
    if in_work_tree && !git(&["check-ignore", "-q", &target.to_string_lossy()]) {
        return Err(fail(
            format!(
                "refusing to write a private key to {}: it is inside the working tree and not ignored by git",
                target.display()
            ),
            "write the key outside the repository (e.g. ~/.config/cuda-aot/keys/), or into an ignored folder such as .cuda-aot/",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_is_the_rfc_8410_subject_public_key_info_of_the_key() {
        let key = crate::devkeys::generate().unwrap().public();
        let pem = export(&key, Format::Pem).unwrap();
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        use base64::Engine as _;
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap();
        // SEQUENCE { SEQUENCE { OID 1.3.101.112 }, BIT STRING { key } } (RFC 8410 §4).
        let mut want = hex::decode("302a300506032b6570032100").unwrap();
        want.extend_from_slice(key.as_bytes());
        assert_eq!(der, want);
        assert!(pem.starts_with("-----BEGIN PUBLIC KEY-----\n"));
    }

    #[test]
    fn sslib_keyid_is_the_id_cuda_aot_signs_with() {
        let key = crate::devkeys::generate().unwrap().public();
        let doc: serde_json::Value =
            serde_json::from_str(&export(&key, Format::Sslib).unwrap()).unwrap();
        assert_eq!(doc["keyid"], key.key_id().hex());
        assert_eq!(doc["keyval"]["public"], hex::encode(key.as_bytes()));
        assert_eq!(export(&key, Format::Line).unwrap(), format!("{key}\n"));
    }
}
