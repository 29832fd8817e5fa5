//! Locks on a 3-primary Redis Cluster, through the facade: keys sharing a hash tag (and a
//! fence key with the same tag) work end to end; keys that cannot share a slot are refused
//! with a typed error before any round trip — proven twice: by a connection wrapper that
//! counts every request reaching the wire, and by every node's own `INFO commandstats`.

mod common;

use redlease::TokenScheme;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::EVENTUALLY;
use lease_testkit::cluster::RedisCluster;
use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use redlease::redis::RedisBackend;
use redlease::redis::key_slot;
use redlease::{BackendError, LockError, LockOptions, Locker, RetryStrategy};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A connection wrapper counting the requests that reach the wire.
#[derive(Clone)]
struct Counting<C> {
    inner: C,
    calls: Arc<AtomicUsize>,
}

impl<C> Counting<C> {
    fn new(inner: C) -> Self {
        Counting {
            inner,
            calls: Arc::new(AtomicUsize::new(0)),
        }
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl<C: ConnectionLike + Send> ConnectionLike for Counting<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// Script calls (EVAL, EVALSHA and their read-only forms) served by every node so far.
async fn script_calls(cluster: &RedisCluster) -> u64 {
    let mut total = 0;
    for node in cluster.nodes() {
        let mut conn = node.connection().await.unwrap();
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .unwrap();
        for line in info.lines() {
            let Some((name, stats)) = line.split_once(':') else {
                continue;
            };
            if matches!(
                name,
                "cmdstat_eval" | "cmdstat_evalsha" | "cmdstat_eval_ro" | "cmdstat_evalsha_ro"
            ) {
                total += stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("calls="))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    total
}

async fn cget(conn: &mut ClusterConnection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(conn).await.unwrap()
}

async fn start() -> RedisCluster {
    let cluster = RedisCluster::start().await.expect("cluster");
    cluster.wait_ready(EVENTUALLY).await.expect("cluster ready");
    cluster
}

/// redislock on Cluster: all keys of a lock (and the fence key) share a slot through a hash
/// tag. Two tagged multi-key locks in different slots each work end to end: obtain with a
/// fencing token, contention, refresh, TTL, release, a larger token for the next holder. A
/// single untagged key needs no tag.
#[tokio::test]
async fn hash_tagged_locks_work_end_to_end() {
    let cluster = start().await;
    let mut raw = cluster.connection().await.unwrap();
    let locker = Locker::new(
        RedisBackend::cluster(cluster.connection().await.unwrap())
            .with_token_scheme(TokenScheme::Counter),
    );
    assert_ne!(key_slot("{orders}"), key_slot("{reports}"));
    for tag in ["{orders}", "{reports}"] {
        let keys = [format!("{tag}:a"), format!("{tag}:b")];
        let fence = format!("{tag}:fence");
        let opts = LockOptions::new().fence_key(fence.clone());
        let a = locker
            .obtain_multi(keys.clone(), ms(10_000), opts.clone().owner("a"))
            .await
            .unwrap();
        assert_eq!(a.fence_token().map(|t| t.get()), Some(1));
        for k in &keys {
            assert_eq!(cget(&mut raw, k).await.as_deref(), Some("a"));
        }
        let err = locker
            .obtain_multi(keys.clone(), ms(10_000), opts.clone().owner("b"))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, LockError::NotObtained { holder: Some(h) } if h == "a"),
            "{err:?}"
        );
        a.refresh(ms(60_000)).await.unwrap();
        assert!(a.ttl().await.unwrap() > ms(10_000));
        a.release().await.unwrap();
        for k in &keys {
            assert_eq!(cget(&mut raw, k).await, None);
        }
        let b = locker
            .obtain_multi(keys.clone(), ms(10_000), opts.owner("b"))
            .await
            .unwrap();
        assert_eq!(b.fence_token().map(|t| t.get()), Some(2));
        assert_eq!(cget(&mut raw, &fence).await.as_deref(), Some("2"));
        b.release().await.unwrap();
    }
    let single = locker
        .obtain("plain", ms(10_000), LockOptions::new())
        .await
        .unwrap();
    assert_eq!(
        cget(&mut raw, "plain").await.as_deref(),
        Some(single.owner())
    );
    single.release().await.unwrap();
}

/// edge-cases (ObtainMulti: on Cluster all keys share a slot) and beyond.md 5 (slot checks
/// before the first round trip): lock keys in different slots, untagged multi-key locks, and a
/// fence key outside the keys' slot are refused with `LockError::Refused(BackendError::Invalid)`
/// — permanent, so not retried even with a retry strategy — and no request reaches any node:
/// the wire counter stays at zero and no node's EVAL/EVALSHA count moves. A valid lock
/// afterwards moves both counters (the measurement can see round trips).
#[tokio::test]
async fn keys_across_slots_are_refused_before_any_round_trip() {
    let cluster = start().await;
    let counting = Counting::new(cluster.connection().await.unwrap());
    let locker = Locker::new(
        RedisBackend::cluster(counting.clone()).with_token_scheme(TokenScheme::Counter),
    );
    assert_ne!(key_slot("{a}1"), key_slot("{b}1"));

    let before = script_calls(&cluster).await;
    let retry = RetryStrategy::linear(ms(10)).unwrap();
    let cases: [(&str, Vec<&str>, Option<&str>); 4] = [
        ("tags in different slots", vec!["{a}1", "{b}1"], None),
        ("untagged keys", vec!["x", "y"], None),
        (
            "fence key in another slot",
            vec!["{a}1", "{a}2"],
            Some("{b}fence"),
        ),
        ("untagged key with a fence key", vec!["k"], Some("k:fence")),
    ];
    for (what, keys, fence) in cases {
        let mut opts = LockOptions::new().retry(retry.clone()).wait(EVENTUALLY);
        if let Some(f) = fence {
            opts = opts.fence_key(f);
        }
        let err = locker
            .obtain_multi(keys, ms(10_000), opts)
            .await
            .unwrap_err();
        match &err {
            LockError::Refused(BackendError::Invalid(msg)) => {
                assert!(!msg.is_empty(), "{what}");
            }
            other => panic!("{what}: expected Refused(Invalid), got {other:?}"),
        }
        assert!(!err.is_not_obtained(), "{what}");
    }
    assert_eq!(counting.calls(), 0, "no request reached the wire");
    assert_eq!(script_calls(&cluster).await, before, "no node ran a script");

    // Control: a valid lock is one round trip, seen by both counters.
    let ok = locker
        .obtain_multi(["{a}1", "{a}2"], ms(10_000), LockOptions::new())
        .await
        .unwrap();
    assert!(counting.calls() >= 1);
    assert!(script_calls(&cluster).await > before);
    ok.release().await.unwrap();
}
