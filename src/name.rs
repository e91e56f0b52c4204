//! Validated names: module names, compile targets (`sm_90`, `sm_90a`, `compute_90`) and
//! kernel entry points. A value of these types cannot hold `..`, `/`, NUL or escapes.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// A module name: 1-64 characters of `a-z`, `0-9` and `_`, starting with a letter.
///
/// Module names become registry paths and log fields, so the charset is closed: no `.`,
/// `/`, `%`, whitespace, NUL or upper case (which would collide on case-insensitive stores).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModuleName(String);

impl ModuleName {
    /// Validates `s` as a module name.
    pub fn new(s: &str) -> Result<Self, Error> {
        let bad = |reason| {
            Err(Error::InvalidName {
                kind: "module name",
                value: s.escape_debug().to_string(),
                reason,
            })
        };
        if s.is_empty() || s.len() > 64 {
            return bad("must be 1 to 64 characters");
        }
        if !s.as_bytes()[0].is_ascii_lowercase() {
            return bad("must start with a lower-case letter");
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return bad("only a-z, 0-9 and _ are allowed (no '.', '/', '%', spaces or NUL)");
        }
        Ok(ModuleName(s.to_string()))
    }
    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A kernel symbol: a C identifier (an `extern "C"` name or an Itanium-mangled C++ name)
/// of at most [`FunctionName::MAX`] characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FunctionName(String);

impl FunctionName {
    /// Longest accepted symbol (mangled template names grow long).
    pub const MAX: usize = 4096;
    /// Validates `s` as a C identifier.
    pub fn new(s: &str) -> Result<Self, Error> {
        if !is_c_identifier(s) {
            return Err(Error::InvalidName {
                kind: "function name",
                value: s.escape_debug().to_string(),
                reason: "must be a C identifier of at most 4096 characters",
            });
        }
        Ok(FunctionName(s.to_string()))
    }
    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The symbol of a device global (`__constant__` / `__device__` variable) as the driver
/// looks it up (`cuModuleGetGlobal`): a C identifier (a plain name or an Itanium-mangled one
/// such as `_ZN8poseidon15ROUND_CONSTANTSE`) of at most [`FunctionName::MAX`] characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GlobalName(String);

impl GlobalName {
    /// Validates `s` as a C identifier.
    pub fn new(s: &str) -> Result<Self, Error> {
        if !is_c_identifier(s) {
            return Err(Error::InvalidName {
                kind: "global symbol",
                value: s.escape_debug().to_string(),
                reason: "must be a C identifier of at most 4096 characters",
            });
        }
        Ok(GlobalName(s.to_string()))
    }
    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `s` is a C identifier of at most [`FunctionName::MAX`] characters.
fn is_c_identifier(s: &str) -> bool {
    let ok_start = s
        .as_bytes()
        .first()
        .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_');
    ok_start
        && s.len() <= FunctionName::MAX
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A demangled C++ name: a kernel's name or signature (`ntt::bit_rev<gl64_t>`,
/// `ntt::bit_rev<gl64_t>(gl64_t*, unsigned int)`) or a device global's
/// (`poseidon::ROUND_CONSTANTS`): 1 to 4096 printable ASCII characters, so it can carry no
/// terminal escape, newline or NUL.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelName(String);

impl KernelName {
    /// Validates `s`.
    pub fn new(s: &str) -> Result<Self, Error> {
        if s.is_empty()
            || s.len() > FunctionName::MAX
            || !s.bytes().all(|b| (0x20..0x7f).contains(&b))
        {
            return Err(Error::InvalidName {
                kind: "kernel name",
                value: s.escape_debug().to_string(),
                reason: "must be 1 to 4096 printable ASCII characters",
            });
        }
        Ok(KernelName(s.to_string()))
    }
    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A compile target: a real SM (`sm_90`, arch-specific `sm_90a`) or a virtual
/// architecture for PTX (`compute_90`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    /// Compute capability major (9 for sm_90).
    pub major: u32,
    /// Compute capability minor (0 for sm_90).
    pub minor: u32,
    /// The arch-specific variant (`a` suffix): runs only on exactly this compute capability.
    pub arch_specific: bool,
    /// The family-specific variant (`f` suffix, CUDA 12.9+: `sm_100f`, `sm_103f`,
    /// `sm_120f`): runs on devices of the same major version with at least this minor.
    /// A cubin's ELF header does not record it (it reads as the plain SM), so only the
    /// signed manifest says a build is `f`.
    pub family_specific: bool,
    /// A virtual architecture (`compute_XX`), i.e. PTX.
    pub virtual_arch: bool,
}

impl Target {
    /// The real SM target for a device of compute capability `major.minor`.
    pub fn sm(major: u32, minor: u32) -> Self {
        Target {
            major,
            minor,
            arch_specific: false,
            family_specific: false,
            virtual_arch: false,
        }
    }
    /// The same target without its `a`/`f` suffix (`sm_90a` → `sm_90`): what a cubin's ELF
    /// header can record for a family build.
    pub fn base(&self) -> Self {
        Target {
            arch_specific: false,
            family_specific: false,
            ..*self
        }
    }
    /// The SM number as written in names (90 for 9.0, 120 for 12.0).
    pub fn number(&self) -> u32 {
        self.major * 10 + self.minor
    }
    /// Whether a binary for this target is an exact match for a device of compute
    /// capability `major.minor`: the same SM (sm_90 or sm_90a on a 9.0 device). A family
    /// build (`sm_100f`) is never exact: see [`Target::is_family_for`].
    pub fn is_exact_for(&self, major: u32, minor: u32) -> bool {
        !self.virtual_arch && !self.family_specific && self.major == major && self.minor == minor
    }
    /// Whether this is a family cubin (`sm_100f`) that runs on a device of compute
    /// capability `major.minor`: the same major version, a minor at least the target's
    /// (`sm_100f` on 10.0 and 10.3, `sm_103f` only on 10.3, `sm_120f` on 12.0 and 12.1).
    pub fn is_family_for(&self, major: u32, minor: u32) -> bool {
        !self.virtual_arch && self.family_specific && self.major == major && self.minor <= minor
    }
    /// Whether PTX for this virtual architecture can be JIT-compiled by the driver for a
    /// device of compute capability `major.minor`: `compute_XX` for any device from XX
    /// up, the arch-specific `compute_XXa` only for exactly XX.
    pub fn can_jit_on(&self, major: u32, minor: u32) -> bool {
        let device = major * 10 + minor;
        self.virtual_arch
            && if self.arch_specific {
                self.number() == device
            } else if self.family_specific {
                self.major == major && self.minor <= minor
            } else {
                self.number() <= device
            }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = if self.virtual_arch { "compute" } else { "sm" };
        let suffix = match (self.arch_specific, self.family_specific) {
            (true, _) => "a",
            (false, true) => "f",
            (false, false) => "",
        };
        write!(f, "{prefix}_{}{suffix}", self.number())
    }
}

impl FromStr for Target {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |reason| Error::InvalidName {
            kind: "target",
            value: s.escape_debug().to_string(),
            reason,
        };
        let (virtual_arch, rest) = if let Some(r) = s.strip_prefix("sm_") {
            (false, r)
        } else if let Some(r) = s.strip_prefix("compute_") {
            (true, r)
        } else {
            return Err(bad("must start with sm_ or compute_"));
        };
        let (digits, arch_specific, family_specific) = if let Some(d) = rest.strip_suffix('a') {
            (d, true, false)
        } else if let Some(d) = rest.strip_suffix('f') {
            (d, false, true)
        } else {
            (rest, false, false)
        };
        if digits.len() < 2
            || digits.len() > 3
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || digits.starts_with('0')
        {
            return Err(bad(
                "expected 2 or 3 digits, e.g. sm_90, sm_90a, sm_100f, sm_120, compute_90",
            ));
        }
        let n: u32 = digits.parse().map_err(|_| bad("not a number"))?;
        if family_specific && n < 100 {
            return Err(bad(
                "family targets (f suffix) exist from sm_100 on (CUDA 12.9+), e.g. sm_100f, sm_120f",
            ));
        }
        Ok(Target {
            major: n / 10,
            minor: n % 10,
            arch_specific,
            family_specific,
            virtual_arch,
        })
    }
}

macro_rules! string_serde {
    ($t:ty, $parse:expr) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $parse(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}
string_serde!(ModuleName, ModuleName::new);
string_serde!(FunctionName, FunctionName::new);
string_serde!(KernelName, KernelName::new);
string_serde!(GlobalName, GlobalName::new);
string_serde!(Target, Target::from_str);

impl fmt::Display for ModuleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl fmt::Display for KernelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl fmt::Display for GlobalName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for FunctionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_refuse_path_tricks() {
        for bad in [
            "../ntt",
            "a/b",
            "ntt\0",
            "ntt%2e%2e",
            "..",
            "",
            "Ntt",
            "9ntt",
            "a b",
            "ntt.cu",
            &"a".repeat(65),
        ] {
            let err = ModuleName::new(bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidName {
                        kind: "module name",
                        ..
                    }
                ),
                "{bad:?}: {err}"
            );
        }
        assert_eq!(
            ModuleName::new("merkle_sha256").unwrap().as_str(),
            "merkle_sha256"
        );
    }

