//! What a runtime accepts and how it loads ([`Policy`]), and where it keeps its rollback
//! state ([`RollbackState`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::bundle::Embedded;
use crate::cuda::LoadApi;
use crate::error::{Error, Result};
use crate::identity::Channel;
use crate::limits::Limits;
use crate::manifest::Manifest;
use crate::state::TrustState;

/// Where the runtime keeps its rollback-protection state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollbackState {
    /// The per-user default ([`TrustState::default_path`]): one file per registry under
    /// `$XDG_STATE_HOME/cuda-aot/trust/` (or `~/.local/state/cuda-aot/trust/`).
    PerUser,
    /// This file.
    File(PathBuf),
    /// No state is kept: rollback is only caught against [`Policy::minimum_versions`].
    /// Explicit, and logged as a warning at every open.
    Disabled,
}

/// What a runtime accepts and how it loads.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The channel the registry must be signed for (`Production` refuses dev keys).
    pub channel: Channel,
    /// Allow PTX (driver JIT) for modules without an exact cubin: the labelled
    /// compatibility mode. Off in production.
    pub allow_ptx: bool,
    /// Prefer the arch-specific cubin (`sm_90a`) over the plain one on its own device.
    pub prefer_arch_specific: bool,
    /// Driver entry point used to load modules.
    pub load_api: LoadApi,
    /// CUDA device ordinal.
    pub device: usize,
    /// Rollback protection: on by default, with the state in a per-user file.
    pub rollback: RollbackState,
    /// Versions below which nothing is accepted even without saved state (a prover can
    /// compile in the release it was built against).
    pub minimum_versions: TrustState,
    /// Accepted clock skew past expiry (explicit; logged at open).
    pub clock_skew: Duration,
    /// Offline grace: an expired timestamp is still accepted this long after the last
    /// fresh verification recorded in the rollback state, with a warning naming the
    /// deadline. Zero by default.
    pub offline_grace: Duration,
    /// Byte caps.
    pub limits: Limits,
    /// Admit research modules (NVRTC builds, channel `research`) beside the registry's
    /// modules: only [`Policy::research`] does; production and development never do.
    pub allow_research: bool,
}

impl Policy {
    /// Production: production-signed registries only, cubins only, exact SM.
    pub fn production() -> Policy {
        Policy {
            channel: Channel::Production,
            allow_ptx: false,
            prefer_arch_specific: true,
            load_api: LoadApi::Module,
            device: 0,
            rollback: RollbackState::PerUser,
            minimum_versions: TrustState::default(),
            clock_skew: Duration::ZERO,
            offline_grace: Duration::ZERO,
            limits: Limits::default(),
            allow_research: false,
        }
    }
    /// Development: dev-signed registries (e.g. from `cargo xtask release` on a fresh clone).
    pub fn development() -> Policy {
        Policy {
            channel: Channel::Dev,
            ..Policy::production()
        }
    }
    /// Research: a development registry plus research modules compiled with NVRTC
    /// (`Runtime::load_research`, feature `research`), each labelled `research` in its
    /// manifest, its log lines and the `research_loads` counter. Never for production.
    pub fn research() -> Policy {
        Policy {
            allow_research: true,
            ..Policy::development()
        }
    }
    /// Whether this policy accepts a module of `manifest`'s channel: the registry's channel
    /// for registry modules; research modules only under [`Policy::research`] (never with
    /// the production channel).
    pub fn admit(&self, manifest: &Manifest) -> Result<()> {
        let name = match (self.channel, self.allow_research) {
            (Channel::Production, _) => "production",
            (_, true) => "research",
            _ => "development",
        };
        match manifest.channel {
            Channel::Research if self.allow_research && self.channel == Channel::Dev => Ok(()),
            Channel::Research => Err(Error::ResearchRefused {
                module: manifest.identity.module.to_string(),
                target: manifest.identity.sm.to_string(),
                origin: manifest.identity.toolkit.nvcc.clone(),
                policy: name.into(),
            }),
            c if c == self.channel => Ok(()),
            c => Err(Error::Channel {
                what: manifest.label(),
                required: self.channel.to_string(),
                found: c.to_string(),
            }),
        }
    }
    /// The same policy with the PTX compatibility mode allowed.
    pub fn with_ptx_compatibility(self) -> Policy {
        Policy {
            allow_ptx: true,
            ..self
        }
    }
    /// The same policy keeping its rollback state in `path`.
    pub fn with_state_file(self, path: impl Into<PathBuf>) -> Policy {
        Policy {
            rollback: RollbackState::File(path.into()),
            ..self
        }
    }
    /// The same policy keeping no rollback state (logged as a warning at every open).
    pub fn without_rollback_protection(self) -> Policy {
        Policy {
            rollback: RollbackState::Disabled,
            ..self
        }
    }
    /// The same policy with an offline grace period for expired timestamps.
    pub fn with_offline_grace(self, grace: Duration) -> Policy {
        Policy {
            offline_grace: grace,
            ..self
        }
    }
    /// The rollback-state file this policy uses for `registry`, if any.
    pub fn state_path(&self, registry: &Path) -> Result<Option<PathBuf>> {
        self.state_path_with(|dir| TrustState::file_in(dir, registry))
    }

