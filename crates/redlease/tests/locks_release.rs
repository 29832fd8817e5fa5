//! Releasing locks and their TTL against a real Redis, through the facade: refresh and release
//! after expiry, release of a lock someone else now holds, the TTL over several keys, and the
//! background release of a dropped lock.
//!
//! Attempts are counted by `Counted` (`common/locks.rs`: the kit's `Wrapped` backend with
//! counting hooks around the Redis backend), so retry counts are asserted exactly, without
//! timing.

mod common;

use std::time::Duration;

use common::locks::{counted_locker, exists, fired, locker, ms, wait_gone};
use common::{EVENTUALLY, get, pttl, raw};
use redlease::{LockError, LockOptions};

/// redislock: refresh and release after expiry fail with "not held"; the loss signal fires
/// on the local deadline; `ttl()` is zero.
#[tokio::test]
async fn refresh_and_release_after_expiry_are_not_held() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    let lock = locker
        .obtain("k", ms(100), LockOptions::new())
        .await
        .unwrap();
    fired(&lock.lost(), "the local deadline").await;
    assert!(!lock.held());
    wait_gone(&mut conn, "k").await;
    assert_eq!(lock.ttl().await.unwrap(), Duration::ZERO);
    assert!(matches!(
        lock.refresh(ms(10_000)).await,
        Err(LockError::NotHeld)
    ));
    assert!(matches!(lock.release().await, Err(LockError::NotHeld)));
    assert_eq!(get(&mut conn, "k").await, None, "release created nothing");
}

/// edge-cases: release and refresh compare the stored value with the caller's token first and
/// never touch a lock someone else now holds. The server drops A's key early (as it does when
/// a paused client outlives the TTL); B — whose token "ab" starts with A's "a" — takes it. A
/// sees zero TTL, `NotHeld` on refresh and on release; B's lock is intact.
#[tokio::test]
async fn release_of_a_lock_someone_else_now_holds_is_not_held_and_leaves_it_intact() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    let a = locker
        .obtain("k", ms(30_000), LockOptions::new().owner("a"))
        .await
        .unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("k")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    wait_gone(&mut conn, "k").await;
    let b = locker
        .obtain("k", ms(30_000), LockOptions::new().owner("ab"))
        .await
        .unwrap();
    assert!(a.held(), "A does not know yet");
    assert_eq!(a.ttl().await.unwrap(), Duration::ZERO);
    assert!(matches!(
        a.refresh(ms(60_000)).await,
        Err(LockError::NotHeld)
    ));
    assert!(matches!(a.release().await, Err(LockError::NotHeld)));
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some("ab"));
    let p = pttl(&mut conn, "k").await;
    assert!(p > 0 && p <= 30_000, "B's TTL untouched: {p}");
    assert!(b.held());
    b.release().await.unwrap();
}

/// redislock: TTL returns the minimum PTTL over the lock's keys, and zero once any key is not
/// ours. Release then deletes only the keys still ours and reports `NotHeld`.
#[tokio::test]
async fn ttl_is_the_minimum_over_the_keys_and_zero_when_not_held() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    let lock = locker
        .obtain_multi(["a", "b", "c"], ms(60_000), LockOptions::new())
        .await
        .unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("b")
        .arg(20_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let ttl = lock.ttl().await.unwrap();
    assert!(
        ttl <= ms(20_000) && ttl > ms(10_000),
        "min over keys: {ttl:?}"
    );
    // Someone else now holds c (as after c expired and was taken).
    let _: () = redis::cmd("SET")
        .arg("c")
        .arg("other")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(lock.ttl().await.unwrap(), Duration::ZERO);
    assert!(matches!(lock.release().await, Err(LockError::NotHeld)));
    assert!(!exists(&mut conn, "a").await);
    assert!(!exists(&mut conn, "b").await);
    assert_eq!(get(&mut conn, "c").await.as_deref(), Some("other"));
}

/// A `Lock` dropped without `release` is released in the background (with or without
/// auto-renewal). The TTL is far longer than the wait, so the key's disappearance proves a
/// release, not an expiry.
#[tokio::test]
async fn dropping_a_lock_releases_it_in_the_background() {
    let server = common::redis().await;
    let (locker, counted) = counted_locker(&server).await;
    let mut conn = raw(&server).await;
    let ttl = EVENTUALLY * 3;
    let plain = locker.obtain("k1", ttl, LockOptions::new()).await.unwrap();
    let renewing = locker
        .obtain("k2", ttl, LockOptions::new().auto_renew(ms(100)))
        .await
        .unwrap();
    assert!(exists(&mut conn, "k1").await && exists(&mut conn, "k2").await);
    drop(plain);
    drop(renewing);
    wait_gone(&mut conn, "k1").await;
    wait_gone(&mut conn, "k2").await;
    assert_eq!(counted.counts().releases, 2);
    // Both are free again.
    let a = locker.obtain("k1", ttl, LockOptions::new()).await.unwrap();
    let b = locker.obtain("k2", ttl, LockOptions::new()).await.unwrap();
    a.release().await.unwrap();
    b.release().await.unwrap();
}
