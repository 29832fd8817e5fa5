//! Truthful outcomes under faults, against a real Redis behind the kit's fault proxy.
//!
//! A call whose request may have reached the server and whose reply was not seen must say
//! *outcome unknown*, never *not applied*; *not applied* is only for what provably never
//! reached the server (a refused connection) or what the server refused. Each test makes the
//! server apply a request whose reply is then lost ([`Mode::DropReplies`]: requests are
//! forwarded, replies held), and checks both what the caller heard and what the server holds.

mod common;

use redlease::TokenScheme;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Backend, EVENTUALLY, get, pttl, raw};
use lease_testkit::proxy::{FaultProxy, Mode};
use lease_testkit::redis::RedisServer;
use lease_testkit::wrap::{Answer, Call, Hooks, Wrapped};
use redis::aio::MultiplexedConnection;
use redlease::core::{AcquireRequest, LeaseSpec, Owner, Ttl};
use redlease::redis::RedisBackend;
use redlease::{
    BackendError, Effect, Fencing, LeaseBackend, LockError, LockOptions, Locker, Token,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A backend through `proxy`; `response_timeout` is the connection's own (None: only the
/// library bounds calls).
async fn proxied(
    server: &RedisServer,
    proxy: &FaultProxy,
    response_timeout: Option<Duration>,
) -> Backend {
    let client = redis::Client::open(server.url_via(proxy.addr())).unwrap();
    let cfg = redis::AsyncConnectionConfig::new().set_response_timeout(response_timeout);
    RedisBackend::new(
        client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .unwrap(),
    )
    .with_token_scheme(TokenScheme::Counter)
}

/// Loads every script through `backend` while the network is healthy: a request whose reply
/// is lost then runs at once, instead of answering NOSCRIPT to a caller that stopped waiting.
async fn warm_up(backend: &Backend) {
    let locker = Locker::new(backend.clone());
    let lock = locker
        .obtain(
            "warm",
            ms(10_000),
            LockOptions::new().fence_key("warm:fence"),
        )
        .await
        .unwrap();
    lock.refresh(ms(10_000)).await.unwrap();
    let f = backend.fencer("warm:fence:applied", lock.fence_token().unwrap());
    assert!(f.set("warm:v", "1").await.unwrap().is_applied());
    lock.release().await.unwrap();
    // The plain lock's path too: the backend probes once for native conditional commands
    // (lease-redis `native.rs`) on its first unfenced single-key renewal or release; the
    // probe must not be the call whose reply a test drops.
    let plain = locker
        .obtain("warm:plain", ms(10_000), LockOptions::new())
        .await
        .unwrap();
    plain.refresh(ms(10_000)).await.unwrap();
    plain.release().await.unwrap();
}

/// Polls (bounded) until `key` holds `want`.
async fn wait_value(conn: &mut MultiplexedConnection, key: &str, want: Option<&str>) {
    let ok = tokio::time::timeout(EVENTUALLY, async {
        while get(conn, key).await.as_deref() != want {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    assert!(ok.is_ok(), "{key} never became {want:?}");
}

/// Issue defect 1: a fenced write that timed out was reported as not applied, but was
/// applied. With the connection's own response timeout (what redis-rs gives by default) and
/// with the fencer's timeout, the write lands and the caller hears "unknown".
#[tokio::test]
async fn a_fenced_write_whose_reply_is_lost_is_applied_and_reported_unknown() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let mut conn = raw(&server).await;
    for (case, response_timeout, fence_timeout) in [
        ("connection response timeout", Some(ms(300)), ms(5_000)),
        ("fencer timeout", None, ms(300)),
    ] {
        proxy.set_mode(Mode::Pass);
        let backend = proxied(&server, &proxy, response_timeout).await;
        warm_up(&backend).await;
        let fencer = backend
            .fencer("{w}:fence:applied", Token::new(5).unwrap())
            .with_timeout(fence_timeout);
        proxy.set_mode(Mode::DropReplies);
        let started = Instant::now();
        let err = fencer.set("{w}:v", case).await.unwrap_err();
        assert!(err.is_outcome_unknown(), "{case}: {err:?}");
        assert_eq!(err.effect(), Effect::Unknown, "{case}");
        assert!(started.elapsed() < ms(3_000), "{case}: bounded");
        // It was applied, with the mark advanced atomically with it.
        assert_eq!(get(&mut conn, "{w}:v").await.as_deref(), Some(case));
        assert_eq!(
            get(&mut conn, "{w}:fence:applied").await.as_deref(),
            Some("5")
        );
    }
    // The control: a connection that cannot be made is "not applied", and nothing was.
    proxy.set_mode(Mode::Pass);
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let refused = redis::Client::open(server.url_via(dead))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap_err();
    let b = redlease::redis::backend_error(refused);
    assert_eq!(b.effect(), Effect::NotApplied, "{b:?}");
    assert!(matches!(b, BackendError::Unavailable(_)), "{b:?}");
}

/// Acquire with its reply lost: the lock is taken at the server (its fence counter moved), the
/// caller hears "unknown" (never "unavailable"), also as the last cause of a wait deadline,
/// and the cleanup started for the unknown outcome deletes the key.
#[tokio::test]
async fn an_obtain_whose_reply_is_lost_is_applied_reported_unknown_and_cleaned_up() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let backend = proxied(&server, &proxy, None).await;
    warm_up(&backend).await;
    let locker = Locker::new(backend.clone());
    let mut conn = raw(&server).await;

    proxy.set_mode(Mode::DropReplies);
    let err = locker
        .obtain(
            "{o}:lock",
            ms(10_000),
            LockOptions::new()
                .fence_key("{o}:fence")
                .owner("attempt-1")
                .operation_timeout(ms(300))
                .wait(Duration::ZERO),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::OutcomeUnknown(_)), "{err:?}");
    assert!(err.is_outcome_unknown());
    assert_eq!(
        get(&mut conn, "{o}:fence").await.as_deref(),
        Some("1"),
        "applied"
    );

    // Retries after the unknown attempt that are themselves unknown, until the deadline: the
    // result stays "unknown" (the lock may be ours), whatever the last attempt saw.
    let err = locker
        .obtain(
            "{o}:lock2",
            ms(10_000),
            LockOptions::new()
                .fence_key("{o}:fence2")
                .owner("attempt-2")
                .retry(redlease::RetryStrategy::linear(ms(50)).unwrap())
                .operation_timeout(ms(200))
                .wait(ms(600)),
        )
        .await
        .unwrap_err();
    assert!(err.is_outcome_unknown(), "{err:?}");
    assert!(
        matches!(&err, LockError::DeadlineExceeded { last } if matches!(**last, LockError::OutcomeUnknown(_))),
        "{err:?}"
    );
    let minted: i64 = get(&mut conn, "{o}:fence2").await.unwrap().parse().unwrap();
    assert!(
        minted >= 2,
        "several attempts were applied: counter {minted}"
    );

    // The cleanups (compare-and-delete with each attempt's token) reach the server too.
    wait_value(&mut conn, "{o}:lock", None).await;
    wait_value(&mut conn, "{o}:lock2", None).await;
}

/// Release with its reply lost: the key is deleted at the server, the caller hears "unknown".
#[tokio::test]
async fn a_release_whose_reply_is_lost_is_applied_and_reported_unknown() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let backend = proxied(&server, &proxy, None).await;
    warm_up(&backend).await;
    let locker = Locker::new(backend);
    let lock = locker
        .obtain(
            "{r}:lock",
            ms(10_000),
            LockOptions::new()
                .fence_key("{r}:fence")
                .operation_timeout(ms(300)),
        )
        .await
        .unwrap();
    let mut conn = raw(&server).await;
    proxy.set_mode(Mode::DropReplies);
    let err = lock.release().await.unwrap_err();
    assert!(matches!(err, LockError::OutcomeUnknown(_)), "{err:?}");
    assert_eq!(get(&mut conn, "{r}:lock").await, None, "it was applied");
}

