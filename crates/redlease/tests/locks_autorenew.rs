//! Auto-renewal and the loss signal against a real Redis, through the facade: a lock renewed
//! across many TTLs, failed renewals tolerated until the local deadline, a loss signal that
//! fires on the local deadline while Redis is frozen (SIGSTOP), old loss receivers that still
//! fire.
//!
//! Faults are real: a SIGSTOPped Redis (kit `pause()`), a TCP proxy that blackholes traffic.
//! Attempts are counted by `Counted` (`common/locks.rs`: the kit's `Wrapped` backend with
//! counting hooks around the Redis backend), so retry counts are asserted exactly, without
//! timing.

mod common;

use common::locks::{
    Counted, SLACK, assert_not_obtained_by, counted_locker, fired, linear, locker, ms, proxied,
    within,
};
use common::{EVENTUALLY, get, raw};
use lease_testkit::proxy::{FaultProxy, Mode};
use redlease::TokenScheme;
use redlease::redis::RedisBackend;
use redlease::{LockError, LockOptions, Locker, LossReason};

/// go-redlock WithAutoRenew: a 500 ms lock renewed every 100 ms stays held across many TTLs
/// (30 successful renewals, at least 6 TTLs); another obtainer still fails; renewals mint no
/// new fencing token.
#[tokio::test]
async fn auto_renew_keeps_a_lock_alive_across_many_ttls() {
    let server = common::redis().await;
    let (locker, counted) = counted_locker(&server).await;
    let mut conn = raw(&server).await;
    let ttl = ms(500);
    let started = tokio::time::Instant::now();
    let lock = locker
        .obtain(
            "k",
            ttl,
            LockOptions::new().auto_renew(ms(100)).fence_key("k:fence"),
        )
        .await
        .unwrap();
    let token = lock.fence_token().unwrap();
    counted.wait_for("30 renewals", |c| c.renews_ok >= 30).await;
    // Renewals are spaced by the interval, so this many span several TTLs.
    assert!(started.elapsed() > ttl * 5, "{:?}", started.elapsed());
    assert!(lock.held());
    assert!(!lock.lost().is_cancelled());
    let err = locker
        .obtain("k", ttl, LockOptions::new())
        .await
        .unwrap_err();
    assert_not_obtained_by(&err, lock.owner());
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some(lock.owner()));
    assert_eq!(get(&mut conn, "k:fence").await, Some(token.to_string()));
    lock.release().await.unwrap();
    assert_eq!(get(&mut conn, "k").await, None);
}

/// edge-cases (go-redlock marked a lock lost at its first failed renewal): failed renewals are
/// tolerated until the local deadline. With the network blackholed for two renewal intervals,
/// the lock stays held and renews again once the network heals.
#[tokio::test]
async fn auto_renew_tolerates_failed_renewals_before_the_deadline() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let counted = Counted::new(proxied(&server, &proxy).await);
    let locker = Locker::new(counted.clone());
    let lock = locker
        .obtain("k", ms(3_000), LockOptions::new().auto_renew(ms(200)))
        .await
        .unwrap();
    counted.wait_for("a renewal", |c| c.renews_ok >= 1).await;
    proxy.set_mode(Mode::Blackhole);
    let base = counted.counts();
    // At most one renewal is in flight: three started means two have failed (timed out).
    counted
        .wait_for("two failed renewals", |c| c.renews >= base.renews + 3)
        .await;
    assert_eq!(
        counted.counts().renews_ok,
        base.renews_ok,
        "none got through"
    );
    assert!(lock.held(), "failures are tolerated until the deadline");
    assert!(!lock.lost().is_cancelled());
    proxy.set_mode(Mode::Pass);
    let healed = std::time::Instant::now();
    counted
        .wait_for("a renewal after healing", |c| c.renews_ok > base.renews_ok)
        .await;
    // The renewal in flight is cut at one interval; the next one gets through.
    within(healed, ms(2 * 200) + SLACK, "a renewal after healing");
    assert!(lock.held());
    assert!(!lock.lost().is_cancelled());
    lock.release().await.unwrap();
}

