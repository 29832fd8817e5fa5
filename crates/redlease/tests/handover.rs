//! Handover by release notices, on a real Redis: followers and lock waiters are woken by the
//! holder's release instead of their next poll; a notice lost between an attempt and the
//! subscription, or while the subscriber connection is down, is made up for by the resync
//! when the subscription is (re)confirmed; without a subscriber, waiters still poll.
//!
//! Every scenario uses poll intervals far longer than its assertion bound, so only a notice
//! (or the resync) can make it pass: each test fails if notices are not delivered.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::locks::{SLACK, ms};
use common::{EVENTUALLY, config, wait_leader, wait_role};
use lease_testkit::proxy::{FaultProxy, Mode};
use lease_testkit::redis::RedisServer;
use lease_testkit::wrap::{Answer, Call, Hooks, Wrapped};
use redlease::redis::HealingConnection;
use redlease::redis::{RedisBackend, ReleaseNotices, Topology, notice_channel};
use redlease::{CancellationToken, Elector, LeaderWatch, LockOptions, Locker, RetryStrategy, Role};

type Managed = RedisBackend<HealingConnection>;

/// A backend as `redlease::redis::connect` builds it: its own data and subscriber
/// connections, like a separate process.
async fn connect(server: &RedisServer) -> Managed {
    redlease::redis::connect(&server.url())
        .await
        .expect("connect")
}

/// A waiter's bound after a release: far below every poll interval used here.
const PROMPT: Duration = Duration::from_millis(1500);

/// Long polls: a lock waiter that only polls would wait 20 s.
fn slow_retry() -> LockOptions {
    LockOptions::new()
        .retry(RetryStrategy::linear(Duration::from_secs(20)).unwrap())
        .wait(Duration::from_secs(60))
}

fn channel(key: &str) -> String {
    notice_channel(key, Topology::Standalone)
}

/// Waits (bounded) until `backend`'s subscriber has confirmed `channel`.
async fn wait_live(backend: &Managed, channel: &str) {
    let notices = backend.release_notices().expect("notices").clone();
    let deadline = Instant::now() + EVENTUALLY;
    // The hub's live flag has no public signal of its own besides the waiters' wake-ups,
    // which these tests are about; a bounded check every few milliseconds does not race.
    while !notices.is_live(channel) {
        assert!(Instant::now() < deadline, "{channel} never became live");
        tokio::time::sleep(ms(5)).await;
    }
}

/// Waits (bounded) until one of `electors` leads and every other follows; returns the leader's
/// index (whoever won the first race).
async fn settled<B: redlease::LeaseBackend>(electors: &[&Elector<B>]) -> usize {
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let roles: Vec<Role> = electors.iter().map(|e| e.state().role).collect();
        let leaders: Vec<usize> = (0..roles.len())
            .filter(|&i| matches!(roles[i], Role::Leader(_)))
            .collect();
        if leaders.len() == 1
            && roles.iter().filter(|r| **r == Role::Follower).count() == roles.len() - 1
        {
            return leaders[0];
        }
        assert!(Instant::now() < deadline, "no settled election: {roles:?}");
        // Role changes have a watch channel per elector; a short bounded wait on any of them.
        let _ = tokio::time::timeout(ms(20), electors[0].subscribe().changed()).await;
    }
}

#[tokio::test]
async fn a_follower_is_elected_at_once_when_the_leader_resigns() {
    let server = RedisServer::start().await.expect("redis");
    // TTL 10 s: the follower polls every ~5 s.
    let a = Elector::new(connect(&server).await, config("svc", "a", 10_000));
    let b = Elector::new(connect(&server).await, config("svc", "b", 10_000));
    let shutdown = CancellationToken::new();
    let runs = [a.clone(), b.clone()].map(|e| {
        let s = shutdown.clone();
        tokio::spawn(async move { e.hold(s).await })
    });
    let (a, b) = match settled(&[&a, &b]).await {
        0 => (a, b),
        _ => (b, a),
    };
    let first = a.token().expect("leads");
    wait_live(b.backend(), &channel("svc:leader")).await;
    let resigned = Instant::now();
    a.resign();
    let second = wait_leader(&b, PROMPT + SLACK).await;
    let took = resigned.elapsed();
    assert!(second > first);
    assert!(took < PROMPT, "handover took {took:?}");
    shutdown.cancel();
    for r in runs {
        tokio::time::timeout(EVENTUALLY, r)
            .await
            .expect("runs end")
            .unwrap()
            .unwrap();
    }
}

