//! Server errors against a real Redis: permanent ones are refused at once (one attempt, no
//! retry loop, no auto-renew spin), transient ones are retried until they clear.
//!
//! Attempts are counted at the server (`INFO commandstats`: calls and rejected calls of
//! `EVALSHA`/`EVAL`), so "exactly one attempt" is what Redis saw, not what the client thinks.
//! Every lock here is fenced, so every attempt is a script.

mod common;

use redlease::TokenScheme;
use std::time::{Duration, Instant};

use common::{EVENTUALLY, raw};
use lease_testkit::redis::RedisServer;
use lease_testkit::wrap::{Answer, Call, Hooks, Wrapped};
use redis::aio::MultiplexedConnection;
use redlease::redis::RedisBackend;
use redlease::{
    BackendError, CancellationToken, Effect, ElectorError, LockError, LockOptions, Locker,
    RetryStrategy,
};

/// Counts acquire errors (a signal the tests wait on: while a script runs, Redis answers every
/// other command, `INFO` included, with BUSY).
#[derive(Clone)]
struct AcquireErrors {
    errors: std::sync::Arc<tokio::sync::watch::Sender<Vec<String>>>,
}

impl Default for AcquireErrors {
    fn default() -> Self {
        AcquireErrors {
            errors: std::sync::Arc::new(tokio::sync::watch::channel(Vec::new()).0),
        }
    }
}

impl AcquireErrors {
    /// Waits (bounded) until `n` acquire errors containing `code` were seen.
    async fn wait_errors(&self, code: &str, n: usize) {
        let mut rx = self.errors.subscribe();
        let seen = tokio::time::timeout(
            EVENTUALLY,
            rx.wait_for(|v| v.iter().filter(|e| e.contains(code)).count() >= n),
        )
        .await;
        assert!(
            matches!(seen, Ok(Ok(_))),
            "{n} {code} errors never came: {:?}",
            self.errors.borrow()
        );
    }
}

#[async_trait::async_trait]
impl Hooks for AcquireErrors {
    async fn after(&self, _call: &Call<'_>, answer: &Answer<'_>) {
        if let Answer::Acquire(Err(e)) = answer {
            self.errors.send_modify(|v| v.push(e.to_string()));
        }
    }
}

/// Forwards to the Redis backend and counts acquire errors ([`AcquireErrors`]).
type Watched = Wrapped<RedisBackend<MultiplexedConnection>, AcquireErrors>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn cmd<T: redis::FromRedisValue>(conn: &mut MultiplexedConnection, args: &[&str]) -> T {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query_async(conn).await.expect("raw command")
}

async fn backend_at(url: &str) -> RedisBackend<MultiplexedConnection> {
    let client = redis::Client::open(url).unwrap();
    RedisBackend::new(client.get_multiplexed_async_connection().await.unwrap())
        .with_token_scheme(TokenScheme::Counter)
}

/// Script calls Redis received since the last `CONFIG RESETSTAT` (executed or rejected).
async fn script_calls(conn: &mut MultiplexedConnection) -> u64 {
    let info: String = cmd(conn, &["INFO", "commandstats"]).await;
    let mut total = 0;
    for line in info.lines() {
        if !(line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:")) {
            continue;
        }
        for field in line.split(':').nth(1).unwrap_or("").split(',') {
            if let Some(n) = field
                .strip_prefix("calls=")
                .or_else(|| field.strip_prefix("rejected_calls="))
            {
                total += n.parse::<u64>().unwrap();
            }
        }
    }
    total
}