/// Refresh with its reply lost: the server applied the shorter TTL; the caller hears
/// "unknown", and the lock's local deadline is shortened as if it had applied (it must never
/// exceed what the server may have been told).
#[tokio::test]
async fn a_refresh_whose_reply_is_lost_is_unknown_and_shortens_the_local_deadline() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let backend = proxied(&server, &proxy, None).await;
    warm_up(&backend).await;
    let locker = Locker::new(backend);
    let lock = locker
        .obtain(
            "{f}:lock",
            ms(60_000),
            LockOptions::new().operation_timeout(ms(300)),
        )
        .await
        .unwrap();
    let mut conn = raw(&server).await;
    proxy.set_mode(Mode::DropReplies);
    let err = lock.refresh(ms(5_000)).await.unwrap_err();
    assert!(matches!(err, LockError::OutcomeUnknown(_)), "{err:?}");
    let local = lock.valid_until();
    let server_ttl = pttl(&mut conn, "{f}:lock").await;
    assert!(
        (0..=5_000).contains(&server_ttl),
        "applied: PTTL {server_ttl}"
    );
    // The server's expiry, estimated after the PTTL reply (never earlier than the real one
    // by more than PTTL's 1 ms truncation): the local deadline is not after it.
    let server_expiry = tokio::time::Instant::now() + ms(server_ttl as u64);
    assert!(
        local <= server_expiry + ms(2),
        "local deadline {:?} after the server's",
        local.saturating_duration_since(server_expiry)
    );
    assert!(lock.held(), "still held until the shorter deadline");
    proxy.set_mode(Mode::Pass);
}