#[tokio::test]
async fn a_lock_waiter_obtains_at_once_when_the_holder_releases() {
    let server = RedisServer::start().await.expect("redis");
    let a = Locker::new(connect(&server).await);
    let b_backend = connect(&server).await;
    let b = Locker::new(b_backend.clone());
    let held = a
        .obtain("job", Duration::from_secs(30), LockOptions::new())
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        let lock = b.obtain("job", Duration::from_secs(30), slow_retry()).await;
        (lock.map(drop), Instant::now())
    });
    // The waiter subscribes after its first attempt found the lock held.
    wait_live(&b_backend, &channel("job")).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let (lock, at) = tokio::time::timeout(PROMPT + SLACK, waiter)
        .await
        .expect("the waiter was not woken")
        .unwrap();
    lock.expect("obtained");
    let took = at.duration_since(released);
    assert!(took < PROMPT, "handoff took {took:?}");
    let stats = b_backend.release_notices().unwrap().stats();
    assert_eq!(stats.connections, 1, "{stats:?}");
    assert!(stats.notices >= 1, "{stats:?}");
}

/// The release happens after the waiter's attempt found the lock held and before its
/// subscription is confirmed (the subscriber's path is blackholed meanwhile): the notice is
/// lost, and the resync when the subscription is confirmed wakes the waiter.
#[tokio::test]
async fn a_release_between_the_attempt_and_the_subscription_is_not_lost() {
    let server = RedisServer::start().await.expect("redis");
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    proxy.set_mode(Mode::Blackhole);
    let client = redis::Client::open(server.url_via(proxy.addr())).unwrap();
    // Data straight to the server, notices through the proxy.
    let b_backend = RedisBackend::new(
        server
            .client()
            .unwrap()
            .get_connection_manager()
            .await
            .unwrap(),
    )
    .with_release_notices(ReleaseNotices::new(client));
    let a = Locker::new(connect(&server).await);
    let held = a
        .obtain("job", Duration::from_secs(30), LockOptions::new())
        .await
        .unwrap();
    let b = Locker::new(b_backend.clone());
    let waiter = tokio::spawn(async move {
        let lock = b.obtain("job", Duration::from_secs(30), slow_retry()).await;
        (lock.map(drop), Instant::now())
    });
    // The subscriber opens its connection once the waiter's first attempt failed.
    let deadline = Instant::now() + EVENTUALLY;
    while proxy.open_connections() == 0 {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(ms(5)).await;
    }
    held.release().await.unwrap();
    assert!(
        !b_backend
            .release_notices()
            .unwrap()
            .is_live(&channel("job"))
    );
    let healed = Instant::now();
    proxy.set_mode(Mode::Pass);
    // The subscription (or a fresh connection after its 2 s bound) is confirmed within a few
    // seconds; the waiter's own poll is 20 s away.
    let bound = Duration::from_secs(5);
    let (lock, at) = tokio::time::timeout(bound + SLACK, waiter)
        .await
        .expect("the waiter missed the release")
        .unwrap();
    lock.expect("obtained");
    let took = at.duration_since(healed);
    assert!(
        took < bound,
        "obtained {took:?} after the subscriber's path healed"
    );
}