/// Loads the scripts (a fenced obtain and a release), so each later attempt is one EVALSHA.
async fn warm_up(locker: &Locker<RedisBackend<MultiplexedConnection>>) {
    locker
        .obtain(
            "{warm}:lock",
            ms(10_000),
            LockOptions::new().fence_key("{warm}:fence"),
        )
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Script calls Redis rejected (NOPERM, ...) since the last `CONFIG RESETSTAT`.
async fn rejected_script_calls(conn: &mut MultiplexedConnection) -> u64 {
    let info: String = cmd(conn, &["INFO", "commandstats"]).await;
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .flat_map(|l| l.split(':').nth(1).unwrap_or("").split(','))
        .filter_map(|f| f.strip_prefix("rejected_calls="))
        .map(|n| n.parse::<u64>().unwrap())
        .sum()
}

/// A contended-style obtain that would retry every 20 ms for 5 s if the error were transient.
fn patient() -> LockOptions {
    LockOptions::new()
        .retry(RetryStrategy::linear(ms(20)).unwrap())
        .wait(ms(5_000))
        .operation_timeout(ms(2_000))
}

/// Obtains `key` (fenced by `fence`) and expects a permanent refusal at once: `Refused`, the
/// server's message contains `code`, one script call reached the server, well before the wait.
async fn assert_refused_at_once(
    locker: &Locker<RedisBackend<MultiplexedConnection>>,
    stats: &mut MultiplexedConnection,
    key: &str,
    fence: &str,
    code: &str,
) {
    let _: () = cmd(stats, &["CONFIG", "RESETSTAT"]).await;
    let started = Instant::now();
    let err = locker
        .obtain(key, ms(10_000), patient().fence_key(fence))
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    match &err {
        LockError::Refused(e @ BackendError::Refused(msg)) => {
            assert!(msg.contains(code), "{code}: {msg}");
            assert_eq!(e.effect(), Effect::NotApplied);
            assert!(!e.is_transient());
        }
        // A corrupt fence key is refused by name (`code` is the key).
        LockError::Refused(e @ BackendError::Corrupt { key, .. }) => {
            assert_eq!(key, code);
            assert_eq!(e.effect(), Effect::NotApplied);
            assert!(!e.is_transient());
        }
        other => panic!("{code}: expected Refused, got {other:?}"),
    }
    assert!(
        elapsed < ms(2_500),
        "{code}: refused at once (the wait is 5 s), took {elapsed:?}"
    );
    assert_eq!(script_calls(stats).await, 1, "{code}: exactly one attempt");
}

/// WRONGTYPE (a lock key holding a hash) and a fence counter holding text: refused at once.
#[tokio::test]
async fn wrongtype_and_a_non_integer_counter_are_refused_at_once() {
    let server = common::redis().await;
    let mut conn = raw(&server).await;
    let locker = Locker::new(backend_at(&server.url()).await);
    warm_up(&locker).await;
    let _: () = cmd(&mut conn, &["HSET", "{p}:hash", "f", "v"]).await;
    assert_refused_at_once(&locker, &mut conn, "{p}:hash", "{p}:fence", "WRONGTYPE").await;
    let _: () = cmd(&mut conn, &["SET", "{p}:text-fence", "abc"]).await;
    assert_refused_at_once(
        &locker,
        &mut conn,
        "{p}:lock",
        "{p}:text-fence",
        "{p}:text-fence",
    )
    .await;
    // Nothing was written by either.
    let exists: i64 = cmd(&mut conn, &["EXISTS", "{p}:lock"]).await;
    assert_eq!(exists, 0);
}

/// NOPERM: an ACL user without the script commands. Locks are refused at once; an election
/// stops with `ElectorError::Refused` instead of retrying forever; an auto-renewed lock whose
/// renewals become refused is given up at once (no spin until the deadline).
#[tokio::test]
async fn noperm_is_refused_at_once_for_locks_elections_and_auto_renewal() {
    let server = common::redis().await;
    let mut conn = raw(&server).await;
    let _: () = cmd(
        &mut conn,
        &[
            "ACL", "SETUSER", "noscript", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval",
        ],
    )
    .await;
    let limited = backend_at(&server.url_for_user("noscript", "pw")).await;
    let locker = Locker::new(limited.clone());
    assert_refused_at_once(&locker, &mut conn, "{n}:lock", "{n}:fence", "NOPERM").await;

    let config = redlease::ElectionConfig::builder("{n}", "a")
        .ttl(ms(2_000))
        .build()
        .unwrap();
    let elector = redlease::Elector::new(limited, config);
    let started = Instant::now();
    let result = tokio::time::timeout(EVENTUALLY, elector.hold(CancellationToken::new()))
        .await
        .expect("the election stops by itself");
    match result {
        Err(ElectorError::Refused { error, .. }) => {
            assert!(error.to_string().contains("NOPERM"), "{error}");
        }
        other => panic!("expected ElectorError::Refused, got {other:?}"),
    }
    assert!(started.elapsed() < ms(2_500), "{:?}", started.elapsed());

    // A user that may run scripts until its permissions are revoked mid-lock.
    let _: () = cmd(
        &mut conn,
        &[
            "ACL", "SETUSER", "revoked", "on", ">pw", "~*", "&*", "+@all",
        ],
    )
    .await;
    let locker = Locker::new(backend_at(&server.url_for_user("revoked", "pw")).await);
    let lock = locker
        .obtain(
            "{n}:renewed",
            ms(10_000),
            LockOptions::new()
                .fence_key("{n}:fence2")
                .auto_renew(ms(100)),
        )
        .await
        .unwrap();
    let lost = lock.lost();
    let _: () = cmd(&mut conn, &["CONFIG", "RESETSTAT"]).await;
    let _: () = cmd(
        &mut conn,
        &["ACL", "SETUSER", "revoked", "-evalsha", "-eval"],
    )
    .await;
    let revoked = Instant::now();
    tokio::time::timeout(ms(3_000), lost.cancelled())
        .await
        .expect("given up at the first refused renewal, long before the 10 s deadline");
    assert!(revoked.elapsed() < ms(2_500), "{:?}", revoked.elapsed());
    // No spin: three renew intervals later, still exactly one refused script call.
    tokio::time::sleep(ms(300)).await;
    assert_eq!(
        rejected_script_calls(&mut conn).await,
        1,
        "one refused renewal, no spin"
    );
    assert!(!lock.held());
}

/// NOAUTH (no password given to a server that requires one) is refused at once; WRONGPASS
/// fails the connection at once with an error that is not transient.
#[tokio::test]
async fn noauth_and_wrongpass_are_refused_at_once() {
    let server = RedisServer::builder()
        .requirepass("secret")
        .start()
        .await
        .unwrap();
    let mut conn = raw(&server).await;
    let locker = Locker::new(backend_at(&server.url_without_auth()).await);
    let started = Instant::now();
    let err = locker
        .obtain("{a}:lock", ms(10_000), patient().fence_key("{a}:fence"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Refused(BackendError::Refused(m)) if m.contains("NOAUTH")),
        "{err:?}"
    );
    assert!(started.elapsed() < ms(2_500));
    let exists: i64 = cmd(&mut conn, &["EXISTS", "{a}:lock"]).await;
    assert_eq!(exists, 0);

    let wrong = format!("redis://:wrong@{}/", server.addr());
    let started = Instant::now();
    let e = redlease::redis::connect(&wrong).await.unwrap_err();
    assert!(started.elapsed() < ms(2_000));
    let b = e.into_backend_error();
    assert!(
        matches!(&b, BackendError::Refused(m) if m.contains("authentication failed")),
        "{b:?}"
    );
    assert!(!b.is_transient());
}

/// OOM under `noeviction` (a memory spike) is transient and not applied: a lock obtain keeps
/// retrying and an elector keeps contending (neither stops, as a permanent refusal would make
/// the whole fleet do); both succeed once memory is freed, and nothing was written meanwhile.
#[tokio::test]
async fn oom_under_noeviction_is_retried_until_memory_is_freed() {
    let server = RedisServer::builder()
        .maxmemory_policy("noeviction")
        .start()
        .await
        .unwrap();
    let mut conn = raw(&server).await;
    let watched = Watched::new(backend_at(&server.url()).await);
    let locker = Locker::new(watched.clone());
    // Load the scripts first: SCRIPT LOAD is refused under OOM as well.
    locker
        .obtain(
            "{m}:warm",
            ms(10_000),
            LockOptions::new().fence_key("{m}:f0"),
        )
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let _: () = cmd(&mut conn, &["CONFIG", "SET", "maxmemory", "1"]).await;
    let obtain = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .obtain(
                    "{m}:lock",
                    ms(10_000),
                    LockOptions::new()
                        .fence_key("{m}:fence")
                        .retry(RetryStrategy::linear(ms(20)).unwrap())
                        .wait(ms(15_000)),
                )
                .await
        })
    };
    let config = redlease::ElectionConfig::builder("{m}e", "a")
        .ttl(ms(1_000))
        .build()
        .unwrap();
    let elector = redlease::Elector::new(watched.clone(), config);
    let shutdown = CancellationToken::new();
    let run = {
        let elector = elector.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move { elector.hold(shutdown).await })
    };
    // Wait (bounded) until several attempts were answered OOM.
    watched.wait_errors("OOM", 4).await;
    assert!(!obtain.is_finished(), "the obtain still retries under OOM");
    assert!(!run.is_finished(), "the elector still contends under OOM");
    let exists: i64 = cmd(&mut conn, &["EXISTS", "{m}:lock", "{m}e:leader"]).await;
    assert_eq!(exists, 0, "nothing was written under OOM");
    let _: () = cmd(&mut conn, &["CONFIG", "SET", "maxmemory", "0"]).await;
    let lock = tokio::time::timeout(EVENTUALLY, obtain)
        .await
        .expect("obtained once memory was freed")
        .unwrap()
        .expect("obtained");
    assert!(lock.fence_token().is_some());
    let mut role = elector.subscribe();
    // (The watch's read guard is dropped at once: holding it would block the elector.)
    let elected = tokio::time::timeout(
        EVENTUALLY,
        role.wait_for(|s| matches!(s.role, redlease::Role::Leader(_))),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    assert!(elected, "elected once memory was freed");
    lock.release().await.unwrap();
    shutdown.cancel();
    let stopped = tokio::time::timeout(EVENTUALLY, run).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
}

