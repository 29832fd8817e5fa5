//! Seeing and breaking plain locks on a real Redis, through the facade (issue 56 item 5):
//! `Locker::holder`, `is_locked`, `remaining` read the store truthfully (an error is an error,
//! never "free"); `Locker::force_release` removes any holder and raises the fence, so the
//! broken holder's fenced writes are refused and the next holder's accepted.

mod common;

use common::locks::{exists, locker, ms};
use common::{get, raw};
use redlease::{FenceOutcome, ForceReleaseOutcome, LockError, LockOptions};

const BOUND: std::time::Duration = std::time::Duration::from_secs(10);

async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {BOUND:?}"))
}

#[tokio::test]
async fn holder_is_locked_and_remaining_read_the_store() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    assert_eq!(bounded("holder", locker.holder("adm")).await.unwrap(), None);
    assert!(!bounded("is_locked", locker.is_locked("adm")).await.unwrap());
    assert_eq!(
        bounded("remaining", locker.remaining("adm")).await.unwrap(),
        None
    );

    let lock = locker
        .obtain(
            "adm",
            ms(10_000),
            LockOptions::new().owner("worker-1").metadata("10.0.0.7"),
        )
        .await
        .unwrap();
    // Another process's view: a locker of its own.
    let other = common::locks::locker(&server).await;
    let h = bounded("holder", other.holder("adm"))
        .await
        .unwrap()
        .expect("held");
    assert_eq!(h.owner, "worker-1");
    assert_eq!(h.metadata.as_deref(), Some("10.0.0.7"));
    let left = h.remaining.expect("a TTL");
    assert!(left > ms(0) && left <= ms(10_000), "{left:?}");
    assert!(bounded("is_locked", other.is_locked("adm")).await.unwrap());
    let left = bounded("remaining", other.remaining("adm"))
        .await
        .unwrap()
        .unwrap();
    assert!(left <= ms(10_000), "{left:?}");
    lock.release().await.unwrap();
    assert!(!bounded("is_locked", other.is_locked("adm")).await.unwrap());
}

#[tokio::test]
async fn force_release_fences_out_the_old_holder_and_admits_the_next() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    let opts = || LockOptions::new().fence_key("{job}:fence");
    let stuck = locker
        .obtain("{job}", ms(30_000), opts().owner("stuck"))
        .await
        .unwrap();
    let old = stuck.fence_token().unwrap();
    let old_writes = stuck.fencer().unwrap();
    assert_eq!(
        bounded("write", old_writes.set("{job}:out", "a"))
            .await
            .unwrap(),
        FenceOutcome::Applied
    );

    let admin = common::locks::locker(&server).await;
    let out = bounded(
        "force_release",
        admin.force_release("{job}", Some("{job}:fence")),
    )
    .await
    .unwrap();
    let ForceReleaseOutcome::Released { holder, fence } = &out else {
        panic!("{out:?}")
    };
    assert_eq!(holder, "stuck");
    let raised = fence.expect("fenced");
    assert!(raised > old, "{old} then {raised}");
    assert!(!exists(&mut conn, "{job}").await, "the lock key is deleted");
    assert_eq!(
        get(&mut conn, "{job}:fence:applied").await,
        Some(raised.to_string())
    );

    // The broken holder's fenced writes are refused from now on.
    let refused = bounded("stale write", old_writes.set("{job}:out", "b"))
        .await
        .unwrap();
    assert!(matches!(refused, FenceOutcome::Stale { .. }), "{refused:?}");
    assert_eq!(get(&mut conn, "{job}:out").await.as_deref(), Some("a"));

    // The next holder is admitted, and so are its writes.
    let next = locker
        .obtain("{job}", ms(30_000), opts().owner("next"))
        .await
        .unwrap();
    assert!(next.fence_token().unwrap() > raised);
    let w = bounded("next write", next.fencer().unwrap().set("{job}:out", "c"))
        .await
        .unwrap();
    assert_eq!(w, FenceOutcome::Applied);
    let again = bounded("old again", old_writes.set("{job}:out", "d"))
        .await
        .unwrap();
    assert!(!again.is_applied());
    assert_eq!(get(&mut conn, "{job}:out").await.as_deref(), Some("c"));
    next.release().await.unwrap();
    drop(stuck);
}

/// Negative control of the fence bump: without the fence key nothing is raised, and the old
/// holder's writes still pass until the next holder's acquire moves the mark.
#[tokio::test]
async fn force_release_without_the_fence_key_leaves_the_mark() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    let stuck = locker
        .obtain(
            "{nf}",
            ms(30_000),
            LockOptions::new().fence_key("{nf}:fence"),
        )
        .await
        .unwrap();
    let out = bounded("force_release", locker.force_release("{nf}", None))
        .await
        .unwrap();
    assert!(out.was_held() && out.fence().is_none(), "{out:?}");
    assert_eq!(
        get(&mut conn, "{nf}:fence:applied").await,
        Some(stuck.fence_token().unwrap().to_string())
    );
    let w = bounded("write", stuck.fencer().unwrap().set("{nf}:out", "x"))
        .await
        .unwrap();
    assert!(w.is_applied(), "not fenced out without the fence key");
}

