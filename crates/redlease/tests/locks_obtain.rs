//! Obtaining locks against a real Redis, through the facade: the reference scenarios of
//! bsm/redislock (obtain and release, metadata, custom tokens, multi-key all-or-nothing) and
//! the edge cases its users learned the hard way (exact owner match, sub-millisecond TTLs and
//! other bad input refused before any round trip).
//!
//! Attempts are counted by `Counted` (`common/locks.rs`: the kit's `Wrapped` backend with
//! counting hooks around the Redis backend), so retry counts are asserted exactly, without
//! timing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::locks::{assert_not_obtained_by, counted_locker, exists, linear, locker, ms};
use common::{get, pttl, raw};
use redlease::core::{
    LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest, Ttl,
};
use redlease::{ConfigError, LeaseBackend, LockError, LockOptions};

/// redislock: Obtain / Release. The key holds the token with the TTL; a second obtainer is
/// refused with the holder named; release deletes the key and frees the lock.
#[tokio::test]
async fn obtain_and_release() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    let lock = locker
        .obtain("k", ms(10_000), LockOptions::new())
        .await
        .unwrap();
    assert!(!lock.owner().is_empty(), "a random token by default");
    assert_eq!(lock.key(), "k");
    assert_eq!(lock.keys(), ["k"]);
    assert_eq!(lock.fence_token(), None, "no fence key, no token");
    assert!(lock.held());
    assert!(!lock.lost().is_cancelled());
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some(lock.owner()));
    let p = pttl(&mut conn, "k").await;
    assert!(p > 0 && p <= 10_000, "PTTL {p}");

    let err = locker
        .obtain("k", ms(10_000), LockOptions::new())
        .await
        .unwrap_err();
    assert_not_obtained_by(&err, lock.owner());
    assert!(err.is_not_obtained());

    let lost = lock.lost();
    lock.release().await.unwrap();
    assert!(lost.is_cancelled(), "release fires the loss signal");
    assert_eq!(get(&mut conn, "k").await, None);
    let again = locker
        .obtain("k", ms(10_000), LockOptions::new())
        .await
        .unwrap();
    again.release().await.unwrap();
}

/// redislock: metadata is stored with the token and reported to anyone who inspects the lock;
/// a contender is told the holder's token, never the metadata.
#[tokio::test]
async fn metadata_is_stored_and_reported() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    let lock = locker
        .obtain("k", ms(10_000), LockOptions::new().metadata("job 42"))
        .await
        .unwrap();
    assert_eq!(lock.metadata(), "job 42");
    assert_eq!(
        get(&mut conn, "k").await,
        Some(format!("{}\0job 42", lock.owner()))
    );
    let info = locker
        .backend()
        .inspect(&LeaseSpec::lock(["k"], None).unwrap())
        .await
        .unwrap();
    assert_eq!(info.holder.as_deref(), Some(lock.owner()));
    assert_eq!(info.metadata.as_deref(), Some("job 42"));
    let err = locker
        .obtain("k", ms(10_000), LockOptions::new())
        .await
        .unwrap_err();
    assert_not_obtained_by(&err, lock.owner());
    // Refresh keeps the metadata (it only moves the TTL).
    lock.refresh(ms(20_000)).await.unwrap();
    assert_eq!(
        get(&mut conn, "k").await,
        Some(format!("{}\0job 42", lock.owner()))
    );
    lock.release().await.unwrap();
}

/// redislock: a custom token; obtaining again with it is reentrant *without counting* (one
/// release frees the lock, the other handle then finds it not held); a fenced re-obtain
/// mints a fresh, larger token (reentrant fencing).
#[tokio::test]
async fn custom_token_reobtain_is_reentrant_without_counting() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    let opts = LockOptions::new().owner("worker-1").fence_key("k:fence");
    let a = locker.obtain("k", ms(10_000), opts.clone()).await.unwrap();
    assert_eq!(a.owner(), "worker-1");
    let b = locker.obtain("k", ms(10_000), opts).await.unwrap();
    assert_eq!(b.owner(), "worker-1");
    assert!(
        b.fence_token().unwrap() > a.fence_token().unwrap(),
        "{:?} then {:?}",
        a.fence_token(),
        b.fence_token()
    );
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some("worker-1"));
    // Someone else is still refused.
    let err = locker
        .obtain("k", ms(10_000), LockOptions::new().owner("worker-2"))
        .await
        .unwrap_err();
    assert_not_obtained_by(&err, "worker-1");

    b.release().await.unwrap();
    assert_eq!(get(&mut conn, "k").await, None, "one release frees it");
    assert!(matches!(
        a.refresh(ms(10_000)).await,
        Err(LockError::NotHeld)
    ));
    assert!(matches!(a.release().await, Err(LockError::NotHeld)));
}