/// BUSY (another client's script runs past the busy threshold) is transient: the obtain keeps
/// retrying, and succeeds once the script is killed.
#[tokio::test]
async fn busy_is_retried_until_it_clears() {
    let server = common::redis().await;
    let mut conn = raw(&server).await;
    let watched = Watched::new(backend_at(&server.url()).await);
    let locker = Locker::new(watched.clone());
    // Load the scripts while the server is free.
    locker
        .obtain(
            "{b}:warm",
            ms(10_000),
            LockOptions::new().fence_key("{b}:f0"),
        )
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let _: () = cmd(&mut conn, &["CONFIG", "SET", "busy-reply-threshold", "50"]).await;
    // A read-only endless script on its own connection (killable with SCRIPT KILL).
    let mut busy_conn = server
        .client()
        .unwrap()
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await
        .unwrap();
    let busy = tokio::spawn(async move {
        let r: redis::RedisResult<()> = redis::cmd("EVAL")
            .arg("while true do end")
            .arg(0)
            .query_async(&mut busy_conn)
            .await;
        r
    });
    // Wait (bounded) until the script runs past the threshold: other clients get BUSY now.
    let mut probe = raw(&server).await;
    let busy_now = tokio::time::timeout(EVENTUALLY, async {
        loop {
            let r: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut probe).await;
            match r {
                Err(e) if e.code() == Some("BUSY") => return,
                _ => tokio::time::sleep(ms(5)).await,
            }
        }
    })
    .await;
    assert!(busy_now.is_ok(), "the server never answered BUSY");
    let obtain = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .obtain(
                    "{b}:lock",
                    ms(10_000),
                    LockOptions::new()
                        .fence_key("{b}:fence")
                        .retry(RetryStrategy::linear(ms(20)).unwrap())
                        .wait(ms(15_000)),
                )
                .await
        })
    };
    // Wait (bounded) until several attempts were answered BUSY.
    watched.wait_errors("BUSY", 3).await;
    assert!(!obtain.is_finished(), "still retrying while BUSY");
    let mut killer = raw(&server).await;
    let _: () = cmd(&mut killer, &["SCRIPT", "KILL"]).await;
    let lock = tokio::time::timeout(EVENTUALLY, obtain)
        .await
        .expect("obtained after the script was killed")
        .unwrap()
        .expect("obtained");
    assert!(lock.fence_token().is_some());
    let killed = tokio::time::timeout(EVENTUALLY, busy)
        .await
        .unwrap()
        .unwrap();
    assert!(killed.is_err(), "the busy script was killed");
    lock.release().await.unwrap();
}

