//! Lease semantics of `RedisBackend` against a real Redis server.

mod common;

use lease_core::TokenScheme;
use std::time::Duration;

use common::*;
use lease_core::{
    AcquireOutcome, BackendError, FenceMark, LeaseBackend, ReleaseOutcome, RenewOutcome,
};
use lease_redis::{HealingConnection, RedisBackend};
use lease_testkit::redis::{Persistence, RedisServer};

#[tokio::test]
async fn acquire_renew_remaining_release_roundtrip() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{jobs}");
    let got = b.acquire(&acq(&spec, "a")).await.unwrap();
    assert_eq!(acquired_token(&got), Some(token(1)));
    assert_eq!(get(&mut raw, "{jobs}:leader").await.as_deref(), Some("a"));
    assert_eq!(get(&mut raw, "{jobs}:fence").await.as_deref(), Some("1"));
    assert_eq!(
        get(&mut raw, "{jobs}:fence:applied").await.as_deref(),
        Some("1")
    );
    let p = pttl(&mut raw, "{jobs}:leader").await;
    assert!(p > 0 && p <= LONG as i64, "PX set: {p}");

    assert_eq!(
        b.renew(&renew(&spec, "a")).await.unwrap(),
        RenewOutcome::Renewed
    );
    let rem = b.remaining(&spec, &owner("a")).await.unwrap().unwrap();
    assert!(rem > Duration::ZERO && rem <= Duration::from_millis(LONG));
    assert_eq!(b.remaining(&spec, &owner("b")).await.unwrap(), None);

    let info = b.inspect(&spec).await.unwrap();
    assert_eq!(info.holder.as_deref(), Some("a"));
    assert_eq!(info.metadata.as_deref(), Some(""));
    assert_eq!(info.counter, Some(token(1)));
    assert_eq!(info.mark, FenceMark::at(token(1)));

    assert_eq!(
        b.release(&release(&spec, "a", None)).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert!(!exists(&mut raw, "{jobs}:leader").await);
    let info = b.inspect(&spec).await.unwrap();
    assert_eq!(info.holder, None);
    assert_eq!(
        info.counter,
        Some(token(1)),
        "the counter survives a release"
    );
    assert_eq!(
        b.renew(&renew(&spec, "a")).await.unwrap(),
        RenewOutcome::NotHeld
    );
    assert_eq!(
        b.release(&release(&spec, "a", None)).await.unwrap(),
        ReleaseOutcome::NotHeld
    );
}

#[tokio::test]
async fn held_lease_reports_holder_and_changes_only_the_waiter_mark() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{jobs}");
    b.acquire(&acq_meta(&spec, "a", "host=1")).await.unwrap();
    let got = b.acquire(&acq(&spec, "b")).await.unwrap();
    match got {
        AcquireOutcome::Held {
            holder, remaining, ..
        } => {
            assert_eq!(holder.as_deref(), Some("a"), "owner part only, no metadata");
            let r = remaining.unwrap();
            assert!(r > Duration::ZERO && r <= Duration::from_millis(LONG));
        }
        other => panic!("{other:?}"),
    }
    // The holder's value gains only the waiter mark (docs/handover.md), TTL kept.
    assert_eq!(
        get(&mut raw, "{jobs}:leader").await.as_deref(),
        Some("a\0host=1\0w")
    );
    assert!(pttl(&mut raw, "{jobs}:leader").await > (LONG as i64) - 5_000);
    assert_eq!(get(&mut raw, "{jobs}:fence").await.as_deref(), Some("1"));
    let info = b.inspect(&spec).await.unwrap();
    assert_eq!(info.metadata.as_deref(), Some("host=1"));
}

