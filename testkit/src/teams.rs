//! Delegated publishing in a test registry (issue 46): generated team keys, a trust root
//! with a delegations role, delegations put in force in the fixture's registry, and a
//! team's release published with the real publisher as that team.

use std::time::Duration;

use cuda_aot::delegation::{Delegation, TeamMetadata};
use cuda_aot::metadata::{Role, Time};
use cuda_aot::verify::DELEGATIONS;
use cuda_aot::{Channel, Limits, SecretKey};
use cuda_aot_registry::publish::{Delegated, TeamPublish, publish_as, publish_delegations};
use cuda_aot_registry::{PublishOptions, Published, Release};

use crate::blobs::Module;
use crate::build::Build;
use crate::keys::{Keys, key, root_payload, sign_doc, sign_root};
use crate::registry::Fixture;

/// One team's generated keys, one of each role.
pub struct TeamKeys {
    /// The delegated role's name.
    pub name: String,
    /// Signs the team's metadata.
    pub publisher: SecretKey,
    /// Signs the team's build statements.
    pub builder: SecretKey,
    /// Signs the team's promotion records.
    pub reviewer: SecretKey,
}

fn one(k: &SecretKey) -> Role {
    Role {
        keys: vec![k.public()],
        threshold: 1,
    }
}

impl TeamKeys {
    /// New keys for team `name`.
    pub fn new(name: &str) -> TeamKeys {
        TeamKeys {
            name: name.into(),
            publisher: key(),
            builder: key(),
            reviewer: key(),
        }
    }

    /// The team's delegation of `paths` (terminating), one key and threshold 1 per role.
    pub fn delegation(&self, paths: &[&str]) -> Delegation {
        Delegation {
            name: self.name.clone(),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            terminating: true,
            publisher: one(&self.publisher),
            builder: one(&self.builder),
            reviewer: one(&self.reviewer),
        }
    }
}

/// A fixture whose trust root names a delegations role, with the delegations it signed in
/// force in the registry.
pub struct Delegations {
    /// The registry, its keys and trust root.
    pub fixture: Fixture,
    /// The delegations role's key.
    pub key: SecretKey,
    /// The teams, in search order.
    pub teams: Vec<TeamKeys>,
}

impl Delegations {
    /// An empty registry under a root of `channel` with a delegations role, and
    /// delegations v1 handing each `(team, patterns)` to that team's generated keys, put
    /// in force by the real publisher.
    pub fn new(channel: Channel, teams: &[(&str, &[&str])]) -> Delegations {
        let keys = Keys::new();
        let delegations_key = key();
        let mut root = root_payload(&keys, 1, channel);
        root.delegations = Some(one(&delegations_key));
        let root_file = sign_root(&root, &[&keys.root]);
        let fixture = Fixture::with_root(keys, root_file, channel);
        let team_keys: Vec<TeamKeys> = teams.iter().map(|(n, _)| TeamKeys::new(n)).collect();
        let list = team_keys
            .iter()
            .zip(teams)
            .map(|(t, (_, paths))| t.delegation(paths))
            .collect();
        let d = Delegations {
            fixture,
            key: delegations_key,
            teams: team_keys,
        };
        d.put_in_force(&d.sign_delegations(1, list)).unwrap();
        d
    }

    /// Delegations version `version` listing `list`, signed with the delegations key.
    pub fn sign_delegations(&self, version: u64, list: Vec<Delegation>) -> Vec<u8> {
        let doc = TeamMetadata {
            schema: TeamMetadata::SCHEMA.into(),
            name: DELEGATIONS.into(),
            version,
            expires: Time::now().plus(Duration::from_secs(86_400)),
            modules: Vec::new(),
            delegations: list,
        };
        sign_doc(&doc, &[&self.key])
    }

    /// Puts the signed delegations `file` in force with the real publisher.
    pub fn put_in_force(&self, file: &[u8]) -> cuda_aot_registry::Result<Published> {
        publish_delegations(
            &self.fixture.registry(),
            &self.fixture.root_file,
            file,
            &[&self.fixture.keys.publisher],
            &PublishOptions::default(),
        )
    }

    /// Publishes `mods` as the release of team number `team`: its builder signs the build
    /// statement and its publisher its metadata.
    pub fn publish_team(
        &self,
        team: usize,
        mods: &[Module],
    ) -> cuda_aot_registry::Result<Published> {
        let t = &self.teams[team];
        self.publish_as_team(t, Build::new(mods, &[&t.builder]), None)
    }

    /// [`Delegations::publish_team`] with `opts` (an index lifetime, say: the team's
    /// metadata is signed to expire with the index).
    pub fn publish_team_with(
        &self,
        team: usize,
        mods: &[Module],
        opts: &PublishOptions,
    ) -> cuda_aot_registry::Result<Published> {
        let t = &self.teams[team];
        self.publish_signed(t, Build::new(mods, &[&t.builder]), None, opts)
    }

    /// Publishes `build` (signed by whoever the test chose) as team `t`'s release, with the
    /// real publisher's checks, putting the signed delegations `delegations` in force with
    /// it when given (a team rotating its keys).
    pub fn publish_as_team(
        &self,
        t: &TeamKeys,
        build: Build,
        delegations: Option<Vec<u8>>,
    ) -> cuda_aot_registry::Result<Published> {
        self.publish_signed(t, build, delegations, &PublishOptions::default())
    }

    fn publish_signed(
        &self,
        t: &TeamKeys,
        build: Build,
        delegations: Option<Vec<u8>>,
        opts: &PublishOptions,
    ) -> cuda_aot_registry::Result<Published> {
        let f = &self.fixture;
        let root = cuda_aot::trust::verify_anchor(&f.root_file, &Limits::default(), "root")?;
        let d = t.delegation(&[]);
        let release = Release {
            build: build.signed(&root.for_team(&d.builder, &d.reviewer))?,
            promotions: Vec::new(),
        };
        let delegated = Delegated {
            delegations,
            team: Some(TeamPublish {
                name: t.name.clone(),
                keys: vec![&t.publisher],
                delegations: None,
            }),
        };
        publish_as(
            &f.registry(),
            &f.root_file,
            &release,
            &[&f.keys.publisher],
            &delegated,
            opts,
        )
    }
}
