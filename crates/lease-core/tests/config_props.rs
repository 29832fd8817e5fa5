//! Properties of configuration and input validation (`lease_core::config`, `lease_core::backend`).
//!
//! - `ElectionConfig` build: every invalid combination gives its own [`ConfigError`] variant,
//!   checked in a fixed order (name, instance id, TTL, renew, acquire, operation timeout), and
//!   every valid one builds with exactly the values given;
//! - defaults: renew = TTL/3 and acquire = TTL/2, truncated to whole milliseconds;
//! - `acquire_timeout = min(acquire, TTL − renew)`, capped by the operation timeout;
//!   `release_timeout = renew`, capped by the operation timeout;
//! - `Ttl`: zero, sub-millisecond parts and anything above 30 days are refused;
//! - `LeaseSpec`, `Owner`, `Metadata`: limits, duplicates, exact owner matching (never by
//!   prefix) and the stored-value round trip.

use std::time::Duration;

use lease_core::backend::{MAX_KEYS, MAX_METADATA_LEN, split_stored};
use lease_core::config::{MAX_ID_LEN, MAX_NAME_LEN, MAX_TTL, MIN_ELECTION_TTL};
use lease_core::{ConfigError, ElectionConfig, LeaseSpec, Metadata, Owner, Ttl};
use proptest::prelude::*;

/// Texts that are valid, empty, too long, or contain NUL.
fn text(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        20 => "[a-zA-Z0-9:{}._-]{1,24}",
        1 => Just(String::new()),
        1 => Just("x".repeat(max)),
        1 => Just("y".repeat(max + 1)),
        1 => "[a-z]{0,5}\0[a-z]{0,5}",
        1 => Just("é".repeat(max / 2 + 1)), // multi-byte: the limit is in bytes
    ]
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// TTLs around every boundary: zero, sub-millisecond, below the election minimum, valid,
/// at and above the maximum.
fn ttl() -> impl Strategy<Value = Duration> {
    prop_oneof![
        1 => Just(Duration::ZERO),
        1 => (1u64..1_000_000).prop_map(Duration::from_nanos),
        1 => (1u64..100_000).prop_map(|us| Duration::from_micros(us * 1000 + us % 999 + 1)),
        1 => (1u64..100).prop_map(ms),
        1 => Just(MIN_ELECTION_TTL),
        8 => (100u64..120_000).prop_map(ms),
        1 => Just(MAX_TTL),
        1 => Just(MAX_TTL + ms(1)),
        1 => (0u64..1_000_000).prop_map(|x| MAX_TTL + Duration::from_secs(x)),
    ]
}

/// A duration relative to `ttl`: zero, a fraction of it, exactly at ttl/2 or ttl, or a hair
/// around those.
fn relative(ttl: Duration) -> impl Strategy<Value = Duration> {
    let t = ttl.as_nanos().min(u64::MAX as u128) as u64;
    prop_oneof![
        Just(Duration::ZERO),
        (0u64..=1000).prop_map(move |permille| Duration::from_nanos(t / 1000 * permille)),
        Just(ttl / 2),
        Just(ttl / 2 + Duration::from_nanos(1)),
        Just(ttl),
        Just(ttl.saturating_sub(Duration::from_nanos(1))),
        Just(ttl + Duration::from_nanos(1)),
        (1u64..10_000).prop_map(Duration::from_nanos),
    ]
}

#[derive(Debug, Clone)]
struct Input {
    name: String,
    id: String,
    ttl: Duration,
    renew: Option<Duration>,
    acquire: Option<Duration>,
    op_timeout: Option<Duration>,
}

fn input() -> impl Strategy<Value = Input> {
    (text(MAX_NAME_LEN), text(MAX_ID_LEN), ttl()).prop_flat_map(|(name, id, ttl)| {
        (
            Just(name),
            Just(id),
            Just(ttl),
            proptest::option::of(relative(ttl)),
            proptest::option::of(relative(ttl)),
            proptest::option::of(relative(ttl)),
        )
            .prop_map(|(name, id, ttl, renew, acquire, op_timeout)| Input {
                name,
                id,
                ttl,
                renew,
                acquire,
                op_timeout,
            })
    })
}

fn whole_ms(d: Duration) -> Duration {
    ms(d.as_millis() as u64)
}