#[tokio::test]
async fn same_owner_takeover_mints_a_fresh_token_and_refreshes_ttl() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{jobs}");
    let t1 = acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap()).unwrap();
    // Shorten the TTL to see the takeover refresh it.
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("{jobs}:leader")
        .arg(5000)
        .query_async(&mut raw)
        .await
        .unwrap();
    let t2 = acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap()).unwrap();
    assert!(t2 > t1, "a takeover is a new term: {t1} -> {t2}");
    assert_eq!(t2, token(2));
    assert_eq!(
        get(&mut raw, "{jobs}:fence:applied").await.as_deref(),
        Some("2")
    );
    assert!(pttl(&mut raw, "{jobs}:leader").await > 5000);
}

#[tokio::test]
async fn counter_heals_from_the_mark() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{jobs}");
    b.acquire(&acq(&spec, "a")).await.unwrap();
    b.release(&release(&spec, "a", None)).await.unwrap();
    // The counter is lost (eviction, restart from an old snapshot); the mark is ahead.
    del(&mut raw, "{jobs}:fence").await;
    set(&mut raw, "{jobs}:fence:applied", "41").await;
    let t = acquired_token(&b.acquire(&acq(&spec, "b")).await.unwrap()).unwrap();
    assert_eq!(t, token(42), "never mints at or below an applied token");
    assert_eq!(get(&mut raw, "{jobs}:fence").await.as_deref(), Some("42"));
    assert_eq!(
        get(&mut raw, "{jobs}:fence:applied").await.as_deref(),
        Some("42")
    );
    // A counter restored lower than the mark heals the same way.
    b.release(&release(&spec, "b", None)).await.unwrap();
    set(&mut raw, "{jobs}:fence", "7").await;
    let t = acquired_token(&b.acquire(&acq(&spec, "c")).await.unwrap()).unwrap();
    assert_eq!(t, token(43));
}

#[tokio::test]
async fn owners_match_exactly_never_by_prefix() {
    let (_server, b, mut raw) = setup().await;
    let spec = lock(&["{l}k"], None);
    b.acquire(&acq(&spec, "abc")).await.unwrap();
    assert_eq!(
        b.renew(&renew(&spec, "ab")).await.unwrap(),
        RenewOutcome::NotHeld
    );
    assert_eq!(
        b.release(&release(&spec, "ab", None)).await.unwrap(),
        ReleaseOutcome::NotHeld
    );
    assert_eq!(b.remaining(&spec, &owner("ab")).await.unwrap(), None);
    assert!(matches!(
        b.acquire(&acq(&spec, "ab")).await.unwrap(),
        AcquireOutcome::Held { .. }
    ));
    assert_eq!(get(&mut raw, "{l}k").await.as_deref(), Some("abc\0\0w"));

    // Metadata after a NUL: the owner part is "abc"; "ab" still does not match, "abc" does.
    b.release(&release(&spec, "abc", None)).await.unwrap();
    b.acquire(&acq_meta(&spec, "abc", "meta")).await.unwrap();
    assert_eq!(get(&mut raw, "{l}k").await.as_deref(), Some("abc\0meta"));
    assert_eq!(
        b.renew(&renew(&spec, "ab")).await.unwrap(),
        RenewOutcome::NotHeld
    );
    assert_eq!(
        b.release(&release(&spec, "ab", None)).await.unwrap(),
        ReleaseOutcome::NotHeld
    );
    assert!(exists(&mut raw, "{l}k").await);
    assert_eq!(
        b.renew(&renew(&spec, "abc")).await.unwrap(),
        RenewOutcome::Renewed
    );

    // A stored value "ab\0meta" belongs to "ab", not to "a".
    set(&mut raw, "{l}k", "ab\0meta").await;
    assert_eq!(
        b.renew(&renew(&spec, "a")).await.unwrap(),
        RenewOutcome::NotHeld
    );
    assert_eq!(
        b.renew(&renew(&spec, "ab")).await.unwrap(),
        RenewOutcome::Renewed
    );
}

