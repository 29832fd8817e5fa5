//! Locks against a real Redis, through the facade: the reference scenarios of bsm/redislock
//! (obtain, metadata, custom tokens, retries, deadlines, concurrency, refresh, release, TTL,
//! fencing) and the edge cases its users and go-redlock's learned the hard way (exact owner
//! match, sub-millisecond TTLs, shared retry strategies, multi-key all-or-nothing, a lost
//! lock being terminal, transient errors retried, a loss signal that fires on the local
//! deadline, old loss receivers that still fire).
//!
//! Faults are real: a SIGSTOPped Redis (kit `pause()`), a TCP proxy that blackholes traffic.
//! Attempts are counted by [`Counted`], a [`LeaseBackend`] wrapper around the Redis backend,
//! so retry counts are asserted exactly, without timing.

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use common::{Backend, EVENTUALLY, backend, get, pttl, raw};
use lease_testkit::proxy::{FaultProxy, Mode};
use lease_testkit::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use redlease::core::{
    AcquireOutcome, AcquireRequest, LeaseInfo, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest,
    RenewOutcome, RenewRequest, Ttl,
};
use redlease::redis::RedisBackend;
use redlease::{
    BackendError, ConfigError, LeaseBackend, LockError, LockOptions, Locker, RetryStrategy,
};
use tokio::sync::watch;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn linear(n: u64) -> RetryStrategy {
    RetryStrategy::linear(ms(n)).unwrap()
}

/// Scheduling slack on top of the protocol's bounds in the fault tests (a loaded 2-core
/// machine, debug builds): faults must end (loss, give-up, recovery) within a bound derived
/// from the TTL, intervals and timeouts plus this, not merely "eventually".
const SLACK: Duration = Duration::from_secs(2);

/// Asserts that `since.elapsed()` is at most `bound`.
fn within(since: std::time::Instant, bound: Duration, what: &str) {
    let took = since.elapsed();
    assert!(took <= bound, "{what} took {took:?}, more than {bound:?}");
}

/// Calls the lock driver made to the backend, as the backend saw them.
#[derive(Clone, Debug, Default)]
struct Counts {
    /// Acquire calls per owner (ownership token).
    acquires: BTreeMap<String, u32>,
    acquire_total: u32,
    /// Renew calls started.
    renews: u32,
    /// Renew calls that answered `Renewed` (and whose reply reached the driver).
    renews_ok: u32,
    releases: u32,
    remaining: u32,
}

impl Counts {
    fn acquires_of(&self, owner: &str) -> u32 {
        self.acquires.get(owner).copied().unwrap_or(0)
    }
}

type BoxFut<'a, T> = Pin<Box<dyn Future<Output = Result<T, BackendError>> + Send + 'a>>;

/// A [`LeaseBackend`] that forwards to `inner` and counts every call (per owner for
/// acquires). Counts are published on a watch channel, so tests wait on them as signals.
#[derive(Clone, Debug)]
struct Counted<B> {
    inner: B,
    counts: Arc<watch::Sender<Counts>>,
}

impl<B> Counted<B> {
    fn new(inner: B) -> Self {
        Counted {
            inner,
            counts: Arc::new(watch::channel(Counts::default()).0),
        }
    }

    fn counts(&self) -> Counts {
        self.counts.borrow().clone()
    }

    /// Waits (bounded) until the counts satisfy `pred`.
    async fn wait_for(&self, what: &str, pred: impl FnMut(&Counts) -> bool) -> Counts {
        let mut rx = self.counts.subscribe();
        match tokio::time::timeout(EVENTUALLY, rx.wait_for(pred)).await {
            Ok(Ok(c)) => c.clone(),
            _ => panic!("timed out waiting for {what}; counts {:?}", self.counts()),
        }
    }
}