/// A connection reset while a request is in flight: unknown, and the request was applied.
#[tokio::test]
async fn a_connection_reset_mid_request_is_unknown() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let backend = proxied(&server, &proxy, None).await;
    warm_up(&backend).await;
    let spec = Arc::new(LeaseSpec::lock(["{c}:lock"], Some("{c}:fence".into())).unwrap());
    let req = AcquireRequest::new(
        spec,
        Owner::new("me").unwrap(),
        Ttl::new(ms(10_000)).unwrap(),
    );
    proxy.set_mode(Mode::DropReplies);
    let call = {
        let backend = backend.clone();
        tokio::spawn(async move { backend.acquire(&req).await })
    };
    let mut conn = raw(&server).await;
    wait_value(&mut conn, "{c}:lock", Some("me")).await;
    proxy.reset_all().await;
    let err = tokio::time::timeout(EVENTUALLY, call)
        .await
        .expect("the reset ends the call")
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, BackendError::OutcomeUnknown(_)), "{err:?}");
    assert!(err.is_transient());
    proxy.set_mode(Mode::Pass);
}

/// Issue defect 7: `redlease::redis::connect` sets no response timeout of its own (redis-rs's
/// default was 500 ms); the library bounds each call, so a slow reply (700 ms) within the
/// caller's bound (the fencer's, 5 s) is heard instead of being cut short into "unknown".
#[tokio::test]
async fn connect_leaves_bounds_to_the_library() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let backend = redlease::redis::connect(&server.url_via(proxy.addr()))
        .await
        .unwrap();
    let f = backend
        .fencer("{s}:fence:applied", Token::new(1).unwrap())
        .with_timeout(ms(5_000));
    assert!(f.set("{s}:warm", 1).await.unwrap().is_applied());
    // Each direction delayed 350 ms: a 700 ms round trip, past redis-rs's old default.
    proxy.set_mode(Mode::Latency(ms(350)));
    let started = Instant::now();
    let outcome = f.set("{s}:v", "slow").await.unwrap();
    assert!(outcome.is_applied());
    assert!(started.elapsed() >= ms(700), "the latency was applied");
}

/// Delays the *replies* of renewals with the auto-renew TTL (the server has applied them):
/// a slow reply path, as on a loaded runtime. Counts renewals applied at the server.
#[derive(Clone)]
struct SlowRenewReplies {
    ttl: Duration,
    delay: Duration,
    applied: Arc<tokio::sync::watch::Sender<u32>>,
}

#[async_trait::async_trait]
impl Hooks for SlowRenewReplies {
    async fn after(&self, call: &Call<'_>, _answer: &Answer<'_>) {
        if let Call::Renew(req) = call
            && req.ttl.get() == self.ttl
        {
            self.applied.send_modify(|n| *n += 1);
            tokio::time::sleep(self.delay).await;
        }
    }
}

