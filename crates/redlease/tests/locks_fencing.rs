//! Fencing tokens of locks against a real Redis, through the facade: tokens strictly increase
//! across holders and survive release; retries after unknown outcomes hand out the current
//! token.
//!
//! Faults are real: a TCP proxy that blackholes traffic.
//! Attempts are counted by `Counted` (`common/locks.rs`: the kit's `Wrapped` backend with
//! counting hooks around the Redis backend), so retry counts are asserted exactly, without
//! timing.

mod common;

use common::locks::{Counted, exists, fired, linear, locker, ms, proxied, wait_gone, warm_up};
use common::{EVENTUALLY, get, pttl, raw};
use lease_testkit::proxy::{FaultProxy, Mode};
use redlease::{LockOptions, Locker};

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
                        .owner("me")
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
