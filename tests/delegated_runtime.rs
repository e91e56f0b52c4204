//! Issue 46 in the prover's process: `Runtime::open` and `Runtime::open_embedded` accept a
//! module its owning team signed, and refuse one another team's key signed before the
//! driver is touched (in CI, where there is none, the refusal is the error; on the GPU
//! host the accepted module loads and runs).

mod common;

use common::*;
use cuda_aot::{Channel, Error, ErrorKind, Runtime, cuda};

/// `adders` owns `add`; `others` owns `other_*`.
fn delegated() -> Delegations {
    let d = Delegations::new(
        Channel::Dev,
        &[("adders", &["add"]), ("others", &["other_*"])],
    );
    d.publish_team(0, &[add_module("sm_90", Channel::Dev)])
        .unwrap();
    d
}

/// Opens the registry and its bundle: both pass verification (without a driver the error is
/// the driver's absence; with one, the module is verified and loads).
fn opens(f: &Fixture) -> Option<Runtime> {
    // The bundle carries the delegated metadata (every layout file of the folder).
    assert!(
        layout_paths(&f.reg_path())
            .iter()
            .any(|p| p.starts_with("teams/"))
    );
    let folder = Runtime::open(f.reg_path(), &f.root_file, f.policy());
    let bundle = Runtime::open_embedded(embed(f), &f.root_file, f.policy());
    match (cuda::driver_present(), folder, bundle) {
        (false, Err(a), Err(b)) => {
            for err in [a, b] {
                assert!(
                    matches!(&err, Error::Cuda(e) if e.is_driver_missing()),
                    "verification refused a team's own module: {err}"
                );
            }
            None
        }
        (true, Ok(rt), Ok(_)) => {
            assert_eq!(rt.counters().modules_verified, 1);
            Some(rt)
        }
        (_, a, b) => panic!("folder: {:?}\nbundle: {:?}", a.err(), b.err()),
    }
}

#[test]
fn a_teams_module_opens_and_another_teams_key_is_refused_before_the_driver() {
    let d = delegated();
    let f = &d.fixture;
    opens(f);
    let (verified, _) = f.verify().unwrap();
    assert_eq!(verified.metadata().index().statements.len(), 1);
    assert_eq!(
        verified.metadata().manifests()[0].signers(),
        [d.teams[0].builder.public().key_id()]
    );

    // The publisher refuses team `others` publishing `add`, and `adders` publishing a
    // statement `others`' builder signed.
    let err = d
        .publish_team(1, &[add_module("sm_90", Channel::Dev)])
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("outside the names delegated to it"),
        "{err}"
    );
    let by_others = Build::new(&[add_module("sm_90", Channel::Dev)], &[&d.teams[1].builder]);
    let err = d.publish_as_team(&d.teams[0], by_others, None).unwrap_err();
    assert!(err.to_string().contains("required builder key(s)"), "{err}");

    // What a stolen publisher key could serve: `add` under a statement `others` signed.
    let forged = Build::new(&[add_module("sm_90", Channel::Dev)], &[&d.teams[1].builder]);
    f.forge(&forged, &[]);
    let folder = Runtime::open(f.reg_path(), &f.root_file, f.policy())
        .err()
        .unwrap();
    let bundle = Runtime::open_embedded(embed(f), &f.root_file, f.policy())
        .err()
        .unwrap();
    for err in [folder, bundle] {
        assert!(
            matches!(&err, Error::Delegation { team: Some(t), .. } if t == "adders"),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("that delegated role \"adders\" has for it"),
            "{err}"
        );
        assert_eq!(err.kind(), ErrorKind::BadSignature);
        assert!(
            err.fix().contains("delegated role \"adders\""),
            "{}",
            err.fix()
        );
    }
}

