//! Release notices in the machines: a follower or lock waiter tries at once on a notice, a
//! notice that arrives while an attempt is in flight is not lost, and nobody else acts on one
//! (a leader, an instance that just resigned, a waiter past its wait deadline).

use std::time::Duration;

use lease_core::election::{Reply, RequestKind};
use lease_core::lock::{LockError, LockOptions, Obtain};
use lease_core::{
    AcquireOutcome, Election, ElectionConfig, FenceState, Instant, ReleaseOutcome, RetryStrategy,
    Token,
};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn config() -> ElectionConfig {
    ElectionConfig::builder("e", "a")
        .ttl(ms(3000))
        .build()
        .unwrap()
}

fn held() -> AcquireOutcome {
    AcquireOutcome::Held {
        holder: Some("b".into()),
        remaining: Some(ms(2000)),
        fence: FenceState::UNKNOWN,
    }
}

/// `m` sends its acquire at `now` and hears `outcome` at `then`.
fn acquire(m: &mut Election, now: Instant, then: Instant, outcome: AcquireOutcome) {
    let req = m.poll_request(now).expect("acquire due");
    assert!(matches!(req.kind, RequestKind::Acquire(_)));
    m.handle_reply(then, req.id, Reply::Acquire(Ok(outcome)));
}

#[test]
fn a_follower_acquires_at_once_on_a_notice() {
    let t0 = Instant::ZERO;
    let mut m = Election::new(config(), 1, t0);
    assert!(!m.wants_notices());
    acquire(&mut m, t0, t0 + ms(1), held());
    assert!(m.wants_notices());
    let next = m.poll_timeout().expect("a poll is scheduled");
    assert!(
        next > t0 + ms(1000),
        "polls at the acquire interval: {next:?}"
    );
    let at = t0 + ms(100);
    assert!(m.poll_request(at).is_none());
    assert!(m.handle_notice(at));
    assert_eq!(m.poll_timeout(), Some(at));
    assert!(m.poll_request(at).is_some(), "the acquire goes out at once");
}

#[test]
fn a_notice_during_an_acquire_makes_the_next_one_immediate() {
    let t0 = Instant::ZERO;
    let mut m = Election::new(config(), 1, t0);
    acquire(&mut m, t0, t0 + ms(1), held());
    // The next poll goes out; the holder releases while it is in flight, after the store
    // judged it.
    let t1 = m.poll_timeout().unwrap();
    let req = m.poll_request(t1).unwrap();
    assert!(m.wants_notices(), "an acquire in flight listens");
    assert!(!m.handle_notice(t1 + ms(1)), "nothing to move yet");
    m.handle_reply(t1 + ms(2), req.id, Reply::Acquire(Ok(held())));
    assert_eq!(
        m.poll_timeout(),
        Some(t1 + ms(2)),
        "not lost: retried at once"
    );
    // Without a notice, a lost race waits for the next poll.
    let req = m.poll_request(t1 + ms(2)).unwrap();
    m.handle_reply(t1 + ms(3), req.id, Reply::Acquire(Ok(held())));
    assert!(m.poll_timeout().unwrap() > t1 + ms(1000));
}

#[test]
fn leaders_and_instances_that_just_resigned_ignore_notices() {
    let t0 = Instant::ZERO;
    let mut m = Election::new(config(), 1, t0);
    acquire(
        &mut m,
        t0,
        t0,
        AcquireOutcome::Acquired {
            token: Some(Token::new(1).unwrap()),
            fence: FenceState::UNKNOWN,
        },
    );
    assert!(m.poll_request(t0).is_none(), "no renewal before one is due");
    assert!(!m.wants_notices());
    assert!(!m.handle_notice(t0 + ms(10)), "a leader");
    assert!(m.resign(t0 + ms(20)));
    let rel = m.poll_request(t0 + ms(20)).unwrap();
    m.handle_reply(
        t0 + ms(21),
        rel.id,
        Reply::Release(Ok(ReleaseOutcome::Released)),
    );
    // Its own release's notice: the others get the first chance.
    assert!(!m.wants_notices());
    let due = m.poll_timeout().unwrap();
    assert!(!m.handle_notice(t0 + ms(22)));
    assert_eq!(m.poll_timeout(), Some(due));
}

fn plan(retry_ms: u64, wait_ms: u64) -> lease_core::lock::ObtainPlan {
    LockOptions::new()
        .retry(RetryStrategy::linear(ms(retry_ms)).unwrap())
        .wait(ms(wait_ms))
        .plan(["k"], ms(10_000), || "t".into())
        .unwrap()
}

#[test]
fn a_lock_waiter_attempts_at_once_on_a_notice() {
    let t0 = Instant::ZERO;
    let mut o = Obtain::new(&plan(5000, 20_000), 1, t0);
    o.poll_request(t0).unwrap();
    o.handle_reply(t0 + ms(1), Ok(held()));
    let due = o.poll_timeout().unwrap();
    assert!(due > t0 + ms(4000), "retry delay (jittered): {due:?}");
    assert!(o.handle_notice(t0 + ms(10)));
    assert!(o.poll_request(t0 + ms(10)).is_some());
}

