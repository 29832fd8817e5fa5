//! Fair locks through the facade, against a real Redis.
//!
//! - FIFO across connections: six waiters on six connections (separate "processes"), queued
//!   one after another behind a holder, get the lock in arrival order;
//! - a crashed waiter (it queued, then stopped heartbeating) holds up a free lock until its
//!   place expires, and the next waiter gets it within the bound: place TTL + one heartbeat;
//! - a release wakes the next waiter within 1 s while the others, which heartbeat only every
//!   10 s, make no attempt because of it (counted per waiter);
//! - truthful outcomes: an obtain whose reply is lost is "unknown", was applied, and its
//!   cleanup releases the lock; an obtain that gives up leaves the queue;
//! - a backend without fair locks, and incompatible options, are refused before any round trip.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::locks::{linear, ms, proxied};
use lease_testkit::proxy::{FaultProxy, Mode};
use lease_testkit::redis::RedisServer;
use redlease::core::{
    AcquireOutcome, AcquireRequest, FairRequest, LeaseInfo, LeaseSpec, Owner, ReleaseOutcome,
    ReleaseRequest, ReleaseWatch, RenewOutcome, RenewRequest, WatchRole, fair_keys, fair_spec,
};
use redlease::redis::{HealingConnection, RedisBackend};
use redlease::{
    BackendError, Fair, LeaseBackend, LockError, LockOptions, Locker, Ttl, async_trait,
};
use tokio::sync::watch;

/// Every await of these tests is bounded by this.
const BOUND: Duration = Duration::from_secs(30);

async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {BOUND:?}"))
}

type Backend = RedisBackend<HealingConnection>;

async fn connect(server: &RedisServer) -> Backend {
    redlease::redis::connect(&server.url())
        .await
        .expect("connect")
}

/// A fair lock on a connection of its own (with release notices).
async fn fair_on(server: &RedisServer, name: &str) -> Fair<Backend> {
    Locker::new(connect(server).await).fair(name).expect("fair")
}

/// The live length of the queue, read raw.
async fn queued(server: &RedisServer, name: &str) -> usize {
    let mut conn = server.connection().await.expect("raw");
    let [queue, _] = fair_keys(name);
    redis::cmd("ZCARD")
        .arg(queue)
        .query_async(&mut conn)
        .await
        .expect("ZCARD")
}