/// beyond.md 3 (a reliable loss signal): with Redis frozen (SIGSTOP), no renewal can answer,
/// and the client has no response timeout of its own, so only the library's local deadline can
/// end the lock. The loss token fires while Redis is still paused, never before the local
/// deadline; `held()` is false and no renewal starts after the loss. After Redis resumes, the
/// lock is free for others.
#[tokio::test]
async fn auto_renew_loss_fires_by_the_local_deadline_while_redis_is_paused() {
    let server = common::redis().await;
    let client = server.client().unwrap();
    let cfg = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let conn = client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
        .unwrap();
    let counted = Counted::new(RedisBackend::new(conn).with_token_scheme(TokenScheme::Counter));
    let locker = Locker::new(counted.clone());
    let lock = locker
        .obtain("k", ms(600), LockOptions::new().auto_renew(ms(150)))
        .await
        .unwrap();
    counted.wait_for("a renewal", |c| c.renews_ok >= 1).await;
    let lost = lock.lost();
    server.pause().await.unwrap();
    let paused = std::time::Instant::now();
    let fired = tokio::time::timeout(EVENTUALLY, lost.cancelled()).await;
    let fired_at = tokio::time::Instant::now();
    // The last renewal that got through was sent before the pause: its deadline is within
    // one TTL of it.
    within(paused, ms(600) + SLACK, "the loss signal");
    let renews_at_loss = counted.counts().renews;
    // Checked before resuming: the signal did not need Redis to answer.
    assert_eq!(
        server.state(),
        lease_testkit::redis::ServerState::Paused,
        "still paused"
    );
    assert!(fired.is_ok(), "the loss signal did not fire while paused");
    assert!(
        fired_at >= lock.valid_until(),
        "fired before the local deadline"
    );
    assert!(!lock.held());
    server.resume().await.unwrap();
    let resumed = std::time::Instant::now();
    // Renewals queued while paused may still extend the key by one TTL: retry past it.
    let next = locker
        .obtain(
            "k",
            ms(600),
            LockOptions::new().retry(linear(20)).wait(EVENTUALLY),
        )
        .await
        .unwrap();
    // The key lapses by one TTL after the last queued renewal is applied at the resume.
    within(resumed, ms(600 + 20) + SLACK, "the take-over");
    assert_eq!(
        counted.counts().renews,
        renews_at_loss,
        "no renewal after the loss"
    );
    assert!(matches!(lock.release().await, Err(LockError::NotHeld)));
    let mut conn = raw(&server).await;
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some(next.owner()));
    next.release().await.unwrap();
}

/// edge-cases (go-redlock replaced its `Lost()` channel on re-acquire, so an old receiver never
/// fired): a loss receiver taken before a re-obtain with the same token still sees the loss of
/// the lease it was taken for. The re-obtained handle releases (one release frees it), C
/// takes the key, A's next renewal finds it gone: A's receiver fires, and A's loss deletes
/// nothing of C's.
#[tokio::test]
async fn a_loss_receiver_from_before_a_reobtain_still_fires() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    let a = locker
        .obtain(
            "k",
            ms(2_000),
            LockOptions::new().owner("t").auto_renew(ms(100)),
        )
        .await
        .unwrap();
    let rx = a.lost();
    let b = locker
        .obtain("k", ms(2_000), LockOptions::new().owner("t"))
        .await
        .unwrap();
    let rx_b = b.lost();
    assert!(!rx.is_cancelled());
    b.release().await.unwrap();
    assert!(rx_b.is_cancelled());
    let c = locker
        .obtain("k", ms(30_000), LockOptions::new().owner("c"))
        .await
        .unwrap();
    fired(&rx, "A's loss receiver").await;
    assert!(!a.held());
    assert!(a.lost().is_cancelled());
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some("c"));
    assert!(matches!(a.release().await, Err(LockError::NotHeld)));
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some("c"));
    c.release().await.unwrap();
}

