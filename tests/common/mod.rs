//! Shared fixtures of the runtime crate's integration tests: generated keys, trust roots,
//! real cubins and registries published with the real publisher all come from
//! `cuda-aot-testkit`; what is the runtime's own is the loader policy of a fixture.

#![allow(dead_code)] // each test file uses a subset

pub use cuda_aot_testkit::*;

use cuda_aot::{Channel, Policy};

/// The runtime's view of a test registry.
pub trait RuntimeFixture {
    /// A policy for this fixture's registry: its channel, state in the fixture's folder.
    fn policy(&self) -> Policy;
}

impl RuntimeFixture for Fixture {
    fn policy(&self) -> Policy {
        let p = match self.channel {
            Channel::Dev => Policy::development(),
            Channel::Production => Policy::production(),
            Channel::Research => Policy::research(),
        };
        p.with_state_file(self.state_path())
    }
}
