//! Shared helpers of the lock tests (`locks_*.rs`): a counting wrapper backend, lockers,
//! waits on keys and signals, a proxied backend.

use redlease::TokenScheme;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lease_testkit::proxy::FaultProxy;
use lease_testkit::redis::RedisServer;
use lease_testkit::wrap::{Answer, Call, Hooks, Wrapped};
use redis::aio::MultiplexedConnection;
use redlease::core::RenewOutcome;
use redlease::redis::RedisBackend;
use redlease::{LeaseBackend, LockError, LockOptions, Locker, RetryStrategy};
use tokio::sync::watch;

use super::{Backend, EVENTUALLY, backend};

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn linear(n: u64) -> RetryStrategy {
    RetryStrategy::linear(ms(n)).unwrap()
}

/// Scheduling slack on top of the protocol's bounds in the fault tests (a loaded 2-core
/// machine, debug builds): faults must end (loss, give-up, recovery) within a bound derived
/// from the TTL, intervals and timeouts plus this, not merely "eventually".
pub const SLACK: Duration = Duration::from_secs(2);

/// Asserts that `since.elapsed()` is at most `bound`.
pub fn within(since: std::time::Instant, bound: Duration, what: &str) {
    let took = since.elapsed();
    assert!(took <= bound, "{what} took {took:?}, more than {bound:?}");
}

/// Calls the lock driver made to the backend, as the backend saw them.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Acquire calls per owner (ownership token).
    pub acquires: BTreeMap<String, u32>,
    pub acquire_total: u32,
    /// Renew calls started.
    pub renews: u32,
    /// Renew calls that answered `Renewed` (and whose reply reached the driver).
    pub renews_ok: u32,
    pub releases: u32,
    pub remaining: u32,
}

impl Counts {
    pub fn acquires_of(&self, owner: &str) -> u32 {
        self.acquires.get(owner).copied().unwrap_or(0)
    }
}

/// Counts every call the lock driver makes (per owner for acquires). Counts are published on
/// a watch channel, so tests wait on them as signals. Clones share the counts.
#[derive(Clone, Debug)]
pub struct Counter {
    counts: Arc<watch::Sender<Counts>>,
}

impl Default for Counter {
    fn default() -> Self {
        Counter {
            counts: Arc::new(watch::channel(Counts::default()).0),
        }
    }
}

impl Counter {
    pub fn counts(&self) -> Counts {
        self.counts.borrow().clone()
    }

    /// Waits (bounded) until the counts satisfy `pred`.
    pub async fn wait_for(&self, what: &str, pred: impl FnMut(&Counts) -> bool) -> Counts {
        let mut rx = self.counts.subscribe();
        match tokio::time::timeout(EVENTUALLY, rx.wait_for(pred)).await {
            Ok(Ok(c)) => c.clone(),
            _ => panic!("timed out waiting for {what}; counts {:?}", self.counts()),
        }
    }
}

#[async_trait::async_trait]
impl Hooks for Counter {
    async fn before(&self, call: &Call<'_>) {
        match call {
            Call::Acquire(req) => self.counts.send_modify(|c| {
                *c.acquires.entry(req.owner.as_str().to_owned()).or_default() += 1;
                c.acquire_total += 1;
            }),
            Call::Renew(_) => self.counts.send_modify(|c| c.renews += 1),
            Call::Release(_) => self.counts.send_modify(|c| c.releases += 1),
            Call::Remaining(..) => self.counts.send_modify(|c| c.remaining += 1),
            Call::Inspect(_) => {}
        }
    }

    async fn after(&self, _call: &Call<'_>, answer: &Answer<'_>) {
        if let Answer::Renew(Ok(RenewOutcome::Renewed)) = answer {
            self.counts.send_modify(|c| c.renews_ok += 1);
        }
    }
}

/// A [`LeaseBackend`] that forwards to the backend it wraps and counts every call
/// ([`Counter`], reached through the wrapper).
pub type Counted<B> = Wrapped<B, Counter>;

/// A locker over a counting wrapper of a fresh connection to `server`.
pub async fn counted_locker(server: &RedisServer) -> (Locker<Counted<Backend>>, Counted<Backend>) {
    let b = Counted::new(backend(server).await);
    (Locker::new(b.clone()), b)
}

/// A plain locker over a fresh connection to `server`.
pub async fn locker(server: &RedisServer) -> Locker<Backend> {
    Locker::new(backend(server).await)
}

pub async fn exists(conn: &mut MultiplexedConnection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap();
    n == 1
}

/// Polls (bounded) until `key` is gone.
pub async fn wait_gone(conn: &mut MultiplexedConnection, key: &str) {
    let gone = tokio::time::timeout(EVENTUALLY, async {
        while exists(conn, key).await {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "{key} never disappeared");
}

/// Waits (bounded) for a cancellation token.
pub async fn fired(token: &redlease::CancellationToken, what: &str) {
    assert!(
        tokio::time::timeout(EVENTUALLY, token.cancelled())
            .await
            .is_ok(),
        "{what} never fired"
    );
}

/// A backend whose connection goes through `proxy`, with no client-side response timeout
/// (only the library bounds round trips).
pub async fn proxied(server: &RedisServer, proxy: &FaultProxy) -> Backend {
    let client = redis::Client::open(server.url_via(proxy.addr())).unwrap();
    let cfg = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    RedisBackend::new(
        client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .unwrap(),
    )
    .with_token_scheme(TokenScheme::Counter)
}

/// Loads the scripts (a fenced obtain and a release on another key, and a plain lock's cycle,
/// which probes for native commands once): a request whose reply
/// is lost then runs at the server as soon as it arrives, instead of answering NOSCRIPT to a
/// caller that stopped waiting (whose EVAL fallback is then never sent).
pub async fn warm_up<B: LeaseBackend>(locker: &Locker<B>) {
    let lock = locker
        .obtain(
            "warm-up",
            ms(10_000),
            LockOptions::new().fence_key("warm-up:fence"),
        )
        .await
        .unwrap();
    lock.release().await.unwrap();
    // The plain lock's path too: a backend probes once for native conditional commands on
    // its first unfenced single-key release, and that probe must not be a test's faulted call.
    let plain = locker
        .obtain("warm-up:plain", ms(10_000), LockOptions::new())
        .await
        .unwrap();
    plain.release().await.unwrap();
}

pub fn assert_not_obtained_by(err: &LockError, holder: &str) {
    match err {
        LockError::NotObtained { holder: Some(h) } => assert_eq!(h, holder),
        other => panic!("expected NotObtained by {holder:?}, got {other:?}"),
    }
}
