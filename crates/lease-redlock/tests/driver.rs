//! lease-tokio's Locker and Elector over a Redlock quorum of real Redis servers, unchanged.
//!
//! Losses and take-overs are bounded from above (TTL, plus the acquire interval for a
//! take-over, plus [`SLACK`] for a loaded machine), not only "eventually".

mod common;

use std::time::{Duration, Instant};

use common::*;
use lease_core::{ElectionConfig, Role};
use lease_testkit::proxy::Mode;
use lease_tokio::{CancellationToken, Elector, ElectorState, LockOptions, Locker};
use tokio::sync::watch;

async fn wait_state(
    rx: &mut watch::Receiver<ElectorState>,
    what: &str,
    pred: impl FnMut(&ElectorState) -> bool,
) -> ElectorState {
    must_complete(what, rx.wait_for(pred))
        .await
        .expect("elector alive")
        .clone()
}

/// Scheduling slack on top of the protocol's bounds (a loaded 2-core machine, debug builds).
const SLACK: Duration = Duration::from_secs(2);

/// Asserts that `since.elapsed()` is at most `bound`.
fn within(since: Instant, bound: Duration, what: &str) {
    let took = since.elapsed();
    assert!(took <= bound, "{what} took {took:?}, more than {bound:?}");
}

#[tokio::test]
async fn auto_renew_survives_one_slow_node_and_signals_loss_when_a_majority_goes_away() {
    let servers = start(3).await;
    let locker = Locker::new(redlock(direct_nodes(&servers).await));
    let lock = locker
        .obtain(
            "job",
            Duration::from_millis(1500),
            LockOptions::new().auto_renew(Duration::from_millis(500)),
        )
        .await
        .unwrap();
    let lost = lock.lost();
    let first_deadline = lock.valid_until();

    // One node paused: every renewal waits for it up to the operation timeout, and succeeds.
    servers[0].pause().await.unwrap();
    must_complete("two renewals with a paused node", async {
        while lock.valid_until() < first_deadline + Duration::from_millis(1000) {
            assert!(!lost.is_cancelled(), "lost with a quorum available");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(lock.held());

    // A majority away: renewals fail until the local deadline, then the loss signal fires.
    servers[1].pause().await.unwrap();
    let majority_gone = Instant::now();
    must_complete("the loss signal", lost.cancelled()).await;
    // The last renewal that reached a quorum was sent before the pause.
    within(
        majority_gone,
        Duration::from_millis(1500) + SLACK,
        "the loss signal",
    );
    assert!(!lock.held());
    servers[0].resume().await.unwrap();
    servers[1].resume().await.unwrap();
}

#[tokio::test]
async fn the_election_fails_over_when_the_leaders_nodes_are_unreachable() {
    let servers = start(3).await;
    // Each elector reaches the three servers through its own proxies.
    let (proxies_a, nodes_a) = proxied_nodes(&servers).await;
    let (_proxies_b, nodes_b) = proxied_nodes(&servers).await;
    let config = |id: &str| {
        ElectionConfig::builder("jobs", id)
            .ttl(Duration::from_millis(1000))
            .build()
            .unwrap()
    };
    let a = Elector::builder(redlock(nodes_a), config("a"))
        .seed(1)
        .build();
    let b = Elector::builder(redlock(nodes_b), config("b"))
        .seed(2)
        .build();
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let mut watch_a = a.subscribe();
    let mut watch_b = b.subscribe();

    let run_a = tokio::spawn({
        let (a, stop) = (a.clone(), stop_a.clone());
        async move { a.hold(stop).await }
    });
    let state = wait_state(&mut watch_a, "a elected", |s| {
        matches!(s.role, Role::Leader(_))
    })
    .await;
    let Role::Leader(token_a) = state.role else {
        unreachable!()
    };
    let run_b = tokio::spawn({
        let (b, stop) = (b.clone(), stop_b.clone());
        async move { b.hold(stop).await }
    });
    wait_state(&mut watch_b, "b follows a", |s| {
        s.role == Role::Follower && s.leader.as_deref() == Some("a")
    })
    .await;
    let seen = b.leader().await.unwrap().unwrap();
    assert_eq!(seen.instance_id, "a");
    assert_eq!(seen.token, Some(token_a));

    // Partition a from every node.
    for p in &proxies_a {
        p.set_mode(Mode::Blackhole);
    }
    let cut = Instant::now();
    let state = wait_state(&mut watch_b, "b elected", |s| {
        matches!(s.role, Role::Leader(_))
    })
    .await;
    let Role::Leader(token_b) = state.role else {
        unreachable!()
    };
    assert!(token_b > token_a, "{token_b} > {token_a}");
    // a's lease lapses by one TTL after the cut; b polls every acquire interval.
    let cfg = b.config();
    within(
        cut,
        cfg.ttl().get() + cfg.acquire_interval() + SLACK,
        "b's take-over",
    );
    wait_state(&mut watch_a, "a stepped down", |s| {
        !matches!(s.role, Role::Leader(_))
    })
    .await;
    within(cut, a.config().ttl().get() + SLACK, "a's step-down");

    // Heal: a's queued requests arrive late and change nothing; b still leads.
    for p in &proxies_a {
        p.set_mode(Mode::Pass);
    }
    wait_state(&mut watch_a, "a follows b", |s| {
        s.role == Role::Follower && s.leader.as_deref() == Some("b")
    })
    .await;
    assert_eq!(b.token(), Some(token_b));

    stop_a.cancel();
    stop_b.cancel();
    must_complete("a stops", run_a).await.unwrap().unwrap();
    must_complete("b stops", run_b).await.unwrap().unwrap();
    let mut raw = raws(&servers).await;
    assert_eq!(
        values(&mut raw, "jobs:leader").await,
        [None, None, None],
        "released on shutdown"
    );
}