/// edge-cases: owners match exactly, never by prefix (redislock matched the stored value by
/// prefix, so a short custom token could match another holder's value). A holder "ab" (with
/// metadata) is neither re-obtained, renewed, released nor reported by owner "a", nor by its
/// own value with the metadata appended.
#[tokio::test]
async fn owner_match_is_exact() {
    let server = common::redis().await;
    let (locker, counted) = counted_locker(&server).await;
    let mut conn = raw(&server).await;
    let holder = locker
        .obtain(
            "k",
            ms(10_000),
            LockOptions::new().owner("ab").metadata("m"),
        )
        .await
        .unwrap();
    let err = locker
        .obtain("k", ms(10_000), LockOptions::new().owner("a"))
        .await
        .unwrap_err();
    assert_not_obtained_by(&err, "ab");

    let spec = Arc::new(LeaseSpec::lock(["k"], None).unwrap());
    let backend = locker.backend();
    for other in ["a", "abm", "ab m", "ab\u{1}m"] {
        let owner = Owner::new(other).unwrap();
        let released = backend
            .release(&ReleaseRequest::new(spec.clone(), owner.clone()))
            .await
            .unwrap();
        assert_eq!(released, ReleaseOutcome::NotHeld, "{other:?}");
        let renewed = backend
            .renew(&RenewRequest::new(
                spec.clone(),
                owner.clone(),
                Ttl::new(ms(60_000)).unwrap(),
            ))
            .await
            .unwrap();
        assert_eq!(renewed, RenewOutcome::NotHeld, "{other:?}");
        assert_eq!(backend.remaining(&spec, &owner).await.unwrap(), None);
    }
    // A token containing the separator is refused before any round trip.
    let before = counted.counts().acquire_total;
    let err = locker
        .obtain("k", ms(10_000), LockOptions::new().owner("ab\0m"))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Invalid(_)), "{err:?}");
    assert_eq!(counted.counts().acquire_total, before);

    assert_eq!(get(&mut conn, "k").await.as_deref(), Some("ab\0m"));
    let p = pttl(&mut conn, "k").await;
    assert!(p > 0 && p <= 10_000, "not renewed by a stranger: PTTL {p}");
    holder.release().await.unwrap();
}

/// redislock ObtainMulti; edge-cases: every key is checked before any is changed. A holds
/// {x, y} (fenced by f); B asks for {z, y} (z free and first, same fence) and C for {y, z}:
/// both are refused and nothing changed — z does not exist, x/y are still A's, the fence
/// counter and mark did not move. Once A releases, B obtains all and the counter moves on.
#[tokio::test]
async fn multi_key_overlap_one_wins_and_the_other_changes_nothing() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    let a = locker
        .obtain_multi(
            ["x", "y"],
            ms(30_000),
            LockOptions::new().owner("A").fence_key("f"),
        )
        .await
        .unwrap();
    assert_eq!(a.fence_token().map(|t| t.get()), Some(1));
    for (keys, who) in [(["z", "y"], "B"), (["y", "z"], "C")] {
        let err = locker
            .obtain_multi(
                keys,
                ms(30_000),
                LockOptions::new().owner(who).fence_key("f"),
            )
            .await
            .unwrap_err();
        assert_not_obtained_by(&err, "A");
        assert!(!exists(&mut conn, "z").await, "{who}: all-or-nothing");
        assert_eq!(get(&mut conn, "x").await.as_deref(), Some("A"));
        assert_eq!(get(&mut conn, "y").await.as_deref(), Some("A"));
        assert_eq!(get(&mut conn, "f").await.as_deref(), Some("1"));
        assert_eq!(get(&mut conn, "f:applied").await.as_deref(), Some("1"));
    }
    a.release().await.unwrap();
    let b = locker
        .obtain_multi(
            ["z", "y"],
            ms(30_000),
            LockOptions::new().owner("B").fence_key("f"),
        )
        .await
        .unwrap();
    assert_eq!(b.fence_token().map(|t| t.get()), Some(2));
    assert_eq!(get(&mut conn, "z").await.as_deref(), Some("B"));
    assert!(!exists(&mut conn, "x").await);
    b.release().await.unwrap();
}