// The trait is declared with `#[async_trait]`; these are its desugared signatures (the facade's
// dev-dependencies do not include the macro).
impl<B: LeaseBackend> LeaseBackend for Counted<B> {
    fn acquire<'life0, 'life1, 'async_trait>(
        &'life0 self,
        req: &'life1 AcquireRequest,
    ) -> BoxFut<'async_trait, AcquireOutcome>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.counts.send_modify(|c| {
                *c.acquires.entry(req.owner.as_str().to_owned()).or_default() += 1;
                c.acquire_total += 1;
            });
            self.inner.acquire(req).await
        })
    }

    fn renew<'life0, 'life1, 'async_trait>(
        &'life0 self,
        req: &'life1 RenewRequest,
    ) -> BoxFut<'async_trait, RenewOutcome>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.counts.send_modify(|c| c.renews += 1);
            let r = self.inner.renew(req).await;
            if matches!(r, Ok(RenewOutcome::Renewed)) {
                self.counts.send_modify(|c| c.renews_ok += 1);
            }
            r
        })
    }

    fn release<'life0, 'life1, 'async_trait>(
        &'life0 self,
        req: &'life1 ReleaseRequest,
    ) -> BoxFut<'async_trait, ReleaseOutcome>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.counts.send_modify(|c| c.releases += 1);
            self.inner.release(req).await
        })
    }

    fn remaining<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        spec: &'life1 LeaseSpec,
        owner: &'life2 Owner,
    ) -> BoxFut<'async_trait, Option<Duration>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.counts.send_modify(|c| c.remaining += 1);
            self.inner.remaining(spec, owner).await
        })
    }

    fn inspect<'life0, 'life1, 'async_trait>(
        &'life0 self,
        spec: &'life1 LeaseSpec,
    ) -> BoxFut<'async_trait, LeaseInfo>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move { self.inner.inspect(spec).await })
    }

    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_spec(spec)
    }

    fn validity_margin(&self, ttl: Ttl) -> Duration {
        self.inner.validity_margin(ttl)
    }
}

/// A locker over a counting wrapper of a fresh connection to `server`.
async fn counted_locker(server: &RedisServer) -> (Locker<Counted<Backend>>, Counted<Backend>) {
    let b = Counted::new(backend(server).await);
    (Locker::new(b.clone()), b)
}

/// A plain locker over a fresh connection to `server`.
async fn locker(server: &RedisServer) -> Locker<Backend> {
    Locker::new(backend(server).await)
}

async fn exists(conn: &mut MultiplexedConnection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap();
    n == 1
}