/// The text rule: non-empty, at most `max` bytes, no NUL.
fn text_error(what: &'static str, s: &str, max: usize) -> Option<ConfigError> {
    if s.is_empty() {
        Some(ConfigError::Empty { what })
    } else if s.len() > max {
        Some(ConfigError::TooLong {
            what,
            len: s.len(),
            max,
        })
    } else if s.contains('\0') {
        Some(ConfigError::ContainsNul { what })
    } else {
        None
    }
}

fn ttl_error(ttl: Duration) -> Option<ConfigError> {
    if ttl.is_zero() {
        Some(ConfigError::ZeroTtl)
    } else if !ttl.subsec_nanos().is_multiple_of(1_000_000) {
        Some(ConfigError::TtlNotWholeMillis(ttl))
    } else if ttl > MAX_TTL {
        Some(ConfigError::TtlTooLong { ttl, max: MAX_TTL })
    } else {
        None
    }
}

/// The specification of `build`: the first rule broken, in order, or the resolved
/// `(renew, acquire)`.
fn oracle(i: &Input) -> Result<(Duration, Duration), ConfigError> {
    if let Some(e) = text_error("election name", &i.name, MAX_NAME_LEN) {
        return Err(e);
    }
    if let Some(e) = text_error("instance id", &i.id, MAX_ID_LEN) {
        return Err(e);
    }
    if let Some(e) = ttl_error(i.ttl) {
        return Err(e);
    }
    if i.ttl < MIN_ELECTION_TTL {
        return Err(ConfigError::TtlTooShort {
            ttl: i.ttl,
            min: MIN_ELECTION_TTL,
        });
    }
    let renew = i.renew.unwrap_or(whole_ms(i.ttl / 3));
    if renew.is_zero() {
        return Err(ConfigError::ZeroRenewInterval);
    }
    // Sub-millisecond intervals cannot fit a round trip.
    let min = Duration::from_millis(1);
    if renew < min {
        return Err(ConfigError::IntervalTooShort {
            what: "renew interval",
            value: renew,
            min,
        });
    }
    // renew <= ttl/2, compared exactly (2·renew <= ttl; the TTL is whole ms here, so even).
    if renew.as_nanos() * 2 > i.ttl.as_nanos() {
        return Err(ConfigError::RenewIntervalTooLong { renew, ttl: i.ttl });
    }
    let acquire = i.acquire.unwrap_or(whole_ms(i.ttl / 2));
    if acquire.is_zero() {
        return Err(ConfigError::ZeroAcquireInterval);
    }
    if acquire < min {
        return Err(ConfigError::IntervalTooShort {
            what: "acquire interval",
            value: acquire,
            min,
        });
    }
    if acquire >= i.ttl {
        return Err(ConfigError::AcquireIntervalTooLong {
            acquire,
            ttl: i.ttl,
        });
    }
    if let Some(t) = i.op_timeout {
        if t.is_zero() {
            return Err(ConfigError::ZeroOperationTimeout);
        }
        if t < min {
            return Err(ConfigError::IntervalTooShort {
                what: "operation timeout",
                value: t,
                min,
            });
        }
        if t >= i.ttl {
            return Err(ConfigError::OperationTimeoutTooLong {
                timeout: t,
                ttl: i.ttl,
            });
        }
    }
    Ok((renew, acquire))
}

