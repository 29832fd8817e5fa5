//! Counting semaphores through the facade, against a real Redis.
//!
//! - at most N holders under concurrency (20 tasks, N = 3, counting concurrent holders as the
//!   tasks themselves see them), and the count is reached (the bound is not vacuous);
//! - a crashed holder's permit (never released, never renewed) expires with its TTL and a
//!   waiter gets it then — not before;
//! - another count is a typed refusal at the first round trip, never retried;
//! - a release wakes a waiter at once (release notices), far before its retry delay;
//! - truthful outcomes: an obtain whose reply is lost is "unknown", was applied, and its
//!   cleanup gives the permit back;
//! - auto-renewal keeps a permit past its TTL; a backend without semaphores refuses;
//! - auto-renewed permits leave in the renewal task's batches: 100 permits renewed once per
//!   interval each in a few script calls per interval, not one per permit;
//! - the permit fencer: every current holder's writes are applied, a permit past its TTL is
//!   refused as not current (its token above the mark), a released one too.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::locks::{linear, ms, proxied};
use lease_testkit::proxy::{FaultProxy, Mode};
use redlease::{BackendError, LockError, LockOptions, Locker, Semaphore};

/// Every await of these tests is bounded by this.
const BOUND: Duration = Duration::from_secs(30);

async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {BOUND:?}"))
}