/// Polls (bounded) until `key` is gone.
async fn wait_gone(conn: &mut MultiplexedConnection, key: &str) {
    let gone = tokio::time::timeout(EVENTUALLY, async {
        while exists(conn, key).await {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "{key} never disappeared");
}

/// Waits (bounded) for a cancellation token.
async fn fired(token: &redlease::CancellationToken, what: &str) {
    assert!(
        tokio::time::timeout(EVENTUALLY, token.cancelled())
            .await
            .is_ok(),
        "{what} never fired"
    );
}

/// A backend whose connection goes through `proxy`, with no client-side response timeout
/// (only the library bounds round trips).
async fn proxied(server: &RedisServer, proxy: &FaultProxy) -> Backend {
    let client = redis::Client::open(server.url_via(proxy.addr())).unwrap();
    let cfg = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    RedisBackend::new(
        client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .unwrap(),
    )
}

/// Loads the scripts (a fenced obtain and a release on another key): a request whose reply
/// is lost then runs at the server as soon as it arrives, instead of answering NOSCRIPT to a
/// caller that stopped waiting (whose EVAL fallback is then never sent).
async fn warm_up<B: LeaseBackend>(locker: &Locker<B>) {
    let lock = locker
        .obtain(
            "warm-up",
            ms(10_000),
            LockOptions::new().fence_key("warm-up:fence"),
        )
        .await
        .unwrap();
    lock.release().await.unwrap();
}

fn assert_not_obtained_by(err: &LockError, holder: &str) {
    match err {
        LockError::NotObtained { holder: Some(h) } => assert_eq!(h, holder),
        other => panic!("expected NotObtained by {holder:?}, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Obtain, release, metadata, tokens
// ---------------------------------------------------------------------------------------------

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
    assert!(!lock.token().is_empty(), "a random token by default");
    assert_eq!(lock.key(), "k");
    assert_eq!(lock.keys(), ["k"]);
    assert_eq!(lock.fence_token(), None, "no fence key, no token");
    assert!(lock.held());
    assert!(!lock.lost().is_cancelled());
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some(lock.token()));
    let p = pttl(&mut conn, "k").await;
    assert!(p > 0 && p <= 10_000, "PTTL {p}");

    let err = locker
        .obtain("k", ms(10_000), LockOptions::new())
        .await
        .unwrap_err();
    assert_not_obtained_by(&err, lock.token());
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
        Some(format!("{}\0job 42", lock.token()))
    );
    let info = locker
        .backend()
        .inspect(&LeaseSpec::lock(["k"], None).unwrap())
        .await
        .unwrap();
    assert_eq!(info.holder.as_deref(), Some(lock.token()));
    assert_eq!(info.metadata.as_deref(), Some("job 42"));
    let err = locker
        .obtain("k", ms(10_000), LockOptions::new())
        .await
        .unwrap_err();
    assert_not_obtained_by(&err, lock.token());
    // Refresh keeps the metadata (it only moves the TTL).
    lock.refresh(ms(20_000)).await.unwrap();
    assert_eq!(
        get(&mut conn, "k").await,
        Some(format!("{}\0job 42", lock.token()))
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
    let opts = LockOptions::new().token("worker-1").fence_key("k:fence");
    let a = locker.obtain("k", ms(10_000), opts.clone()).await.unwrap();
    assert_eq!(a.token(), "worker-1");
    let b = locker.obtain("k", ms(10_000), opts).await.unwrap();
    assert_eq!(b.token(), "worker-1");
    assert!(
        b.fence_token().unwrap() > a.fence_token().unwrap(),
        "{:?} then {:?}",
        a.fence_token(),
        b.fence_token()
    );
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some("worker-1"));
    // Someone else is still refused.
    let err = locker
        .obtain("k", ms(10_000), LockOptions::new().token("worker-2"))
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
            LockOptions::new().token("ab").metadata("m"),
        )
        .await
        .unwrap();
    let err = locker
        .obtain("k", ms(10_000), LockOptions::new().token("a"))
        .await
        .unwrap_err();
    assert_not_obtained_by(&err, "ab");

    let spec = Arc::new(LeaseSpec::lock(["k"], None).unwrap());
    let backend = locker.backend();
    for other in ["a", "abm", "ab m", "ab\u{1}m"] {
        let owner = Owner::new(other).unwrap();
        let released = backend
            .release(&ReleaseRequest {
                spec: spec.clone(),
                owner: owner.clone(),
                term: None,
            })
            .await
            .unwrap();
        assert_eq!(released, ReleaseOutcome::NotHeld, "{other:?}");
        let renewed = backend
            .renew(&RenewRequest {
                spec: spec.clone(),
                owner: owner.clone(),
                ttl: Ttl::new(ms(60_000)).unwrap(),
            })
            .await
            .unwrap();
        assert_eq!(renewed, RenewOutcome::NotHeld, "{other:?}");
        assert_eq!(backend.remaining(&spec, &owner).await.unwrap(), None);
    }
    // A token containing the separator is refused before any round trip.
    let before = counted.counts().acquire_total;
    let err = locker
        .obtain("k", ms(10_000), LockOptions::new().token("ab\0m"))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Invalid(_)), "{err:?}");
    assert_eq!(counted.counts().acquire_total, before);

    assert_eq!(get(&mut conn, "k").await.as_deref(), Some("ab\0m"));
    let p = pttl(&mut conn, "k").await;
    assert!(p > 0 && p <= 10_000, "not renewed by a stranger: PTTL {p}");
    holder.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Retries and deadlines
// ---------------------------------------------------------------------------------------------