fn build(i: &Input) -> Result<ElectionConfig, ConfigError> {
    let mut b = ElectionConfig::builder(i.name.clone(), i.id.clone()).ttl(i.ttl);
    if let Some(d) = i.renew {
        b = b.renew_interval(d);
    }
    if let Some(d) = i.acquire {
        b = b.acquire_interval(d);
    }
    if let Some(d) = i.op_timeout {
        b = b.operation_timeout(d);
    }
    b.build()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn build_matches_the_rules(i in input()) {
        let got = build(&i);
        match (oracle(&i), got) {
            (Err(expected), got) => prop_assert_eq!(got, Err(expected)),
            (Ok((renew, acquire)), Ok(c)) => {
                prop_assert_eq!(c.name(), i.name.as_str());
                prop_assert_eq!(c.instance_id(), i.id.as_str());
                prop_assert_eq!(c.owner().as_str(), i.id.as_str());
                prop_assert_eq!(c.ttl().get(), i.ttl);
                prop_assert_eq!(c.renew_interval(), renew);
                prop_assert_eq!(c.acquire_interval(), acquire);
                prop_assert_eq!(c.operation_timeout(), i.op_timeout);
                // Derived bounds.
                let cap = |d: Duration| i.op_timeout.map_or(d, |t| d.min(t));
                prop_assert_eq!(c.acquire_timeout(), cap(acquire.min(i.ttl - renew)));
                prop_assert_eq!(c.release_timeout(), cap(renew));
                prop_assert!(c.acquire_timeout() < i.ttl, "an acquire round trip ends before its lease");
                prop_assert!(!c.acquire_timeout().is_zero());
                prop_assert_eq!(c.lease_spec(), LeaseSpec::election(&i.name));
            }
            (Ok(_), Err(e)) => prop_assert!(false, "valid input refused: {:?}: {}", i, e),
        }
    }

    #[test]
    fn defaults_are_ttl_thirds_and_halves_in_whole_ms(ttl_ms in 100u64..=MAX_TTL.as_millis() as u64) {
        let c = ElectionConfig::builder("e", "i").ttl(ms(ttl_ms)).build().map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(c.renew_interval(), ms(ttl_ms / 3));
        prop_assert_eq!(c.acquire_interval(), ms(ttl_ms / 2));
        prop_assert_eq!(c.renew_interval().subsec_nanos() % 1_000_000, 0);
        prop_assert_eq!(c.acquire_interval().subsec_nanos() % 1_000_000, 0);
        prop_assert_eq!(c.acquire_timeout(), ms(ttl_ms / 2).min(ms(ttl_ms) - ms(ttl_ms / 3)));
        prop_assert_eq!(c.release_timeout(), ms(ttl_ms / 3));
        prop_assert_eq!(c.operation_timeout(), None);
    }

    #[test]
    fn ttl_matches_the_rules(d in ttl()) {
        match ttl_error(d) {
            Some(e) => prop_assert_eq!(Ttl::new(d), Err(e)),
            None => {
                let t = Ttl::new(d).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(t.get(), d);
                prop_assert_eq!(u128::from(t.as_millis()), d.as_millis());
            }
        }
    }

    #[test]
    fn owner_matches_the_text_rules(s in text(MAX_ID_LEN)) {
        match text_error("owner", &s, MAX_ID_LEN) {
            Some(e) => prop_assert_eq!(Owner::new(&s), Err(e)),
            None => prop_assert_eq!(Owner::new(&s).map(|o| o.as_str().to_owned()), Ok(s)),
        }
    }

    #[test]
    fn owner_matches_exactly_never_by_prefix(
        a in "[a-z0-9-]{1,12}",
        b in "[a-z0-9-]{1,12}",
        meta in "[ -~]{0,20}",
    ) {
        let oa = Owner::new(&a).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let m = Metadata::new(&meta).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let stored_b = Owner::new(&b).map_err(|e| TestCaseError::fail(e.to_string()))?.stored_value(&m);
        prop_assert_eq!(oa.matches(&stored_b), a == b, "{:?} vs stored {:?}", a, stored_b);
        // The classic prefix trap: "ab" must not match "abc" nor "abc\0meta".
        let longer = Owner::new(format!("{a}{b}")).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(!oa.matches(&longer.stored_value(&m)));
        prop_assert!(!longer.matches(&oa.stored_value(&m)));
        prop_assert!(oa.matches(&oa.stored_value(&m)));
    }

    #[test]
    fn stored_value_splits_back(owner in "[^\0]{1,40}", meta in "[^\0]{0,40}", flags in proptest::option::of("[^\0]{0,5}")) {
        prop_assume!(owner.len() <= MAX_ID_LEN);
        let o = Owner::new(&owner).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let m = Metadata::new(&meta).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let stored = o.stored_value(&m);
        prop_assert_eq!(split_stored(&stored), (owner.as_str(), meta.as_str()));
        if meta.is_empty() {
            prop_assert_eq!(stored.as_str(), owner.as_str(), "no separator without metadata");
        }
        if let Some(flags) = flags {
            // A store's flags after a second NUL (the Redis backend's waiter mark,
            // `owner\0\0w` or `owner\0meta\0w`) are neither owner nor metadata.
            let flagged = format!("{owner}\0{meta}\0{flags}");
            prop_assert_eq!(split_stored(&flagged), (owner.as_str(), meta.as_str()));
            prop_assert!(o.matches(&flagged));
        }
    }

    #[test]
    fn metadata_refuses_nul(before in "[^\0]{0,8}", after in "[^\0]{0,8}") {
        let s = format!("{before}\0{after}");
        prop_assert_eq!(Metadata::new(&s), Err(ConfigError::ContainsNul { what: "metadata" }));
    }

    #[test]
    fn metadata_limit(len in prop_oneof![0usize..100, Just(MAX_METADATA_LEN), Just(MAX_METADATA_LEN + 1), (MAX_METADATA_LEN - 3)..(MAX_METADATA_LEN + 3)]) {
        let s = "m".repeat(len);
        if len > MAX_METADATA_LEN {
            prop_assert_eq!(Metadata::new(&s), Err(ConfigError::MetadataTooLong { len, max: MAX_METADATA_LEN }));
        } else {
            prop_assert_eq!(Metadata::new(&s).map(|m| m.as_str().len()), Ok(len));
        }
    }

    #[test]
    fn lock_spec_matches_the_rules(
        keys in proptest::collection::vec(prop_oneof![8 => "[a-c]{1,2}", 1 => Just(String::new()), 1 => Just("k".repeat(MAX_NAME_LEN + 1))], 0..6),
        many in proptest::bool::weighted(0.05),
        fence in proptest::option::of(prop_oneof!["[a-c]{1,2}", "[a-c]{1,2}:applied", Just(String::new())]),
    ) {
        let keys: Vec<String> = if many { (0..=MAX_KEYS).map(|i| format!("k{i}")).collect() } else { keys };
        let expected: Result<(), ConfigError> = (|| {
            if keys.is_empty() {
                return Err(ConfigError::Empty { what: "key list" });
            }
            if keys.len() > MAX_KEYS {
                return Err(ConfigError::TooManyKeys { len: keys.len(), max: MAX_KEYS });
            }
            for (i, k) in keys.iter().enumerate() {
                if k.is_empty() {
                    return Err(ConfigError::Empty { what: "lock key" });
                }
                if k.len() > MAX_NAME_LEN {
                    return Err(ConfigError::TooLong { what: "lock key", len: k.len(), max: MAX_NAME_LEN });
                }
                if keys[..i].contains(k) {
                    return Err(ConfigError::DuplicateKey(k.clone()));
                }
            }
            if let Some(f) = &fence {
                if f.is_empty() {
                    return Err(ConfigError::Empty { what: "fence key" });
                }
                let mark = format!("{f}:applied");
                if let Some(k) = keys.iter().find(|k| *k == f || **k == mark) {
                    return Err(ConfigError::DuplicateKey(k.clone()));
                }
            }
            Ok(())
        })();
        let got = LeaseSpec::lock(keys.clone(), fence.clone());
        match expected {
            Err(e) => prop_assert_eq!(got, Err(e)),
            Ok(()) => {
                let spec = got.map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(spec.keys(), keys.as_slice());
                prop_assert_eq!(spec.fence_key(), fence.as_deref());
                prop_assert_eq!(spec.mark_key(), fence.map(|f| format!("{f}:applied")));
            }
        }
    }

    #[test]
    fn election_spec_derives_from_the_name(name in "[a-z{}]{1,16}") {
        let spec = LeaseSpec::election(&name);
        let leader = [format!("{name}:leader")];
        prop_assert_eq!(spec.keys(), leader.as_slice());
        let fence = format!("{name}:fence");
        prop_assert_eq!(spec.fence_key(), Some(fence.as_str()));
        prop_assert_eq!(spec.mark_key(), Some(format!("{name}:fence:applied")));
    }
}

/// Guards the generator: the inputs above reach every rule, and valid configurations too
/// (otherwise `build_matches_the_rules` could pass by testing little).
#[test]
fn inputs_reach_every_rule() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..4000 {
        let i = input().new_tree(&mut runner).unwrap().current();
        let kind = match oracle(&i) {
            Ok(_) => "Ok".to_string(),
            Err(e) => format!("{e:?}")
                .split(['(', ' ', '{'])
                .next()
                .unwrap_or_default()
                .to_string(),
        };
        *counts.entry(kind).or_insert(0u32) += 1;
    }
    for kind in [
        "Ok",
        "Empty",
        "TooLong",
        "ContainsNul",
        "ZeroTtl",
        "TtlNotWholeMillis",
        "TtlTooLong",
        "TtlTooShort",
        "ZeroRenewInterval",
        "RenewIntervalTooLong",
        "ZeroAcquireInterval",
        "AcquireIntervalTooLong",
        "ZeroOperationTimeout",
        "OperationTimeoutTooLong",
    ] {
        assert!(
            counts.get(kind).copied().unwrap_or(0) >= 20,
            "{kind} reached too rarely: {counts:?}"
        );
    }
}
