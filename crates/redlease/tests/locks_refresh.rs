//! Refreshing locks against a real Redis, through the facade: a refresh extends the lock; a
//! lost lock is terminal; transient errors are retried (a blackholing proxy) until the
//! strategy gives up; a process stalled past its local deadline does not extend the lock.
//!
//! Faults are real: a TCP proxy that blackholes traffic.
//! Attempts are counted by `Counted` (`common/locks.rs`: the kit's `Wrapped` backend with
//! counting hooks around the Redis backend), so retry counts are asserted exactly, without
//! timing.

mod common;

use std::sync::Arc;

use common::locks::{
    Counted, SLACK, counted_locker, linear, locker, ms, proxied, wait_gone, within,
};
use common::{EVENTUALLY, get, pttl, raw};
use lease_testkit::proxy::{FaultProxy, Mode};
use redlease::{LockError, LockOptions, Locker, RetryStrategy};

/// redislock: Refresh extends the TTL at the server and the local deadline.
#[tokio::test]
async fn refresh_extends_the_lock() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    let lock = locker
        .obtain("k", ms(1_000), LockOptions::new())
        .await
        .unwrap();
    let before = lock.valid_until();
    lock.refresh(ms(60_000)).await.unwrap();
    assert!(lock.valid_until() > before);
    assert!(
        pttl(&mut conn, "k").await > 1_000,
        "the server TTL was extended"
    );
    assert!(lock.ttl().await.unwrap() > ms(1_000));
    // A shorter refresh shortens it (an explicit refresh sets the TTL).
    lock.refresh(ms(5_000)).await.unwrap();
    let p = pttl(&mut conn, "k").await;
    assert!(p > 0 && p <= 5_000, "PTTL {p}");
    lock.release().await.unwrap();
}

/// edge-cases: refresh of a lost lock is terminal. The key is taken by someone else; the
/// refresh answers `NotHeld` after one round trip, although the lock has a retry strategy;
/// the loss signal fires; later refreshes answer at once without a round trip; the new
/// holder is intact.
#[tokio::test]
async fn refresh_of_a_lost_lock_returns_not_held_at_once_without_retries() {
    let server = common::redis().await;
    let (locker, counted) = counted_locker(&server).await;
    let mut conn = raw(&server).await;
    let lock = locker
        .obtain(
            "k",
            ms(30_000),
            LockOptions::new()
                .owner("a")
                .retry(RetryStrategy::limit(5, linear(10))),
        )
        .await
        .unwrap();
    // The server loses the key (as on expiry or eviction) and someone else takes it.
    let _: i64 = redis::cmd("DEL")
        .arg("k")
        .query_async(&mut conn)
        .await
        .unwrap();
    let other = locker
        .obtain("k", ms(30_000), LockOptions::new().owner("b"))
        .await
        .unwrap();
    let lost = lock.lost();
    assert!(matches!(
        lock.refresh(ms(30_000)).await,
        Err(LockError::NotHeld)
    ));
    assert_eq!(counted.counts().renews, 1, "no retries");
    assert!(lost.is_cancelled());
    assert!(!lock.held());
    assert!(matches!(
        lock.refresh(ms(30_000)).await,
        Err(LockError::NotHeld)
    ));
    assert_eq!(counted.counts().renews, 1, "terminal: no more round trips");
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some("b"));
    assert!(pttl(&mut conn, "k").await > 0);
    other.release().await.unwrap();
}

/// edge-cases: transient refresh errors are retried. The network drops everything (proxy
/// blackhole) while a refresh runs; each attempt is bounded by the operation timeout and
/// retried; once the network heals the refresh succeeds.
#[tokio::test]
async fn refresh_retries_transient_errors_until_the_network_heals() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let counted = Counted::new(proxied(&server, &proxy).await);
    let locker = Locker::new(counted.clone());
    let lock = locker
        .obtain(
            "k",
            ms(10_000),
            LockOptions::new()
                .retry(RetryStrategy::limit(1_000, linear(20)))
                .operation_timeout(ms(100)),
        )
        .await
        .unwrap();
    let lock = Arc::new(lock);
    proxy.set_mode(Mode::Blackhole);
    let refresh = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.refresh(ms(60_000)).await })
    };
    // Two attempts have timed out while the third is in flight.
    counted
        .wait_for("three refresh attempts", |c| c.renews >= 3)
        .await;
    assert!(!refresh.is_finished(), "still retrying");
    proxy.set_mode(Mode::Pass);
    let healed = std::time::Instant::now();
    tokio::time::timeout(EVENTUALLY, refresh)
        .await
        .expect("refresh in time")
        .unwrap()
        .unwrap();
    // The attempt in flight at the heal gets through or times out (100 ms); the next one,
    // 20 ms later, gets through.
    within(
        healed,
        ms(2 * (100 + 20)) + SLACK,
        "the refresh after healing",
    );
    assert!(lock.held());
    assert!(!lock.lost().is_cancelled());
    let mut conn = raw(&server).await;
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some(lock.owner()));
    assert!(pttl(&mut conn, "k").await > 10_000, "extended to 60 s");
    Arc::try_unwrap(lock).unwrap().release().await.unwrap();
}

