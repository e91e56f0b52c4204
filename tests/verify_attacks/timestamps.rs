//! Timestamps, expiry and rollback: replayed and deleted metadata, expiry and skew, the
//! freeze bound, the offline grace, extreme clocks, and rollback state on by default.

use crate::common::*;
use crate::{current_index, republish_index};
use cuda_aot::metadata::Time;
use cuda_aot::source::layout;
use cuda_aot::verify::Options;
use cuda_aot::{Channel, Error};
use cuda_aot_registry::PublishOptions;
use std::time::Duration;

#[test]
fn an_older_index_replayed_after_a_newer_one_was_seen_is_refused() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let old_ts = f.read(layout::TIMESTAMP);
    f.verify().unwrap();
    f.publish_sms(&["sm_80"]);
    let (idx, _) = f.verify().unwrap();
    assert_eq!(idx.index().version, 2);
    // A mirror (or attacker) serves the old, validly signed timestamp again.
    f.write(layout::TIMESTAMP, &old_ts);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::Rollback { what, seen: 2, got: 1 } if what == "timestamp"),
        "{err}"
    );
}

#[test]
fn an_expired_timestamp_is_refused_unless_within_the_explicit_skew() {
    let f = Fixture::new();
    let opts = PublishOptions {
        now: Time::from_unix(Time::now().unix() - 3600),
        timestamp_ttl: Duration::from_secs(60),
        ..Default::default()
    };
    f.publish_modules(&[add_module("sm_90", Channel::Dev)], opts);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::Expired { what, skew_secs: 0, .. } if what == "timestamp v1"),
        "{err}"
    );
    // An explicit two-hour skew allowance accepts it (and is reported).
    let lenient = Options {
        skew: Duration::from_secs(7200),
        ..Options::default()
    };
    let (idx, _) = f.verify_with(&lenient).unwrap();
    assert_eq!(idx.skew(), Duration::from_secs(7200));
}

fn now_minus(secs: u64) -> Time {
    Time::from_unix(Time::now().unix() - secs)
}

/// Finding 4: with saved state, deleting the root rotation (to bring back a revoked
/// publisher key) is a rollback.
#[test]
fn issue_10_deleting_a_root_rotation_after_it_was_seen_is_a_rollback() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    f.write(
        &layout::root(2),
        &sign_root(&root_payload(&f.keys, 2, Channel::Dev), &[&f.keys.root]),
    );
    let (v, _) = f.verify().unwrap();
    assert_eq!(v.state().root, 2);
    std::fs::remove_file(f.reg_path().join(layout::root(2))).unwrap();
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::Rollback { what, seen: 2, got: 1 } if what == "trust root"),
        "{err}"
    );
}

/// Finding 4: the production and development policies keep rollback state by default,
/// per user and per registry; turning it off is explicit.
#[test]
fn issue_10_rollback_protection_is_on_by_default() {
    use cuda_aot::runtime::RollbackState;
    for p in [
        cuda_aot::Policy::production(),
        cuda_aot::Policy::development(),
    ] {
        assert_eq!(p.rollback, RollbackState::PerUser);
        let a = p
            .state_path(std::path::Path::new("/srv/a"))
            .unwrap()
            .unwrap();
        let b = p
            .state_path(std::path::Path::new("/srv/b"))
            .unwrap()
            .unwrap();
        assert!(a.to_string_lossy().contains("cuda-aot") && a != b, "{a:?}");
        assert_eq!(
            p.without_rollback_protection()
                .state_path(std::path::Path::new("/srv/a"))
                .unwrap(),
            None
        );
    }
}

/// Finding 6: no clock or skew value panics the verifier.
#[test]
fn issue_10_extreme_clocks_and_skews_do_not_panic() {
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let opts = Options {
        skew: Duration::from_secs(u64::MAX),
        ..Options::default()
    };
    f.verify_with(&opts).unwrap();
    let opts = Options {
        now: Time::from_unix(u64::MAX),
        ..Options::default()
    };
    let err = f.verify_with(&opts).unwrap_err();
    assert!(
        matches!(&err, Error::Expired { now, .. } if now.contains("after year 9999")),
        "{err}"
    );
}