#[test]
fn a_notice_during_an_obtain_attempt_is_not_lost() {
    let t0 = Instant::ZERO;
    let mut o = Obtain::new(&plan(5000, 20_000), 1, t0);
    o.poll_request(t0).unwrap();
    assert!(!o.handle_notice(t0 + ms(1)));
    o.handle_reply(t0 + ms(2), Ok(held()));
    assert_eq!(o.poll_timeout(), Some(t0 + ms(2)));
}

#[test]
fn a_notice_never_starts_an_attempt_after_the_wait() {
    let t0 = Instant::ZERO;
    // Retry 500 ms, wait 600 ms: the second attempt at ~500 ms is the last one.
    let mut o = Obtain::new(&plan(500, 600), 1, t0);
    o.poll_request(t0).unwrap();
    o.handle_reply(t0 + ms(1), Ok(held()));
    let second = o.poll_timeout().unwrap();
    o.poll_request(second).unwrap();
    o.handle_reply(second + ms(1), Ok(held()));
    // The next retry would pass the wait: the obtain has ended, a notice changes nothing.
    let outcome = o.poll_outcome().expect("ended");
    assert!(outcome.is_err());
    assert!(!o.handle_notice(second + ms(2)));
    assert!(o.poll_request(second + ms(2)).is_none());
}

#[test]
fn a_notice_during_the_last_attempt_allows_one_more_within_the_wait() {
    let t0 = Instant::ZERO;
    let mut o = Obtain::new(&plan(500, 600), 1, t0);
    o.poll_request(t0).unwrap();
    o.handle_reply(t0 + ms(1), Ok(held()));
    let second = o.poll_timeout().unwrap();
    o.poll_request(second).unwrap();
    o.handle_notice(second + ms(1));
    o.handle_reply(second + ms(2), Ok(held()));
    // The delay would pass the wait, but the release came during the attempt: once more now.
    assert!(o.poll_outcome().is_none());
    assert_eq!(o.poll_timeout(), Some(second + ms(2)));
}

#[test]
fn with_live_notices_a_waiter_polls_when_the_holder_would_expire() {
    let t0 = Instant::ZERO;
    // Retry 100 ms, wait 20 s; the holder has 2 s left.
    let mut o = Obtain::new(&plan(100, 20_000), 1, t0);
    o.set_notices_live(true);
    o.poll_request(t0).unwrap();
    o.handle_reply(t0 + ms(1), Ok(held()));
    assert_eq!(o.poll_timeout(), Some(t0 + ms(1) + ms(2000)));
    // Not live: the retry delay (jittered, at most 100 ms).
    o.set_notices_live(false);
    o.handle_notice(t0 + ms(5));
    o.poll_request(t0 + ms(5)).unwrap();
    o.handle_reply(t0 + ms(6), Ok(held()));
    assert!(o.poll_timeout().unwrap() <= t0 + ms(106));
}

#[test]
fn with_live_notices_the_last_poll_is_the_last_the_wait_allows() {
    let t0 = Instant::ZERO;
    // Wait 1 s, the holder has 2 s left: the last attempt is the last scheduled one within
    // the wait (retries of at most 100 ms), never after the deadline.
    let mut o = Obtain::new(&plan(100, 1000), 1, t0);
    o.set_notices_live(true);
    o.poll_request(t0).unwrap();
    o.handle_reply(t0 + ms(1), Ok(held()));
    let last = o.poll_timeout().unwrap();
    assert!(last <= t0 + ms(1000) && last > t0 + ms(890), "{last:?}");
    o.poll_request(last).unwrap();
    o.handle_reply(last + ms(1), Ok(held()));
    assert!(matches!(
        o.poll_outcome(),
        Some(Err(LockError::DeadlineExceeded { .. }))
    ));
}

/// Issue 26: notices may make an attempt earlier, never the give-up later. Three attempts
/// 5 ms apart against a holder with 1 s left: "not obtained" after 10 ms, not at the expiry.
#[test]
fn with_live_notices_a_limited_strategy_gives_up_on_its_schedule() {
    let t0 = Instant::ZERO;
    let mut p = plan(5, 10_000);
    p.retry = RetryStrategy::limit(2, RetryStrategy::linear(ms(5)).unwrap());
    let mut o = Obtain::new(&p, 1, t0);
    o.set_notices_live(true);
    let mut now = t0;
    let mut attempts = 0;
    let outcome = loop {
        if let Some(outcome) = o.poll_outcome() {
            break outcome;
        }
        now = o.poll_timeout().unwrap_or(now);
        o.poll_request(now).expect("an attempt is due");
        attempts += 1;
        o.handle_reply(now, Ok(held()));
        assert!(attempts <= 3, "more attempts than the strategy allows");
    };
    assert!(
        matches!(outcome, Err(LockError::NotObtained { .. })),
        "{outcome:?}"
    );
    // Two retries of 5 ms, each lengthened by at most a quarter by the jitter.
    assert!(
        now <= t0 + ms(10) + ms(10) / 4,
        "gave up at {now:?}, after the strategy's schedule"
    );
}