#[tokio::test]
async fn multi_key_locks_are_all_or_nothing() {
    let (_server, b, mut raw) = setup().await;
    let spec = lock(&["{m}1", "{m}2", "{m}3"], Some("{m}f"));
    let other = lock(&["{m}2"], None);
    b.acquire(&acq(&other, "b")).await.unwrap();

    match b.acquire(&acq(&spec, "a")).await.unwrap() {
        AcquireOutcome::Held { holder, .. } => assert_eq!(holder.as_deref(), Some("b")),
        o => panic!("{o:?}"),
    }
    assert!(!exists(&mut raw, "{m}1").await, "checked before any change");
    assert!(!exists(&mut raw, "{m}3").await);
    assert!(!exists(&mut raw, "{m}f").await, "no token minted");

    // Renew needs every key: with {m}1 and {m}3 ours and {m}2 someone else's, nothing moves.
    set(&mut raw, "{m}1", "a").await;
    set(&mut raw, "{m}3", "a").await;
    assert_eq!(
        b.renew(&renew(&spec, "a")).await.unwrap(),
        RenewOutcome::NotHeld
    );
    assert_eq!(
        pttl(&mut raw, "{m}1").await,
        -1,
        "no PEXPIRE on a partial renew"
    );
    assert_eq!(b.remaining(&spec, &owner("a")).await.unwrap(), None);

    // Release deletes exactly our keys and reports NotHeld.
    assert_eq!(
        b.release(&release(&spec, "a", None)).await.unwrap(),
        ReleaseOutcome::NotHeld
    );
    assert!(!exists(&mut raw, "{m}1").await);
    assert!(!exists(&mut raw, "{m}3").await);
    // Marked by the failed attempt on it.
    assert_eq!(get(&mut raw, "{m}2").await.as_deref(), Some("b\0\0w"));

    b.release(&release(&other, "b", None)).await.unwrap();
    let t = acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap());
    assert_eq!(t, Some(token(1)));
    for k in ["{m}1", "{m}2", "{m}3"] {
        assert_eq!(get(&mut raw, k).await.as_deref(), Some("a"));
    }
    // Remaining is the minimum over the keys.
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("{m}2")
        .arg(5000)
        .query_async(&mut raw)
        .await
        .unwrap();
    let rem = b.remaining(&spec, &owner("a")).await.unwrap().unwrap();
    assert!(rem <= Duration::from_millis(5000), "{rem:?}");
    assert_eq!(
        b.release(&release(&spec, "a", None)).await.unwrap(),
        ReleaseOutcome::Released
    );
}

#[tokio::test]
async fn token_past_2_pow_53_is_refused_without_writing() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{x}");
    set(&mut raw, "{x}:fence", "9007199254740991").await;
    let t = acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap()).unwrap();
    assert_eq!(t.get(), 1 << 53, "2^53 itself is the last valid token");
    assert_eq!(
        get(&mut raw, "{x}:fence:applied").await.as_deref(),
        Some("9007199254740992")
    );
    b.release(&release(&spec, "a", None)).await.unwrap();

    let err = b.acquire(&acq(&spec, "b")).await.unwrap_err();
    assert!(matches!(err, BackendError::TokenExhausted(_)), "{err:?}");
    assert!(!err.is_transient());
    assert!(!exists(&mut raw, "{x}:leader").await, "nothing written");
    assert_eq!(
        get(&mut raw, "{x}:fence").await.as_deref(),
        Some("9007199254740992")
    );

    // A mark at 2^53 with the counter lost is refused the same way.
    let spec = election("{y}");
    set(&mut raw, "{y}:fence:applied", "9007199254740992").await;
    let err = b.acquire(&acq(&spec, "a")).await.unwrap_err();
    assert!(matches!(err, BackendError::TokenExhausted(_)), "{err:?}");
    assert!(!exists(&mut raw, "{y}:fence").await);
    assert!(!exists(&mut raw, "{y}:leader").await);
}

#[tokio::test]
async fn sixteen_digit_tokens_are_stored_exactly() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{big}");
    set(&mut raw, "{big}:fence", "1234567890123456").await;
    let t = acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap()).unwrap();
    assert_eq!(t.get(), 1_234_567_890_123_457);
    assert_eq!(
        get(&mut raw, "{big}:fence:applied").await.as_deref(),
        Some("1234567890123457")
    );
    assert_eq!(
        get(&mut raw, "{big}:fence").await.as_deref(),
        Some("1234567890123457")
    );
}