/// READONLY (a replica, as during a failover) is transient: retried until the replica is
/// promoted.
#[tokio::test]
async fn readonly_is_retried_until_the_replica_is_promoted() {
    let primary = common::redis().await;
    let replica = common::redis().await;
    let mut rconn = raw(&replica).await;
    let port = primary.port().to_string();
    let _: () = cmd(&mut rconn, &["REPLICAOF", "127.0.0.1", &port]).await;
    let locker = Locker::new(backend_at(&replica.url()).await);
    let obtain = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .obtain(
                    "{ro}:lock",
                    ms(10_000),
                    LockOptions::new()
                        .fence_key("{ro}:fence")
                        .retry(RetryStrategy::linear(ms(20)).unwrap())
                        .wait(ms(15_000)),
                )
                .await
        })
    };
    let retried = tokio::time::timeout(EVENTUALLY, async {
        loop {
            let info: String = cmd(&mut rconn, &["INFO", "errorstats"]).await;
            let n = info
                .lines()
                .find_map(|l| l.strip_prefix("errorstat_READONLY:count="))
                .map_or(0, |n| n.parse::<u64>().unwrap());
            if n >= 3 {
                return n;
            }
            tokio::time::sleep(ms(10)).await;
        }
    })
    .await
    .expect("attempts answered READONLY");
    assert!(retried >= 3);
    assert!(!obtain.is_finished(), "still retrying while READONLY");
    let _: () = cmd(&mut rconn, &["REPLICAOF", "NO", "ONE"]).await;
    let lock = tokio::time::timeout(EVENTUALLY, obtain)
        .await
        .expect("obtained after promotion")
        .unwrap()
        .expect("obtained");
    lock.release().await.unwrap();
}