/// The subscriber connection is killed while a waiter waits, and the holder releases before
/// it is back: the waiter is woken by the resync once the subscriber has reconnected.
#[tokio::test]
async fn a_killed_subscriber_reconnects_and_the_waiter_is_not_stranded() {
    let server = RedisServer::start().await.expect("redis");
    let a = Locker::new(connect(&server).await);
    let b_backend = connect(&server).await;
    let b = Locker::new(b_backend.clone());
    let held = a
        .obtain("job", Duration::from_secs(30), LockOptions::new())
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        let lock = b.obtain("job", Duration::from_secs(30), slow_retry()).await;
        (lock.map(drop), Instant::now())
    });
    wait_live(&b_backend, &channel("job")).await;
    let mut raw = server.connection().await.unwrap();
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(killed, 1, "one subscriber connection");
    held.release().await.unwrap();
    let released = Instant::now();
    let (lock, at) = tokio::time::timeout(PROMPT + SLACK, waiter)
        .await
        .expect("the waiter was stranded")
        .unwrap();
    lock.expect("obtained");
    let took = at.duration_since(released);
    assert!(took < PROMPT, "obtained {took:?} after the release");
    let stats = b_backend.release_notices().unwrap().stats();
    assert_eq!(stats.connections, 2, "reconnected once: {stats:?}");
}

/// With the subscriber unable to reach the server at all, a waiter still obtains the lock by
/// polling: notices only ever make an attempt sooner, never later.
#[tokio::test]
async fn without_a_subscriber_waiters_poll() {
    let server = RedisServer::start().await.expect("redis");
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    proxy.set_mode(Mode::Blackhole);
    let b_backend = RedisBackend::new(server.connection().await.unwrap()).with_release_notices(
        ReleaseNotices::new(redis::Client::open(server.url_via(proxy.addr())).unwrap()),
    );
    let a = Locker::new(connect(&server).await);
    let held = a
        .obtain("job", Duration::from_secs(30), LockOptions::new())
        .await
        .unwrap();
    let b = Locker::new(b_backend);
    let poll = ms(300);
    let waiter = tokio::spawn(async move {
        let options = LockOptions::new()
            .retry(RetryStrategy::linear(poll).unwrap())
            .wait(Duration::from_secs(30));
        let lock = b.obtain("job", Duration::from_secs(30), options).await;
        (lock.map(drop), Instant::now())
    });
    tokio::time::sleep(ms(100)).await; // let the waiter fail once (not a signal: any order works)
    held.release().await.unwrap();
    let released = Instant::now();
    let (lock, at) = tokio::time::timeout(poll + SLACK, waiter)
        .await
        .expect("the waiter never polled")
        .unwrap();
    lock.expect("obtained");
    assert!(at.duration_since(released) <= poll + SLACK);
}

/// Eight waiters in one process on one key: each release wakes one of them (not all), so the
/// handoffs cost about one attempt each; every waiter gets the lock.
#[tokio::test]
async fn one_waiter_per_release_within_a_process() {
    let server = RedisServer::start().await.expect("redis");
    let backend = connect(&server).await;
    let locker = Locker::new(backend.clone());
    let rounds = 5;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let locker = locker.clone();
        tasks.spawn(async move {
            for _ in 0..rounds {
                let lock = locker
                    .obtain("hot", Duration::from_secs(30), slow_retry())
                    .await
                    .expect("obtained");
                tokio::time::sleep(ms(2)).await;
                lock.release().await.expect("released");
            }
        });
    }
    // 40 handoffs of ~2 ms each; the waiters' own polls are 20 s away.
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(joined) = tasks.join_next().await {
            joined.unwrap();
        }
    })
    .await
    .expect("every waiter got the lock 5 times, woken by releases");
    let mut raw = server.connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .unwrap();
    let calls = |name: &str| -> u64 {
        info.lines()
            .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
            .and_then(|l| l.split("calls=").nth(1))
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let acquisitions = 8 * rounds;
    // SET NX (the fast path) + EVALSHA (failed attempts, releases) per acquisition.
    let scripts = calls("evalsha") + calls("eval");
    let per = (calls("set") + scripts) as f64 / acquisitions as f64;
    // Woken one at a time, each acquisition costs its release, its winning attempt, the
    // first failed attempt of each obtain, and a few extra attempts (resyncs); waking all 7
    // waiters per release would cost about 9.
    println!("{per:.2} commands per acquisition");
    assert!(per < 5.0, "{per:.1} commands per acquisition");
}