/// Team `adders` rotates its builder key with delegations v2, no new trust root: the
/// delegations alone are refused (the release in force is signed by the old key), with the
/// release its new key signs they land and the runtime opens it; the old key is refused.
#[test]
fn a_team_rotates_its_builder_key_and_the_runtime_follows() {
    let mut d = delegated();
    let old = std::mem::replace(&mut d.teams[0].builder, key());
    let v2 = d.sign_delegations(
        2,
        vec![
            d.teams[0].delegation(&["add"]),
            d.teams[1].delegation(&["other_*"]),
        ],
    );
    let root_before = d.fixture.root_file.clone();
    let err = d.put_in_force(&v2).unwrap_err();
    assert!(
        err.to_string().contains("delegated role \"adders\""),
        "{err}"
    );
    let t = &d.teams[0];
    let mods = [add_module("sm_90", Channel::Dev)];
    let by_old = Build::new(&mods, &[&old]);
    let err = d.publish_as_team(t, by_old, Some(v2.clone())).unwrap_err();
    assert!(err.to_string().contains("required builder key(s)"), "{err}");
    d.publish_as_team(t, Build::new(&mods, &[&t.builder]), Some(v2))
        .unwrap();
    assert_eq!(d.fixture.root_file, root_before);
    opens(&d.fixture);
    let (verified, _) = d.fixture.verify().unwrap();
    assert_eq!(
        verified.metadata().manifests()[0].signers(),
        [t.builder.public().key_id()]
    );
}

/// How long a release stays loadable counts the delegated metadata its modules' owners
/// were found through: a team's metadata signed for two days keeps a release whose index
/// (republished later by the root's builders, for a year) would otherwise last a year from
/// being reported loadable past those two days.
#[test]
fn loadable_until_counts_the_teams_metadata() {
    let d = Delegations::new(Channel::Dev, &[("adders", &["add"])]);
    let two_days = std::time::Duration::from_secs(2 * 86_400);
    let opts = cuda_aot_registry::PublishOptions {
        index_ttl: two_days,
        ..Default::default()
    };
    d.publish_team_with(0, &[add_module("sm_90", Channel::Dev)], &opts)
        .unwrap();
    // The root's builders publish `core` (no pattern names it) with a year-long index.
    let blob = cubin("sm_90");
    let core = (manifest("core", "sm_90", &blob, Channel::Dev), blob);
    let f = &d.fixture;
    f.publish_modules(
        &[core],
        cuda_aot_registry::PublishOptions {
            keep_unlisted: true,
            ..Default::default()
        },
    );
    let (verified, _) = f.verify().unwrap();
    let v = verified.metadata();
    assert!(v.index().expires > cuda_aot::metadata::Time::now().plus(two_days * 100));
    let until = v.loadable_until(std::time::Duration::ZERO);
    let src = cuda_aot::source::DirSource::new(f.reg_path());
    let team_expiry = v
        .delegated_roles(&src, cuda_aot::metadata::Time::now())
        .unwrap()
        .iter()
        .find(|r| r.delegation.name == "adders")
        .and_then(|r| r.metadata.as_ref().ok())
        .map(|m| m.expires)
        .unwrap();
    assert!(
        until <= team_expiry,
        "{until} past the team's {team_expiry}"
    );
    assert_eq!(v.manifests().len(), 2);
}

#[test]
#[ignore = "needs an sm_90 CUDA device (the fixture cubins are sm_90)"]
fn gpu_a_teams_module_loads_and_runs() {
    let d = delegated();
    let rt = opens(&d.fixture).expect("a device");
    println!(
        "device: {} {} driver {}",
        rt.device().name,
        rt.device().sm(),
        rt.device().driver_version_string()
    );
    run_add(&rt);
    println!(
        "add of team adders ran; signed by {}",
        d.teams[0].builder.public().key_id().short()
    );
    drop(rt);
    // On the device too, another team's key is refused before anything is loaded.
    let f = &d.fixture;
    let forged = Build::new(&[add_module("sm_90", Channel::Dev)], &[&d.teams[1].builder]);
    f.forge(&forged, &[]);
    let err = Runtime::open(f.reg_path(), &f.root_file, f.policy())
        .err()
        .unwrap();
    assert!(
        matches!(&err, Error::Delegation { team: Some(t), .. } if t == "adders"),
        "{err}"
    );
    println!("refused: {err}\nFix: {}", err.fix());
}