/// A renewal refused with a permanent error ends the term at once (not at the deadline) with
/// `StepDownReason::Refused`, and the run stops with `ElectorError::Refused`.
#[tokio::test]
async fn an_election_whose_renewal_is_refused_steps_down_at_once_and_stops() {
    let server = common::redis().await;
    let mut conn = raw(&server).await;
    let _: () = cmd(
        &mut conn,
        &["ACL", "SETUSER", "leader", "on", ">pw", "~*", "&*", "+@all"],
    )
    .await;
    let recorder = common::Recorder::default();
    // TTL 6 s, renew every 2 s: the deadline is far from the first refused renewal.
    let config = redlease::ElectionConfig::builder("{rr}", "a")
        .ttl(ms(6_000))
        .build()
        .unwrap();
    let elector = redlease::Elector::builder(
        backend_at(&server.url_for_user("leader", "pw")).await,
        config,
    )
    .observer(recorder.clone())
    .build();
    let run = {
        let elector = elector.clone();
        tokio::spawn(async move { elector.hold(CancellationToken::new()).await })
    };
    common::wait_leader(&elector, EVENTUALLY).await;
    let _: () = cmd(
        &mut conn,
        &["ACL", "SETUSER", "leader", "-evalsha", "-eval"],
    )
    .await;
    let revoked = Instant::now();
    let result = tokio::time::timeout(EVENTUALLY, run)
        .await
        .expect("the run stops by itself")
        .unwrap();
    // The next renewal is due within one renew interval (2 s); the deadline is 6 s away.
    assert!(
        revoked.elapsed() < ms(2_000) + ms(2_000),
        "{:?}",
        revoked.elapsed()
    );
    match result {
        Err(ElectorError::Refused { op, error }) => {
            assert_eq!(op, redlease::Op::Renew);
            assert!(error.to_string().contains("NOPERM"), "{error}");
        }
        other => panic!("expected ElectorError::Refused, got {other:?}"),
    }
    assert!(
        recorder
            .events()
            .iter()
            .any(|e| e.starts_with("stepped_down") && e.ends_with("Refused")),
        "{:?}",
        recorder.events()
    );
    // The observer heard the refusal itself too, once.
    assert_eq!(
        recorder
            .events()
            .iter()
            .filter(|e| *e == "refused Renew false")
            .count(),
        1,
        "{:?}",
        recorder.events()
    );
    assert!(!elector.is_leader());
}

/// A corrupt fence epoch (issue 27): the election stops at once with
/// `ElectorError::Refused` carrying `BackendError::Corrupt` that names the epoch key, after one
/// attempt; nothing is minted and the leader key is never written. (It used to be granted, the
/// reply then failed to parse as a transient error, and the elector retried forever, minting
/// a token each time.)
#[tokio::test]
async fn a_corrupt_fence_epoch_stops_an_election_at_once() {
    let server = common::redis().await;
    let mut conn = raw(&server).await;
    let _: () = cmd(&mut conn, &["SET", "{ce}:fence", "41"]).await;
    let _: () = cmd(&mut conn, &["SET", "{ce}:fence:epoch", "not-microseconds"]).await;
    let _: () = cmd(&mut conn, &["CONFIG", "RESETSTAT"]).await;
    let config = redlease::ElectionConfig::builder("{ce}", "a")
        .ttl(ms(2_000))
        .build()
        .unwrap();
    let elector = redlease::Elector::new(backend_at(&server.url()).await, config);
    let started = Instant::now();
    let result = tokio::time::timeout(EVENTUALLY, elector.hold(CancellationToken::new()))
        .await
        .expect("the election stops by itself");
    match result {
        Err(ElectorError::Refused { error, .. }) => {
            assert!(
                matches!(&error, BackendError::Corrupt { key, .. } if key == "{ce}:fence:epoch"),
                "{error:?}"
            );
            assert_eq!(error.effect(), Effect::NotApplied);
        }
        other => panic!("expected ElectorError::Refused, got {other:?}"),
    }
    assert!(started.elapsed() < ms(2_500), "{:?}", started.elapsed());
    let counter: String = cmd(&mut conn, &["GET", "{ce}:fence"]).await;
    assert_eq!(counter, "41", "nothing minted");
    let exists: i64 = cmd(&mut conn, &["EXISTS", "{ce}:leader"]).await;
    assert_eq!(exists, 0);
    // One acquire attempt (and the release of whatever it may have taken).
    let calls = script_calls(&mut conn).await;
    assert!(calls <= 3, "{calls} script calls");
}
