//! Issue 54: retries are honoured exactly, whatever wakes the waiter. A wake-up (a release
//! notice, a hand-off line, the holder's expiry estimate) may make an attempt earlier; if
//! that attempt finds the lock still held it is no retry, and the strategy's schedule stays
//! where it was. Only a retry made at or after its due instant counts.

use std::time::Duration;

use lease_core::lock::{LockError, LockOptions, Obtain, ObtainPlan};
use lease_core::{AcquireOutcome, FenceState, Instant, RetryStrategy};
use proptest::prelude::*;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn held(remaining: Option<Duration>) -> AcquireOutcome {
    AcquireOutcome::Held {
        holder: Some("first".into()),
        remaining,
        fence: FenceState::UNKNOWN,
    }
}

fn acquired() -> AcquireOutcome {
    AcquireOutcome::Acquired {
        token: None,
        fence: FenceState::UNKNOWN,
    }
}

fn plan(retries: u32, delay: Duration, wait: Duration) -> ObtainPlan {
    LockOptions::new()
        .retry(RetryStrategy::limit(
            retries,
            RetryStrategy::linear(delay).unwrap(),
        ))
        .wait(wait)
        .plan(["k"], ms(10_000), || "t".into())
        .unwrap()
}

/// The strategy's delays for `seed`, as the machine draws them.
fn delays(plan: &ObtainPlan, seed: u64) -> Vec<Duration> {
    let mut s = plan.retry.jittered_sequence(seed);
    std::iter::from_fn(|| s.next_delay()).collect()
}

/// bsm/redislock's `TestObtain_retry_success`, as the store would answer it: the first lock
/// has 100 ms to live; three retries 50 ms apart; release notices are live, and spurious
/// wake-ups (a resync, a notice for another holder) come every 5 ms. The obtain wins once
/// the first lock has expired; before the fix, each wake-up spent a retry and it gave up
/// within 20 ms.
#[test]
fn wake_ups_that_find_the_lock_held_spend_no_retry() {
    let t0 = Instant::ZERO;
    let p = plan(3, ms(50), ms(10_000));
    let expiry = t0 + ms(100);
    for seed in 0..64 {
        let mut o = Obtain::new(&p, seed, t0);
        o.set_notices_live(true);
        let mut now = t0;
        let mut attempts = 0;
        let outcome = loop {
            if let Some(outcome) = o.poll_outcome() {
                break outcome;
            }
            if o.poll_request(now).is_some() {
                attempts += 1;
                assert!(attempts < 100, "seed {seed}: attempts without end");
                let reply = if now >= expiry {
                    acquired()
                } else {
                    held(Some(expiry - now))
                };
                o.handle_reply(now, Ok(reply));
                continue;
            }
            let due = o.poll_timeout().expect("waiting");
            let wake = now + ms(5);
            if wake < due {
                now = wake;
                o.handle_notice(now);
            } else {
                now = due;
            }
        };
        let won = outcome.unwrap_or_else(|e| panic!("seed {seed}: {e} at {now:?}"));
        assert!(won.sent_at >= expiry);
    }
}

/// The same without any wake-up and without notices: the strategy alone (negative control
/// of the scenario: three retries of at most 50 ms cannot outlast a 200 ms holder).
#[test]
fn a_strategy_that_ends_before_the_expiry_gives_up() {
    let t0 = Instant::ZERO;
    let p = plan(3, ms(50), ms(10_000));
    let expiry = t0 + ms(200);
    let mut o = Obtain::new(&p, 1, t0);
    let mut now = t0;
    let outcome = loop {
        if let Some(outcome) = o.poll_outcome() {
            break outcome;
        }
        if o.poll_request(now).is_some() {
            o.handle_reply(now, Ok(held(Some(expiry - now))));
        } else {
            now = o.poll_timeout().expect("waiting");
        }
    };
    assert!(matches!(outcome, Err(LockError::NotObtained { .. })));
    assert!(now < expiry);
}

/// Without notices, a wake-up from a hand-off line that finds the key still held leaves the
/// schedule as it was: the next attempt is at the strategy's instant.
#[test]
fn a_woken_attempt_keeps_the_next_retry_where_it_was() {
    let t0 = Instant::ZERO;
    let p = plan(2, ms(100), ms(10_000));
    let d = delays(&p, 9);
    let mut o = Obtain::new(&p, 9, t0);
    o.poll_request(t0).unwrap();
    o.handle_reply(t0, Ok(held(None)));
    assert_eq!(o.poll_timeout(), Some(t0 + d[0]));
    let woken = t0 + ms(10);
    assert!(o.handle_notice(woken));
    o.poll_request(woken).unwrap();
    o.handle_reply(woken + ms(1), Ok(held(None)));
    assert_eq!(o.poll_timeout(), Some(t0 + d[0]), "the retry stays due");
    assert!(o.poll_outcome().is_none());
}

#[derive(Clone, Debug)]
enum Wake {
    /// A notice this long after the last event.
    Notice(u64),
    /// The driver's own process answers the attempt: held locally.
    LocalHold,
}

proptest! {
    /// Whatever wakes the waiter, and whether notices are live or not: an obtain against a
    /// holder that never lets go gives up no earlier than the strategy's own schedule (the
    /// sum of its delays, replies taking no time) and never later than the wait, and every
    /// attempt it makes before the schedule's end that finds the lock held is either a due
    /// retry or a wake-up.
    #[test]
    fn retries_are_never_spent_before_they_are_due(
        seed in any::<u64>(),
        retries in 0u32..6,
        delay_ms in 1u64..200,
        remaining_ms in prop::option::of(0u64..2_000),
        live in any::<bool>(),
        wakes in prop::collection::vec(
            prop_oneof![(0u64..80).prop_map(Wake::Notice), Just(Wake::LocalHold)],
            0..40,
        ),
    ) {
        let t0 = Instant::ZERO;
        let wait = ms(60_000);
        let p = plan(retries, ms(delay_ms), wait);
        let schedule: Duration = delays(&p, seed).iter().sum();
        let mut o = Obtain::new(&p, seed, t0);
        o.set_notices_live(live);
        let mut wakes = wakes.into_iter();
        let mut now = t0;
        let mut steps = 0;
        let outcome = loop {
            steps += 1;
            prop_assert!(steps < 10_000, "no end");
            if let Some(outcome) = o.poll_outcome() {
                break outcome;
            }
            if o.poll_request(now).is_some() {
                match wakes.clone().next() {
                    Some(Wake::LocalHold) if o.handle_local_hold(now, remaining_ms.map(|r| now + ms(r))) => {
                        wakes.next();
                    }
                    _ => o.handle_reply(now, Ok(held(remaining_ms.map(ms)))),
                }
                continue;
            }
            let due = o.poll_timeout().expect("waiting");
            match wakes.next() {
                Some(Wake::Notice(after)) if now + ms(after) < due => {
                    now += ms(after);
                    o.handle_notice(now);
                }
                _ => now = due,
            }
        };
        prop_assert!(matches!(outcome, Err(LockError::NotObtained { .. })), "{outcome:?}");
        prop_assert!(now >= t0 + schedule, "gave up at {now:?}, the strategy's schedule ends at {schedule:?}");
        prop_assert!(now <= t0 + wait);
    }
}
