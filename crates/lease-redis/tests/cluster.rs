//! Redis Cluster: end to end on a 3-primary cluster, and local slot checks that refuse
//! cross-slot requests before any round trip.

mod common;

use common::*;
use lease_core::TokenScheme;
use lease_core::{
    AcquireOutcome, BackendError, FenceOutcome, Fencing, LeaseBackend, LeaseSpec, ReleaseOutcome,
    RenewOutcome,
};
use lease_redis::slot::{self, SlotError, key_slot};
use lease_redis::{FencedWrite, RedisBackend, RedisFencer, RedisLeaseError};
use lease_testkit::cluster::RedisCluster;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use redis::cluster_async::ClusterConnection;

async fn cluster() -> (RedisCluster, ClusterConnection) {
    let c = RedisCluster::start().await.expect("cluster");
    let conn = c.connection().await.expect("cluster connection");
    (c, conn)
}

async fn cget(conn: &mut ClusterConnection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(conn).await.unwrap()
}

#[tokio::test]
async fn a_hash_tagged_election_works_end_to_end() {
    let (_c, conn) = cluster().await;
    let mut raw = conn.clone();
    let b = RedisBackend::cluster(conn).with_token_scheme(TokenScheme::Counter);
    // Two elections, in different slots (and, with 3 primaries, likely on different nodes).
    for name in ["{jobs}", "{reports}"] {
        let spec = election(name);
        assert!(b.check_spec(&spec).is_ok());
        let t = acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap()).unwrap();
        assert_eq!(t, token(1));
        assert!(matches!(
            b.acquire(&acq(&spec, "b")).await.unwrap(),
            AcquireOutcome::Held { .. }
        ));
        assert_eq!(
            b.renew(&renew(&spec, "a")).await.unwrap(),
            RenewOutcome::Renewed
        );
        assert!(b.remaining(&spec, &owner("a")).await.unwrap().is_some());
        let f = b.fencer(&LeaseSpec::election_mark_key(name), t);
        let state = format!("{name}:state");
        assert_eq!(f.hset(&state, "v", 1).await.unwrap(), FenceOutcome::Applied);
        assert_eq!(
            f.apply_all(vec![
                FencedWrite::set(format!("{name}:a"), "x"),
                FencedWrite::hset(&state, "w", 2),
            ])
            .await
            .unwrap(),
            FenceOutcome::Applied
        );
        assert_eq!(
            f.eval(
                "redis.call('SET', KEYS[2], ARGV[2])",
                [format!("{name}:e")],
                ["y"]
            )
            .await
            .unwrap(),
            FenceOutcome::Applied
        );
        assert_eq!(
            cget(&mut raw, &format!("{name}:e")).await.as_deref(),
            Some("y")
        );
        let info = b.inspect(&spec).await.unwrap();
        assert_eq!(info.holder.as_deref(), Some("a"));
        assert_eq!(info.counter, Some(t));
        assert!(b.raise_counter(&spec, &owner("a"), token(5)).await.unwrap());
        assert_eq!(
            b.release(&release(&spec, "a", Some(token(5))))
                .await
                .unwrap(),
            ReleaseOutcome::Released
        );
        let t2 = acquired_token(&b.acquire(&acq(&spec, "b")).await.unwrap()).unwrap();
        assert_eq!(t2, token(6));
        assert_eq!(
            f.set(format!("{name}:a"), "late").await.unwrap(),
            FenceOutcome::Stale {
                mark: lease_core::FenceMark::at(t2)
            }
        );
    }
    // A tagged multi-key lock.
    let spec = lock(&["{orders}:1", "{orders}:2"], Some("{orders}:fence"));
    assert_eq!(
        acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap()),
        Some(token(1))
    );
    // An administrator's forced release, in the keys' slot: both keys gone, the fence raised
    // above the holder's token (its writes refused), the next holder's token above that.
    let out = b.force_release(&spec).await.unwrap();
    assert_eq!(
        out,
        lease_core::ForceReleaseOutcome::Released {
            holder: "a".into(),
            fence: Some(token(2))
        }
    );
    assert_eq!(cget(&mut raw, "{orders}:1").await, None);
    assert_eq!(cget(&mut raw, "{orders}:2").await, None);
    let old = b.fencer("{orders}:fence:applied", token(1));
    assert!(!old.set("{orders}:out", "late").await.unwrap().is_applied());
    assert_eq!(
        acquired_token(&b.acquire(&acq(&spec, "b")).await.unwrap()),
        Some(token(3))
    );
    assert!(
        !b.force_release(&lock(&["{orders}:free"], None))
            .await
            .unwrap()
            .was_held()
    );
}