    #[test]
    fn targets_round_trip_and_compare() {
        for s in [
            "sm_80",
            "sm_90",
            "sm_90a",
            "sm_100",
            "sm_120",
            "compute_90",
            "sm_100a",
        ] {
            assert_eq!(s.parse::<Target>().unwrap().to_string(), s);
        }
        for bad in [
            "sm_9", "sm_090", "sm90", "sm_90b", "compute_", "sm_1000", "sm_9x",
        ] {
            assert!(bad.parse::<Target>().is_err(), "{bad}");
        }
        let a: Target = "sm_90a".parse().unwrap();
        assert!(a.is_exact_for(9, 0) && !a.is_exact_for(8, 0));
        assert!(!"compute_90".parse::<Target>().unwrap().is_exact_for(9, 0));
        assert_eq!("sm_120".parse::<Target>().unwrap(), Target::sm(12, 0));
        let ptx80: Target = "compute_80".parse().unwrap();
        assert!(ptx80.can_jit_on(8, 0) && ptx80.can_jit_on(9, 0) && !ptx80.can_jit_on(7, 5));
        let ptx90a: Target = "compute_90a".parse().unwrap();
        assert!(ptx90a.can_jit_on(9, 0) && !ptx90a.can_jit_on(10, 0));
        assert!(!"sm_80".parse::<Target>().unwrap().can_jit_on(9, 0));
    }