/// `INFO commandstats` `calls=` per command name.
async fn command_calls(
    conn: &mut redis::aio::MultiplexedConnection,
) -> std::collections::HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Issue 16, item 3: many auto-renewed locks of one locker share their renewals. 300 locks
/// (TTL 900 ms, renewed every 300 ms) held across several TTLs are all still held and renewed
/// once per interval each, in a few script calls per interval (not one per lock); stealing one
/// lock's key loses that lock alone; freezing Redis (SIGSTOP) fires every loss signal by its
/// own local deadline, never before.
#[tokio::test]
async fn many_auto_renewed_locks_share_batched_renewals() {
    const LOCKS: usize = 300;
    let server = common::redis().await;
    let client = server.client().unwrap();
    // No response timeout of the client's own: only the library's deadlines end the locks.
    let cfg = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let conn = client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
        .unwrap();
    let locker = Locker::new(RedisBackend::new(conn).with_token_scheme(TokenScheme::Counter));
    let mut raw = raw(&server).await;
    let (ttl, interval) = (ms(900), ms(300));
    let mut locks = Vec::new();
    for i in 0..LOCKS {
        let lock = locker
            .obtain(
                format!("many:{i}"),
                ttl,
                LockOptions::new().auto_renew(interval),
            )
            .await
            .unwrap();
        locks.push(lock);
    }
    let losses: Vec<_> = locks.iter().map(|l| l.lost()).collect();
    let before = command_calls(&mut raw).await;
    let start = std::time::Instant::now();
    // A real wait: the point is to be held across several TTLs.
    tokio::time::sleep(ttl * 3).await;
    let after = command_calls(&mut raw).await;
    let held_for = start.elapsed();
    let delta =
        |name: &str| after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0);
    for (i, lock) in locks.iter().enumerate() {
        assert!(lock.held(), "lock {i} held");
        assert!(!losses[i].is_cancelled(), "lock {i} not lost");
    }
    assert_eq!(
        get(&mut raw, "many:0").await.as_deref(),
        Some(locks[0].owner())
    );
    // Each lock is renewed about once per interval (a renewal may join a batch up to an
    // eighth of an interval early) ...
    let intervals = held_for.as_secs_f64() / interval.as_secs_f64();
    let renewals = delta("pexpire") as f64 / LOCKS as f64;
    assert!(
        renewals >= intervals - 2.0 && renewals <= intervals * 1.15 + 1.0,
        "{renewals:.1} renewals per lock in {intervals:.1} intervals"
    );
    // ... in a few script calls per interval, not one per lock.
    let scripts = (delta("evalsha") + delta("eval")) as f64;
    println!(
        "{renewals:.1} renewals per lock and {scripts} script calls in {intervals:.1} intervals"
    );
    assert!(
        scripts <= intervals * 40.0,
        "{scripts} script calls for {LOCKS} locks over {intervals:.1} intervals"
    );

    // Another owner takes one key: that lock alone is lost, at its next renewal.
    let _: () = redis::cmd("SET")
        .arg("many:7")
        .arg("thief")
        .query_async(&mut raw)
        .await
        .unwrap();
    fired(&losses[7], "the stolen lock's loss signal").await;
    assert!(!locks[7].held());
    for (i, lock) in locks.iter().enumerate().filter(|(i, _)| *i != 7) {
        assert!(lock.held(), "lock {i} is unaffected");
    }

    // Frozen Redis: every renewal batch hangs; each loss fires by its own deadline.
    server.pause().await.unwrap();
    let paused = std::time::Instant::now();
    let all = async {
        for l in &losses {
            l.cancelled().await;
        }
    };
    let fired_in_time = tokio::time::timeout(EVENTUALLY, all).await;
    let fired_at = tokio::time::Instant::now();
    assert_eq!(
        server.state(),
        lease_testkit::redis::ServerState::Paused,
        "still paused"
    );
    assert!(
        fired_in_time.is_ok(),
        "every loss signal fired while paused"
    );
    within(paused, ttl + SLACK, "every loss signal");
    for (i, lock) in locks.iter().enumerate() {
        assert!(!lock.held(), "lock {i}");
        assert!(
            fired_at >= lock.valid_until(),
            "lock {i} fired before its deadline"
        );
    }
    server.resume().await.unwrap();
}

