//! Release notices over a quorum, on three real Redis servers: a follower of a Redlock election
//! and a lock waiter are woken by a release (every node publishes; the backend listens on
//! every node), with poll intervals far longer than the bound; a node that lost its notice
//! (its subscriber connection killed) does not matter while another node's arrives.

mod common;

use std::time::{Duration, Instant};

use common::start;
use lease_core::ElectionConfig;
use lease_core::notify::WatchRole;
use lease_core::{LeaseBackend, LeaseSpec, RetryStrategy, Role};
use lease_redis::HealingConnection;
use lease_redlock::{Node, RedlockBackend, RedlockConfig};
use lease_tokio::{CancellationToken, Elector, LockOptions, Locker};

type Backend = RedlockBackend<Node<lease_redis::RedisBackend<HealingConnection>>>;

const PROMPT: Duration = Duration::from_millis(1500);
const SLACK: Duration = Duration::from_secs(2);
const EVENTUALLY: Duration = Duration::from_secs(20);

async fn backend(servers: &[lease_testkit::redis::RedisServer]) -> Backend {
    let mut nodes = Vec::new();
    for s in servers {
        nodes.push(Node::connect(s.client().unwrap()).await.unwrap());
    }
    RedlockBackend::new(nodes, RedlockConfig::new()).unwrap()
}