    #[test]
    fn family_targets_parse_and_run_only_in_their_family() {
        for s in ["sm_100f", "sm_103f", "sm_120f", "compute_100f"] {
            assert_eq!(s.parse::<Target>().unwrap().to_string(), s);
        }
        assert!(
            "sm_90f".parse::<Target>().is_err(),
            "no family targets before sm_100"
        );
        let f100: Target = "sm_100f".parse().unwrap();
        assert!(f100.family_specific && !f100.arch_specific);
        assert_eq!(f100.base().to_string(), "sm_100");
        assert!(
            !f100.is_exact_for(10, 0),
            "a family build is never the exact cubin"
        );
        assert!(f100.is_family_for(10, 0) && f100.is_family_for(10, 3));
        assert!(!f100.is_family_for(12, 0) && !f100.is_family_for(9, 0));
        let f103: Target = "sm_103f".parse().unwrap();
        assert!(f103.is_family_for(10, 3) && !f103.is_family_for(10, 0));
        let f120: Target = "sm_120f".parse().unwrap();
        assert!(f120.is_family_for(12, 1) && !f120.is_family_for(10, 0));
        assert!(!"sm_100".parse::<Target>().unwrap().is_family_for(10, 0));
        let p: Target = "compute_100f".parse().unwrap();
        assert!(p.can_jit_on(10, 3) && !p.can_jit_on(12, 0));
    }

    #[test]
    fn function_names_are_c_identifiers() {
        assert!(FunctionName::new("gl_add").is_ok());
        assert!(FunctionName::new("_Z3addPy").is_ok());
        assert!(FunctionName::new("a-b").is_err());
        assert!(FunctionName::new("1a").is_err());
        assert!(FunctionName::new("").is_err());
    }
}
