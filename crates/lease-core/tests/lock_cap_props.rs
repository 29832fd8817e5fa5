//! The cap of a hold ([`LockOptions::max_hold`]) over random interleavings.
//!
//! proptest chooses a timing (TTL, renew interval, drift margin), a cap of at least one TTL,
//! whether the token is private, and a script: time passing (the driver wakes at every timer
//! on the way, sends each renewal due and answers it: renewed, unavailable, timed out, outcome
//! unknown, rarely "not ours") and explicit refreshes to random TTLs. Checked at every step:
//!
//! - no renewal or refresh is sent that would tell the store an expiry (`sent + ttl`) past
//!   `obtained + max_hold`, and a refresh is refused (`PastCap`) exactly when it would;
//! - the local deadline never passes the cap, and the lock is never held at or after it;
//! - the loss signal fires at or before the cap, whatever happened; with the cap's reason
//!   ([`LossReason::MaxHoldReached`]) — and then the release is asked for exactly when the
//!   token is private — unless the store said "not ours" first, or a renewal within the cap
//!   failed or a refresh shortened the deadline (a real loss at the deadline);
//! - with every renewal answered, the hold is not cut short: it ends within one renew interval
//!   (plus the margin) before the cap, with the cap's reason.
//!
//! The negative control runs the same checker over a lock built without the cap: it must
//! find a renewal past the bound.

use std::time::Duration;

use lease_core::lease::LeaseTiming;
use lease_core::lock::{HeldLock, LockEvent, LockOptions, RefreshStart};
use lease_core::{BackendError, Instant, LossReason, RenewOutcome, Ttl};
use proptest::prelude::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Applied,
    NotOurs,
    Unavailable,
    TimedOut,
    Unknown,
}

impl Answer {
    fn reply(self, bound: Duration) -> Result<RenewOutcome, BackendError> {
        match self {
            Answer::Applied => Ok(RenewOutcome::Renewed),
            Answer::NotOurs => Ok(RenewOutcome::NotHeld),
            Answer::Unavailable => Err(BackendError::Unavailable("down".into())),
            Answer::TimedOut => Err(BackendError::Timeout(bound)),
            Answer::Unknown => Err(BackendError::OutcomeUnknown("reset".into())),
        }
    }
}

fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        8 => Just(Answer::Applied),
        1 => Just(Answer::NotOurs),
        2 => Just(Answer::Unavailable),
        2 => Just(Answer::TimedOut),
        2 => Just(Answer::Unknown),
    ]
}

#[derive(Clone, Debug)]
enum Step {
    /// Time passes by this many ms; every renewal due on the way is answered so, after `rtt`
    /// ms (capped by its deadline).
    Pass { gap: u64, answer: Answer, rtt: u64 },
    /// An explicit refresh to this TTL (ms), answered so after 1 ms.
    Refresh { ttl: u64, answer: Answer },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (1u64..400, answer(), 0u64..20).prop_map(|(gap, answer, rtt)| Step::Pass { gap, answer, rtt }),
        1 => (1u64..3_000, answer()).prop_map(|(ttl, answer)| Step::Refresh { ttl, answer }),
    ]
}

/// What ended the hold: when, why, and whether a release was asked for.
type End = (Instant, LossReason, bool);

struct Sim {
    lock: HeldLock,
    now: Instant,
    ttl: Ttl,
    margin: Duration,
    cap: Instant,
    end: Option<End>,
}

impl Sim {
    fn events(&mut self) -> Result<(), String> {
        while let Some(e) = self.lock.poll_event() {
            if let LockEvent::Lost { reason, release } = e {
                if self.end.is_some() {
                    return Err("a second loss".into());
                }
                self.end = Some((self.now, reason, release));
            }
        }
        Ok(())
    }

    fn check(&mut self) -> Result<(), String> {
        self.events()?;
        if self.lock.valid_until() > self.cap {
            return Err(format!(
                "local deadline {:?} past the cap {:?}",
                self.lock.valid_until(),
                self.cap
            ));
        }
        if self.now >= self.cap && self.lock.is_held(self.now) {
            return Err(format!("held at {:?}, at or after the cap", self.now));
        }
        Ok(())
    }

    /// Passes time to `target`, waking at every timer and answering each renewal due.
    fn pass(&mut self, target: Instant, answer: Answer, rtt: u64) -> Result<(), String> {
        loop {
            match self.lock.poll_timeout() {
                Some(t) if t <= target => self.now = self.now.max(t),
                _ => self.now = target,
            }
            self.lock.handle_timeout(self.now);
            self.check()?;
            if let Some(order) = self.lock.poll_renew(self.now) {
                let end = order.sent_at + self.ttl.get();
                if end > self.cap {
                    return Err(format!(
                        "a renewal sent at {:?} tells the store {end:?}, past the cap {:?}",
                        order.sent_at, self.cap
                    ));
                }
                self.now = (self.now + ms(rtt)).min(order.deadline);
                let bound = order.deadline - order.sent_at;
                let reply = if answer == Answer::TimedOut {
                    self.now = order.deadline;
                    answer.reply(bound)
                } else {
                    answer.reply(bound)
                };
                self.lock.handle_renew(self.now, reply);
                self.check()?;
            }
            if self.now >= target {
                return Ok(());
            }
        }
    }

