//! Signatures that did not count toward a threshold ([`ForeignSignature`]), and how a
//! threshold refusal describes them (another trust root, another role, an invalid signature).

use crate::role::RoleName;

/// When no key of the role signed and every signature came from a key the trust root does
/// not know, the registry was most likely signed under another trust root: name both sets.
pub(super) fn describe_other_root(
    valid: usize,
    foreign: &[ForeignSignature],
    trusted: &[String],
    role: RoleName,
) -> String {
    if valid > 0 || !all_unknown(foreign) {
        return String::new();
    }
    let signed: Vec<&str> = foreign.iter().map(|f| f.key.as_str()).collect();
    format!(
        ". It looks signed under another trust root: signed by {}, while this trust root's {role} key(s) are {}",
        signed.join(", "),
        trusted.join(", ")
    )
}

/// Some signatures, and every one by a key no role of the trust root holds.
pub(super) fn all_unknown(foreign: &[ForeignSignature]) -> bool {
    !foreign.is_empty()
        && foreign
            .iter()
            .all(|f| f.signer == ForeignSigner::UnknownKey)
}

/// A signature that did not count toward a threshold, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignSignature {
    /// The short key id (from the file, escaped: only a hint).
    pub key: String,
    /// What the key is to the trust root.
    pub signer: ForeignSigner,
}

/// What the key of a signature that did not count is, to the trust root used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForeignSigner {
    /// A key of the required role whose signature does not verify.
    InvalidSignature,
    /// A key of another role (its signature verifies).
    OtherRole(RoleName),
    /// A key no role of this trust root lists.
    UnknownKey,
}

impl ForeignSignature {
    /// "`<key>` (what it is)", for a signature that did not count toward `role`'s threshold.
    pub fn describe(&self, role: RoleName) -> String {
        let is = match self.signer {
            ForeignSigner::InvalidSignature => format!("{role} key, invalid signature"),
            ForeignSigner::OtherRole(r) => format!("a {r} key, not a {role} key"),
            ForeignSigner::UnknownKey => "unknown key".to_string(),
        };
        format!("{} ({is})", self.key)
    }
}

/// "; also signed by ...": the signatures that did not count toward `role`'s threshold.
pub(super) fn describe_foreign(foreign: &[ForeignSignature], role: RoleName) -> String {
    if foreign.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = foreign.iter().map(|f| f.describe(role)).collect();
    format!("; also signed by {}", parts.join(", "))
}
