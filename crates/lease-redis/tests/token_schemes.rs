//! Token schemes, fence epochs and floors on a real Redis: clock-floored tokens (the default)
//! stay above what was minted before the counter was lost; the fence epoch changes with the
//! loss; a floor lifts a counter that went back, with either scheme; refused acquires report
//! the store's fence state.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use lease_core::{AcquireOutcome, LeaseBackend, Token, TokenScheme};
use lease_redis::RedisBackend;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

async fn flushall(raw: &mut Conn) {
    let _: () = redis::cmd("FLUSHALL").query_async(raw).await.unwrap();
}

fn granted(o: &AcquireOutcome) -> (Token, lease_core::FenceState) {
    match o {
        AcquireOutcome::Acquired {
            token: Some(t),
            fence,
        } => (*t, *fence),
        other => panic!("not granted: {other:?}"),
    }
}

#[tokio::test]
async fn clock_floored_tokens_survive_a_flush_and_the_epoch_changes() {
    let (_server, counter_backend, mut raw) = setup().await;
    // The kit's server runs on this machine: its TIME is this clock.
    let b = RedisBackend::new(counter_backend.connection().clone());
    assert_eq!(b.token_scheme(), TokenScheme::ClockFloored, "the default");
    let spec = election("{floored}");
    let before = now_us();
    let (t1, f1) = granted(&b.acquire(&acq(&spec, "a")).await.unwrap());
    assert!(
        t1.get() >= before,
        "at least the server's time in µs: {t1} < {before}"
    );
    assert!(t1.get() <= now_us() + 1_000_000, "not far ahead: {t1}");
    assert_eq!(f1.counter, None, "a fresh store has no counter");
    let e1 = f1.epoch.expect("the epoch is created with the counter");
    // A same-owner takeover mints again: above t1, in the same epoch.
    let (t2, f2) = granted(&b.acquire(&acq(&spec, "a")).await.unwrap());
    assert!(t2 > t1);
    assert_eq!(f2.counter, Some(t1));
    assert_eq!(f2.epoch, Some(e1));
    // The store loses everything: the next token is still above t2, in a new epoch.
    flushall(&mut raw).await;
    let (t3, f3) = granted(&b.acquire(&acq(&spec, "b")).await.unwrap());
    assert!(t3 > t2, "{t3} after {t2}");
    assert_eq!(f3.counter, None);
    let e2 = f3.epoch.expect("a new epoch");
    assert_ne!(e2, e1);
    // `inspect` reports the epoch too.
    assert_eq!(b.inspect(&spec).await.unwrap().epoch, Some(e2));
}

#[tokio::test]
async fn the_plain_counter_restarts_after_a_flush_unless_a_floor_lifts_it() {
    let (_server, b, mut raw) = setup().await;
    assert_eq!(b.token_scheme(), TokenScheme::Counter);
    let spec = election("{plain}");
    let (t1, _) = granted(&b.acquire(&acq(&spec, "a")).await.unwrap());
    let (t2, _) = granted(&b.acquire(&acq(&spec, "a")).await.unwrap());
    assert_eq!((t1.get(), t2.get()), (1, 2));
    flushall(&mut raw).await;
    let (t, _) = granted(&b.acquire(&acq(&spec, "a")).await.unwrap());
    assert_eq!(t.get(), 1, "without a floor the counter starts again");
    flushall(&mut raw).await;
    let floored = acq(&spec, "a").with_floor(Some(t2));
    let (t, f) = granted(&b.acquire(&floored).await.unwrap());
    assert_eq!(t.get(), 3, "minted above the floor");
    assert_eq!(f.counter, None, "the store's own counter was gone");
    // A floor below the counter changes nothing.
    let low = acq(&spec, "a").with_floor(Some(token(1)));
    assert_eq!(granted(&b.acquire(&low).await.unwrap()).0.get(), 4);
}

#[tokio::test]
async fn a_refused_acquire_reports_the_holders_token_and_the_epoch() {
    let (_server, b, _raw) = setup().await;
    let spec = election("{held}");
    let (t1, f1) = granted(&b.acquire(&acq(&spec, "a")).await.unwrap());
    match b.acquire(&acq(&spec, "b")).await.unwrap() {
        AcquireOutcome::Held {
            holder,
            remaining,
            fence,
        } => {
            assert_eq!(holder.as_deref(), Some("a"));
            assert!(remaining.is_some_and(|r| r > Duration::ZERO));
            assert_eq!(fence.counter, Some(t1));
            assert_eq!(fence.epoch, f1.epoch);
        }
        other => panic!("expected held: {other:?}"),
    }
}

/// How far the counter runs ahead of the clock under the fastest fenced acquire loop one
/// client can drive (same-owner takeovers, back to back, pipelined by 64 tasks): the bound
/// `docs/fencing.md` states. Each token must be at most the server's time when it was minted
/// plus the number of tokens minted in the same microsecond; we measure the largest lead of a
/// token over the client's clock after the reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counter_stays_at_the_clock_under_the_fastest_loop() {
    let (_server, counter_backend, _raw) = setup().await;
    let b = RedisBackend::new(counter_backend.connection().clone());
    let spec = election("{fast}");
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let b = b.clone();
        let spec = spec.clone();
        tasks.push(tokio::spawn(async move {
            let mut lead = 0i64;
            let mut n = 0u64;
            let until = std::time::Instant::now() + Duration::from_secs(2);
            while std::time::Instant::now() < until {
                let (t, _) = granted(&b.acquire(&acq(&spec, "a")).await.unwrap());
                let after = now_us();
                lead = lead.max(t.get() as i64 - after as i64);
                n += 1;
            }
            (lead, n)
        }));
    }
    let mut lead = i64::MIN;
    let mut total = 0;
    for t in tasks {
        let (l, n) = tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("bounded")
            .expect("no panic");
        lead = lead.max(l);
        total += n;
    }
    eprintln!(
        "{total} fenced acquires in 2 s ({} per second): the largest lead of a token over the clock after its reply was {lead} µs",
        total / 2
    );
    assert!(
        lead <= 0,
        "a token ran ahead of the clock by {lead} µs: the counter outpaced the µs clock"
    );
}