#[tokio::test]
async fn force_release_of_a_free_key_says_so_and_still_raises_the_fence() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    let lapsed = locker
        .obtain(
            "{free}",
            ms(30_000),
            LockOptions::new().fence_key("{free}:fence"),
        )
        .await
        .unwrap();
    let old = lapsed.fence_token().unwrap();
    // Its key vanishes (as when the TTL runs out), the holder does not know yet.
    let _: i64 = redis::cmd("DEL")
        .arg("{free}")
        .query_async(&mut conn)
        .await
        .unwrap();

    let out = bounded(
        "force_release",
        locker.force_release("{free}", Some("{free}:fence")),
    )
    .await
    .unwrap();
    let ForceReleaseOutcome::NotHeld {
        fence: Some(raised),
    } = out
    else {
        panic!("{out:?}")
    };
    assert!(raised > old);
    assert!(!exists(&mut conn, "{free}").await, "nothing created");
    let w = bounded(
        "lapsed write",
        lapsed.fencer().unwrap().set("{free}:out", "x"),
    )
    .await
    .unwrap();
    assert!(!w.is_applied(), "the lapsed holder is fenced out: {w:?}");

    // Unfenced and free: not held, nothing minted.
    let out = bounded("force_release", locker.force_release("{none}", None))
        .await
        .unwrap();
    assert_eq!(out, ForceReleaseOutcome::NotHeld { fence: None });
}

#[tokio::test]
async fn an_error_is_never_not_locked() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    // Bad input: refused before any round trip.
    assert!(matches!(
        locker.force_release("", None).await,
        Err(LockError::Invalid(_))
    ));
    assert!(matches!(
        locker.holder("").await,
        Err(LockError::Invalid(_))
    ));

    // A key of another type: an error, not "free", and force_release changes nothing.
    let _: i64 = redis::cmd("HSET")
        .arg("{h}")
        .arg("f")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    let e = bounded("is_locked", locker.is_locked("{h}"))
        .await
        .unwrap_err();
    assert!(matches!(e, LockError::Refused(_)), "{e:?}");
    let e = bounded(
        "force_release",
        locker.force_release("{h}", Some("{h}:fence")),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, LockError::Refused(_)), "{e:?}");
    assert_eq!(get(&mut conn, "{h}:fence").await, None, "nothing minted");

    // The server gone: unavailable, never "not locked".
    server.kill().await.unwrap();
    let e = bounded("is_locked", locker.is_locked("k"))
        .await
        .unwrap_err();
    assert!(matches!(e, LockError::Unavailable(_)), "{e:?}");
    let e = bounded("force_release", locker.force_release("k", None))
        .await
        .unwrap_err();
    assert!(!matches!(e, LockError::Refused(_)), "{e:?}");
}

/// A waiter that only polls every 20 s is woken by the forced release's notice, as by a
/// release: the broken lock passes on at once, not at the waiter's next poll.
#[tokio::test]
async fn a_forced_release_wakes_a_waiter() {
    use redlease::redis::{Topology, notice_channel};
    use redlease::{Locker, RetryStrategy};
    let server = common::redis().await;
    let connect = || async {
        redlease::redis::connect(&server.url())
            .await
            .expect("connect")
    };
    let holder = Locker::new(connect().await);
    let inner = connect().await;
    let notices = inner.release_notices().expect("notices").clone();
    let waiting = Locker::new(inner);
    let admin = Locker::new(connect().await);
    let held = bounded(
        "the first lock",
        holder.obtain("job", ms(30_000), LockOptions::new()),
    )
    .await
    .unwrap();
    let waiter = tokio::spawn(async move {
        let slow = LockOptions::new()
            .retry(RetryStrategy::linear(ms(20_000)).unwrap())
            .wait(ms(60_000));
        let lock = waiting.obtain("job", ms(30_000), slow).await;
        (lock.map(drop), std::time::Instant::now())
    });
    // The waiter subscribes after its first attempt found the lock held (its attempt also
    // marked the holder's value, so that the release publishes).
    let channel = notice_channel("job", Topology::Standalone);
    bounded("the waiter's subscription", async {
        while !notices.is_live(&channel) {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    let forced = std::time::Instant::now();
    let out = bounded("force_release", admin.force_release("job", None))
        .await
        .unwrap();
    assert!(out.was_held(), "{out:?}");
    let (lock, at) = bounded("the woken waiter", waiter).await.unwrap();
    lock.expect("obtained");
    assert!(at.duration_since(forced) < BOUND, "woken, not polled");
    drop(held);
}