#[tokio::test]
async fn a_stolen_lock_is_not_deleted_by_the_old_owner() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{s}");
    b.acquire(&acq(&spec, "a")).await.unwrap();
    // a's lease expires (simulated: the key is gone) and b takes it.
    del(&mut raw, "{s}:leader").await;
    let tb = acquired_token(&b.acquire(&acq(&spec, "b")).await.unwrap()).unwrap();
    assert_eq!(tb, token(2));
    assert_eq!(
        b.release(&release(&spec, "a", Some(token(1))))
            .await
            .unwrap(),
        ReleaseOutcome::NotHeld
    );
    assert_eq!(
        b.release(&release(&spec, "a", None)).await.unwrap(),
        ReleaseOutcome::NotHeld
    );
    assert_eq!(
        b.renew(&renew(&spec, "a")).await.unwrap(),
        RenewOutcome::NotHeld
    );
    assert_eq!(get(&mut raw, "{s}:leader").await.as_deref(), Some("b"));
}

#[tokio::test]
async fn a_late_release_of_an_earlier_term_keeps_the_later_term() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{t}");
    let t1 = acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap()).unwrap();
    let t2 = acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap()).unwrap();
    assert_eq!(
        b.release(&release(&spec, "a", Some(t1))).await.unwrap(),
        ReleaseOutcome::NotHeld
    );
    assert_eq!(get(&mut raw, "{t}:leader").await.as_deref(), Some("a"));
    assert_eq!(
        b.release(&release(&spec, "a", Some(t2))).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert!(!exists(&mut raw, "{t}:leader").await);
}

#[tokio::test]
async fn garbage_in_counter_or_keys_is_a_server_error_and_changes_nothing() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{g}");
    set(&mut raw, "{g}:fence", "12abc").await;
    let err = b.acquire(&acq(&spec, "a")).await.unwrap_err();
    assert!(
        matches!(&err, BackendError::Corrupt { key, .. } if key == "{g}:fence"),
        "{err:?}"
    );
    assert!(!exists(&mut raw, "{g}:leader").await);
    assert!(matches!(
        b.inspect(&spec).await.unwrap_err(),
        BackendError::Corrupt { .. }
    ));
    // A lock key of another type: WRONGTYPE from the script.
    let _: i64 = redis::cmd("HSET")
        .arg("{g}:leader")
        .arg("f")
        .arg("v")
        .query_async(&mut raw)
        .await
        .unwrap();
    let err = b.renew(&renew(&spec, "a")).await.unwrap_err();
    assert!(
        matches!(&err, BackendError::Refused(m) if m.contains("WRONGTYPE")),
        "{err:?}"
    );
}

#[tokio::test]
async fn raise_counter_lifts_counter_and_mark_only_while_held() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{r}");
    b.acquire(&acq(&spec, "a")).await.unwrap();
    assert!(b.raise_counter(&spec, &owner("a"), token(7)).await.unwrap());
    assert_eq!(get(&mut raw, "{r}:fence").await.as_deref(), Some("7"));
    assert_eq!(
        get(&mut raw, "{r}:fence:applied").await.as_deref(),
        Some("7")
    );
    // Never lowers.
    assert!(b.raise_counter(&spec, &owner("a"), token(5)).await.unwrap());
    assert_eq!(get(&mut raw, "{r}:fence").await.as_deref(), Some("7"));
    // Not ours: nothing changes.
    assert!(!b.raise_counter(&spec, &owner("b"), token(9)).await.unwrap());
    assert_eq!(get(&mut raw, "{r}:fence").await.as_deref(), Some("7"));
    // A 16-digit raise is exact.
    assert!(
        b.raise_counter(&spec, &owner("a"), token(1_234_567_890_123_456))
            .await
            .unwrap()
    );
    assert_eq!(
        get(&mut raw, "{r}:fence:applied").await.as_deref(),
        Some("1234567890123456")
    );
    // The next acquire mints above the raised counter.
    let t = acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap()).unwrap();
    assert_eq!(t.get(), 1_234_567_890_123_457);
    // Unfenced leases cannot be raised.
    let unfenced = lock(&["{r}u"], None);
    assert!(matches!(
        b.raise_counter(&unfenced, &owner("a"), token(1)).await,
        Err(BackendError::Invalid(_))
    ));
}

