//! The delegation rules and search against the TUF conformance suite's delegation cases
//! (tuf-conformance `test_updater_delegation_graphs.py` and neighbours) and tough's 2026
//! advisories, each asserting the exact refusal. Role metadata here is signed with real
//! ed25519 keys (generated per test) in a small test envelope; the registry's own envelope
//! is wired in with the index.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::walk::{Listed, MetadataRefusal, Repository, RoleView, load};
use super::*;
use crate::keys::{PublicKey, SecretKey};
use crate::metadata::{Role, Time};

fn secret() -> SecretKey {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).unwrap();
    SecretKey::from_seed(seed)
}

/// A team's keys: publisher, builder, reviewer (one each, threshold 1).
struct Team {
    publisher: SecretKey,
}

fn role(keys: &[&SecretKey], threshold: u32) -> Role {
    Role {
        keys: keys.iter().map(|k| k.public()).collect(),
        threshold,
    }
}

fn team() -> Team {
    Team {
        publisher: secret(),
    }
}

fn delegation(name: &str, paths: &[&str], terminating: bool, t: &Team) -> Delegation {
    Delegation {
        name: name.into(),
        paths: paths.iter().map(|p| p.to_string()).collect(),
        terminating,
        publisher: role(&[&t.publisher], 1),
        builder: role(&[&secret()], 1),
        reviewer: role(&[&secret()], 1),
    }
}

#[derive(Serialize, Deserialize)]
struct Meta {
    name: String,
    version: u64,
    expires: u64,
    modules: Vec<String>,
    delegations: Vec<Delegation>,
}

#[derive(Serialize, Deserialize)]
struct Envelope {
    payload: String,
    signatures: Vec<(String, String)>,
}