/// Issue 27: the renewal task's timer queue is bounded by the live locks, not by how many
/// locks came and went. 600 auto-renewed locks are obtained and released one after the other
/// (each leaves a stale entry behind: a release does not remove its lock's entry) while four
/// others stay held: the queue never holds more than twice the live locks plus the compaction
/// slack (64) — with compaction disabled it reached 307 and this test failed — and the four held locks keep renewing
/// across several TTLs meanwhile and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_queue_stays_bounded_while_locks_come_and_go() {
    const CHURN: usize = 600;
    const HELD: usize = 4;
    // Twice the live entries at the last compaction plus lease-tokio's COMPACT_SLACK (64).
    // Live: the held locks, the churned lock of the moment, and room for released locks
    // still referenced for a moment (a batch in flight) — 74 is typical (five live entries).
    const BOUND: usize = 2 * (HELD + 8) + 64;
    let server = common::redis().await;
    let (locker, counted) = counted_locker(&server).await;
    let mut conn = raw(&server).await;
    let ttl = ms(600);
    let options = || LockOptions::new().auto_renew(ms(150));
    let started = tokio::time::Instant::now();
    let mut held = Vec::new();
    for i in 0..HELD {
        held.push(
            locker
                .obtain(format!("held-{i}"), ttl, options())
                .await
                .unwrap(),
        );
    }
    let mut max = 0;
    for i in 0..CHURN {
        let lock = tokio::time::timeout(
            EVENTUALLY,
            locker.obtain(format!("churn-{i}"), ttl, options()),
        )
        .await
        .expect("obtain in time")
        .unwrap();
        lock.release().await.unwrap();
        max = max.max(locker.renewal_queue_len());
    }
    eprintln!("renewal queue: at most {max} entries over {CHURN} obtained-and-released locks");
    assert!(
        max <= BOUND,
        "the renewal queue reached {max} entries for {HELD} held locks (bound {BOUND})"
    );
    assert!(
        max > HELD,
        "the queue length is observed at all (max {max})"
    );
    // The held locks renewed all along: several TTLs have passed since they were obtained
    // and each is still held, in Redis and locally.
    let base = counted.counts().renews_ok;
    counted
        .wait_for("renewals after the churn", |c| {
            c.renews_ok >= base + 2 * HELD as u32
        })
        .await;
    let deadline = started + ttl * 3;
    if tokio::time::Instant::now() < deadline {
        // Not a synchronisation: the assertion is about locks outliving several TTLs.
        tokio::time::sleep_until(deadline).await;
    }
    for lock in &held {
        assert!(lock.held(), "{} lost", lock.key());
        assert!(!lock.lost().is_cancelled());
        assert_eq!(
            get(&mut conn, lock.key()).await.as_deref(),
            Some(lock.owner()),
            "{} still ours in Redis",
            lock.key()
        );
    }
    assert!(
        locker.renewal_queue_len() <= BOUND,
        "{}",
        locker.renewal_queue_len()
    );
    for lock in held {
        lock.release().await.unwrap();
    }
}

/// No renewal before one is due: the obtain itself set the TTL, so the first renewal comes
/// one renew interval after it (less at most the batching window), not at once (it used to
/// follow the obtain by about a millisecond: one wasted round trip per obtain).
#[tokio::test]
async fn the_first_renewal_comes_one_interval_after_the_obtain() {
    let server = common::redis().await;
    let (locker, counted) = counted_locker(&server).await;
    let interval = ms(600);
    let obtained = tokio::time::Instant::now();
    let lock = locker
        .obtain("first", ms(3_000), LockOptions::new().auto_renew(interval))
        .await
        .unwrap();
    let first = counted
        .wait_for("the first renewal", |c| c.renews >= 1)
        .await;
    let after = obtained.elapsed();
    assert_eq!(first.renews, 1, "{first:?}");
    // The batching window lets a renewal go up to an eighth of the interval early.
    assert!(
        after >= interval * 3 / 4,
        "first renewal {after:?} after the obtain, interval {interval:?}"
    );
    lock.release().await.unwrap();
}