/// Waits (bounded) until the queue of `name` holds `n` waiters.
async fn until_queued(server: &RedisServer, name: &str, n: usize) {
    bounded("the queue fills", async {
        while queued(server, name).await < n {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifo_across_connections() {
    let server = common::redis().await;
    const WAITERS: usize = 6;
    let holder = fair_on(&server, "{fifo}").await;
    let held = bounded("obtain", holder.acquire(ms(10_000), LockOptions::new()))
        .await
        .expect("obtain");
    let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let fair = fair_on(&server, "{fifo}").await;
        let order = order_tx.clone();
        tasks.push(tokio::spawn(async move {
            let lock = fair
                .acquire(
                    ms(10_000),
                    LockOptions::new().retry(linear(50)).wait(ms(25_000)),
                )
                .await
                .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
            order.send(i).expect("order");
            tokio::time::sleep(ms(10)).await;
            lock.release().await.expect("release");
        }));
        // Arrival order is queue order: the next waiter starts once this one is queued.
        until_queued(&server, "{fifo}", i + 1).await;
    }
    drop(order_tx);
    held.release().await.expect("release");
    let mut order = Vec::new();
    while let Some(i) = bounded("the next holder", order_rx.recv()).await {
        order.push(i);
    }
    for t in tasks {
        bounded("a waiter", t).await.expect("task");
    }
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "FIFO across connections"
    );
    assert_eq!(
        queued(&server, "{fifo}").await,
        0,
        "nobody left in the queue"
    );
}

#[tokio::test]
async fn a_crashed_waiter_is_skipped_within_its_bound() {
    let server = common::redis().await;
    let holder = fair_on(&server, "{crash}").await;
    let held = bounded("obtain", holder.acquire(ms(10_000), LockOptions::new()))
        .await
        .expect("obtain");
    // The crashed waiter: queued with a 400 ms place (the bound of a 133 ms retry), then
    // never heard from again.
    let raw = connect(&server).await;
    let spec = Arc::new(fair_spec("{crash}", None).expect("spec"));
    let place = Ttl::new(ms(400)).expect("ttl");
    let crashed = FairRequest::new(
        AcquireRequest::new(
            Arc::clone(&spec),
            Owner::new("crashed").expect("owner"),
            Ttl::new(ms(10_000)).expect("ttl"),
        ),
        Some(place),
    );
    // Taken before the send: the server starts the place's 400 ms at some instant after it,
    // so "not before 400 ms" measured from here cannot fail because a reply came back late.
    let last_heartbeat = Instant::now();
    let got = bounded("the crashed waiter queues", raw.acquire_fair(&crashed))
        .await
        .expect("queued");
    assert!(matches!(got, AcquireOutcome::Held { .. }), "{got:?}");
    // The live waiter heartbeats every 50 ms (its place: 150 ms).
    let waiter = fair_on(&server, "{crash}").await;
    let wait = tokio::spawn(async move {
        let got = waiter
            .acquire(
                ms(10_000),
                LockOptions::new().retry(linear(50)).wait(ms(20_000)),
            )
            .await;
        (got, Instant::now())
    });
    until_queued(&server, "{crash}", 2).await;
    held.release().await.expect("release");
    let (got, at) = bounded("the live waiter", wait).await.expect("task");
    got.expect("the live waiter obtains")
        .release()
        .await
        .expect("release");
    let after = at - last_heartbeat;
    assert!(
        after >= ms(400),
        "obtained {after:?} after the crashed waiter's heartbeat: its place was not kept"
    );
    // The bound: the crashed place's TTL, then at most one heartbeat of the live waiter
    // (plus scheduling slack).
    assert!(
        after <= ms(400 + 50) + common::locks::SLACK,
        "the crashed waiter held up the lock {after:?}"
    );
}

/// Counts each waiter's fair attempts (as the backend saw them), published on a watch.
struct Counted {
    inner: Backend,
    attempts: watch::Sender<u32>,
}

#[async_trait]
impl LeaseBackend for Counted {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.inner.acquire(req).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.inner.renew(req).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.inner.release(req).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.inner.remaining(spec, owner).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.inner.inspect(spec).await
    }
    fn validity_margin(&self, ttl: Ttl) -> Duration {
        self.inner.validity_margin(ttl)
    }
    fn check_fair(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_fair(spec)
    }
    async fn acquire_fair(&self, req: &FairRequest) -> Result<AcquireOutcome, BackendError> {
        self.attempts.send_modify(|n| *n += 1);
        self.inner.acquire_fair(req).await
    }
    async fn release_fair(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.inner.release_fair(req).await
    }
    async fn leave_fair(&self, spec: &LeaseSpec, owner: &Owner) -> Result<bool, BackendError> {
        self.inner.leave_fair(spec, owner).await
    }
    fn fair_watch(&self, spec: &LeaseSpec, owner: &Owner, role: WatchRole) -> Option<ReleaseWatch> {
        self.inner.fair_watch(spec, owner, role)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_wakes_the_next_waiter_fast_and_only_it() {
    let server = common::redis().await;
    let holder = fair_on(&server, "{wake}").await;
    let held = bounded("obtain", holder.acquire(ms(30_000), LockOptions::new()))
        .await
        .expect("obtain");
    // Three waiters that heartbeat only every 10 s: only a wake makes them attempt sooner.
    let mut counts = Vec::new();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (attempts, seen) = watch::channel(0u32);
        let fair = Locker::new(Counted {
            inner: connect(&server).await,
            attempts,
        })
        .fair("{wake}")
        .expect("fair");
        let done = done_tx.clone();
        tasks.push(tokio::spawn(async move {
            let lock = fair
                .acquire(
                    ms(30_000),
                    LockOptions::new().retry(linear(10_000)).wait(ms(30_000)),
                )
                .await
                .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
            let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
            done.send((i, Instant::now(), release_tx)).expect("done");
            release_rx.await.ok();
            lock.release().await.expect("release");
        }));
        until_queued(&server, "{wake}", i + 1).await;
        // Its first attempt, then the one when its wake channel went live (a resync).
        let mut s = seen.clone();
        bounded("the waiter subscribed", s.wait_for(|n| *n >= 2))
            .await
            .expect("counts");
        counts.push(seen);
    }
    let before: Vec<u32> = counts.iter().map(|c| *c.borrow()).collect();
    let released_at = Instant::now();
    held.release().await.expect("release");
    let (first, at, release_first) = bounded("the next holder", done_rx.recv())
        .await
        .expect("a holder");
    assert_eq!(first, 0, "the head gets the lock");
    let woken = at - released_at;
    assert!(woken < ms(1_000), "woken {woken:?} after the release");
    // Nothing signals an attempt that should not happen: give the others time to make one.
    tokio::time::sleep(ms(300)).await;
    let after: Vec<u32> = counts.iter().map(|c| *c.borrow()).collect();
    assert_eq!(
        after[0],
        before[0] + 1,
        "the head attempted once: {before:?} -> {after:?}"
    );
    assert_eq!(
        &after[1..],
        &before[1..],
        "no herd: {before:?} -> {after:?}"
    );
    // And on down the line, each release waking the next.
    release_first.send(()).ok();
    for expected in 1..3 {
        let (i, _, release) = bounded("the next holder", done_rx.recv())
            .await
            .expect("a holder");
        assert_eq!(i, expected);
        release.send(()).ok();
    }
    for t in tasks {
        bounded("a waiter", t).await.expect("task");
    }
}

#[tokio::test]
async fn an_obtain_whose_reply_is_lost_is_unknown_applied_and_cleaned_up() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    let fair = Locker::new(proxied(&server, &proxy).await)
        .fair("{lost}")
        .expect("fair");
    // Load the fair scripts while the path is healthy.
    let warm = bounded("warm", fair.acquire(ms(10_000), LockOptions::new()))
        .await
        .expect("warm");
    warm.release().await.expect("release");

    proxy.set_mode(Mode::DropReplies);
    let err = bounded(
        "obtain",
        fair.acquire(
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
    let reader = fair_on(&server, "{lost}").await;
    let info = bounded("inspect", reader.inspect(ms(2_000)))
        .await
        .expect("inspect");
    assert_eq!(
        info.counter.map(|t| t.get()),
        Some(2),
        "the lost obtain minted a token"
    );
    bounded("cleanup", async {
        while reader
            .inspect(ms(2_000))
            .await
            .expect("inspect")
            .holder
            .is_some()
        {
            tokio::time::sleep(ms(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn an_obtain_that_gives_up_leaves_the_queue() {
    let server = common::redis().await;
    let holder = fair_on(&server, "{leave}").await;
    let held = bounded("obtain", holder.acquire(ms(10_000), LockOptions::new()))
        .await
        .expect("obtain");
    // A long place (3 x 1 s), so only the leave can empty the queue soon.
    let waiter = fair_on(&server, "{leave}").await;
    let err = bounded(
        "give up",
        waiter.acquire(
            ms(10_000),
            LockOptions::new().retry(linear(1_000)).wait(ms(300)),
        ),
    )
    .await
    .unwrap_err();
    assert!(err.is_not_obtained(), "{err:?}");
    bounded("the place is left", async {
        while queued(&server, "{leave}").await > 0 {
            tokio::time::sleep(ms(10)).await;
        }
    })
    .await;
    // A cancelled obtain leaves too.
    let cancelled = tokio::time::timeout(
        ms(300),
        waiter.acquire(
            ms(10_000),
            LockOptions::new().retry(linear(1_000)).wait(ms(20_000)),
        ),
    )
    .await;
    assert!(cancelled.is_err(), "still waiting when cancelled");
    bounded("the place is left", async {
        while queued(&server, "{leave}").await > 0 {
            tokio::time::sleep(ms(10)).await;
        }
    })
    .await;
    held.release().await.expect("release");
}

#[tokio::test]
async fn refusals_before_any_round_trip() {
    let server = common::redis().await;
    let locker = Locker::new(connect(&server).await);
    // A retry slower than the TTL: a waiter would hold up a free lock longer than a holder.
    let fair = locker.fair("{refuse}").expect("fair");
    let err = fair
        .acquire(ms(1_000), LockOptions::new().retry(linear(5_000)))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Invalid(_)), "{err:?}");
    assert!(matches!(locker.fair(""), Err(LockError::Invalid(_))));
    // The in-memory backend has fair locks; a backend without them refuses, typed.
    struct Plain(Backend);
    #[async_trait]
    impl LeaseBackend for Plain {
        async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
            self.0.acquire(req).await
        }
        async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
            self.0.renew(req).await
        }
        async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
            self.0.release(req).await
        }
        async fn remaining(
            &self,
            spec: &LeaseSpec,
            owner: &Owner,
        ) -> Result<Option<Duration>, BackendError> {
            self.0.remaining(spec, owner).await
        }
        async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
            self.0.inspect(spec).await
        }
    }
    let plain = Locker::new(Plain(connect(&server).await));
    match plain.fair("{refuse}") {
        Err(LockError::Refused(BackendError::Unsupported(m))) => {
            assert!(m.contains("fair"), "{m}");
        }
        other => panic!("expected an unsupported refusal, got {other:?}"),
    }
}

/// Issue 54: a fair try-lock takes no place in the line. With the lock held, an acquire with
/// a retry strategy but a zero wait (`lock --fair --wait 0`) is refused at once and leaves
/// the queue as it found it; the control: the same acquire with a wait is queued.
#[tokio::test]
async fn a_try_lock_takes_no_place_in_the_line() {
    let server = RedisServer::start().await.expect("redis");
    let holder = fair_on(&server, "{try}").await;
    let held = bounded("obtain", holder.acquire(ms(10_000), LockOptions::new()))
        .await
        .expect("obtain");
    let once = fair_on(&server, "{try}").await;
    let err = bounded(
        "a try-lock",
        once.acquire(
            ms(10_000),
            LockOptions::new().retry(linear(50)).wait(Duration::ZERO),
        ),
    )
    .await
    .unwrap_err();
    assert!(err.is_not_obtained(), "{err:?}");
    assert_eq!(queued(&server, "{try}").await, 0, "no place taken");
    // The control: a waiter with a wait is queued behind the holder.
    let waiter = fair_on(&server, "{try}").await;
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(
                ms(10_000),
                LockOptions::new().retry(linear(50)).wait(ms(20_000)),
            )
            .await
    });
    until_queued(&server, "{try}", 1).await;
    held.release().await.expect("release");
    let got = bounded("the waiter", waiting)
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    got.release().await.expect("release");
}