fn sign(meta: &Meta, signers: &[&SecretKey]) -> Vec<u8> {
    let payload = serde_json::to_string(meta).unwrap();
    let signatures = signers
        .iter()
        .map(|k| {
            let sig = k.sign(payload.as_bytes());
            (k.public().to_string(), hex(&sig))
        })
        .collect();
    serde_json::to_vec(&Envelope {
        payload,
        signatures,
    })
    .unwrap()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A registry of role metadata files listed by an index, the files keyed by
/// [`role_file`], each read recorded.
#[derive(Default)]
struct Repo {
    listed: HashMap<String, Listed>,
    files: HashMap<String, Vec<u8>>,
    seen: HashMap<String, u64>,
    now: u64,
    reads: RefCell<Vec<String>>,
}

impl Repo {
    fn new() -> Repo {
        Repo {
            now: 1_000,
            ..Default::default()
        }
    }
    /// Publishes version `version` of `name` (listed as it is).
    fn put(
        &mut self,
        name: &str,
        version: u64,
        modules: &[&str],
        list: Vec<Delegation>,
        by: &[&SecretKey],
    ) {
        let meta = Meta {
            name: name.into(),
            version,
            expires: 2_000,
            modules: modules.iter().map(|m| m.to_string()).collect(),
            delegations: list,
        };
        self.put_bytes(name, version, sign(&meta, by));
    }
    fn put_bytes(&mut self, name: &str, version: u64, bytes: Vec<u8>) {
        self.listed.insert(
            name.into(),
            Listed {
                version,
                length: bytes.len() as u64,
                blake3: *blake3::hash(&bytes).as_bytes(),
            },
        );
        self.files.insert(role_file(name, version), bytes);
    }
    fn visited(&self) -> Vec<String> {
        self.reads.borrow().clone()
    }
}

impl Repository for Repo {
    fn listed(&self, name: &str) -> Option<Listed> {
        self.listed.get(name).cloned()
    }
    fn read(&self, name: &str, listed: &Listed) -> Result<Vec<u8>, String> {
        self.reads.borrow_mut().push(name.to_string());
        let file = role_file(name, listed.version);
        let bytes = self.files.get(&file).ok_or(format!("{file}: missing"))?;
        Ok(bytes[..bytes.len().min(listed.length as usize + 1)].to_vec())
    }
    fn open(&self, bytes: &[u8], keys: &Role) -> Result<RoleView, String> {
        let env: Envelope = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        // Distinct keys of the role whose signature verifies.
        let mut valid = BTreeSet::new();
        for (key, sig) in &env.signatures {
            let key: PublicKey = key.parse().map_err(|e| format!("{e:?}"))?;
            let sig: Vec<u8> = (0..sig.len() / 2)
                .map(|i| u8::from_str_radix(&sig[2 * i..2 * i + 2], 16).unwrap())
                .collect();
            if keys.keys.contains(&key) && key.verify_strict(env.payload.as_bytes(), &sig) {
                valid.insert(key.key_id());
            }
        }
        if (valid.len() as u32) < keys.threshold {
            return Err(format!("{} of {} signatures", valid.len(), keys.threshold));
        }
        let meta: Meta = serde_json::from_str(&env.payload).map_err(|e| e.to_string())?;
        Ok(RoleView {
            name: meta.name,
            version: meta.version,
            expires: Time::from_unix(meta.expires),
            modules: meta.modules.into_iter().collect(),
            delegations: meta.delegations,
        })
    }
    fn seen(&self, name: &str) -> Option<u64> {
        self.seen.get(name).copied()
    }
    fn now(&self) -> Time {
        Time::from_unix(self.now)
    }
}

const TOP: &str = "delegations";

fn owner(repo: &Repo, top: &[Delegation], module: &str) -> Result<Option<Vec<String>>, Refusal> {
    repo.reads.borrow_mut().clear();
    walk(module, top, TOP, repo).map(|o| o.map(|o| o.chain))
}

#[test]
fn patterns_match_case_sensitively_and_never_across_a_separator() {
    assert!(glob_match(b"risc0_*", b"risc0_poseidon"));
    assert!(glob_match(b"risc0_?", b"risc0_a"));
    assert!(!glob_match(b"risc0_?", b"risc0_ab"));
    assert!(!glob_match(b"risc0_*", b"RISC0_poseidon"), "case-sensitive");
    assert!(
        !glob_match(b"risc0_*", b"risc0_a/b"),
        "a wildcard crossed /"
    );
    assert!(!glob_match(b"*", b"a/b"));
    assert!(!glob_match(b"a?b", b"a/b"));
    assert!(glob_match(b"*_ntt_*", b"zk_ntt_bls"));
    // Patterns no module name can match are refused, each saying why.
    let t = team();
    for (pattern, why) in [
        ("Risc0_*", "case-sensitive"),
        ("risc0/*", "no '/'"),
        ("_x*", "starting with a letter"),
        ("risc0-*", "a-z, 0-9 and _"),
        ("", "empty"),
    ] {
        let d = delegation("a", &[pattern], false, &t);
        match check_list(TOP, 1, None, &[d]) {
            Err(Refusal::MatchesNothing {
                pattern: p, reason, ..
            }) => {
                assert_eq!(p, pattern);
                assert!(reason.contains(why), "{pattern}: {reason}");
            }
            other => panic!("{pattern}: {other:?}"),
        }
    }
    let long = format!("a{}", "?".repeat(64));
    assert!(matches!(
        check_list(TOP, 1, None, &[delegation("a", &[&long], false, &t)]),
        Err(Refusal::MatchesNothing { .. })
    ));
}

#[test]
fn overlapping_patterns_need_an_order_and_nested_ones_their_delegators() {
    let (a, b) = (team(), team());
    // Overlap, the earlier one not terminating: refused, naming both and an example.
    let list = [
        delegation("risc0", &["risc0_*"], false, &a),
        delegation("poseidon", &["*_poseidon*"], false, &b),
    ];
    let err = check_list(TOP, 1, None, &list).unwrap_err();
    assert_eq!(
        err,
        Refusal::Overlap {
            first: ("risc0".into(), "risc0_*".into()),
            second: ("poseidon".into(), "*_poseidon*".into()),
            example: "risc0_poseidon".into(),
        }
    );
    assert!(err.to_string().contains("no order decides"), "{err}");
    // The earlier one terminating decides: accepted.
    let mut ordered = list.clone();
    ordered[0].terminating = true;
    check_list(TOP, 1, None, &ordered).unwrap();
    // Disjoint patterns: accepted.
    let disjoint = [
        delegation("risc0", &["risc0_*"], false, &a),
        delegation("airbender", &["airbender_*"], false, &b),
    ];
    check_list(TOP, 1, None, &disjoint).unwrap();
    // A nested pattern outside its delegator's.
    let err = check_list(
        "risc0",
        2,
        Some(&["risc0_*".to_string()]),
        &[delegation("gpu", &["airbender_*"], false, &b)],
    )
    .unwrap_err();
    assert!(
        matches!(err, Refusal::OutsideDelegator { ref pattern, .. } if pattern == "airbender_*"),
        "{err}"
    );
    // Nesting past one level below the teams.
    let err = check_list(
        "gpu",
        3,
        Some(&["risc0_*".to_string()]),
        &[delegation("x", &["risc0_*"], false, &b)],
    )
    .unwrap_err();
    assert_eq!(err, Refusal::TooDeep { role: "gpu".into() });
}

#[test]
fn role_names_are_safe_file_names_and_keys_count_once() {
    let names = [
        "?", "#", "/x", "../x", "..", ".", "%2F", "a b", "ü", "x%", "X",
    ];
    let files: BTreeSet<String> = names.iter().map(|n| role_file(n, 3)).collect();
    assert_eq!(
        files.len(),
        names.len(),
        "two names share a file: {files:?}"
    );
    for (n, f) in names.iter().zip(names.iter().map(|n| role_file(n, 3))) {
        assert!(!f.contains('/') && f != "." && f != "..", "{n:?} -> {f}");
        assert!(
            f.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"%._-".contains(&b)),
            "{f}"
        );
        check_role_name(n).unwrap();
    }
    assert_eq!(role_file("../x", 3), "3.%2E%2E%2Fx.json");
    for bad in [
        "",
        "root",
        "publisher",
        "delegations",
        "a\nb",
        &"x".repeat(65),
    ] {
        assert!(
            matches!(check_role_name(bad), Err(Refusal::BadRoleName { .. })),
            "{bad:?}"
        );
    }
    // Duplicate key ids in a role, a threshold above the distinct keys, a shared key.
    let t = team();
    let mut d = delegation("a", &["a_*"], false, &t);
    d.publisher = role(&[&t.publisher, &t.publisher], 2);
    let err = check_list(TOP, 1, None, std::slice::from_ref(&d)).unwrap_err();
    assert!(
        matches!(&err, Refusal::BadKeys { reason, .. } if reason.contains("same key twice")),
        "{err}"
    );
    d.publisher = role(&[&t.publisher], 2);
    assert!(matches!(
        check_list(TOP, 1, None, std::slice::from_ref(&d)),
        Err(Refusal::BadKeys { .. })
    ));
    let shared = secret();
    d.publisher = role(&[&t.publisher], 1);
    d.builder = role(&[&shared], 1);
    d.reviewer = role(&[&shared], 1);
    assert!(matches!(
        check_list(TOP, 1, None, &[d]),
        Err(Refusal::BadKeys { .. })
    ));
    // A role delegating to itself.
    let err = check_list(
        "a",
        2,
        Some(&["a_*".into()]),
        &[delegation("a", &["a_*"], false, &t)],
    )
    .unwrap_err();
    assert!(
        matches!(&err, Refusal::BadRoleName { reason, .. } if reason.contains("cycle")),
        "{err}"
    );
}