#[tokio::test]
async fn untagged_and_cross_slot_requests_are_refused_without_a_round_trip() {
    let (_c, conn) = cluster().await;
    let counting = Counting::new(conn);
    let b = RedisBackend::cluster(counting.clone()).with_token_scheme(TokenScheme::Counter);

    // An untagged election name.
    let untagged = election("jobs");
    assert!(matches!(
        b.check_spec(&untagged),
        Err(SlotError::NoHashTag { .. })
    ));
    assert!(slot::check_election_name("jobs").is_err());
    let err = b.acquire(&acq(&untagged, "a")).await.unwrap_err();
    assert!(matches!(err, BackendError::Invalid(_)), "{err:?}");
    assert!(!err.is_transient());
    assert!(matches!(
        b.renew(&renew(&untagged, "a")).await,
        Err(BackendError::Invalid(_))
    ));
    assert!(matches!(
        b.release(&release(&untagged, "a", None)).await,
        Err(BackendError::Invalid(_))
    ));
    assert!(matches!(
        b.remaining(&untagged, &owner("a")).await,
        Err(BackendError::Invalid(_))
    ));
    assert!(matches!(
        b.inspect(&untagged).await,
        Err(BackendError::Invalid(_))
    ));
    assert!(matches!(
        b.raise_counter(&untagged, &owner("a"), token(1)).await,
        Err(BackendError::Invalid(_))
    ));
    assert!(matches!(
        b.force_release(&untagged).await,
        Err(BackendError::Invalid(_))
    ));

    // Tagged keys in different slots.
    let cross = lock(&["{a}1", "{b}1"], None);
    assert!(matches!(b.check_spec(&cross), Err(SlotError::CrossSlot(_))));
    assert!(matches!(
        b.acquire(&acq(&cross, "a")).await,
        Err(BackendError::Invalid(_))
    ));
    assert!(matches!(
        b.force_release(&cross).await,
        Err(BackendError::Invalid(_))
    ));

    // A fenced target outside the mark's slot.
    let f = b.fencer_for("{jobs}:fence:applied", token(1)).unwrap();
    let err = f.set("{other}:state", "x").await.unwrap_err();
    match &err {
        RedisLeaseError::Slot(SlotError::CrossSlot(c)) => {
            assert_eq!(c.other, "{other}:state");
            assert_eq!(c.other_slot, key_slot("other"));
            assert_eq!(c.first_slot, key_slot("jobs"));
        }
        other => panic!("{other:?}"),
    }
    assert!(!err.is_transient());
    assert!(matches!(
        f.apply_all(vec![
            FencedWrite::set("{jobs}:ok", "1"),
            FencedWrite::del(["{jobs}:ok", "untagged"]),
        ])
        .await,
        Err(RedisLeaseError::Slot(SlotError::CrossSlot(_)))
    ));
    assert!(matches!(
        f.eval("return 1", ["elsewhere"], Vec::<String>::new())
            .await,
        Err(RedisLeaseError::Slot(_))
    ));
    assert!(f.check_keys(&["{jobs}:x"]).is_ok());
    assert!(f.check_keys(&["{x}:jobs"]).is_err());
    // The same through the trait-built fencer.
    let g = b.fencer("{jobs}:fence:applied", token(1));
    assert!(matches!(
        g.hset("nope", "f", "v").await,
        Err(RedisLeaseError::Slot(_))
    ));

    // An untagged mark key is refused at construction.
    assert!(matches!(
        b.fencer_for("jobs:fence:applied", token(1)),
        Err(SlotError::NoHashTag { .. })
    ));
    assert!(RedisFencer::new_cluster(counting.clone(), "jobs:fence:applied", token(1)).is_err());

    assert_eq!(
        counting.calls(),
        0,
        "every refusal happened before any round trip"
    );

    // And a valid request does reach the server through the same connection.
    let ok = election("{jobs}");
    b.acquire(&acq(&ok, "a")).await.unwrap();
    assert!(counting.calls() > 0);
}