#[tokio::test]
async fn script_flush_falls_back_to_eval() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{n}");
    b.acquire(&acq(&spec, "a")).await.unwrap();
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        b.renew(&renew(&spec, "a")).await.unwrap(),
        RenewOutcome::Renewed
    );
    let sha = redis::Script::new(lease_redis::scripts::RENEW)
        .get_hash()
        .to_owned();
    let cached: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(cached, vec![1], "EVAL cached the script again");
    assert!(b.inspect(&spec).await.unwrap().holder.is_some());
    assert_eq!(
        b.release(&release(&spec, "a", None)).await.unwrap(),
        ReleaseOutcome::Released
    );
}

#[tokio::test]
async fn a_restarted_server_does_not_break_a_running_leader() {
    // With AOF the lease survives a restart, but the script cache does not: the leader's next
    // renewal meets NOSCRIPT and must still succeed.
    let server = RedisServer::builder()
        .persistence(Persistence::AofAlways)
        .start()
        .await
        .unwrap();
    let client = server.client().unwrap();
    let b = RedisBackend::new(client.get_connection_manager().await.unwrap())
        .with_token_scheme(TokenScheme::Counter);
    let spec = election("{re}");
    let t = acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap()).unwrap();
    server.restart().await.unwrap();
    // The manager reconnects after the first failure on the dropped connection; the backend
    // itself never retries, so the test does, a bounded number of times.
    let mut renewed = None;
    for _ in 0..50 {
        match b.renew(&renew(&spec, "a")).await {
            Ok(o) => {
                renewed = Some(o);
                break;
            }
            Err(e) => {
                // The dropped connection cannot tell whether a request got out (unknown);
                // reconnecting to a server not yet listening is refused (not applied).
                assert!(
                    matches!(
                        e,
                        BackendError::Unavailable(_) | BackendError::OutcomeUnknown(_)
                    ),
                    "{e:?}"
                );
                assert!(e.is_transient());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert_eq!(renewed, Some(RenewOutcome::Renewed));
    // The restarted server learnt the script from the EVAL fallback (nothing else loads it).
    let mut raw = server.connection().await.unwrap();
    let sha = redis::Script::new(lease_redis::scripts::RENEW)
        .get_hash()
        .to_owned();
    let cached: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(cached, vec![1]);
    let info = b.inspect(&spec).await.unwrap();
    assert_eq!(info.counter, Some(t));
    assert_eq!(info.holder.as_deref(), Some("a"));
}

#[tokio::test]
async fn works_over_a_connection_manager() {
    let server = RedisServer::start().await.unwrap();
    let client = server.client().unwrap();
    let b = RedisBackend::new(client.get_connection_manager().await.unwrap())
        .with_token_scheme(TokenScheme::Counter);
    let spec = election("{cm}");
    assert_eq!(
        acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap()),
        Some(token(1))
    );
    assert!(matches!(
        b.acquire(&acq(&spec, "b")).await.unwrap(),
        AcquireOutcome::Held { .. }
    ));
    assert_eq!(
        b.renew(&renew(&spec, "a")).await.unwrap(),
        RenewOutcome::Renewed
    );
    assert_eq!(
        b.release(&release(&spec, "a", None)).await.unwrap(),
        ReleaseOutcome::Released
    );
}

/// A connection that dies under the client cannot tell whether a request got out: outcome
/// unknown. A connection that cannot be made proves nothing was sent: unavailable, not applied.
#[tokio::test]
async fn a_dead_connection_is_unknown_and_a_refused_one_is_unavailable() {
    let server = RedisServer::start().await.unwrap();
    let b = RedisBackend::new(server.connection().await.unwrap())
        .with_token_scheme(TokenScheme::Counter);
    let manager = RedisBackend::new(
        server
            .client()
            .unwrap()
            .get_connection_manager()
            .await
            .unwrap(),
    )
    .with_token_scheme(TokenScheme::Counter);
    let spec = election("{u}");
    b.acquire(&acq(&spec, "a")).await.unwrap();
    server.kill().await.unwrap();
    let err = b.renew(&renew(&spec, "a")).await.unwrap_err();
    assert!(matches!(err, BackendError::OutcomeUnknown(_)), "{err:?}");
    assert_eq!(err.effect(), lease_core::Effect::Unknown);
    assert!(err.is_transient());
    // The manager reconnects on use: nothing listens, so the connection is refused.
    let refused = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match manager.renew(&renew(&spec, "a")).await {
                Err(e @ BackendError::Unavailable(_)) => return e,
                Err(e) => assert!(e.is_transient(), "{e:?}"),
                Ok(o) => panic!("a killed server answered {o:?}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a refused connection within 20 s");
    assert_eq!(refused.effect(), lease_core::Effect::NotApplied);
    assert!(refused.is_transient());
}

#[tokio::test]
async fn standalone_backends_accept_untagged_names() {
    let (_server, b, _raw) = setup().await;
    let spec = election("plain-name");
    assert!(b.check_spec(&spec).is_ok());
    assert_eq!(
        acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap()),
        Some(token(1))
    );
}

/// A backend keeps clones of its connection for its calls (`src/lend.rs`). A kept clone of a
/// `HealingConnection` must not stay on a connection given up meanwhile (here by another
/// clone's silence rule): once that connection is closed, the backend's next call runs on the
/// current one. Negative control: with `lend.rs`'s `refresh` not unpinning a stale clone, the call below
/// goes to the killed connection and fails.
#[tokio::test]
async fn a_kept_healing_clone_follows_a_connection_given_up_meanwhile() {
    let server = bounded(RedisServer::start()).await.expect("redis server");
    let healing = bounded(HealingConnection::connect(server.client().expect("client")))
        .await
        .expect("connect")
        .with_silence(Duration::from_millis(200));
    let backend = RedisBackend::new(healing.clone());
    let spec = lock(&["kept"], None);
    // The backend's calls leave a clone on the first connection in its thread's slot.
    let got = bounded(backend.acquire(&acq(&spec, "a"))).await;
    assert!(
        matches!(got, Ok(AcquireOutcome::Acquired { .. })),
        "{got:?}"
    );
    let released = bounded(backend.release(&release(&spec, "a", None))).await;
    assert_eq!(released.ok(), Some(ReleaseOutcome::Released));
    let mut other = healing.clone();
    let first: i64 = bounded(redis::cmd("CLIENT").arg("ID").query_async(&mut other))
        .await
        .expect("CLIENT ID");
    // A request abandoned while the server is frozen, and no reply for longer than the
    // silence bound: the next call of a new clone gives the connection up and dials again.
    bounded(server.pause()).await.expect("pause");
    let abandoned = tokio::time::timeout(
        Duration::from_millis(100),
        redis::cmd("PING").query_async::<String>(&mut other),
    )
    .await;
    assert!(
        abandoned.is_err(),
        "the frozen server answered: {abandoned:?}"
    );
    // The silence rule is a duration with no event to wait for.
    tokio::time::sleep(Duration::from_millis(300)).await;
    bounded(server.resume()).await.expect("resume");
    let mut fresh = healing.clone();
    let pong: String = bounded(redis::cmd("PING").query_async(&mut fresh))
        .await
        .expect("PING on a new connection");
    assert_eq!(pong, "PONG");
    assert_eq!(
        healing.stats().given_up,
        1,
        "the silent connection was given up"
    );
    // The connection given up is closed at the server.
    let mut raw = bounded(server.connection()).await.expect("raw");
    let _: () = bounded(
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(first)
            .query_async(&mut raw),
    )
    .await
    .expect("CLIENT KILL");
    let got = bounded(backend.acquire(&acq(&spec, "b"))).await;
    assert!(
        matches!(got, Ok(AcquireOutcome::Acquired { .. })),
        "the backend's kept clone used the connection given up: {got:?}"
    );
}

/// `f`, failing the test if it takes more than five seconds.
async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .expect("no answer within 5 s")
}