/// Waits (bounded) until `backend`'s watch on `spec` is live: every relay subscribed.
async fn wait_live(backend: &Backend, spec: &LeaseSpec) {
    let watch = backend
        .release_watch(spec, WatchRole::Observer)
        .expect("nodes have notices");
    watch.activate();
    let deadline = Instant::now() + EVENTUALLY;
    while !watch.is_live() {
        assert!(Instant::now() < deadline, "never live");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One raw command to a node, bounded.
async fn ask<T: redis::FromRedisValue>(
    raw: &mut redis::aio::MultiplexedConnection,
    cmd: &redis::Cmd,
) -> T {
    tokio::time::timeout(EVENTUALLY, cmd.query_async(raw))
        .await
        .expect("the node answers within the bound")
        .expect("the command")
}

/// Runs `e` until `shutdown` and waits (bounded) until it leads; returns its run.
async fn lead(
    e: &Elector<Backend>,
    shutdown: &CancellationToken,
) -> tokio::task::JoinHandle<Result<(), lease_tokio::ElectorError>> {
    let run = {
        let (e, s) = (e.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let mut rx = e.subscribe();
    tokio::time::timeout(
        EVENTUALLY,
        rx.wait_for(|s| matches!(s.role, Role::Leader(_))),
    )
    .await
    .expect("leads within the bound")
    .expect("the elector runs");
    run
}

#[tokio::test]
async fn a_redlock_follower_is_elected_at_once_on_resign() {
    let servers = start(3).await;
    let config = |id: &str| {
        ElectionConfig::builder("rl", id)
            .ttl(Duration::from_secs(10))
            .build()
            .unwrap()
    };
    let a = Elector::new(backend(&servers).await, config("a"));
    let b_backend = backend(&servers).await;
    let b = Elector::new(b_backend.clone(), config("b"));
    let shutdown = CancellationToken::new();
    let run_a = lead(&a, &shutdown).await;
    let run_b = {
        let (e, s) = (b.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let mut rx = b.subscribe();
    tokio::time::timeout(EVENTUALLY, rx.wait_for(|s| s.role == Role::Follower))
        .await
        .unwrap()
        .unwrap();
    wait_live(&b_backend, &LeaseSpec::election("rl")).await;
    let resigned = Instant::now();
    a.resign();
    tokio::time::timeout(
        PROMPT + SLACK,
        rx.wait_for(|s| matches!(s.role, Role::Leader(_))),
    )
    .await
    .expect("the follower was woken")
    .unwrap();
    let took = resigned.elapsed();
    assert!(took < PROMPT, "handover took {took:?}");
    shutdown.cancel();
    for r in [run_a, run_b] {
        tokio::time::timeout(EVENTUALLY, r)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

#[tokio::test]
async fn a_redlock_lock_waiter_is_woken_even_if_one_node_lost_its_notice() {
    let servers = start(3).await;
    let a = Locker::new(backend(&servers).await);
    let b_backend = backend(&servers).await;
    let b = Locker::new(b_backend.clone());
    let held = a
        .obtain("job", Duration::from_secs(30), LockOptions::new())
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        let options = LockOptions::new()
            .retry(RetryStrategy::linear(Duration::from_secs(20)).unwrap())
            .wait(Duration::from_secs(60));
        let lock = b.obtain("job", Duration::from_secs(30), options).await;
        (lock.map(drop), Instant::now())
    });
    let spec = LeaseSpec::lock(["job"], None).unwrap();
    wait_live(&b_backend, &spec).await;
    // Node 0's subscriber connection is killed: its notice of this release is lost.
    let mut raw = servers[0].connection().await.unwrap();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut raw)
        .await
        .unwrap();
    let released = Instant::now();
    held.release().await.unwrap();
    let (lock, at) = tokio::time::timeout(PROMPT + SLACK, waiter)
        .await
        .expect("the waiter was woken")
        .unwrap();
    lock.expect("obtained");
    let took = at.duration_since(released);
    assert!(took < PROMPT, "obtained {took:?} after the release");
}

/// A `LeaderWatch` over Redlock with no contender beside it gets its releases by notice: its
/// reads (`observe`) set the waiter mark on the holder's value on every node, so the release
/// publishes on every node. Before Redlock's `observe` did that (it read only, as `inspect`
/// does), no node's value was marked and no release published: the watch saw it at its poll.
#[tokio::test]
async fn a_redlock_leader_watch_marks_the_holder_on_every_node() {
    let servers = start(3).await;
    let config = ElectionConfig::builder("rlw", "a")
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap();
    let key = config.lease_spec().keys()[0].clone();
    let a_backend = backend(&servers).await;
    let a = Elector::new(a_backend.clone(), config);
    let shutdown = CancellationToken::new();
    let run = lead(&a, &shutdown).await;
    let mut raws = Vec::new();
    for s in &servers {
        let conn = tokio::time::timeout(EVENTUALLY, s.connection()).await;
        raws.push(conn.expect("bounded").expect("connect"));
    }
    let marked = |v: &str| v.ends_with("\0w") && v.matches('\0').count() == 2;
    for raw in &mut raws {
        let v: String = ask(raw, redis::cmd("GET").arg(&key)).await;
        assert!(!marked(&v), "nobody watched yet: {v:?}");
    }

    let mut watch =
        lease_tokio::LeaderWatch::new(std::sync::Arc::new(backend(&servers).await), "rlw")
            .unwrap()
            .every(Duration::from_secs(10))
            .unwrap();
    let first = tokio::time::timeout(PROMPT, watch.changed())
        .await
        .expect("the first read is prompt")
        .expect("read");
    assert_eq!(first.map(|l| l.instance_id).as_deref(), Some("a"));
    for raw in &mut raws {
        let v: String = ask(raw, redis::cmd("GET").arg(&key)).await;
        assert!(marked(&v), "the watch's read marks the holder: {v:?}");
        let () = ask(raw, redis::cmd("CONFIG").arg("RESETSTAT")).await;
    }

    shutdown.cancel();
    tokio::time::timeout(EVENTUALLY, run)
        .await
        .expect("a steps down")
        .unwrap()
        .unwrap();
    // The release round returns at a quorum; the last node's release may still run.
    tokio::time::timeout(EVENTUALLY, a_backend.settled())
        .await
        .expect("every node's release answered");
    for raw in &mut raws {
        let info: String = ask(raw, redis::cmd("INFO").arg("commandstats")).await;
        assert!(
            info.contains("cmdstat_publish:calls=1,"),
            "every node published: {info}"
        );
    }
}