/// Issue 56 (capped holds; Redisson's watchdog renews forever): a 200 ms lock auto-renewed
/// every 50 ms with `max_hold(600 ms)` is renewed past its TTL, then auto-renewal stops, the
/// loss signal fires by the cap with `LossReason::MaxHoldReached`, the lock is released, and a
/// waiter in another locker gets it. A refresh past the cap is refused before any round trip.
#[tokio::test]
async fn max_hold_ends_an_auto_renewed_lock_by_its_cap_and_a_waiter_gets_it() {
    let server = common::redis().await;
    let holder = locker(&server).await;
    let waiter = locker(&server).await;
    let mut conn = raw(&server).await;
    let started = std::time::Instant::now();
    let lock = holder
        .obtain(
            "k",
            ms(200),
            LockOptions::new().auto_renew(ms(50)).max_hold(ms(600)),
        )
        .await
        .unwrap();
    let lost = lock.lost();
    // Past the cap: refused at once, nothing sent, the lock unchanged.
    assert!(matches!(
        lock.refresh(ms(10_000)).await,
        Err(LockError::MaxHoldReached)
    ));
    assert!(lock.held());
    assert_eq!(lock.loss_reason(), None);
    let take = tokio::spawn(async move {
        let next = waiter
            .obtain(
                "k",
                ms(5_000),
                LockOptions::new().retry(linear(20)).wait(EVENTUALLY),
            )
            .await;
        (next, std::time::Instant::now())
    });
    fired(&lost, "the loss signal at the cap").await;
    let fired_after = started.elapsed();
    // The cap is dated from the obtain's send, after `started`: the signal fires by it (the
    // slack is the timer's lateness on a busy machine), and not before renewals carried the
    // lock past two TTLs.
    within(started, ms(600) + SLACK, "the loss signal");
    assert!(fired_after >= ms(400), "cut short: {fired_after:?}");
    assert_eq!(lock.loss_reason(), Some(LossReason::MaxHoldReached));
    assert!(!lock.held());
    let (next, taken_at) = tokio::time::timeout(EVENTUALLY, take)
        .await
        .expect("the waiter never got the lock")
        .unwrap();
    let next = next.unwrap();
    // Released at the cap (not left to lapse a TTL later): the waiter has it by then.
    assert!(
        taken_at.duration_since(started) <= ms(600) + SLACK,
        "{:?}",
        taken_at.duration_since(started)
    );
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some(next.owner()));
    assert!(matches!(lock.release().await, Err(LockError::NotHeld)));
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some(next.owner()));
    next.release().await.unwrap();
}

/// Negative control for the test above: without `max_hold` the same lock is still held past
/// the 600 ms the cap allowed, and the same waiter (bounded to 900 ms) does not get it.
#[tokio::test]
async fn without_max_hold_the_same_lock_is_held_past_the_cap() {
    let server = common::redis().await;
    let holder = locker(&server).await;
    let waiter = locker(&server).await;
    let lock = holder
        .obtain("k", ms(200), LockOptions::new().auto_renew(ms(50)))
        .await
        .unwrap();
    let lost = lock.lost();
    let err = waiter
        .obtain(
            "k",
            ms(5_000),
            LockOptions::new().retry(linear(20)).wait(ms(900)),
        )
        .await
        .unwrap_err();
    assert!(err.is_not_obtained(), "{err:?}");
    assert!(!lost.is_cancelled());
    assert!(lock.held());
    assert_eq!(lock.loss_reason(), None);
    lock.release().await.unwrap();
}