async fn notified(
    server: &lease_testkit::redis::RedisServer,
) -> Locker<redlease::redis::RedisBackend<redlease::redis::HealingConnection>> {
    Locker::new(
        redlease::redis::connect(&server.url())
            .await
            .expect("connect"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_more_than_n_holders_under_concurrency() {
    let server = common::redis().await;
    const TASKS: usize = 20;
    const N: u32 = 3;
    let holding = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        // Each task its own connection and locker: separate "processes".
        let sem = notified(&server)
            .await
            .semaphore("{jobs}", N)
            .expect("semaphore");
        let (holding, peak) = (Arc::clone(&holding), Arc::clone(&peak));
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for round in 0..3 {
                let permit = sem
                    .acquire(
                        ms(10_000),
                        LockOptions::new().retry(linear(20)).wait(ms(20_000)),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("task {i} round {round}: {e}"));
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokens.push(permit.fence_token().expect("every permit is fenced"));
                tokio::time::sleep(ms(15)).await;
                // Counted out before the release is sent: the store holds it at least as long.
                holding.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.expect("release");
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(bounded("a task", t).await.expect("task"));
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= N as usize, "{peak} holders at once, N = {N}");
    assert_eq!(
        peak, N as usize,
        "the semaphore was never full: the bound was not tested"
    );
    all.sort();
    all.dedup();
    assert_eq!(
        all.len(),
        TASKS * 3,
        "every permit got its own fencing token"
    );
}

#[tokio::test]
async fn a_crashed_holders_permit_expires() {
    let server = common::redis().await;
    let locker = notified(&server).await;
    let sem = locker.semaphore("{crash}", 1).expect("semaphore");
    let ttl = ms(1_000);
    let crashed = bounded("obtain", sem.acquire(ttl, LockOptions::new()))
        .await
        .expect("obtain");
    let obtained_at = Instant::now();
    // The holder dies: no release, no renewal (its handle never runs its drop).
    std::mem::forget(crashed);
    let other = notified(&server)
        .await
        .semaphore("{crash}", 1)
        .expect("semaphore");
    let err = bounded("busy", other.acquire(ms(5_000), LockOptions::new()))
        .await
        .unwrap_err();
    assert!(err.is_not_obtained(), "{err:?}");
    let permit = bounded(
        "waiter",
        other.acquire(
            ms(5_000),
            LockOptions::new().retry(linear(50)).wait(ms(5_000)),
        ),
    )
    .await
    .expect("the crashed permit expires");
    let waited = obtained_at.elapsed();
    assert!(
        waited >= ms(900),
        "obtained after {waited:?}, before the crashed permit's TTL"
    );
    assert!(waited < ms(3_000), "obtained only after {waited:?}");
    permit.release().await.expect("release");
}

#[tokio::test]
async fn another_count_is_refused_at_once_and_typed() {
    let server = common::redis().await;
    let locker = notified(&server).await;
    let three = locker.semaphore("{n}", 3).expect("semaphore");
    let held = bounded("obtain", three.acquire(ms(10_000), LockOptions::new()))
        .await
        .expect("obtain");
    let five = locker
        .semaphore("{n}", 5)
        .expect("a count is checked at the store");
    let started = Instant::now();
    let err = bounded(
        "mismatch",
        five.acquire(
            ms(10_000),
            LockOptions::new().retry(linear(10)).wait(ms(5_000)),
        ),
    )
    .await
    .unwrap_err();
    match &err {
        LockError::Refused(BackendError::PermitsMismatch {
            name,
            stored: 3,
            asked: 5,
        }) => {
            assert_eq!(name, "{n}");
        }
        other => panic!("expected a typed mismatch, got {other:?}"),
    }
    assert!(
        started.elapsed() < ms(1_000),
        "permanent: not retried for the wait"
    );
    // Bad input is refused before any round trip.
    assert!(matches!(
        locker.semaphore("{n}", 0),
        Err(LockError::Invalid(_))
    ));
    assert!(matches!(
        locker.semaphore("", 2),
        Err(LockError::Invalid(_))
    ));
    assert!(matches!(
        three
            .acquire(ms(1_000), LockOptions::new().metadata("m"))
            .await,
        Err(LockError::Invalid(_))
    ));
    held.release().await.expect("release");
}

#[tokio::test]
async fn a_release_wakes_a_waiter_at_once() {
    let server = common::redis().await;
    let holder = notified(&server)
        .await
        .semaphore("{wake}", 1)
        .expect("semaphore");
    let waiter = notified(&server)
        .await
        .semaphore("{wake}", 1)
        .expect("semaphore");
    let permit = bounded("obtain", holder.acquire(ms(30_000), LockOptions::new()))
        .await
        .expect("obtain");
    // The waiter retries only every 10 s; the holder's permit lasts 30 s: only the release
    // notice can wake it soon.
    let wait = tokio::spawn(async move {
        let p = waiter
            .acquire(
                ms(30_000),
                LockOptions::new().retry(linear(10_000)).wait(ms(30_000)),
            )
            .await;
        (p, Instant::now())
    });
    // Let the waiter find the semaphore full and subscribe.
    tokio::time::sleep(ms(300)).await;
    let released_at = Instant::now();
    permit.release().await.expect("release");
    let (got, at) = bounded("waiter", wait).await.expect("task");
    let woken = at - released_at;
    got.expect("the waiter obtains")
        .release()
        .await
        .expect("release");
    assert!(woken < ms(1_000), "woken {woken:?} after the release");
}

#[tokio::test]
async fn an_obtain_whose_reply_is_lost_is_unknown_applied_and_cleaned_up() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    let locker = Locker::new(proxied(&server, &proxy).await);
    let sem = locker.semaphore("{lost}", 2).expect("semaphore");
    // Load the permit scripts while the path is healthy.
    let warm = bounded("warm", sem.acquire(ms(10_000), LockOptions::new()))
        .await
        .expect("warm");
    warm.release().await.expect("release");

    proxy.set_mode(Mode::DropReplies);
    let err = bounded(
        "obtain",
        sem.acquire(
            ms(10_000),
            LockOptions::new()
                .operation_timeout(ms(300))
                .wait(Duration::ZERO),
        ),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, LockError::OutcomeUnknown(_)), "{err:?}");
    proxy.set_mode(Mode::Pass);
    // It was applied (a token was minted), and the cleanup gives the permit back.
    let reader = notified(&server)
        .await
        .semaphore("{lost}", 2)
        .expect("semaphore");
    let info = bounded("inspect", reader.inspect(ms(2_000)))
        .await
        .expect("inspect");
    assert_eq!(
        info.counter.map(|t| t.get()),
        Some(2),
        "the lost obtain minted a token"
    );
    let gone = bounded("cleanup", async {
        loop {
            let info = reader.inspect(ms(2_000)).await.expect("inspect");
            if info.holders.is_empty() {
                break;
            }
            tokio::time::sleep(ms(20)).await;
        }
    })
    .await;
    let () = gone;
}

#[tokio::test]
async fn auto_renewal_keeps_a_permit_and_loss_is_signalled() {
    let server = common::redis().await;
    let sem: Semaphore<_> = notified(&server)
        .await
        .semaphore("{renew}", 1)
        .expect("semaphore");
    let permit = bounded(
        "obtain",
        sem.acquire(ms(600), LockOptions::new().auto_renew(ms(150))),
    )
    .await
    .expect("obtain");
    tokio::time::sleep(ms(1_500)).await;
    assert!(permit.held(), "renewed past its TTL");
    let ttl = bounded("ttl", permit.ttl()).await.expect("ttl");
    assert!(ttl > Duration::ZERO && ttl <= ms(600), "{ttl:?}");
    let other = notified(&server)
        .await
        .semaphore("{renew}", 1)
        .expect("semaphore");
    assert!(
        bounded("busy", other.acquire(ms(600), LockOptions::new()))
            .await
            .unwrap_err()
            .is_not_obtained()
    );
    let lost = permit.lost();
    permit.release().await.expect("release");
    assert!(lost.is_cancelled());
}

#[tokio::test]
async fn a_backend_without_semaphores_refuses_before_any_round_trip() {
    // A backend that implements only the lease methods: the trait's defaults refuse.
    struct LocksOnly(redlease::memory::MemoryBackend);
    #[redlease::async_trait]
    impl redlease::LeaseBackend for LocksOnly {
        async fn acquire(
            &self,
            r: &redlease::core::AcquireRequest,
        ) -> Result<redlease::core::AcquireOutcome, BackendError> {
            self.0.acquire(r).await
        }
        async fn renew(
            &self,
            r: &redlease::core::RenewRequest,
        ) -> Result<redlease::core::RenewOutcome, BackendError> {
            self.0.renew(r).await
        }
        async fn release(
            &self,
            r: &redlease::core::ReleaseRequest,
        ) -> Result<redlease::core::ReleaseOutcome, BackendError> {
            self.0.release(r).await
        }
        async fn remaining(
            &self,
            s: &redlease::core::LeaseSpec,
            o: &redlease::core::Owner,
        ) -> Result<Option<Duration>, BackendError> {
            self.0.remaining(s, o).await
        }
        async fn inspect(
            &self,
            s: &redlease::core::LeaseSpec,
        ) -> Result<redlease::core::LeaseInfo, BackendError> {
            self.0.inspect(s).await
        }
    }
    let locker = Locker::new(LocksOnly(redlease::memory::MemoryBackend::new(
        redlease::memory::ManualClock::new(),
    )));
    assert!(matches!(
        locker.semaphore("{x}", 2),
        Err(LockError::Refused(BackendError::Unsupported(_)))
    ));
}

/// On a 3-primary Redis Cluster: a hash-tagged semaphore works end to end (its keys, fence keys
/// and notice channel in one slot), and an untagged name is refused before any round trip —
/// no script call reaches any node.
#[tokio::test]
async fn on_redis_cluster_a_tagged_semaphore_works_and_an_untagged_one_is_refused() {
    use lease_testkit::cluster::RedisCluster;
    let cluster = RedisCluster::start().await.expect("cluster");
    cluster
        .wait_ready(common::EVENTUALLY)
        .await
        .expect("cluster ready");
    let locker = Locker::new(redlease::redis::RedisBackend::cluster(
        cluster.connection().await.expect("connection"),
    ));
    let sem = locker.semaphore("{deploys}", 2).expect("a tagged name");
    let a = bounded("a", sem.acquire(ms(10_000), LockOptions::new()))
        .await
        .expect("a");
    let b = bounded("b", sem.acquire(ms(10_000), LockOptions::new()))
        .await
        .expect("b");
    assert!(a.fence_token() < b.fence_token());
    let full = bounded("c", sem.acquire(ms(10_000), LockOptions::new())).await;
    assert!(full.unwrap_err().is_not_obtained());
    a.release().await.expect("release");
    let c = bounded("c", sem.acquire(ms(10_000), LockOptions::new()))
        .await
        .expect("c");
    let info = bounded("inspect", sem.inspect(ms(2_000)))
        .await
        .expect("inspect");
    assert_eq!(info.holders.len(), 2);
    assert_eq!(info.permits, Some(2));

    let before = script_calls(&cluster).await;
    let refused = locker.semaphore("deploys", 2);
    assert!(
        matches!(refused, Err(LockError::Refused(BackendError::Invalid(_)))),
        "{refused:?}"
    );
    assert_eq!(
        script_calls(&cluster).await,
        before,
        "no script reached a node"
    );
    b.release().await.expect("release");
    c.release().await.expect("release");
}

/// Script calls (EVAL, EVALSHA and their read-only forms) served by every node of `cluster`.
async fn script_calls(cluster: &lease_testkit::cluster::RedisCluster) -> u64 {
    let mut total = 0u64;
    for node in cluster.nodes() {
        let mut conn = node.connection().await.expect("node");
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .expect("INFO");
        total += info
            .lines()
            .filter(|l| l.starts_with("cmdstat_eval"))
            .filter_map(|l| l.split("calls=").nth(1))
            .filter_map(|v| v.split(',').next())
            .filter_map(|v| v.parse::<u64>().ok())
            .sum::<u64>();
    }
    total
}

#[tokio::test]
async fn the_permit_fencer_admits_current_permits_only() {
    use redlease::PermitWriteOutcome;
    let server = common::redis().await;
    let sem = notified(&server)
        .await
        .semaphore("{fenced}", 2)
        .expect("semaphore");
    let a = bounded("a", sem.acquire(ms(400), LockOptions::new()))
        .await
        .expect("a");
    let b = bounded("b", sem.acquire(ms(30_000), LockOptions::new()))
        .await
        .expect("b");
    let (fa, fb) = (
        a.permit_fencer().expect("fenced"),
        b.permit_fencer().expect("fenced"),
    );
    for f in [&fa, &fb, &fa] {
        let got = bounded("write", f.set("{fenced}:out", f.owner())).await;
        assert_eq!(got.expect("write"), PermitWriteOutcome::Applied);
    }
    // a stops renewing: once the server expired its permit, its writes are refused even
    // though its token passes the lock rule's mark... (wait past the TTL: no signal exists).
    tokio::time::sleep(ms(550)).await;
    assert!(!a.held());
    let got = bounded("stale write", fa.set("{fenced}:out", "a late")).await;
    assert_eq!(got.expect("write"), PermitWriteOutcome::NotCurrent);
    // ... while b's, an older-or-newer token alike, still is; and once b releases, not.
    let got = bounded("write", fb.set("{fenced}:out", "b")).await;
    assert_eq!(got.expect("write"), PermitWriteOutcome::Applied);
    bounded("release", b.release()).await.expect("release");
    let got = bounded("released write", fb.set("{fenced}:out", "b late")).await;
    assert_eq!(got.expect("write"), PermitWriteOutcome::NotCurrent);
    drop(a);
}

/// `INFO commandstats` `calls=` of `name`.
async fn calls(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|l| {
            let rest = l.strip_prefix(&format!("cmdstat_{name}:"))?;
            rest.split("calls=").nth(1)?.split(',').next()?.parse().ok()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn auto_renewed_permits_are_renewed_in_batches() {
    const PERMITS: usize = 100;
    let server = common::redis().await;
    let sem = notified(&server)
        .await
        .semaphore("{batched}", PERMITS as u32)
        .expect("semaphore");
    let (ttl, interval) = (ms(900), ms(300));
    let mut permits = Vec::new();
    for i in 0..PERMITS {
        let p = bounded(
            "obtain",
            sem.acquire(ttl, LockOptions::new().auto_renew(interval)),
        )
        .await
        .unwrap_or_else(|e| panic!("permit {i}: {e}"));
        permits.push(p);
    }
    let mut raw = common::raw(&server).await;
    let scripts = |raw: &mut redis::aio::MultiplexedConnection| {
        let mut raw = raw.clone();
        async move { calls(&mut raw, "evalsha").await + calls(&mut raw, "eval").await }
    };
    let (zadd0, scripts0) = (calls(&mut raw, "zadd").await, scripts(&mut raw).await);
    let start = Instant::now();
    // A real wait: the point is to be held across several TTLs.
    tokio::time::sleep(ttl * 3).await;
    let (zadd1, scripts1) = (calls(&mut raw, "zadd").await, scripts(&mut raw).await);
    let intervals = start.elapsed().as_secs_f64() / interval.as_secs_f64();
    for (i, p) in permits.iter().enumerate() {
        assert!(p.held(), "permit {i} held");
    }
    let renewals = (zadd1 - zadd0) as f64 / PERMITS as f64;
    let script_calls = (scripts1 - scripts0) as f64;
    println!(
        "{renewals:.1} renewals per permit and {script_calls} script calls in {intervals:.1} intervals"
    );
    assert!(
        renewals >= intervals - 2.0 && renewals <= intervals * 1.15 + 1.0,
        "{renewals:.1} renewals per permit in {intervals:.1} intervals"
    );
    // One call per permit would be about 100 per interval.
    assert!(
        script_calls <= intervals * 20.0,
        "{script_calls} script calls for {PERMITS} permits over {intervals:.1} intervals"
    );
    for p in permits {
        bounded("release", p.release()).await.expect("release");
    }
}