/// The ids of the server's clients (`CLIENT LIST`).
async fn client_ids(raw: &mut redis::aio::MultiplexedConnection) -> Vec<i64> {
    let list: String = bounded(redis::cmd("CLIENT").arg("LIST").query_async(raw))
        .await
        .expect("CLIENT LIST");
    list.lines()
        .filter_map(|l| l.strip_prefix("id=")?.split(' ').next()?.parse().ok())
        .collect()
}

/// Issue 54: idle kept clones never keep a dead connection. A backend's calls leave clones of
/// its `HealingConnection` idle in their threads' slots, pinned to the connection they used;
/// when that connection is given up after a stall, the backend makes no call, and the clones
/// sit idle — yet the connection is closed at the server within one silence period: the give-up
/// purges the kept clones. Before, it stayed open (socket, driver task, the server's client
/// slot) for as long as the clones sat idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_kept_clones_do_not_keep_a_connection_given_up() {
    let server = bounded(RedisServer::start()).await.expect("redis server");
    let silence = Duration::from_millis(200);
    let healing = bounded(HealingConnection::connect(server.client().expect("client")))
        .await
        .expect("connect")
        .with_silence(silence);
    let backend = std::sync::Arc::new(RedisBackend::new(healing.clone()));
    let spec = lock(&["idle"], None);
    // Calls on both worker threads, several at once: clones kept idle in their slots.
    let mut calls = Vec::new();
    for i in 0..16 {
        let backend = std::sync::Arc::clone(&backend);
        let spec = spec.clone();
        calls.push(tokio::spawn(async move {
            let owner = format!("o{i}");
            let _ = backend.acquire(&acq(&spec, &owner)).await;
            let _ = backend.release(&release(&spec, &owner, None)).await;
        }));
    }
    for c in calls {
        bounded(c).await.expect("call");
    }
    let mut raw = bounded(server.connection()).await.expect("raw");
    let mut probe = healing.clone();
    let first: i64 = bounded(redis::cmd("CLIENT").arg("ID").query_async(&mut probe))
        .await
        .expect("CLIENT ID");
    let before = client_ids(&mut raw).await;
    assert!(before.contains(&first));
    // A stall: a request abandoned while the server is frozen, no reply past the silence.
    bounded(server.pause()).await.expect("pause");
    let abandoned = tokio::time::timeout(
        Duration::from_millis(100),
        redis::cmd("PING").query_async::<String>(&mut probe),
    )
    .await;
    assert!(abandoned.is_err(), "the frozen server answered");
    drop(probe);
    tokio::time::sleep(silence + Duration::from_millis(100)).await;
    bounded(server.resume()).await.expect("resume");
    // The next call (not the backend's) gives the silent connection up and dials again.
    let mut fresh = healing.clone();
    let _: String = bounded(redis::cmd("PING").query_async(&mut fresh))
        .await
        .expect("PING on a new connection");
    drop(fresh);
    assert_eq!(healing.stats().given_up, 1);
    let given_up = std::time::Instant::now();
    // Within one silence period the first connection is gone from the server, and the client
    // count is back where it was (the new connection in place of the old).
    let after = bounded(async {
        loop {
            let ids = client_ids(&mut raw).await;
            if !ids.contains(&first) {
                return ids;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        given_up.elapsed() <= silence,
        "closed {:?} after the give-up",
        given_up.elapsed()
    );
    assert_eq!(after.len(), before.len(), "{before:?} -> {after:?}");
    drop(backend);
}