/// A hash-tagged fair lock on the cluster: the queue and places keys (sorted sets) go to the
/// name's slot with it; FIFO hand-over, the bounded inspection's count, and the queue keys
/// deleted when nobody waits. A name without a tag is refused before any round trip.
#[tokio::test]
async fn a_hash_tagged_fair_lock_works_end_to_end() {
    use lease_core::fair::{FairRequest, fair_keys, fair_spec};
    use std::sync::Arc;
    let (_c, conn) = cluster().await;
    let mut raw = conn.clone();
    let b = RedisBackend::cluster(conn).with_token_scheme(TokenScheme::Counter);
    let spec = Arc::new(fair_spec("{fairq}", None).expect("spec"));
    let long = ttl_ms(60_000);
    let attempt = |who: &str| FairRequest::new(acq(&spec, who), Some(long));
    assert!(matches!(
        b.acquire_fair(&attempt("a")).await,
        Ok(AcquireOutcome::Acquired { .. })
    ));
    for who in ["b", "c"] {
        let r = b.acquire_fair(&attempt(who)).await;
        assert!(
            matches!(r, Ok(AcquireOutcome::Held { holder: Some(ref h), .. }) if h == "a"),
            "{r:?}"
        );
    }
    let [queue, places] = fair_keys("{fairq}");
    for k in [&queue, &places] {
        assert_eq!(key_slot(k.as_bytes()), key_slot(b"{fairq}"));
        let n: usize = redis::cmd("ZCARD")
            .arg(k.as_str())
            .query_async(&mut raw)
            .await
            .expect("ZCARD");
        assert_eq!(n, 2, "{k}");
    }
    let info = b.inspect_fair(&spec).await.expect("inspect");
    assert_eq!(info.waiting, 2);
    assert_eq!(
        info.waiters
            .iter()
            .map(|w| w.owner.as_str())
            .collect::<Vec<_>>(),
        ["b", "c"]
    );
    let r = b.release_fair(&release(&spec, "a", None)).await;
    assert!(matches!(r, Ok(ReleaseOutcome::Released)), "{r:?}");
    let r = b.acquire_fair(&attempt("c")).await;
    assert!(
        matches!(r, Ok(AcquireOutcome::Held { holder: Some(ref h), .. }) if h == "b"),
        "kept for b: {r:?}"
    );
    assert!(matches!(
        b.acquire_fair(&attempt("b")).await,
        Ok(AcquireOutcome::Acquired { .. })
    ));
    assert!(matches!(
        b.release_fair(&release(&spec, "b", None)).await,
        Ok(ReleaseOutcome::Released)
    ));
    assert!(matches!(
        b.acquire_fair(&attempt("c")).await,
        Ok(AcquireOutcome::Acquired { .. })
    ));
    let left: usize = redis::cmd("EXISTS")
        .arg(queue.as_str())
        .arg(places.as_str())
        .query_async(&mut raw)
        .await
        .expect("EXISTS");
    assert_eq!(left, 0, "nobody waits: the queue keys are gone");
    let untagged = fair_spec("jobs", None).expect("spec");
    assert!(matches!(
        b.check_fair(&untagged),
        Err(BackendError::Invalid(_))
    ));
}

#[tokio::test]
async fn script_flush_on_every_node_is_survived() {
    let (c, conn) = cluster().await;
    let b = RedisBackend::cluster(conn).with_token_scheme(TokenScheme::Counter);
    let spec = election("{n}");
    b.acquire(&acq(&spec, "a")).await.unwrap();
    let f = b.fencer(&LeaseSpec::election_mark_key("{n}"), token(1));
    assert!(f.set("{n}:s", "1").await.unwrap().is_applied());
    for node in c.nodes() {
        let mut n = node.connection().await.unwrap();
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut n)
            .await
            .unwrap();
    }
    assert_eq!(
        b.renew(&renew(&spec, "a")).await.unwrap(),
        RenewOutcome::Renewed
    );
    assert!(f.set("{n}:s", "2").await.unwrap().is_applied());
}

#[tokio::test]
async fn key_slot_matches_the_server() {
    let (c, _conn) = cluster().await;
    let mut node = c.nodes()[0].connection().await.unwrap();
    // Fixed cases from the Redis Cluster specification.
    for key in [
        "foo",
        "{user1000}.following",
        "{user1000}.followers",
        "foo{}{bar}",
        "foo{{bar}}zap",
        "foo{bar}{zap}",
        "{",
        "}",
        "{}",
        "}{",
        "",
    ] {
        let s: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut node)
            .await
            .unwrap();
        assert_eq!(key_slot(key), s, "{key:?}");
    }
    // Random keys, rich in braces, against CLUSTER KEYSLOT.
    let keys: Vec<Vec<u8>> = {
        let mut runner = TestRunner::new(Config {
            cases: 1,
            failure_persistence: None,
            ..Config::default()
        });
        let strategy = proptest::collection::vec(
            proptest::collection::vec(
                prop_oneof![Just(b'{'), Just(b'}'), any::<u8>(), b'a'..=b'e'],
                0..12,
            ),
            200,
        );
        strategy.new_tree(&mut runner).unwrap().current()
    };
    let mut pipe = redis::pipe();
    for k in &keys {
        pipe.cmd("CLUSTER").arg("KEYSLOT").arg(k.as_slice());
    }
    let slots: Vec<u16> = pipe.query_async(&mut node).await.unwrap();
    for (k, s) in keys.iter().zip(slots) {
        assert_eq!(key_slot(k), s, "{:?}", String::from_utf8_lossy(k));
    }
}
