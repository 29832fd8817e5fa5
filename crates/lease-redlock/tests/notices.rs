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
    let run_a = {
        let (e, s) = (a.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let mut rx = a.subscribe();
    tokio::time::timeout(
        EVENTUALLY,
        rx.wait_for(|s| matches!(s.role, Role::Leader(_))),
    )
    .await
    .unwrap()
    .unwrap();
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
