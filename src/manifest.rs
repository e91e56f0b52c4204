//! The module manifest: the signed document that says what one blob is (its identity, digest,
//! size, kernels with their launch ABI, globals and channel), and its schema rule.

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::identity::{Channel, Function, Global, Identity, Kind};

/// The payload of a signed module manifest: the identity plus what the build produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`Manifest::SCHEMA`].
    pub schema: String,
    /// The build inputs (nested: serde cannot deny unknown fields through `flatten`).
    pub identity: Identity,
    /// blake3 of the blob bytes.
    pub module_digest: Digest,
    /// Blob size in bytes.
    pub size: u64,
    /// Kernel entry points, read from the cubin's symbol table.
    pub functions: Vec<Function>,
    /// Device globals the module defines ([`Global`]): required in schema v2 (possibly
    /// empty), absent in v1 manifests, which predate signed globals and still verify as
    /// before (their globals are not checked, and [`crate::Module::global`] refuses them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub globals: Option<Vec<Global>>,
    /// The trust channel this manifest was built for.
    pub channel: Channel,
}

impl Manifest {
    /// The schema tag of the manifest format the builder writes (with `globals`).
    pub const SCHEMA: &'static str = "cuda-aot/manifest/v2";
    /// The first manifest format, without `globals`: still read and verified.
    pub const SCHEMA_V1: &'static str = "cuda-aot/manifest/v1";

    /// The one schema rule of manifests, applied by the verifier and the publisher: v2 with
    /// a `globals` list, or v1 without one. `Err`: what is wrong, for the caller's error.
    pub fn check_schema(&self) -> std::result::Result<(), String> {
        let schema = crate::error::escape_untrusted(&self.schema);
        match (self.schema.as_str(), self.globals.is_some()) {
            (Self::SCHEMA, true) | (Self::SCHEMA_V1, false) => Ok(()),
            (Self::SCHEMA, false) => Err(format!("schema {schema:?} requires a `globals` list")),
            (Self::SCHEMA_V1, true) => Err(format!(
                "schema {schema:?} has no `globals` field (signed globals are schema {:?})",
                Self::SCHEMA
            )),
            _ => Err(format!(
                "schema {schema:?}, expected {:?} (or {:?})",
                Self::SCHEMA,
                Self::SCHEMA_V1
            )),
        }
    }

    /// `module sm (kind)`, the label used in errors and tables.
    pub fn label(&self) -> String {
        let id = &self.identity;
        match id.kind {
            Kind::Cubin => format!("{} {}", id.module, id.sm),
            Kind::Ptx => format!("{} {} (ptx, compatibility mode)", id.module, id.sm),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::GlobalSpace;
    use crate::identity::tests::{global, sample_identity};
    use crate::identity::{LaunchAbi, Param};
    use crate::name::{FunctionName, KernelName};

    #[test]
    fn manifest_round_trips_and_refuses_unknown_fields() {
        let m = Manifest {
            schema: Manifest::SCHEMA.into(),
            identity: sample_identity(),
            module_digest: Digest::of(b"blob"),
            size: 4,
            functions: vec![Function {
                symbol: FunctionName::new("ntt_butterfly").unwrap(),
                name: KernelName::new("ntt_butterfly").unwrap(),
                signature: None,
                abi: LaunchAbi {
                    params: vec![Param { offset: 0, size: 8 }, Param { offset: 8, size: 8 }],
                    param_bytes: 16,
                    registers: Some(24),
                    ..Default::default()
                },
            }],
            globals: Some(Vec::new()),
            channel: Channel::Dev,
        };
        let bytes = crate::json::to_vec(&m);
        let back: Manifest = crate::json::parse(&bytes, 1 << 20, "m").unwrap();
        assert_eq!(back, m);
        let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        v["extra"] = 1.into();
        let err = crate::json::parse::<Manifest>(&serde_json::to_vec(&v).unwrap(), 1 << 20, "m")
            .unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }

    /// Issue 19, item 4: v1 manifests (no `globals`) still parse, and serialise back to the
    /// same bytes (they are signed); v2 requires the list; the one schema rule refuses a
    /// v1 manifest with globals and a v2 manifest without them.
    #[test]
    fn issue_19_v1_manifests_parse_unchanged_and_v2_requires_globals() {
        let mut m = Manifest {
            schema: Manifest::SCHEMA_V1.into(),
            identity: sample_identity(),
            module_digest: Digest::of(b"blob"),
            size: 4,
            functions: vec![],
            globals: None,
            channel: Channel::Dev,
        };
        let v1 = crate::json::to_vec(&m);
        assert!(!String::from_utf8_lossy(&v1).contains("globals"));
        let back: Manifest = crate::json::parse(&v1, 1 << 20, "m").unwrap();
        assert_eq!((back.globals.as_ref(), back.check_schema()), (None, Ok(())));
        assert_eq!(crate::json::to_vec(&back), v1);
        m.schema = Manifest::SCHEMA.into();
        assert!(
            m.check_schema()
                .unwrap_err()
                .contains("requires a `globals` list")
        );
        m.globals = Some(vec![global(
            "_ZN8poseidon3MDSE",
            "poseidon::MDS",
            64,
            GlobalSpace::Constant,
        )]);
        assert_eq!(m.check_schema(), Ok(()));
        let v2 = crate::json::to_vec(&m);
        let value: serde_json::Value = serde_json::from_slice(&v2).unwrap();
        assert_eq!(
            value["globals"],
            serde_json::json!([{"symbol": "_ZN8poseidon3MDSE", "name": "poseidon::MDS",
                "size": 64, "space": "constant", "initialised": false}])
        );
        assert_eq!(
            crate::json::parse::<Manifest>(&v2, 1 << 20, "m").unwrap(),
            m
        );
        m.schema = Manifest::SCHEMA_V1.into();
        assert!(
            m.check_schema()
                .unwrap_err()
                .contains("has no `globals` field")
        );
        m.schema = "cuda-aot/manifest/v9".into();
        assert!(m.check_schema().unwrap_err().contains("expected"));
    }
}
