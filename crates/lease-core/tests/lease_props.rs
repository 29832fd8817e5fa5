//! Properties of the lease-holding machine (`lease_core::lease::HeldLease`), over random
//! sequences of time steps, renew polls, replies (renewed, not ours, errors, timeouts — on time
//! or late) and local ends.
//!
//! - dated from the send: the first deadline is `sent_at + TTL`, a renewal moves it to the
//!   renewal's `sent_at + TTL` (never backward);
//! - never held at or after its deadline, and once the deadline has passed no input (not even a
//!   late "renewed" reply) makes it held again;
//! - the first renewal is due at once; then one renewal every interval after the previous send;
//! - at most one renewal in flight; its deadline is the remaining budget (capped by the
//!   operation timeout);
//! - "not ours" is loss at once; errors and timeouts are tolerated until the deadline;
//! - exactly one `Lost` event per loss, none after a local end;
//! - `poll_timeout` never makes a driver spin.

use std::time::Duration;

use lease_core::backend::{BackendError, RenewOutcome};
use lease_core::lease::{HeldLease, LeaseEvent, LeaseTiming, LossReason};
use lease_core::{Instant, Token, Ttl};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Step {
    /// Time passes by this many ms; the driver calls `handle_timeout` (or not: a paused driver).
    Advance { ms: u64, handle: bool },
    /// Time jumps to the machine's own `poll_timeout`, then `handle_timeout` there.
    ToTimeout,
    /// Time jumps to the lease's deadline plus a little, with or without `handle_timeout` (the
    /// thin window where a late reply could wrongly revive the lease).
    PastDeadline { extra_ms: u64, handle: bool },
    /// Poll for a renewal.
    Poll,
    /// The in-flight renewal's reply arrives now.
    Reply(ReplyKind),
    /// The driver ends the lease (resign/release).
    End,
}

#[derive(Clone, Copy, Debug)]
enum ReplyKind {
    Renewed,
    NotHeld,
    Error,
    TimedOut,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u64..700, proptest::bool::weighted(0.85)).prop_map(|(ms, handle)| Step::Advance { ms, handle }),
        4 => Just(Step::ToTimeout),
        2 => (0u64..20, proptest::bool::weighted(0.3)).prop_map(|(extra_ms, handle)| Step::PastDeadline { extra_ms, handle }),
        6 => Just(Step::Poll),
        5 => Just(Step::Reply(ReplyKind::Renewed)),
        1 => Just(Step::Reply(ReplyKind::NotHeld)),
        2 => Just(Step::Reply(ReplyKind::Error)),
        2 => Just(Step::Reply(ReplyKind::TimedOut)),
        1 => Just(Step::End),
    ]
}

#[derive(Clone, Debug)]
struct Setup {
    ttl_ms: u64,
    renew_ms: u64,
    op_timeout_ms: Option<u64>,
    /// How long the acquire reply took: the lease is created at `sent_at + acquire_rtt`.
    acquire_rtt_ms: u64,
}