    /// The rollback-state file this policy uses for an embedded bundle, if any: one per
    /// trust root and registry the bundle was fetched from, so a program built later with
    /// an older release of that registry is refused as a rollback.
    pub fn embedded_state_path(&self, bundle: &Embedded) -> Result<Option<PathBuf>> {
        let key = format!(
            "embedded bundle\n{}\n{}",
            bundle.trust_root().hex(),
            bundle.origin()
        );
        self.state_path_with(|dir| TrustState::file_for_key(dir, key.as_bytes()))
    }

    fn state_path_with(&self, per_user: impl Fn(&Path) -> PathBuf) -> Result<Option<PathBuf>> {
        match &self.rollback {
            RollbackState::File(p) => Ok(Some(p.clone())),
            RollbackState::Disabled => Ok(None),
            RollbackState::PerUser => TrustState::default_dir()
                .map(|dir| Some(per_user(&dir)))
                .ok_or_else(|| Error::Missing {
                    what: "per-user folder for the rollback state (HOME is not set)".into(),
                    path: "$XDG_STATE_HOME or $HOME".into(),
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;
    use crate::runtime::tests::m;

    /// Issue 7: research modules (NVRTC builds, channel research) are refused by the
    /// production and development policies, before any driver call; only the research
    /// policy admits them, and never a production-channel one.
    #[test]
    fn issue_7_a_research_channel_module_under_the_production_policy_is_refused() {
        let mut research = m("sm_90", Kind::Cubin);
        research.channel = Channel::Research;
        research.identity.toolkit.nvcc = "NVRTC 13.0".into();
        for (policy, name) in [
            (Policy::production(), "production"),
            (Policy::development(), "development"),
            (
                Policy {
                    allow_research: true,
                    ..Policy::production()
                },
                "production",
            ),
        ] {
            let err = policy.admit(&research).unwrap_err();
            assert!(
                matches!(&err, Error::ResearchRefused { module, target, origin, policy }
                    if module == "ntt" && target == "sm_90" && origin == "NVRTC 13.0" && policy == name),
                "{err}"
            );
            assert!(err.to_string().contains("channel research"), "{err}");
            assert!(
                err.fix().contains("cargo xtask promote ntt"),
                "{}",
                err.fix()
            );
        }
        Policy::research().admit(&research).unwrap();
        // Registry modules: the policy's own channel only.
        let dev = m("sm_90", Kind::Cubin);
        Policy::development().admit(&dev).unwrap();
        Policy::research().admit(&dev).unwrap();
        assert!(matches!(
            Policy::production().admit(&dev).unwrap_err(),
            Error::Channel { .. }
        ));
        assert_eq!(Channel::Research.to_string(), "research");
    }
}