/// The observer stream (`LeaderWatch`) follows three terms: each new leader and each release
/// is reported promptly although its poll interval is 10 s (a release by its notice, the next
/// leader by the quick re-reads that follow it).
#[tokio::test]
async fn the_observer_sees_three_terms_promptly() {
    let server = RedisServer::start().await.expect("redis");
    let mut watch = LeaderWatch::new(Arc::new(connect(&server).await), "obs")
        .unwrap()
        .every(Duration::from_secs(10))
        .unwrap();
    // The watch runs on its own, reporting each change with the instant it saw it.
    let (tx, mut changes) = tokio::sync::mpsc::unbounded_channel();
    let watcher = tokio::spawn(async move {
        loop {
            let change = watch.changed().await.expect("inspect");
            if tx.send((change, Instant::now())).is_err() {
                return;
            }
        }
    });
    let mut next_change = async || {
        tokio::time::timeout(PROMPT + SLACK, changes.recv())
            .await
            .expect("a change reported promptly")
            .expect("the watcher runs")
    };
    let (first, _) = next_change().await;
    assert!(first.is_none(), "nobody leads yet");
    let mut seen = Vec::new();
    for id in ["a", "b", "c"] {
        let elector = Elector::new(connect(&server).await, config("obs", id, 10_000));
        let shutdown = CancellationToken::new();
        let run = {
            let (e, s) = (elector.clone(), shutdown.clone());
            tokio::spawn(async move { e.hold(s).await })
        };
        let token = wait_leader(&elector, EVENTUALLY).await;
        let elected = Instant::now();
        let (leader, at) = next_change().await;
        let leader = leader.expect("a leader");
        assert_eq!(leader.instance_id, id);
        assert_eq!(leader.token, Some(token));
        let took = at.saturating_duration_since(elected);
        assert!(
            took < PROMPT,
            "leader {id} reported {took:?} after its election"
        );
        seen.push(token);
        shutdown.cancel(); // releases: the watch hears it at once
        tokio::time::timeout(EVENTUALLY, run)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let released = Instant::now();
        let (vacant, at) = next_change().await;
        assert!(vacant.is_none());
        let took = at.saturating_duration_since(released);
        assert!(took < PROMPT, "release of {id} reported {took:?} after it");
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    watcher.abort();
}

/// Redis Cluster: the release is published with `SPUBLISH` and subscribed with `SSUBSCRIBE`
/// on the node that owns the key's slot (and on no other node); a follower is woken by it.
#[tokio::test]
async fn cluster_notices_stay_on_the_node_that_owns_the_slot() {
    use lease_testkit::cluster::RedisCluster;
    let cluster = RedisCluster::start().await.expect("cluster");
    let notices =
        ReleaseNotices::cluster(redis::cluster::ClusterClientBuilder::new(cluster.urls()))
            .expect("cluster notices");
    let b_backend =
        RedisBackend::cluster(cluster.connection().await.unwrap()).with_release_notices(notices);
    let a = Elector::new(
        RedisBackend::cluster(cluster.connection().await.unwrap()),
        config("{svc}", "a", 10_000),
    );
    let b = Elector::new(b_backend.clone(), config("{svc}", "b", 10_000));
    let shutdown = CancellationToken::new();
    // `a` first, so that `b` (the one with the subscriber) follows.
    let run_a = {
        let (e, s) = (a.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    wait_leader(&a, EVENTUALLY).await;
    let run_b = {
        let (e, s) = (b.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let runs = [run_a, run_b];
    wait_role(&b, EVENTUALLY, "follower", |r| *r == Role::Follower).await;
    let channel = notice_channel("{svc}:leader", Topology::Cluster);
    let notices = b_backend.release_notices().unwrap().clone();
    // Redis 6.2 has no sharded pub/sub: the preflight says so, the subscription is refused
    // (not retried), the release still works, and the follower takes over by polling.
    let report = tokio::time::timeout(EVENTUALLY, redlease::LeaseBackend::preflight(&b_backend))
        .await
        .expect("preflight in time")
        .expect("preflight");
    let server = report.server.clone().expect("the server is named");
    if server.product == "redis" && server.version_numbers().is_some_and(|v| v < (7, 0, 0)) {
        assert!(
            report.notes.iter().any(|n| n.contains("SPUBLISH")),
            "{:?}",
            report.notes
        );
        let deadline = Instant::now() + EVENTUALLY;
        while notices.stats().refused == 0 {
            assert!(Instant::now() < deadline, "SSUBSCRIBE never refused");
            tokio::time::sleep(ms(5)).await;
        }
        assert!(!notices.is_live(&channel));
        a.resign();
        wait_leader(&b, EVENTUALLY).await;
        assert_eq!(notices.stats().notices, 0);
        shutdown.cancel();
        for r in runs {
            tokio::time::timeout(EVENTUALLY, r)
                .await
                .expect("runs end")
                .unwrap()
                .unwrap();
        }
        return;
    }
    let deadline = Instant::now() + EVENTUALLY;
    while !notices.is_live(&channel) {
        assert!(Instant::now() < deadline, "never subscribed");
        tokio::time::sleep(ms(5)).await;
    }
    // Exactly one node holds the subscription: the one that serves the key.
    let mut owners = Vec::new();
    for node in cluster.nodes() {
        let mut conn = node.connection().await.unwrap();
        let counts: Vec<redis::Value> = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(&channel)
            .query_async(&mut conn)
            .await
            .unwrap();
        let subscribers: i64 = redis::from_redis_value(counts[1].clone()).unwrap();
        let serves_key = redis::cmd("EXISTS")
            .arg("{svc}:leader")
            .query_async::<i64>(&mut conn)
            .await
            .is_ok_and(|n| n == 1);
        if subscribers > 0 {
            owners.push((node.addr(), serves_key));
        }
    }
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert!(
        owners[0].1,
        "the subscribed node serves the key: {owners:?}"
    );
    let resigned = Instant::now();
    a.resign();
    wait_leader(&b, PROMPT + SLACK).await;
    let took = resigned.elapsed();
    assert!(took < PROMPT, "handover took {took:?}");
    assert!(notices.stats().notices >= 1);
    shutdown.cancel();
    for r in runs {
        tokio::time::timeout(EVENTUALLY, r)
            .await
            .expect("runs end")
            .unwrap()
            .unwrap();
    }
}

/// A wrapper that forwards the required methods, and release notices only as far as
/// `notices` says: the negative controls for the wrappers that forward notices.
#[derive(Clone)]
struct Limited<B> {
    inner: B,
    notices: Notices,
}

/// A waiter on `key` (polling every 20 s) behind the kit's [`Wrapped`] with `hooks`, around
/// `inner` forwarding `notices`; it ends with its obtain's outcome and when it came.
fn spawn_waiter<H: Hooks>(
    inner: &Managed,
    notices: Notices,
    hooks: H,
    key: &'static str,
) -> tokio::task::JoinHandle<(Result<(), redlease::LockError>, Instant)> {
    let inner = inner.clone();
    let b = Locker::new(Wrapped::with_hooks(Limited { inner, notices }, hooks));
    tokio::spawn(async move {
        let lock = b.obtain(key, Duration::from_secs(30), slow_retry()).await;
        (lock.map(drop), Instant::now())
    })
}

/// How much of the release notices a [`Limited`] wrapper forwards.
#[derive(Clone, Copy)]
enum Notices {
    /// All of them, as the wrapped backend gives them.
    Forwarded,
    /// None: `release_watch` and `notice_mark` keep their defaults (no watch, no mark).
    Dropped,
    /// Watches, but marks that never move (a notice before a waiter's watch is unseen).
    FrozenMarks,
}

#[redlease::async_trait]
impl<B: redlease::LeaseBackend> redlease::LeaseBackend for Limited<B> {
    async fn acquire(
        &self,
        req: &redlease::core::AcquireRequest,
    ) -> Result<redlease::core::AcquireOutcome, redlease::BackendError> {
        self.inner.acquire(req).await
    }
    async fn renew(
        &self,
        req: &redlease::core::RenewRequest,
    ) -> Result<redlease::core::RenewOutcome, redlease::BackendError> {
        self.inner.renew(req).await
    }
    async fn release(
        &self,
        req: &redlease::core::ReleaseRequest,
    ) -> Result<redlease::core::ReleaseOutcome, redlease::BackendError> {
        self.inner.release(req).await
    }
    async fn remaining(
        &self,
        spec: &redlease::core::LeaseSpec,
        owner: &redlease::core::Owner,
    ) -> Result<Option<Duration>, redlease::BackendError> {
        self.inner.remaining(spec, owner).await
    }
    async fn inspect(
        &self,
        spec: &redlease::core::LeaseSpec,
    ) -> Result<redlease::core::LeaseInfo, redlease::BackendError> {
        self.inner.inspect(spec).await
    }
    fn release_watch(
        &self,
        spec: &redlease::core::LeaseSpec,
        role: redlease::core::WatchRole,
    ) -> Option<redlease::core::ReleaseWatch> {
        match self.notices {
            Notices::Dropped => None,
            Notices::Forwarded | Notices::FrozenMarks => self.inner.release_watch(spec, role),
        }
    }
    fn notice_mark(&self, spec: &redlease::core::LeaseSpec) -> Option<redlease::core::NoticeMark> {
        match self.notices {
            Notices::Dropped => None,
            Notices::Forwarded => self.inner.notice_mark(spec),
            Notices::FrozenMarks => self
                .inner
                .notice_mark(spec)
                .map(|m| redlease::core::NoticeMark::new(0, m.others_wait())),
        }
    }
}

/// Counts the waiter's acquire attempts once answered: a signal that the first one found
/// the lock held.
#[derive(Clone, Default)]
struct Attempts(Arc<tokio::sync::watch::Sender<u32>>);

#[redlease::async_trait]
impl Hooks for Attempts {
    async fn after(&self, call: &Call<'_>, _answer: &Answer<'_>) {
        if let Call::Acquire(_) = call {
            self.0.send_modify(|n| *n += 1);
        }
    }
}

/// Holds a lock with one backend, starts a waiter (polling every 20 s) behind the kit's
/// [`Wrapped`] around `inner` (around a [`Limited`] `inner` that drops notices when `bare`), releases once the
/// waiter's first attempt was answered (and `inner`'s subscriber is live for it, unless
/// bare), and returns whether the waiter obtained the lock within [`PROMPT`] of the release.
async fn woken_behind_wrapped(server: &RedisServer, bare: bool) -> bool {
    let key = if bare { "job-bare" } else { "job" };
    let a = Locker::new(connect(server).await);
    let inner = connect(server).await;
    let attempts = Attempts::default();
    let mut answered = attempts.0.subscribe();
    let held = a
        .obtain(key, Duration::from_secs(30), LockOptions::new())
        .await
        .unwrap();
    let notices = if bare {
        Notices::Dropped
    } else {
        Notices::Forwarded
    };
    let waiter = spawn_waiter(&inner, notices, attempts, key);
    tokio::time::timeout(EVENTUALLY, answered.wait_for(|n| *n >= 1))
        .await
        .expect("the waiter's first attempt")
        .unwrap();
    if !bare {
        wait_live(&inner, &channel(key)).await;
    }
    let released = Instant::now();
    held.release().await.unwrap();
    obtained_promptly(waiter, released)
        .await
        .unwrap_or_else(|| {
            let notices = inner.release_notices().unwrap();
            assert!(bare, "not woken: {:?}", notices.stats());
            assert!(!notices.is_live(&channel(key)), "no watch, no subscription");
            false
        })
}

/// Whether `waiter` obtained the lock within [`PROMPT`] of `released`; `None` when it did not
/// end within `PROMPT` (and some slack).
async fn obtained_promptly(
    waiter: tokio::task::JoinHandle<(Result<(), redlease::LockError>, Instant)>,
    released: Instant,
) -> Option<bool> {
    let (lock, at) = tokio::time::timeout(PROMPT + SLACK, waiter)
        .await
        .ok()?
        .unwrap();
    lock.expect("obtained");
    Some(at.duration_since(released) < PROMPT)
}

#[tokio::test]
async fn a_waiter_behind_the_kits_wrapper_is_woken_by_the_release_notice() {
    let server = RedisServer::start().await.expect("redis");
    assert!(woken_behind_wrapped(&server, false).await);
    // The negative control: behind a wrapper that keeps the default `release_watch` the
    // notices are dropped, and the waiter is left to its 20 s poll.
    assert!(!woken_behind_wrapped(&server, true).await);
}

/// Holds the waiter's first answered attempt (it found the lock held) until released: the
/// window between the attempt's mark and the registration of the waiter's watch.
#[derive(Clone)]
struct HoldFirstAnswer {
    answered: Arc<tokio::sync::Notify>,
    go: Arc<tokio::sync::Semaphore>,
    first: Arc<std::sync::atomic::AtomicBool>,
}

#[redlease::async_trait]
impl Hooks for HoldFirstAnswer {
    async fn after(&self, call: &Call<'_>, _answer: &Answer<'_>) {
        if let Call::Acquire(_) = call
            && self.first.swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            self.answered.notify_one();
            // Bounded: a test that never lets go fails on its own timeout, not here.
            let _ = tokio::time::timeout(EVENTUALLY, self.go.acquire()).await;
        }
    }
}

/// A waiter (polling every 20 s) whose watch is registered only after its first attempt: the
/// holder releases while that attempt's answer is held back (the notice arrives before the
/// watch exists; an observer of the same process keeps the channel subscribed). Returns
/// whether the waiter obtained the lock within [`PROMPT`] of the release; `frozen` gives it
/// marks that never move.
async fn woken_after_a_late_registration(server: &RedisServer, frozen: bool) -> bool {
    use redlease::LeaseBackend;
    use redlease::core::{LeaseSpec, WatchRole};

    let key = if frozen { "late-frozen" } else { "late" };
    let a = Locker::new(connect(server).await);
    let inner = connect(server).await;
    let held = a
        .obtain(key, Duration::from_secs(30), LockOptions::new())
        .await
        .unwrap();
    let spec = LeaseSpec::lock([key], None).unwrap();
    let mut observer = inner
        .release_watch(&spec, WatchRole::Observer)
        .expect("a watch");
    observer.activate();
    tokio::time::timeout(EVENTUALLY, observer.notified())
        .await
        .expect("the observer's subscription is confirmed");
    let hook = HoldFirstAnswer {
        answered: Arc::new(tokio::sync::Notify::new()),
        go: Arc::new(tokio::sync::Semaphore::new(0)),
        first: Arc::new(std::sync::atomic::AtomicBool::new(true)),
    };
    let (answered, go) = (Arc::clone(&hook.answered), Arc::clone(&hook.go));
    let notices = if frozen {
        Notices::FrozenMarks
    } else {
        Notices::Forwarded
    };
    let waiter = spawn_waiter(&inner, notices, hook, key);
    tokio::time::timeout(EVENTUALLY, answered.notified())
        .await
        .expect("the waiter's first attempt was answered");
    let released = Instant::now();
    held.release().await.unwrap();
    // The notice reached this process (the observer sees every notice) before the waiter's
    // watch exists.
    tokio::time::timeout(EVENTUALLY, observer.notified())
        .await
        .expect("the release's notice");
    go.add_permits(1);
    obtained_promptly(waiter, released)
        .await
        .unwrap_or_else(|| {
            let stats = inner.release_notices().unwrap().stats();
            assert!(frozen, "not woken: {stats:?}");
            false
        })
}

#[tokio::test]
async fn a_release_before_the_waiters_watch_is_registered_is_not_lost() {
    let server = RedisServer::start().await.expect("redis");
    assert!(woken_after_a_late_registration(&server, false).await);
    // The negative control: with marks that never move, the notice that came before the
    // watch is lost and the waiter is left to its 20 s poll.
    assert!(!woken_after_a_late_registration(&server, true).await);
}