fn setup() -> impl Strategy<Value = Setup> {
    (100u64..5000).prop_flat_map(|ttl_ms| {
        (
            Just(ttl_ms),
            1u64..=ttl_ms / 2,
            proptest::option::of(1u64..ttl_ms),
            prop_oneof![4 => 0u64..50, 1 => 0u64..=ttl_ms + 50],
        )
            .prop_map(|(ttl_ms, renew_ms, op_timeout_ms, acquire_rtt_ms)| Setup {
                ttl_ms,
                renew_ms,
                op_timeout_ms,
                acquire_rtt_ms,
            })
    })
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn held_lease_rules(s in setup(), steps in proptest::collection::vec(step(), 0..80)) {
        let ttl = ms(s.ttl_ms);
        let timing = LeaseTiming::new(Ttl::new(ttl).map_err(|e| TestCaseError::fail(e.to_string()))?, ms(s.renew_ms)).with_operation_timeout(s.op_timeout_ms.map(ms));
        let sent_at = Instant::ZERO + ms(1000);
        let mut now = sent_at + ms(s.acquire_rtt_ms);
        let token = Token::new(7).ok();
        let mut lease = HeldLease::new(timing, token, sent_at, now);

        // Dated from the send.
        prop_assert_eq!(lease.valid_until(), sent_at + ttl);
        prop_assert_eq!(lease.token(), token);
        // The first renewal is due at once (unless the acquire reply came too late to hold).
        let mut in_flight: Option<(Instant, Instant)> = None; // (sent_at, deadline)
        let mut last_renew_sent: Option<Instant> = None;
        let mut next_due: Instant = now;
        if now < lease.valid_until() {
            prop_assert!(lease.is_held(now));
            let order = lease.poll_renew(now);
            prop_assert!(order.is_some(), "first renewal at once");
            if let Some(o) = order {
                prop_assert_eq!(o.sent_at, now);
                in_flight = Some((o.sent_at, o.deadline));
                last_renew_sent = Some(now);
            }
        } else {
            prop_assert!(!lease.is_held(now));
            prop_assert_eq!(lease.lost(), Some(LossReason::DeadlineExpired));
        }

        let mut lost_events = 0u32;
        while let Some(ev) = lease.poll_event() {
            prop_assert!(matches!(ev, LeaseEvent::Lost(LossReason::DeadlineExpired)));
            lost_events += 1;
        }
        let mut ended = false;
        // Once the deadline is seen passed (or loss happened), the lease never holds again.
        let mut dead = !lease.is_held(now);

        for st in steps {
            let before_until = lease.valid_until();
            let past_deadline_before = now >= before_until;
            match st {
                Step::Advance { ms: d, handle } => {
                    now += ms(d);
                    if handle {
                        lease.handle_timeout(now);
                    }
                }
                Step::PastDeadline { extra_ms, handle } => {
                    now = now.max(lease.valid_until() + ms(extra_ms));
                    if handle {
                        lease.handle_timeout(now);
                    }
                }
                Step::ToTimeout => {
                    if let Some(t) = lease.poll_timeout() {
                        if t > now {
                            now = t;
                        }
                        lease.handle_timeout(now);
                        // No spin: at its timeout the machine either wants a renewal, or has
                        // moved its timeout forward, or is done.
                        let polled = lease.poll_renew(now);
                        if let Some(o) = polled {
                            prop_assert!(in_flight.is_none());
                            prop_assert!(last_renew_sent.is_none_or(|p| now >= p + ms(s.renew_ms)),
                                "renewals closer than the interval");
                            in_flight = Some((o.sent_at, o.deadline));
                            last_renew_sent = Some(now);
                        } else {
                            prop_assert!(lease.poll_timeout().is_none_or(|t2| t2 > now),
                                "poll_timeout {:?} at {:?} with nothing to poll", lease.poll_timeout(), now);
                        }
                    }
                }
                Step::Poll => {
                    let order = lease.poll_renew(now);
                    let can = lease.lost().is_none() && !ended && now < lease.valid_until();
                    match order {
                        Some(o) => {
                            prop_assert!(can, "renewal polled while not held");
                            prop_assert!(in_flight.is_none(), "at most one renewal in flight");
                            prop_assert!(now >= next_due, "renewal before it was due");
                            prop_assert!(last_renew_sent.is_none_or(|p| now >= p + ms(s.renew_ms)),
                                "renewals closer than the interval");
                            prop_assert_eq!(o.sent_at, now);
                            let mut dl = lease.valid_until().min(now + ms(s.renew_ms));
                            if let Some(c) = s.op_timeout_ms {
                                dl = dl.min(now + ms(c));
                            }
                            prop_assert_eq!(o.deadline, dl, "bounded by min(remaining budget, renew interval)");
                            prop_assert!(lease.renew_in_flight());
                            in_flight = Some((o.sent_at, o.deadline));
                            last_renew_sent = Some(now);
                        }
                        None => {
                            prop_assert!(!can || in_flight.is_some() || now < next_due,
                                "a due renewal was not polled at {:?} (due {:?})", now, next_due);
                        }
                    }
                }
                Step::Reply(kind) => {
                    let Some((r_sent, r_deadline)) = in_flight.take() else {
                        // A reply with nothing in flight is ignored.
                        let until = lease.valid_until();
                        lease.handle_renew(now, Ok(RenewOutcome::Renewed));
                        prop_assert_eq!(lease.valid_until(), until);
                        continue;
                    };
                    if matches!(kind, ReplyKind::TimedOut) && now < r_deadline {
                        now = r_deadline;
                    }
                    let reply = match kind {
                        ReplyKind::Renewed => Ok(RenewOutcome::Renewed),
                        ReplyKind::NotHeld => Ok(RenewOutcome::NotHeld),
                        ReplyKind::Error => Err(BackendError::Unavailable("down".into())),
                        ReplyKind::TimedOut => Err(BackendError::Timeout(now - r_sent)),
                    };
                    let was_held = lease.lost().is_none() && !ended && now < lease.valid_until();
                    lease.handle_renew(now, reply);
                    prop_assert!(!lease.renew_in_flight());
                    match kind {
                        ReplyKind::Renewed if was_held => {
                            // Dated from the renewal's send.
                            prop_assert_eq!(lease.valid_until(), before_until.max(r_sent + ttl));
                            next_due = (r_sent + ms(s.renew_ms)).max(now);
                        }
                        ReplyKind::NotHeld if was_held => {
                            prop_assert_eq!(lease.lost(), Some(LossReason::NotOurs), "not ours is loss at once");
                            prop_assert!(!lease.is_held(now));
                        }
                        ReplyKind::Error | ReplyKind::TimedOut if was_held => {
                            // Tolerated until the deadline.
                            prop_assert_eq!(lease.is_held(now), now < lease.valid_until());
                            prop_assert_eq!(lease.valid_until(), before_until);
                            next_due = (r_sent + ms(s.renew_ms)).max(now);
                        }
                        _ => {}
                    }
                }
                Step::End => {
                    lease.end();
                    ended = true;
                    prop_assert!(lease.is_ended());
                    prop_assert!(lease.poll_timeout().is_none());
                    prop_assert!(lease.poll_renew(now).is_none());
                }
            }

            // Never held at or after the deadline.
            if lease.is_held(now) {
                prop_assert!(now < lease.valid_until());
                prop_assert!(lease.lost().is_none() && !ended);
            }
            prop_assert!(!lease.is_held(lease.valid_until()));
            // The deadline never moves backward.
            prop_assert!(lease.valid_until() >= before_until);
            // A deadline already passed before this input cannot be revived by it.
            if past_deadline_before {
                prop_assert!(!lease.is_held(now), "revived after its deadline ({:?} >= {:?}) by {:?}", now, before_until, st);
            }
            if dead {
                prop_assert!(!lease.is_held(now), "held again after being lost/expired");
            }
            if !lease.is_held(now) && (now >= lease.valid_until() || lease.lost().is_some() || ended) {
                dead = true;
            }
            // Events.
            while let Some(ev) = lease.poll_event() {
                match ev {
                    LeaseEvent::Lost(reason) => {
                        lost_events += 1;
                        prop_assert_eq!(Some(reason), lease.lost());
                        prop_assert!(!ended, "no loss event after a local end");
                    }
                    LeaseEvent::Renewed { valid_until } => {
                        prop_assert_eq!(valid_until, lease.valid_until());
                        prop_assert!(now < valid_until);
                    }
                    LeaseEvent::RenewFailed(_) => {}
                    _ => {}
                }
            }
            prop_assert!(lost_events <= 1, "one loss event per loss");
            if lease.lost().is_some() {
                prop_assert_eq!(lost_events, 1);
                prop_assert!(lease.poll_timeout().is_none());
            }
            // The deadline fires through handle_timeout.
            if lease.lost().is_none() && !ended {
                let t = lease.poll_timeout();
                prop_assert!(t.is_some_and(|t| t <= lease.valid_until()));
                if lease.renew_in_flight() {
                    prop_assert_eq!(t, Some(lease.valid_until()));
                }
            }
        }
    }
}