/// Finding 9: the trust root bounds how far ahead timestamps and indexes may expire.
#[test]
fn issue_10_metadata_expiring_past_the_freeze_bound_is_refused() {
    let f = Fixture::new();
    let far = PublishOptions {
        timestamp_ttl: Duration::from_secs(40 * 86_400),
        ..Default::default()
    };
    f.publish_modules(&[add_module("sm_90", Channel::Dev)], far);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::FreezeBound { what, bound_days: 31, root: 1, .. } if what == "timestamp v1"),
        "{err}"
    );
    // Year 9999 for the index.
    let f = Fixture::new();
    f.publish_sms(&["sm_90"]);
    let (ts, mut idx) = current_index(&f);
    idx.expires = "9999-12-31T00:00:00Z".parse::<FakeTime>().unwrap().0;
    republish_index(&f, &ts, &idx);
    let err = f.verify().unwrap_err();
    assert!(
        matches!(&err, Error::FreezeBound { what, bound_days: 400, .. } if what == "index v2"),
        "{err}"
    );
}

/// Parses an RFC 3339 time the way documents carry it.
struct FakeTime(Time);
impl std::str::FromStr for FakeTime {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_value::<Time>(serde_json::Value::String(s.into()))
            .map(FakeTime)
            .map_err(|e| e.to_string())
    }
}

/// Finding 10: an expired timestamp is accepted within the offline grace counted from the
/// last fresh verification, and refused one second after it.
#[test]
fn issue_10_offline_grace_holds_up_to_its_deadline_and_not_a_second_longer() {
    let f = Fixture::new();
    let t0 = now_minus(10 * 86_400);
    let opts = PublishOptions {
        now: t0,
        timestamp_ttl: Duration::from_secs(3600),
        ..Default::default()
    };
    f.publish_modules(&[add_module("sm_90", Channel::Dev)], opts);
    let at = |secs: u64, grace_days: u64| Options {
        now: t0.plus(Duration::from_secs(secs)),
        offline_grace: Duration::from_secs(grace_days * 86_400),
        ..Options::default()
    };
    // Fresh at t0 + 10 s: recorded.
    let (v, _) = f.verify_with(&at(10, 2)).unwrap();
    assert_eq!(v.freshness(), cuda_aot::verify::Freshness::Fresh);
    assert_eq!(v.state().fresh_at, Some(t0.plus(Duration::from_secs(10))));
    let deadline = 10 + 2 * 86_400;
    assert_eq!(
        v.loadable_until(Duration::from_secs(2 * 86_400)),
        t0.plus(Duration::from_secs(deadline))
    );
    // Expired, without grace: refused.
    let err = f.verify_with(&at(7200, 0)).unwrap_err();
    assert!(matches!(&err, Error::Expired { .. }), "{err}");
    // Expired, within the grace: accepted, with the deadline named.
    let (v, _) = f.verify_with(&at(7200, 2)).unwrap();
    assert!(
        matches!(v.freshness(), cuda_aot::verify::Freshness::Grace { deadline: d, .. } if d == t0.plus(Duration::from_secs(deadline))),
        "{:?}",
        v.freshness()
    );
    assert_eq!(
        v.state().fresh_at,
        Some(t0.plus(Duration::from_secs(10))),
        "a grace verification does not move the start of the grace"
    );
    // Exactly at the deadline: accepted; one second later: refused.
    f.verify_with(&at(deadline, 2)).unwrap();
    let err = f.verify_with(&at(deadline + 1, 2)).unwrap_err();
    assert!(
        matches!(&err, Error::Expired { what, .. } if what == "timestamp v1"),
        "{err}"
    );
}
