//! Delegated team metadata in a registry folder, with real envelopes (issue 46): the search
//! for a module's owner reads `teams/<version>.<role>.json` through [`RegistryTeams`], each
//! checked against the length and blake3 the index lists and signed by a threshold of the
//! keys its delegator gave the team, counted by the trust root's one counting function:
//! another team's key, one signature repeated against a threshold of two (tough
//! CVE-2026-6966) and an over-long file are refused, each with the exact reason.

use std::collections::BTreeMap;

use cuda_aot::delegation::walk::{Listed, MetadataRefusal};
use cuda_aot::delegation::{Delegation, Refusal, RegistryTeams, TeamMetadata, walk};
use cuda_aot::envelope::Envelope;
use cuda_aot::keys::SecretKey;
use cuda_aot::metadata::{Role, Time, sign_doc};
use cuda_aot::name::ModuleName;
use cuda_aot::source::DirSource;
use cuda_aot::source::layout;
use cuda_aot::trust::{VerifiedRoot, verify_anchor};
use cuda_aot_testkit::Fixture;

fn secret() -> SecretKey {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).unwrap();
    SecretKey::from_seed(seed)
}

fn role(keys: &[&SecretKey], threshold: u32) -> Role {
    Role {
        keys: keys.iter().map(|k| k.public()).collect(),
        threshold,
    }
}

fn delegation(name: &str, paths: &[&str], publisher: Role) -> Delegation {
    Delegation {
        name: name.into(),
        paths: paths.iter().map(|p| p.to_string()).collect(),
        terminating: false,
        publisher,
        builder: role(&[&secret()], 1),
        reviewer: role(&[&secret()], 1),
    }
}

fn metadata(name: &str, modules: &[&str]) -> TeamMetadata {
    TeamMetadata {
        schema: TeamMetadata::SCHEMA.into(),
        name: name.into(),
        version: 1,
        expires: Time::now().plus(std::time::Duration::from_secs(86_400)),
        modules: modules
            .iter()
            .map(|m| ModuleName::new(m).unwrap())
            .collect(),
        delegations: vec![],
    }
}

/// A registry folder holding the envelopes given, listed as they are.
struct Teams {
    dir: tempfile::TempDir,
    listed: BTreeMap<String, Listed>,
}

impl Teams {
    fn new() -> Teams {
        Teams {
            dir: tempfile::tempdir().unwrap(),
            listed: BTreeMap::new(),
        }
    }
    fn put(&mut self, name: &str, env: &Envelope) {
        let bytes = env.to_bytes();
        let path = self
            .dir
            .path()
            .join(layout::team(&cuda_aot::Digest::of(&bytes)));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        self.listed.insert(
            name.into(),
            Listed {
                version: 1,
                length: bytes.len() as u64,
                blake3: *blake3::hash(&bytes).as_bytes(),
            },
        );
    }
    fn owner(
        &self,
        root: &VerifiedRoot,
        top: &[Delegation],
        module: &str,
        limit: u64,
    ) -> Result<Option<Vec<String>>, Refusal> {
        let src = DirSource::new(self.dir.path());
        let repo = RegistryTeams::new(
            &src,
            root,
            self.listed.clone(),
            BTreeMap::new(),
            Time::now(),
            limit,
        );
        walk(module, top, "delegations", &repo).map(|o| o.map(|o| o.chain))
    }
}

fn root() -> VerifiedRoot {
    let f = Fixture::new();
    verify_anchor(&f.root_file, &Default::default(), "trust root").unwrap()
}

#[test]
fn issue_46_team_metadata_is_verified_with_its_delegators_keys_in_real_envelopes() {
    let root = root();
    let (a, b) = (secret(), secret());
    let top = vec![
        delegation("risc0", &["risc0_*"], role(&[&a], 1)),
        delegation("airbender", &["airbender_*"], role(&[&b], 1)),
    ];
    let mut teams = Teams::new();
    teams.put(
        "risc0",
        &sign_doc(&metadata("risc0", &["risc0_poseidon"]), &[&a]),
    );
    teams.put(
        "airbender",
        &sign_doc(&metadata("airbender", &["airbender_ntt"]), &[&b]),
    );
    assert_eq!(
        teams.owner(&root, &top, "risc0_poseidon", 1 << 20).unwrap(),
        Some(vec!["risc0".to_string()])
    );
    assert_eq!(
        teams.owner(&root, &top, "airbender_ntt", 1 << 20).unwrap(),
        Some(vec!["airbender".to_string()])
    );
    assert_eq!(
        teams.owner(&root, &top, "risc0_other", 1 << 20).unwrap(),
        None
    );

    // Team airbender's key signing risc0's metadata: refused, naming the role and its
    // delegator, the signature counted by the trust root's function.
    teams.put(
        "risc0",
        &sign_doc(&metadata("risc0", &["risc0_poseidon"]), &[&b]),
    );
    match teams
        .owner(&root, &top, "risc0_poseidon", 1 << 20)
        .unwrap_err()
    {
        Refusal::Metadata {
            role,
            delegator,
            refusal: MetadataRefusal::Signatures(why),
        } => {
            assert_eq!(
                (role.as_str(), delegator.as_str()),
                ("risc0", "delegations")
            );
            assert!(
                why.contains("signed by 0 of the 1 required key(s) its delegator lists"),
                "{why}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn issue_46_one_signature_twice_never_meets_a_threshold_of_two() {
    // tough CVE-2026-6966, with the registry's own envelope and counting.
    let root = root();
    let (k1, k2) = (secret(), secret());
    let top = vec![delegation("risc0", &["risc0_*"], role(&[&k1, &k2], 2))];
    let mut env = sign_doc(&metadata("risc0", &["risc0_poseidon"]), &[&k1]);
    let twice = env.signatures[0].clone();
    env.signatures.push(twice);
    let mut teams = Teams::new();
    teams.put("risc0", &env);
    match teams
        .owner(&root, &top, "risc0_poseidon", 1 << 20)
        .unwrap_err()
    {
        Refusal::Metadata {
            refusal: MetadataRefusal::Signatures(why),
            ..
        } => assert!(why.contains("signed by 1 of the 2 required"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Both keys: accepted.
    let mut env = sign_doc(&metadata("risc0", &["risc0_poseidon"]), &[&k1]);
    env.add_signature(&k2).unwrap();
    teams.put("risc0", &env);
    assert!(
        teams
            .owner(&root, &top, "risc0_poseidon", 1 << 20)
            .unwrap()
            .is_some()
    );
}

#[test]
fn issue_46_over_long_team_metadata_is_refused_before_its_signatures_are_read() {
    let root = root();
    let a = secret();
    let top = vec![delegation("risc0", &["risc0_*"], role(&[&a], 1))];
    let mut teams = Teams::new();
    teams.put(
        "risc0",
        &sign_doc(&metadata("risc0", &["risc0_poseidon"]), &[&a]),
    );
    let length = teams.listed["risc0"].length;
    // A verifier that takes at most 100 bytes of team metadata reads 101 and stops.
    match teams.owner(&root, &top, "risc0_poseidon", 100).unwrap_err() {
        Refusal::Metadata {
            refusal: MetadataRefusal::Length { listed, found },
            ..
        } => assert_eq!((listed, found), (length, 101)),
        other => panic!("{other:?}"),
    }
}