/// Issue defect 4: an explicit `refresh` to a shorter TTL raced the auto-renewer: its PEXPIRE
/// landed after an in-flight renewal, whose (later) reply then set the local deadline to the
/// renewal's longer one, so the lock believed it was held after Redis would expire it. Now a
/// refresh waits for the renewal in flight, and the local deadline never exceeds the server's
/// expiry (checked every few ms while the renewal's reply and the refresh complete).
#[tokio::test]
async fn a_refresh_racing_auto_renewal_never_leaves_the_local_deadline_past_the_server() {
    let server = common::redis().await;
    let long = ms(10_000);
    let slow = Wrapped::with_hooks(
        common::backend(&server).await,
        SlowRenewReplies {
            ttl: long,
            delay: ms(200),
            applied: Arc::new(tokio::sync::watch::channel(0).0),
        },
    );
    let locker = Locker::new(slow.clone());
    let lock = Arc::new(
        locker
            .obtain(
                "{race}:lock",
                long,
                LockOptions::new().auto_renew(ms(1_000)),
            )
            .await
            .unwrap(),
    );
    let mut conn = raw(&server).await;
    // The first renewal is sent at once: wait until the server has applied it (its reply is
    // now held back for 200 ms), then refresh to a shorter TTL.
    let mut applied = slow.applied.subscribe();
    tokio::time::timeout(EVENTUALLY, applied.wait_for(|n| *n >= 1))
        .await
        .expect("a renewal reached the server")
        .unwrap();
    let refresh = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.refresh(ms(3_000)).await })
    };
    // For 600 ms (the held reply, the refresh, and after), the local deadline never passes
    // the server's expiry.
    let until = tokio::time::Instant::now() + ms(600);
    let mut checks = 0;
    while tokio::time::Instant::now() < until {
        // The server's expiry read on both sides of the local one: a refresh may lower it and
        // a renewal raise it between two reads, so the local deadline must not pass the later
        // of the two (the server's expiry is estimated after each PTTL reply, never earlier
        // than the real one by more than PTTL's 1 ms truncation).
        let before = pttl(&mut conn, "{race}:lock").await;
        let expiry_before = tokio::time::Instant::now() + ms(before.max(0) as u64);
        let local = lock.valid_until();
        let after = pttl(&mut conn, "{race}:lock").await;
        let expiry_after = tokio::time::Instant::now() + ms(after.max(0) as u64);
        assert!(before > 0 && after > 0, "held at the server");
        let server_expiry = expiry_before.max(expiry_after);
        assert!(
            local <= server_expiry + ms(20),
            "local deadline {:?} past the server's expiry (PTTL {before} then {after} ms)",
            local.saturating_duration_since(server_expiry)
        );
        checks += 1;
        tokio::time::sleep(ms(5)).await;
    }
    assert!(
        checks >= 3,
        "the invariant was checked while the race played out"
    );
    tokio::time::timeout(EVENTUALLY, refresh)
        .await
        .expect("refresh returns")
        .unwrap()
        .expect("refreshed");
    let left = pttl(&mut conn, "{race}:lock").await;
    assert!(left <= 3_000, "the refresh applied last: PTTL {left}");
}

/// A cancelled obtain (its future dropped while the attempt is in flight, as the CLI does on
/// SIGINT) whose attempt the server applied cleans up after itself: the key is deleted long
/// before its TTL.
#[tokio::test]
async fn a_cancelled_obtain_cleans_up_what_it_may_hold() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let backend = proxied(&server, &proxy, None).await;
    warm_up(&backend).await;
    let locker = Locker::new(backend);
    let mut conn = raw(&server).await;
    proxy.set_mode(Mode::DropReplies);
    let obtain = tokio::spawn(async move {
        locker
            .obtain(
                "{x}:lock",
                ms(60_000),
                LockOptions::new()
                    .fence_key("{x}:fence")
                    .operation_timeout(ms(30_000)),
            )
            .await
    });
    // Applied at the server, the reply held: now the caller gives up.
    let applied = tokio::time::timeout(EVENTUALLY, async {
        while get(&mut conn, "{x}:fence").await.is_none() {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    assert!(applied.is_ok(), "the attempt reached the server");
    assert!(get(&mut conn, "{x}:lock").await.is_some());
    obtain.abort();
    assert!(
        tokio::time::timeout(EVENTUALLY, obtain)
            .await
            .unwrap()
            .is_err()
    );
    // The cleanup's request also reaches the server (only replies are held).
    wait_value(&mut conn, "{x}:lock", None).await;
    proxy.set_mode(Mode::Pass);
}

/// After a refresh to a long TTL, an auto-renewal (shorter TTL) whose reply is lost may have
/// told the server the shorter expiry: the local deadline comes down to it, and the loss
/// signal fires by then — not at the refresh's far deadline.
#[tokio::test]
async fn an_unanswered_renewal_after_a_longer_refresh_brings_the_deadline_down() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let backend = proxied(&server, &proxy, None).await;
    warm_up(&backend).await;
    let locker = Locker::new(backend);
    let lock = locker
        .obtain(
            "{d}:lock",
            ms(2_000),
            LockOptions::new()
                .auto_renew(ms(500))
                .operation_timeout(ms(300)),
        )
        .await
        .unwrap();
    lock.refresh(ms(60_000)).await.unwrap();
    assert!(lock.valid_until() > tokio::time::Instant::now() + ms(50_000));
    let lost = lock.lost();
    proxy.set_mode(Mode::DropReplies);
    let cut = tokio::time::Instant::now();
    // The next renewal (within 500 ms) tells the server 2 s and gets no answer.
    tokio::time::timeout(ms(10_000), lost.cancelled())
        .await
        .expect("lost by the renewal's 2 s expiry, not the refresh's 60 s");
    assert!(
        cut.elapsed() < ms(500) + ms(2_000) + ms(2_000),
        "{:?}",
        cut.elapsed()
    );
    assert!(!lock.held());
    proxy.set_mode(Mode::Pass);
}