/// redislock: retry success. An obtainer with a linear retry is refused at least once while
/// the lock is held, and obtains it once the holder releases.
#[tokio::test]
async fn retry_obtains_once_the_holder_releases() {
    let server = common::redis().await;
    let (locker, counted) = counted_locker(&server).await;
    let mut conn = raw(&server).await;
    let holder = locker
        .obtain("k", ms(30_000), LockOptions::new().token("holder"))
        .await
        .unwrap();
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .obtain(
                    "k",
                    ms(10_000),
                    LockOptions::new()
                        .token("waiter")
                        .retry(linear(10))
                        .wait(EVENTUALLY),
                )
                .await
        })
    };
    // The waiter has been refused and has retried at least once.
    counted
        .wait_for("the waiter to retry", |c| c.acquires_of("waiter") >= 2)
        .await;
    holder.release().await.unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(got.token(), "waiter");
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some("waiter"));
    got.release().await.unwrap();
}

/// redislock: retry failure. When the strategy stops (LimitRetry 2), the error is
/// `NotObtained` — not a deadline — after exactly 1 + 2 attempts, and the holder is intact.
#[tokio::test]
async fn retry_gives_up_with_not_obtained_when_the_strategy_stops() {
    let server = common::redis().await;
    let (locker, counted) = counted_locker(&server).await;
    let mut conn = raw(&server).await;
    let holder = locker
        .obtain("k", ms(30_000), LockOptions::new().token("holder"))
        .await
        .unwrap();
    let err = locker
        .obtain(
            "k",
            ms(10_000),
            LockOptions::new()
                .token("w")
                .retry(RetryStrategy::limit(2, linear(10))),
        )
        .await
        .unwrap_err();
    assert_not_obtained_by(&err, "holder");
    assert_eq!(counted.counts().acquires_of("w"), 3);
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some("holder"));
    holder.release().await.unwrap();
}

/// redislock: retry with a context deadline; edge-cases: the deadline error carries both
/// causes (`DeadlineExceeded { last: NotObtained }`, `is_not_obtained()`), and without a
/// caller deadline an unbounded strategy still stops after one TTL (implicit deadline).
#[tokio::test]
async fn deadline_error_carries_not_obtained_and_the_implicit_deadline_is_one_ttl() {
    let server = common::redis().await;
    let (locker, counted) = counted_locker(&server).await;
    let holder = locker
        .obtain("k", ms(30_000), LockOptions::new().token("holder"))
        .await
        .unwrap();

    // An explicit wait, far shorter than the holder's TTL.
    let err = locker
        .obtain(
            "k",
            ms(10_000),
            LockOptions::new()
                .token("w1")
                .retry(linear(20))
                .wait(ms(200)),
        )
        .await
        .unwrap_err();
    match &err {
        LockError::DeadlineExceeded { last } => assert_not_obtained_by(last, "holder"),
        other => panic!("expected DeadlineExceeded, got {other:?}"),
    }
    assert!(err.is_not_obtained());
    let source = std::error::Error::source(&err).expect("the last cause is the source");
    assert!(source.to_string().contains("not obtained"), "{source}");
    assert!(counted.counts().acquires_of("w1") >= 2, "it did retry");

    // No wait given: an unbounded linear strategy stops after one TTL (200 ms) of the
    // obtainer, long before the holder's 30 s.
    let err = locker
        .obtain(
            "k",
            ms(200),
            LockOptions::new().token("w2").retry(linear(20)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::DeadlineExceeded { last } if last.is_not_obtained()),
        "{err:?}"
    );
    assert!(counted.counts().acquires_of("w2") >= 2, "it did retry");
    holder.release().await.unwrap();
}

/// redislock: concurrent obtain. 100 obtainers race (multi-threaded runtime, several
/// connections, released together by a barrier): exactly one wins and every loser is told
/// who won.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_concurrent_obtainers_exactly_one_wins() {
    let server = common::redis().await;
    let mut lockers = Vec::new();
    for _ in 0..10 {
        lockers.push(locker(&server).await);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(100));
    let mut tasks = Vec::new();
    for i in 0..100 {
        let locker = lockers[i % lockers.len()].clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            locker
                .obtain("k", ms(30_000), LockOptions::new().token(format!("c{i}")))
                .await
        }));
    }
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(lock) => winners.push(lock),
            Err(e) => losers.push(e),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one winner");
    assert_eq!(losers.len(), 99);
    let winner = winners.pop().unwrap();
    for e in &losers {
        assert_not_obtained_by(e, winner.token());
    }
    let mut conn = raw(&server).await;
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some(winner.token()));
    winner.release().await.unwrap();
}