#[test]
fn the_search_is_depth_first_in_order_and_a_terminating_match_ends_it() {
    let (a, a1, a2, b) = (team(), team(), team(), team());
    let mut repo = Repo::new();
    let top = vec![
        delegation("A", &["risc0_*"], true, &a),
        delegation("B", &["risc0_*", "zk_*"], false, &b),
    ];
    let kids = vec![
        delegation("A1", &["risc0_a*"], false, &a1),
        delegation("A2", &["risc0_b*"], false, &a2),
    ];
    repo.put("A", 1, &["risc0_core"], kids, &[&a.publisher]);
    repo.put("A1", 1, &["risc0_add"], vec![], &[&a1.publisher]);
    repo.put("A2", 1, &[], vec![], &[&a2.publisher]);
    repo.put("B", 1, &["risc0_bad", "zk_ntt"], vec![], &[&b.publisher]);
    // Listed by A itself.
    assert_eq!(
        owner(&repo, &top, "risc0_core").unwrap(),
        Some(vec!["A".to_string()])
    );
    assert_eq!(repo.visited(), ["A"]);
    // Below A, depth first.
    assert_eq!(
        owner(&repo, &top, "risc0_add").unwrap(),
        Some(vec!["A".into(), "A1".into()])
    );
    assert_eq!(repo.visited(), ["A", "A1"]);
    // B lists risc0_bad, but A matches it and terminates: not found, B never read.
    assert_eq!(owner(&repo, &top, "risc0_bad").unwrap(), None);
    assert_eq!(repo.visited(), ["A", "A2"]);
    // A branch whose paths do not match is not visited.
    assert_eq!(
        owner(&repo, &top, "zk_ntt").unwrap(),
        Some(vec!["B".to_string()])
    );
    assert_eq!(repo.visited(), ["B"]);
    assert_eq!(owner(&repo, &top, "plonky_fft").unwrap(), None);
    assert!(repo.visited().is_empty());
}