/// edge-cases: a TTL under 1 ms became PX 0 (deleting the key yet reporting success); such
/// TTLs, TTLs that are not whole milliseconds, and huge ones are refused with
/// `LockError::Invalid` before any round trip — for obtain and for refresh; so are other bad
/// inputs (no keys, duplicate keys, a renew interval above TTL/2, a zero operation timeout).
#[tokio::test]
async fn bad_ttls_and_inputs_are_refused_before_any_round_trip() {
    let server = common::redis().await;
    let (locker, counted) = counted_locker(&server).await;
    for bad in [
        Duration::ZERO,
        Duration::from_micros(1),
        Duration::from_micros(999),
        Duration::from_micros(1_500),
        redlease::core::MAX_TTL + ms(1),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ] {
        let err = locker
            .obtain("k", bad, LockOptions::new().retry(linear(10)))
            .await
            .unwrap_err();
        assert!(matches!(err, LockError::Invalid(_)), "{bad:?}: {err:?}");
    }
    let err = locker
        .obtain("k", Duration::ZERO, LockOptions::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LockError::Invalid(ConfigError::ZeroTtl)),
        "{err:?}"
    );

    let empty: [&str; 0] = [];
    let bad_inputs: Vec<(&str, Result<_, LockError>)> = vec![
        (
            "a sub-millisecond auto-renew interval",
            locker
                .obtain(
                    "a",
                    ms(1_000),
                    LockOptions::new().auto_renew(Duration::from_micros(500)),
                )
                .await,
        ),
        (
            "a sub-millisecond operation timeout",
            locker
                .obtain(
                    "a",
                    ms(1_000),
                    LockOptions::new().operation_timeout(Duration::from_micros(500)),
                )
                .await,
        ),
        (
            "no keys",
            locker
                .obtain_multi(empty, ms(1_000), LockOptions::new())
                .await,
        ),
        (
            "duplicate keys",
            locker
                .obtain_multi(["a", "a"], ms(1_000), LockOptions::new())
                .await,
        ),
        (
            "empty key",
            locker.obtain("", ms(1_000), LockOptions::new()).await,
        ),
        (
            "fence key equals a lock key",
            locker
                .obtain("a", ms(1_000), LockOptions::new().fence_key("a"))
                .await,
        ),
        (
            "renew interval above TTL/2",
            locker
                .obtain("a", ms(1_000), LockOptions::new().auto_renew(ms(501)))
                .await,
        ),
        (
            "zero renew interval",
            locker
                .obtain(
                    "a",
                    ms(1_000),
                    LockOptions::new().auto_renew(Duration::ZERO),
                )
                .await,
        ),
        (
            "zero operation timeout",
            locker
                .obtain(
                    "a",
                    ms(1_000),
                    LockOptions::new().operation_timeout(Duration::ZERO),
                )
                .await,
        ),
        (
            "empty token",
            locker
                .obtain("a", ms(1_000), LockOptions::new().owner(""))
                .await,
        ),
    ];
    for (what, r) in bad_inputs {
        let err = r.err().unwrap_or_else(|| panic!("{what}: accepted"));
        assert!(matches!(err, LockError::Invalid(_)), "{what}: {err:?}");
    }
    assert_eq!(counted.counts().acquire_total, 0, "no round trip");

    let lock = locker
        .obtain("k", ms(10_000), LockOptions::new())
        .await
        .unwrap();
    for bad in [Duration::ZERO, Duration::from_micros(500), Duration::MAX] {
        let err = lock.refresh(bad).await.unwrap_err();
        assert!(matches!(err, LockError::Invalid(_)), "{bad:?}: {err:?}");
    }
    assert_eq!(counted.counts().renews, 0, "no round trip");
    assert!(lock.held(), "a refused refresh changes nothing");
    let mut conn = raw(&server).await;
    assert!(pttl(&mut conn, "k").await > 0, "the key was not deleted");
    lock.release().await.unwrap();
}
