//! An elector reads the store's settings when it starts: with `require_durable_store`, a store
//! that lets the fence keys be evicted or lost is refused before anything is written; a
//! durable one is contended as usual. Real servers.

mod common;

use std::time::Duration;

use common::*;
use lease_testkit::redis::{Persistence, RedisServer};
use redlease::{CancellationToken, Elector, ElectorError, StoreRisk};

/// Bounds each run in these tests.
const BOUND: Duration = Duration::from_secs(10);

/// The kit's default server persists nothing: a strict elector refuses it at once, writing
/// nothing (no lease, no counter).
#[tokio::test]
async fn a_strict_elector_refuses_a_store_without_persistence() {
    let server = redis().await;
    let elector = Elector::builder(backend(&server).await, config("svc", "a", 1000))
        .require_durable_store(true)
        .build();
    let report = tokio::time::timeout(BOUND, elector.preflight())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.risks(), vec![StoreRisk::CounterLostOnRestart]);
    let err = tokio::time::timeout(BOUND, elector.hold(CancellationToken::new()))
        .await
        .expect("refused at once, not contended")
        .expect_err("a strict elector refuses");
    let ElectorError::UnsafeStore { report } = &err else {
        panic!("{err}");
    };
    assert!(report.fence_keys_at_risk());
    assert!(err.to_string().contains("no persistence"), "{err}");
    let mut conn = raw(&server).await;
    assert_eq!(get(&mut conn, "svc:leader").await, None);
    assert_eq!(get(&mut conn, "svc:fence").await, None);
}

/// A store with every write fsynced before the reply is contended as usual.
#[tokio::test]
async fn a_strict_elector_runs_on_a_durable_store() {
    let server = RedisServer::builder()
        .persistence(Persistence::AofAlways)
        .start()
        .await
        .unwrap();
    let elector = Elector::builder(backend(&server).await, config("svc", "a", 1000))
        .require_durable_store(true)
        .build();
    let shutdown = CancellationToken::new();
    let run = {
        let (e, s) = (elector.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    wait_leader(&elector, EVENTUALLY).await;
    shutdown.cancel();
    tokio::time::timeout(BOUND, run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

/// Without the option, the same risky store is contended (the risk is a `tracing` warning).
#[tokio::test]
async fn a_default_elector_runs_on_a_risky_store() {
    let server = redis().await;
    let elector = Elector::new(backend(&server).await, config("svc", "a", 1000));
    let shutdown = CancellationToken::new();
    let run = {
        let (e, s) = (elector.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    wait_leader(&elector, EVENTUALLY).await;
    shutdown.cancel();
    tokio::time::timeout(BOUND, run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