/// edge-cases: transient errors exhausted. With the network blackholed throughout, refresh
/// fails with `OutcomeUnknown` after exactly 1 + 3 attempts (`limit(3, ..)`): a blackholed
/// request may have reached the server, so the TTL may or may not have changed; a transient failure
/// is not a loss: the lock is still held locally, and refreshes again once the network heals.
#[tokio::test]
async fn refresh_gives_up_after_the_strategys_retries_when_blackholed() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let counted = Counted::new(proxied(&server, &proxy).await);
    let locker = Locker::new(counted.clone());
    let lock = locker
        .obtain(
            "k",
            ms(10_000),
            LockOptions::new()
                .retry(RetryStrategy::limit(3, linear(20)))
                .operation_timeout(ms(100)),
        )
        .await
        .unwrap();
    proxy.set_mode(Mode::Blackhole);
    let cut = std::time::Instant::now();
    let err = tokio::time::timeout(EVENTUALLY, lock.refresh(ms(10_000)))
        .await
        .expect("refresh gives up in time")
        .unwrap_err();
    // 4 attempts of at most 100 ms each, 3 waits of at most 20 ms.
    within(cut, ms(4 * 100 + 3 * 20) + SLACK, "giving up");
    assert!(matches!(err, LockError::OutcomeUnknown(_)), "{err:?}");
    assert!(err.is_outcome_unknown());
    assert_eq!(counted.counts().renews, 4);
    assert!(lock.held(), "a transient failure is not a loss");
    assert!(!lock.lost().is_cancelled());
    proxy.set_mode(Mode::Pass);
    lock.refresh(ms(10_000)).await.unwrap();
    lock.release().await.unwrap();
    let mut conn = raw(&server).await;
    assert_eq!(get(&mut conn, "k").await, None);
}

/// A process stalled past its lock's local deadline (a blocking pause on the runtime's only
/// thread, so not even the loss watcher runs) must not extend the lock when it resumes: the
/// lease has lapsed locally and may be someone else's. The request's way in is slowed (proxy
/// latency at obtain) so the server's copy outlives the local deadline, as with any one-way
/// delay: a refresh reaching Redis in that gap would succeed at the server. It answers
/// `NotHeld` at once instead — no round trip — the loss signal fires, and the key is left to
/// expire with the TTL it had.
#[tokio::test]
async fn refresh_after_a_stall_past_the_local_deadline_is_not_held_without_a_round_trip() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let counted = Counted::new(proxied(&server, &proxy).await);
    let locker = Locker::new(counted.clone());
    let mut conn = raw(&server).await;
    proxy.set_mode(Mode::Latency(ms(400)));
    let lock = locker
        .obtain("k", ms(2_000), LockOptions::new())
        .await
        .unwrap();
    proxy.set_mode(Mode::Pass);
    let lost = lock.lost();
    // Stall past the local deadline (the server's copy lives ~400 ms longer).
    let stall = lock
        .valid_until()
        .saturating_duration_since(tokio::time::Instant::now())
        + ms(100);
    std::thread::sleep(stall);
    let err = lock.refresh(ms(60_000)).await.unwrap_err();
    assert!(matches!(err, LockError::NotHeld), "{err:?}");
    assert_eq!(counted.counts().renews, 0, "no round trip");
    assert!(lost.is_cancelled());
    assert!(!lock.held());
    // Nothing extended the key: it expires with its original TTL.
    wait_gone(&mut conn, "k").await;
}