/// edge-cases: retry strategies with internal counters raced when shared (LimitRetry
/// exceeded its max). Ten concurrent obtainers share one `limit(3, linear(20ms))` on a held
/// key: each fails with `NotObtained` after exactly its own 1 + 3 attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_retry_strategy_each_obtainer_follows_its_own_sequence() {
    let server = common::redis().await;
    let (locker, counted) = counted_locker(&server).await;
    let holder = locker
        .obtain("k", ms(30_000), LockOptions::new().token("holder"))
        .await
        .unwrap();
    let shared = RetryStrategy::limit(3, linear(20));
    let barrier = Arc::new(tokio::sync::Barrier::new(10));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let (locker, barrier) = (locker.clone(), barrier.clone());
        let opts = LockOptions::new()
            .token(format!("w{i}"))
            .retry(shared.clone())
            .wait(EVENTUALLY);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            locker.obtain("k", ms(10_000), opts).await
        }));
    }
    for t in tasks {
        let err = t.await.unwrap().unwrap_err();
        assert_not_obtained_by(&err, "holder");
    }
    let counts = counted.counts();
    for i in 0..10 {
        assert_eq!(counts.acquires_of(&format!("w{i}")), 4, "w{i}: {counts:?}");
    }
    holder.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Refresh
// ---------------------------------------------------------------------------------------------

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
                .token("a")
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
        .obtain("k", ms(30_000), LockOptions::new().token("b"))
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
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some(lock.token()));
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

// ---------------------------------------------------------------------------------------------
// Expiry, release of a lost lock, TTL
// ---------------------------------------------------------------------------------------------

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
        .obtain("k", ms(30_000), LockOptions::new().token("a"))
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
        .obtain("k", ms(30_000), LockOptions::new().token("ab"))
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

// ---------------------------------------------------------------------------------------------
// Multi-key, fencing, invalid input, drop
// ---------------------------------------------------------------------------------------------

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
            LockOptions::new().token("A").fence_key("f"),
        )
        .await
        .unwrap();
    assert_eq!(a.fence_token().map(|t| t.get()), Some(1));
    for (keys, who) in [(["z", "y"], "B"), (["y", "z"], "C")] {
        let err = locker
            .obtain_multi(
                keys,
                ms(30_000),
                LockOptions::new().token(who).fence_key("f"),
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
            LockOptions::new().token("B").fence_key("f"),
        )
        .await
        .unwrap();
    assert_eq!(b.fence_token().map(|t| t.get()), Some(2));
    assert_eq!(get(&mut conn, "z").await.as_deref(), Some("B"));
    assert!(!exists(&mut conn, "x").await);
    b.release().await.unwrap();
}