#[test]
fn a_cycle_or_a_role_nested_too_deep_is_refused() {
    let (a, b) = (team(), team());
    let mut repo = Repo::new();
    let top = vec![delegation("A", &["risc0_*"], false, &a)];
    // A -> B -> A.
    repo.put(
        "A",
        1,
        &[],
        vec![delegation("B", &["risc0_*"], false, &b)],
        &[&a.publisher],
    );
    repo.put(
        "B",
        1,
        &[],
        vec![delegation("A", &["risc0_*"], false, &a)],
        &[&b.publisher],
    );
    assert_eq!(
        owner(&repo, &top, "risc0_x").unwrap_err(),
        Refusal::TooDeep { role: "B".into() }
    );
    // A -> A.
    repo.put(
        "A",
        1,
        &[],
        vec![delegation("A", &["risc0_*"], false, &a)],
        &[&a.publisher],
    );
    assert!(matches!(
        owner(&repo, &top, "risc0_x").unwrap_err(),
        Refusal::BadRoleName { reason, .. } if reason.contains("cycle")
    ));
}

#[test]
fn a_diamond_is_verified_against_each_delegator() {
    let (a, b, c) = (team(), team(), team());
    let mut repo = Repo::new();
    let top = vec![
        delegation("A", &["risc0_a*"], false, &a),
        delegation("B", &["risc0_b*"], false, &b),
    ];
    // Both delegate C; A with C's keys, B with keys of its own choosing.
    repo.put(
        "A",
        1,
        &[],
        vec![delegation("C", &["risc0_a*"], false, &c)],
        &[&a.publisher],
    );
    let other = team();
    repo.put(
        "B",
        1,
        &[],
        vec![delegation("C", &["risc0_b*"], false, &other)],
        &[&b.publisher],
    );
    repo.put("C", 1, &["risc0_a1", "risc0_b1"], vec![], &[&c.publisher]);
    assert_eq!(
        owner(&repo, &top, "risc0_a1").unwrap(),
        Some(vec!["A".into(), "C".into()])
    );
    // Through B, C's metadata must carry B's keys for C: it does not.
    match owner(&repo, &top, "risc0_b1").unwrap_err() {
        Refusal::Metadata {
            role,
            delegator,
            refusal: MetadataRefusal::Signatures(_),
        } => assert_eq!((role.as_str(), delegator.as_str()), ("C", "B")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn delegated_metadata_is_checked_in_python_tufs_order() {
    // tough CVE-2026-6967: delegated metadata must not skip its length, hash, version and
    // expiry checks. Each case breaks one thing and must be refused for exactly that.
    let a = team();
    let d = delegation("A", &["risc0_*"], false, &a);
    let good = |repo: &mut Repo| repo.put("A", 2, &["risc0_x"], vec![], &[&a.publisher]);
    let refusal = |repo: &Repo| match load(repo, &d, TOP) {
        Err(Refusal::Metadata { refusal, .. }) => refusal,
        other => panic!("{other:?}"),
    };
    let mut repo = Repo::new();
    assert_eq!(refusal(&repo), MetadataRefusal::NotListed);
    good(&mut repo);
    load(&repo, &d, TOP).unwrap();
    let file = role_file("A", 2);
    let bytes = repo.files[&file].clone();
    // Truncated, and over-long (only listed + 1 bytes are read).
    repo.files
        .insert(file.clone(), bytes[..bytes.len() - 1].to_vec());
    assert_eq!(
        refusal(&repo),
        MetadataRefusal::Length {
            listed: bytes.len() as u64,
            found: bytes.len() as u64 - 1
        }
    );
    let mut long = bytes.clone();
    long.extend_from_slice(&[b' '; 4096]);
    repo.files.insert(file.clone(), long);
    assert_eq!(
        refusal(&repo),
        MetadataRefusal::Length {
            listed: bytes.len() as u64,
            found: bytes.len() as u64 + 1
        }
    );
    // One byte changed: the hash, before any signature is looked at.
    let mut flipped = bytes.clone();
    let at = flipped.len() / 2;
    flipped[at] ^= 1;
    repo.files.insert(file.clone(), flipped);
    assert_eq!(refusal(&repo), MetadataRefusal::Hash);
    // Signed by a key that is not the delegator's for A.
    let mut repo = Repo::new();
    repo.put("A", 2, &["risc0_x"], vec![], &[&team().publisher]);
    assert!(matches!(refusal(&repo), MetadataRefusal::Signatures(_)));
    // Another role's metadata under A's name.
    let mut repo = Repo::new();
    repo.put("B", 2, &[], vec![], &[&a.publisher]);
    let listed = repo.listed["B"].clone();
    repo.listed.insert("A".into(), listed);
    repo.files
        .insert(file.clone(), repo.files[&role_file("B", 2)].clone());
    assert_eq!(refusal(&repo), MetadataRefusal::OtherRole("B".into()));
    // Not the version the index lists.
    let mut repo = Repo::new();
    good(&mut repo);
    repo.listed.get_mut("A").unwrap().version = 3;
    repo.files.insert(role_file("A", 3), bytes.clone());
    assert_eq!(
        refusal(&repo),
        MetadataRefusal::Version {
            listed: 3,
            found: 2
        }
    );
    // Rolled back below a version seen before.
    let mut repo = Repo::new();
    good(&mut repo);
    repo.seen.insert("A".into(), 5);
    assert_eq!(
        refusal(&repo),
        MetadataRefusal::RolledBack { seen: 5, found: 2 }
    );
    // Expired.
    let mut repo = Repo::new();
    good(&mut repo);
    repo.now = 2_000;
    assert_eq!(
        refusal(&repo),
        MetadataRefusal::Expired(Time::from_unix(2_000))
    );
}

#[test]
fn the_same_signature_twice_does_not_meet_a_threshold_of_two() {
    // tough CVE-2026-6966: one valid signature, duplicated, met a delegated threshold.
    let (k1, k2) = (secret(), secret());
    let mut d = delegation("A", &["risc0_*"], false, &team());
    d.publisher = role(&[&k1, &k2], 2);
    let mut repo = Repo::new();
    repo.put("A", 1, &["risc0_x"], vec![], &[&k1, &k1]);
    assert!(matches!(
        load(&repo, &d, TOP),
        Err(Refusal::Metadata {
            refusal: MetadataRefusal::Signatures(_),
            ..
        })
    ));
    repo.put("A", 1, &["risc0_x"], vec![], &[&k1, &k2]);
    load(&repo, &d, TOP).unwrap();
}

#[test]
fn unusual_role_names_are_found_through_their_safe_files() {
    let t = team();
    let mut repo = Repo::new();
    let top: Vec<Delegation> = ["?", "#", "/x", "../x"]
        .iter()
        .enumerate()
        .map(|(i, n)| delegation(n, &[&format!("m{i}_*")], false, &t))
        .collect();
    for (i, d) in top.iter().enumerate() {
        repo.put(&d.name, 1, &[&format!("m{i}_k")], vec![], &[&t.publisher]);
    }
    for (i, d) in top.iter().enumerate() {
        assert_eq!(
            owner(&repo, &top, &format!("m{i}_k")).unwrap(),
            Some(vec![d.name.clone()])
        );
    }
    assert!(
        repo.files.keys().all(|f| !f.contains('/')),
        "{:?}",
        repo.files.keys()
    );
}

#[test]
fn the_shortest_common_name_of_two_patterns_is_found() {
    assert_eq!(
        common_name("risc0_*", "*_poseidon").as_deref(),
        Some("risc0_poseidon")
    );
    assert_eq!(common_name("a*", "b*"), None);
    assert_eq!(common_name("a?c", "*c").as_deref(), Some("aac"));
    assert_eq!(common_name("*", "*").as_deref(), Some("a"));
    assert_eq!(common_name("risc0_*", "risc0_*").as_deref(), Some("risc0_"));
    assert_eq!(common_name("9*", "*"), None, "must start with a letter");
}
