//! Locker tests over the in-memory backend on tokio's paused clock (driver logic only; the
//! Redis versions live in the `redlease` crate's integration tests).

mod common;

use common::bridge;
use std::time::Duration;

use lease_core::RetryStrategy;
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_tokio::{LockError, LockOptions, Locker};

fn setup() -> (
    Locker<MemoryBackend>,
    MemoryBackend,
    tokio::task::JoinHandle<()>,
) {
    let clock = ManualClock::new();
    let b = bridge(clock.clone());
    let backend = MemoryBackend::new(clock);
    (Locker::new(backend.clone()), backend, b)
}

const TTL: Duration = Duration::from_millis(300);

#[tokio::test(start_paused = true)]
async fn obtain_release_and_contention() {
    let (locker, backend, _b) = setup();
    let lock = locker
        .obtain("k", TTL, LockOptions::new().metadata("meta"))
        .await
        .unwrap();
    assert_eq!(lock.metadata(), "meta");
    assert!(lock.held());
    let err = locker
        .obtain("k", TTL, LockOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::NotObtained { .. }), "{err:?}");
    assert!(lock.ttl().await.unwrap() > Duration::ZERO);
    lock.release().await.unwrap();
    assert_eq!(backend.get("k"), None);
}

#[tokio::test(start_paused = true)]
async fn retry_until_free_and_deadline_carries_cause() {
    let (locker, _backend, _b) = setup();
    let held = locker.obtain("k", TTL, LockOptions::new()).await.unwrap();
    // Retries past the holder's expiry: obtained.
    let retry = RetryStrategy::linear(Duration::from_millis(50)).unwrap();
    let got = locker
        .obtain(
            "k",
            TTL,
            LockOptions::new()
                .retry(retry.clone())
                .wait(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    drop(held);
    // Wait shorter than the holder's TTL: deadline exceeded, carrying "not obtained".
    let err = locker
        .obtain(
            "k",
            TTL,
            LockOptions::new()
                .retry(retry)
                .wait(Duration::from_millis(120)),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::DeadlineExceeded { .. }), "{err:?}");
    assert!(err.is_not_obtained());
    got.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn custom_token_is_reentrant_without_counting() {
    let (locker, backend, _b) = setup();
    let a = locker
        .obtain("k", TTL, LockOptions::new().owner("tok"))
        .await
        .unwrap();
    let b = locker
        .obtain("k", TTL, LockOptions::new().owner("tok"))
        .await
        .unwrap();
    assert_eq!(a.owner(), "tok");
    b.release().await.unwrap();
    assert_eq!(backend.get("k"), None, "one release frees it");
    assert!(matches!(a.release().await, Err(LockError::NotHeld)));
}

#[tokio::test(start_paused = true)]
async fn auto_renew_keeps_the_lock_and_loss_fires_by_the_deadline() {
    let (locker, backend, _b) = setup();
    let lock = locker
        .obtain(
            "k",
            TTL,
            LockOptions::new().auto_renew(Duration::from_millis(100)),
        )
        .await
        .unwrap();
    tokio::time::sleep(TTL * 10).await;
    assert!(lock.held());
    assert!(!lock.lost().is_cancelled());
    let lost = lock.lost();
    backend.set_unavailable(true);
    let cut = tokio::time::Instant::now();
    lost.cancelled().await;
    assert!(tokio::time::Instant::now() <= cut + TTL);
    assert!(!lock.held());
}

/// The loss signal's token is made on the first `lost()` call: a lock lost before anyone
/// asked hands out a token already cancelled, and every later call the same signal.
#[tokio::test(start_paused = true)]
async fn loss_signal_asked_for_only_after_the_loss_is_cancelled() {
    let (locker, backend, _b) = setup();
    let lock = locker
        .obtain(
            "k",
            TTL,
            LockOptions::new().auto_renew(Duration::from_millis(100)),
        )
        .await
        .unwrap();
    backend.set_unavailable(true);
    tokio::time::sleep(TTL * 2).await;
    assert!(!lock.held());
    let first = lock.lost();
    assert!(first.is_cancelled(), "lost before the first lost() call");
    assert!(lock.lost().is_cancelled());
    // A token handed out before a release fires with it.
    backend.set_unavailable(false);
    let other = locker.obtain("k2", TTL, LockOptions::new()).await.unwrap();
    let keep = other.lost();
    assert!(!keep.is_cancelled());
    other.release().await.unwrap();
    assert!(
        keep.is_cancelled(),
        "a token handed out before the release fires with it"
    );
}

#[tokio::test(start_paused = true)]
async fn refresh_of_a_lost_lock_is_terminal() {
    let (locker, backend, _b) = setup();
    let lock = locker.obtain("k", TTL, LockOptions::new()).await.unwrap();
    backend.lose_key("k");
    let other = locker.obtain("k", TTL, LockOptions::new()).await.unwrap();
    assert!(matches!(lock.refresh(TTL).await, Err(LockError::NotHeld)));
    assert!(lock.lost().is_cancelled());
    assert!(matches!(lock.release().await, Err(LockError::NotHeld)));
    assert!(backend.get("k").is_some(), "a stolen lock is not deleted");
    other.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn multi_key_overlap_changes_nothing() {
    let (locker, backend, _b) = setup();
    let ab = locker
        .obtain_multi(["a", "b"], TTL, LockOptions::new())
        .await
        .unwrap();
    let err = locker
        .obtain_multi(["b", "c"], TTL, LockOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::NotObtained { .. }));
    assert_eq!(backend.get("c"), None, "all-or-nothing");
    ab.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn fenced_obtain_tokens_increase_and_invalid_input_is_refused() {
    let (locker, _backend, _b) = setup();
    let opts = LockOptions::new().fence_key("k:fence");
    let a = locker.obtain("k", TTL, opts.clone()).await.unwrap();
    let ta = a.fence_token().unwrap();
    a.release().await.unwrap();
    let b = locker.obtain("k", TTL, opts).await.unwrap();
    assert!(b.fence_token().unwrap() > ta);
    for bad in [
        Duration::ZERO,
        Duration::from_micros(500),
        Duration::from_secs(100 * 86400),
    ] {
        let e = locker
            .obtain("x", bad, LockOptions::new())
            .await
            .unwrap_err();
        assert!(matches!(e, LockError::Invalid(_)), "{bad:?}: {e:?}");
    }
    let e = locker
        .obtain("", TTL, LockOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(e, LockError::Invalid(_)));
}

#[tokio::test(start_paused = true)]
async fn dropped_guard_releases_in_the_background() {
    let (locker, backend, _b) = setup();
    let lock = locker.obtain("k", TTL, LockOptions::new()).await.unwrap();
    drop(lock);
    // Wait for the background release, bounded well below the TTL (300 ms) so that the key
    // disappearing can only be the release, not expiry.
    let mut gone = false;
    for _ in 0..100 {
        if backend.get("k").is_none() {
            gone = true;
            break;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(gone, "the dropped lock was not released in the background");
}