/// The step-down instant is the deadline itself, even with a renewal in flight.
#[test]
fn steps_down_exactly_at_the_deadline() {
    let timing = LeaseTiming::new(Ttl::new(ms(3000)).unwrap(), ms(1000));
    let t0 = Instant::ZERO;
    let mut lease = HeldLease::new(timing, None, t0, t0 + ms(10));
    let order = lease.poll_renew(t0 + ms(10)).unwrap();
    assert_eq!(order.deadline, t0 + ms(1010), "one renew interval");
    assert_eq!(lease.poll_timeout(), Some(t0 + ms(3000)));
    lease.handle_timeout(t0 + ms(2999));
    assert!(lease.is_held(t0 + ms(2999)));
    lease.handle_timeout(t0 + ms(3000));
    assert!(!lease.is_held(t0 + ms(3000)));
    assert_eq!(lease.lost(), Some(LossReason::DeadlineExpired));
    // The renewal's reply arriving right at the deadline ("photo finish") does not revive it.
    lease.handle_renew(t0 + ms(3000), Ok(RenewOutcome::Renewed));
    assert!(!lease.is_held(t0 + ms(3000)));
}

/// A "renewed" reply delivered at the deadline without a prior `handle_timeout` (a driver that
/// delivers a ready reply in preference to its timer) must not carry the lease past the
/// deadline it had when the reply arrived.
#[test]
fn a_reply_at_the_deadline_does_not_revive() {
    let timing = LeaseTiming::new(Ttl::new(ms(3000)).unwrap(), ms(1000));
    let t0 = Instant::ZERO;
    let mut lease = HeldLease::new(timing, None, t0, t0);
    let order = lease.poll_renew(t0 + ms(100)).unwrap();
    assert_eq!(order.sent_at, t0 + ms(100));
    lease.handle_renew(t0 + ms(3000), Ok(RenewOutcome::Renewed));
    assert!(!lease.is_held(t0 + ms(3000)));
    assert_eq!(lease.lost(), Some(LossReason::DeadlineExpired));
}