/// redislock fencing: tokens strictly increase across holders — after a release, after an
/// expiry — and the counter survives release (no TTL on it).
#[tokio::test]
async fn fenced_tokens_strictly_increase_across_holders_and_survive_release() {
    let server = common::redis().await;
    let locker = locker(&server).await;
    let mut conn = raw(&server).await;
    let opts = LockOptions::new().fence_key("k:fence");
    let a = locker.obtain("k", ms(10_000), opts.clone()).await.unwrap();
    let ta = a.fence_token().unwrap();
    a.release().await.unwrap();
    assert_eq!(get(&mut conn, "k:fence").await, Some(ta.to_string()));
    assert_eq!(
        pttl(&mut conn, "k:fence").await,
        -1,
        "the counter never expires"
    );

    // B holds briefly and lets it expire.
    let b = locker.obtain("k", ms(100), opts.clone()).await.unwrap();
    let tb = b.fence_token().unwrap();
    assert!(tb > ta, "{ta} then {tb}");
    fired(&b.lost(), "B's deadline").await;
    wait_gone(&mut conn, "k").await;
    drop(b);

    let c = locker.obtain("k", ms(10_000), opts).await.unwrap();
    let tc = c.fence_token().unwrap();
    assert!(tc > tb, "{tb} then {tc}");
    assert_eq!(get(&mut conn, "k:fence").await, Some(tc.to_string()));
    assert_eq!(
        get(&mut conn, "k:fence:applied").await,
        Some(tc.to_string()),
        "the mark is stamped at obtain"
    );
    c.release().await.unwrap();
    assert_eq!(get(&mut conn, "k:fence").await, Some(tc.to_string()));
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
        redlease::core::config::MAX_TTL + ms(1),
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
                .obtain("a", ms(1_000), LockOptions::new().token(""))
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

// ---------------------------------------------------------------------------------------------
// Auto-renewal and the loss signal
// ---------------------------------------------------------------------------------------------

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
    assert_not_obtained_by(&err, lock.token());
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some(lock.token()));
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
    let counted = Counted::new(RedisBackend::new(conn));
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
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some(next.token()));
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
            LockOptions::new().token("t").auto_renew(ms(100)),
        )
        .await
        .unwrap();
    let rx = a.lost();
    let b = locker
        .obtain("k", ms(2_000), LockOptions::new().token("t"))
        .await
        .unwrap();
    let rx_b = b.lost();
    assert!(!rx.is_cancelled());
    b.release().await.unwrap();
    assert!(rx_b.is_cancelled());
    let c = locker
        .obtain("k", ms(30_000), LockOptions::new().token("c"))
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

/// A request that got no reply in time may still have taken the lock at the server. With the
/// network blackholed, an obtain without retries fails with `OutcomeUnknown`; when the network
/// heals, the queued acquire does run (the fence counter moves to 1) and the cleanup the driver
/// started right behind it deletes the key — long before its 60 s TTL.
#[tokio::test]
async fn an_obtain_with_an_unknown_outcome_cleans_up_after_itself() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let locker = Locker::new(proxied(&server, &proxy).await);
    let mut conn = raw(&server).await;
    warm_up(&locker).await;
    proxy.set_mode(Mode::Blackhole);
    let err = locker
        .obtain(
            "k",
            ms(60_000),
            LockOptions::new()
                .fence_key("k:fence")
                .operation_timeout(ms(100)),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::OutcomeUnknown(_)), "{err:?}");
    assert!(!err.is_not_obtained());
    proxy.set_mode(Mode::Pass);
    let cleaned = tokio::time::timeout(EVENTUALLY, async {
        loop {
            let counter = get(&mut conn, "k:fence").await;
            if counter.as_deref() == Some("1") && !exists(&mut conn, "k").await {
                break;
            }
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    assert!(
        cleaned.is_ok(),
        "the acquire ran but was not cleaned up: k={:?} fence={:?}",
        get(&mut conn, "k").await,
        get(&mut conn, "k:fence").await
    );
}

/// After attempts with unknown outcomes, a retry with the same token takes the lock over: the
/// lock handed out carries the token minted by the attempt that answered, which is the fence
/// counter's current value (earlier, timed-out attempts minted smaller ones).
#[tokio::test]
async fn retries_after_unknown_outcomes_hand_out_the_current_token() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let counted = Counted::new(proxied(&server, &proxy).await);
    let locker = Locker::new(counted.clone());
    let mut conn = raw(&server).await;
    warm_up(&locker).await;
    proxy.set_mode(Mode::Blackhole);
    let obtain = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .obtain(
                    "k",
                    ms(30_000),
                    LockOptions::new()
                        .token("me")
                        .fence_key("k:fence")
                        .retry(linear(20))
                        .operation_timeout(ms(100))
                        .wait(EVENTUALLY),
                )
                .await
        })
    };
    counted
        .wait_for("two timed-out attempts", |c| c.acquires_of("me") >= 3)
        .await;
    proxy.set_mode(Mode::Pass);
    let lock = obtain.await.unwrap().unwrap();
    let token = lock.fence_token().unwrap();
    assert!(token.get() >= 3, "earlier attempts ran too: {token}");
    assert_eq!(get(&mut conn, "k:fence").await, Some(token.to_string()));
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some("me"));
    lock.release().await.unwrap();
    assert!(!exists(&mut conn, "k").await);
}
