//! The delegations spec file (`[[delegation]]` tables in TOML): what `cargo xtask
//! delegations sign` signs and `publish --team-delegations` signs into a team's metadata.

use anyhow::Result;
use cuda_aot::delegation::Delegation;
use serde::Deserialize;

use crate::advice::fail;

/// A delegations spec.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    #[serde(default)]
    delegation: Vec<Delegation>,
}

/// The delegations a spec file lists, in order (parsed, not yet checked).
pub fn read(path: &std::path::Path) -> Result<Vec<Delegation>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        fail(
            format!("{}: {e}", path.display()),
            "give the path of a delegations spec: `[[delegation]]` tables (see cargo xtask delegations --help)",
        )
    })?;
    let spec: Spec = toml::from_str(&text).map_err(|e| {
        let fix = match e.message().contains("public key") {
            true => "write each key as the one line of its `.pub` file (`ed25519:` and 64 hex digits), as cargo xtask keygen writes it",
            false => "write the spec as `[[delegation]]` tables, each with name, paths, publisher, builder and reviewer (terminating is optional; see the example in cargo xtask delegations --help)",
        };
        fail(format!("{}: {e}", path.display()), fix)
    })?;
    Ok(spec.delegation)
}