    fn refresh(&mut self, ttl: u64, answer: Answer) -> Result<(), String> {
        let ttl = Ttl::new(ms(ttl)).map_err(|e| e.to_string())?;
        let past = self.now + ttl.get() > self.cap;
        match self.lock.begin_refresh(self.now, ttl, self.margin) {
            RefreshStart::Send(order) => {
                if past {
                    return Err(format!("a refresh to {ttl:?} at {:?} was sent", self.now));
                }
                self.check()?;
                self.now = (self.now + ms(1)).min(order.deadline);
                let _ = self
                    .lock
                    .handle_refresh(self.now, answer.reply(order.deadline - order.sent_at));
                self.check()
            }
            RefreshStart::PastCap if !past => Err("refused a refresh within the cap".into()),
            RefreshStart::PastCap if !self.lock.is_held(self.now) => {
                Err("PastCap for a lock not held".into())
            }
            _ => self.check(),
        }
    }
}

/// Runs `steps`, then lets time run (every renewal answered) until well past the cap.
fn run(mut sim: Sim, steps: &[Step]) -> Result<End, String> {
    for s in steps {
        match *s {
            Step::Pass { gap, answer, rtt } => {
                let target = sim.now + ms(gap);
                sim.pass(target, answer, rtt)?;
            }
            Step::Refresh { ttl, answer } => sim.refresh(ttl, answer)?,
        }
    }
    let far = sim.cap + sim.ttl.get() * 2;
    sim.pass(far, Answer::Applied, 1)?;
    let end = sim.end.ok_or("the hold never ended")?;
    if end.0 > sim.cap {
        return Err(format!(
            "the loss fired at {:?}, after the cap {:?}",
            end.0, sim.cap
        ));
    }
    Ok(end)
}

fn timing() -> impl Strategy<Value = (LeaseTiming, u64, bool)> {
    (
        50u64..2_000,
        2u64..=10,
        0u64..=50,
        0u64..8_000,
        any::<bool>(),
    )
        .prop_map(|(ttl, div, margin_pm, extra, private)| {
            let ttl_d = ms(ttl);
            let interval = (ttl_d / div as u32).max(ms(1));
            let timing = LeaseTiming::new(Ttl::new(ttl_d).expect("valid"), interval)
                .with_margin(ttl_d * margin_pm as u32 / 1000);
            (timing, ttl + extra, private)
        })
}

fn sim(timing: LeaseTiming, cap: Option<Instant>, private: bool, bound: Instant) -> Sim {
    let t0 = Instant::ZERO;
    Sim {
        lock: HeldLock::new(timing, true, None, private, t0, t0).with_cap(cap),
        now: t0,
        ttl: timing.ttl,
        margin: timing.margin,
        cap: bound,
        end: None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_capped_hold_ends_by_its_cap_and_says_so(
        (timing, max_hold, private) in timing(),
        steps in proptest::collection::vec(step(), 0..40),
    ) {
        let cap = Instant::ZERO + ms(max_hold);
        let (_, reason, release) = run(sim(timing, Some(cap), private, cap), &steps)
            .map_err(TestCaseError::fail)?;
        match reason {
            LossReason::MaxHoldReached => prop_assert_eq!(release, private),
            LossReason::NotOurs => prop_assert!(!release),
            // A renewal within the cap failed, or a refresh shortened the deadline: a real loss.
            LossReason::DeadlineExpired if steps.iter().any(|s| match s {
                Step::Pass { answer, .. } => *answer != Answer::Applied,
                Step::Refresh { .. } => true,
            }) => {}
            other => prop_assert!(false, "ended with {:?}, not the cap's reason", other),
        }
    }

    #[test]
    fn a_capped_hold_is_not_cut_short(
        (timing, max_hold, private) in timing(),
        rtt in 0u64..5,
    ) {
        let cap = Instant::ZERO + ms(max_hold);
        let steps = [Step::Pass { gap: max_hold, answer: Answer::Applied, rtt }];
        let (at, reason, release) = run(sim(timing, Some(cap), private, cap), &steps)
            .map_err(TestCaseError::fail)?;
        prop_assert_eq!(reason, LossReason::MaxHoldReached);
        prop_assert_eq!(release, private);
        let slack = timing.renew_interval + timing.margin + ms(rtt);
        prop_assert!(at + slack >= cap, "ended at {:?}, more than {:?} before the cap", at, slack);
    }
}

/// Negative control: the checker catches a lock that renews past the bound (the same lock,
/// built without its cap).
#[test]
fn without_the_cap_the_checker_finds_a_renewal_past_the_bound() {
    let timing = LeaseTiming::new(Ttl::new(ms(300)).expect("valid"), ms(100));
    let bound = Instant::ZERO + ms(600);
    let steps = [Step::Pass {
        gap: 600,
        answer: Answer::Applied,
        rtt: 1,
    }];
    let err = run(sim(timing, None, true, bound), &steps).expect_err("the uncapped lock renews on");
    assert!(err.contains("past the cap"), "{err}");
    // And with the cap, the same script passes.
    let (_, reason, _) = run(sim(timing, Some(bound), true, bound), &steps).expect("capped");
    assert_eq!(reason, LossReason::MaxHoldReached);
}

/// The options are checked before any round trip: a cap needs auto-renewal and one TTL.
#[test]
fn a_max_hold_is_validated_before_any_round_trip() {
    let plan = |o: LockOptions| o.plan(["k"], ms(1_000), || "t".into());
    assert!(
        plan(LockOptions::new().max_hold(ms(5_000))).is_err(),
        "no auto-renewal"
    );
    assert!(
        plan(LockOptions::new().auto_renew(ms(300)).max_hold(ms(999))).is_err(),
        "shorter than the TTL"
    );
    let ok = plan(LockOptions::new().auto_renew(ms(300)).max_hold(ms(1_000))).expect("one TTL");
    assert_eq!(ok.max_hold, Some(ms(1_000)));
    assert_eq!(plan(LockOptions::new()).expect("plain").max_hold, None);
}