proptest! {
    /// A lock's lease ([`HeldLease::renewed_when_due`]): no renewal before one renew interval
    /// after the acquiring send, exactly one when it is due, and the timer points at it.
    #[test]
    fn a_lock_lease_renews_only_when_due(ttl_ms in 50u64..10_000, renew_pct in 10u64..90, rtt_ms in 0u64..12_000, early_ms in 0u64..5_000) {
        let renew = ms(ttl_ms * renew_pct / 100).max(ms(1));
        let timing = LeaseTiming::new(Ttl::new(ms(ttl_ms)).map_err(|e| TestCaseError::fail(e.to_string()))?, renew);
        let sent_at = Instant::ZERO + ms(1000);
        let now = sent_at + ms(rtt_ms);
        let mut lease = HeldLease::renewed_when_due(timing, None, sent_at, now);
        let due = (sent_at + renew).max(now);
        if now >= lease.valid_until() {
            prop_assert!(!lease.is_held(now));
            return Ok(());
        }
        prop_assert_eq!(lease.poll_timeout(), Some(due.min(lease.valid_until())));
        let probe = now + ms(early_ms);
        let polled = lease.poll_renew(probe);
        prop_assert_eq!(polled.is_some(), probe >= due && probe < lease.valid_until(), "renewal exactly when due");
    }
}
