//! Properties of the lock machines (`lease_core::lock`) over random interleavings.
//!
//! **Held locks.** proptest chooses a timing (TTL, auto-renewal or not, drift margin, an
//! operation timeout) and a sequence of actions: time passing (the driver wakes at every
//! timer on the way), renewals polled and answered (renewed, not ours, unavailable, refused,
//! timed out, outcome unknown), explicit refreshes to random TTLs started, answered the same
//! ways or abandoned, and release or drop. A model of the store tracks every expiry the store
//! may hold (a request whose outcome is unknown may or may not have applied). After every step:
//!
//! - the local deadline never exceeds any expiry the store may hold (the store was never told
//!   less than the lock believes);
//! - never held at or after the local deadline, and once not held, never held again;
//! - at most one TTL-changing request (renewal or refresh) in flight;
//! - every renewal's reply deadline is within the remaining validity;
//! - `poll_timeout` never makes a driver spin;
//! - a drop releases when the token is private or the lock was held.
//!
//! **Obtains.** proptest chooses a wait, an operation timeout, a retry strategy, whether the
//! token is private, and the reply of each attempt. Checked:
//!
//! - no attempt starts after the wait deadline; every attempt is bounded by
//!   `min(operation timeout or TTL, TTL)`; a permanent error or a grant ends the obtain;
//! - the final error is "outcome unknown" exactly when an attempt got no answer and no later
//!   attempt was answered; cleanup is asked for exactly then, and only with a private token;
//! - a grant reports the fencing token and the winning attempt's send instant.

use std::time::Duration;

use lease_core::lease::LeaseTiming;
use lease_core::lock::{
    HeldLock, LockEvent, LockOptions, Obtain, RefreshReply, RefreshStart, release_result,
};
use lease_core::{
    AcquireOutcome, BackendError, FenceState, Instant, ReleaseOutcome, RenewOutcome, RetryStrategy,
    Token, Ttl,
};
use proptest::prelude::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How a request is answered.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Applied,
    NotOurs,
    Unavailable,
    Refused,
    TimedOut,
    Unknown,
}

impl Answer {
    fn reply(self, bound: Duration) -> Result<RenewOutcome, BackendError> {
        match self {
            Answer::Applied => Ok(RenewOutcome::Renewed),
            Answer::NotOurs => Ok(RenewOutcome::NotHeld),
            Answer::Unavailable => Err(BackendError::Unavailable("down".into())),
            Answer::Refused => Err(BackendError::Refused("NOPERM".into())),
            Answer::TimedOut => Err(BackendError::Timeout(bound)),
            Answer::Unknown => Err(BackendError::OutcomeUnknown("reset".into())),
        }
    }
}

fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        4 => Just(Answer::Applied),
        1 => Just(Answer::NotOurs),
        2 => Just(Answer::Unavailable),
        1 => Just(Answer::Refused),
        2 => Just(Answer::TimedOut),
        2 => Just(Answer::Unknown),
    ]
}

#[derive(Clone, Debug)]
enum Action {
    /// Time passes by this fraction (‰) of the TTL; the driver wakes at every timer.
    Advance(u64),
    /// The driver polls for a renewal.
    PollRenew,
    /// The renewal in flight is answered now.
    AnswerRenew(Answer),
    /// A refresh attempt to this fraction (‰) of the TTL starts.
    BeginRefresh(u64),
    /// The refresh attempt in flight is answered now.
    AnswerRefresh(Answer),
    /// The refresh caller gives up on its attempt.
    AbandonRefresh,
    /// Explicit release.
    Release,
    /// The handle is dropped.
    Drop,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (1u64..700).prop_map(Action::Advance),
        3 => Just(Action::PollRenew),
        3 => answer().prop_map(Action::AnswerRenew),
        2 => (1u64..3000).prop_map(Action::BeginRefresh),
        2 => answer().prop_map(Action::AnswerRefresh),
        1 => Just(Action::AbandonRefresh),
        1 => Just(Action::Release),
        1 => Just(Action::Drop),
    ]
}

/// A request whose effect on the store is pending: the expiry it tells.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    expiry: Instant,
    bound: Duration,
}

/// What the store may hold: every expiry it may have been told last.
#[derive(Debug)]
struct Store {
    possible: Vec<Instant>,
}

impl Store {
    fn min(&self) -> Instant {
        self.possible.iter().copied().min().unwrap_or(Instant::ZERO)
    }
    /// A request is sent: it may apply from now on.
    fn send(&mut self, expiry: Instant) {
        self.possible.push(expiry);
    }
    /// Its answer: applied (only its expiry stands), not applied (it never did), or unknown.
    fn settle(&mut self, expiry: Instant, answer: Answer) {
        match answer {
            Answer::Applied => self.possible = vec![expiry],
            Answer::Unavailable | Answer::Refused | Answer::NotOurs => {
                if let Some(i) = self.possible.iter().rposition(|e| *e == expiry) {
                    self.possible.remove(i);
                }
            }
            Answer::TimedOut | Answer::Unknown => {}
        }
    }
}

struct Harness {
    lock: HeldLock,
    now: Instant,
    store: Store,
    renew: Option<InFlight>,
    refresh: Option<InFlight>,
    ever_unheld: bool,
    ended: bool,
}

impl Harness {
    fn check(&mut self) -> Result<(), TestCaseError> {
        let held = self.lock.is_held(self.now);
        if held {
            prop_assert!(
                self.now < self.lock.valid_until(),
                "held at or after the deadline"
            );
            prop_assert!(!self.ever_unheld, "held again after it was not");
            prop_assert!(
                self.lock.valid_until() <= self.store.min(),
                "the local deadline {:?} exceeds what the store may hold {:?}",
                self.lock.valid_until(),
                self.store.possible
            );
        } else {
            self.ever_unheld = true;
        }
        prop_assert!(
            self.renew.is_none() || self.refresh.is_none(),
            "two TTL-changing requests in flight"
        );
        while let Some(event) = self.lock.poll_event() {
            if let LockEvent::Lost { release, .. } = event {
                prop_assert!(!release || self.lock.private_token());
            }
        }
        Ok(())
    }

    /// Runs the driver's timer loop up to `until`, waking at every timeout.
    fn advance(&mut self, until: Instant) -> Result<(), TestCaseError> {
        let mut guard = 0;
        while let Some(t) = self.lock.poll_timeout() {
            if t > until {
                break;
            }
            self.now = self.now.max(t);
            let before = self.lock.poll_timeout();
            self.lock.handle_timeout(self.now);
            let polled = self.poll_renew()?;
            let after = self.lock.poll_timeout();
            // No spin: the timeout moved, the lock ended, or a renewal went out.
            prop_assert!(
                polled || after != before || after.is_none_or(|a| a > self.now),
                "poll_timeout spins at {:?}",
                self.now
            );
            self.check()?;
            guard += 1;
            prop_assert!(guard < 10_000, "timer loop does not progress");
            if polled || after == before {
                break;
            }
        }
        self.now = self.now.max(until);
        self.lock.handle_timeout(self.now);
        self.check()
    }

    fn poll_renew(&mut self) -> Result<bool, TestCaseError> {
        let Some(order) = self.lock.poll_renew(self.now) else {
            return Ok(false);
        };
        prop_assert!(
            self.renew.is_none() && self.refresh.is_none(),
            "renewal while another request is in flight"
        );
        prop_assert!(
            order.deadline <= self.lock.valid_until(),
            "renewal waits past the deadline"
        );
        let expiry = order.sent_at + self.lock.ttl().get();
        self.store.send(expiry);
        self.renew = Some(InFlight {
            expiry,
            bound: order.deadline - order.sent_at,
        });
        Ok(true)
    }
}

fn timing() -> impl Strategy<Value = (LeaseTiming, bool, bool)> {
    (
        100u64..5000,
        2u64..5,
        0u64..20,
        prop::option::of(1u64..2000),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(ttl, div, margin_pct, cap, auto, private)| {
            let ttl_d = ms(ttl);
            (
                LeaseTiming::new(Ttl::new(ttl_d).expect("valid"), ttl_d / div as u32)
                    .with_operation_timeout(cap.map(ms))
                    .with_margin(ttl_d * margin_pct as u32 / 100),
                auto,
                private,
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn a_held_lock_never_outlives_what_the_store_was_told(
        (timing, auto, private) in timing(),
        actions in prop::collection::vec(action(), 1..60),
    ) {
        let start = Instant::ZERO + ms(1000);
        let ttl = timing.ttl.get();
        let mut h = Harness {
            lock: HeldLock::new(timing, auto, Some(Token::new(5).expect("valid")), private, start, start),
            now: start,
            store: Store { possible: vec![start + ttl] },
            renew: None,
            refresh: None,
            ever_unheld: false,
            ended: false,
        };
        h.check()?;
        for action in actions {
            if h.ended {
                break;
            }
            match action {
                Action::Advance(permille) => {
                    let until = h.now + ttl * permille as u32 / 1000;
                    h.advance(until)?;
                }
                Action::PollRenew => {
                    let polled = h.poll_renew()?;
                    prop_assert!(polled || !auto || h.renew.is_some() || h.refresh.is_some() || !h.lock.is_held(h.now) || h.lock.poll_timeout().is_some_and(|t| t > h.now));
                }
                Action::AnswerRenew(a) => {
                    if let Some(r) = h.renew.take() {
                        h.store.settle(r.expiry, a);
                        h.lock.handle_renew(h.now, a.reply(r.bound));
                    }
                }
                Action::BeginRefresh(permille) => {
                    let new_ttl = Ttl::new(ms((ttl.as_millis() as u64 * permille / 1000).max(1))).expect("valid");
                    let was_held = h.lock.is_held(h.now);
                    match h.lock.begin_refresh(h.now, new_ttl, timing.margin) {
                        RefreshStart::Send(order) => {
                            prop_assert!(h.renew.is_none() && h.refresh.is_none(), "refresh while a request is in flight");
                            prop_assert!(was_held, "a refresh of a lock that is not held");
                            prop_assert!(order.deadline > order.sent_at);
                            prop_assert!(order.deadline <= h.lock.valid_until().max(order.sent_at + ms(1)));
                            let expiry = h.now + new_ttl.get();
                            h.store.send(expiry);
                            h.refresh = Some(InFlight { expiry, bound: order.deadline - order.sent_at });
                        }
                        RefreshStart::Busy => prop_assert!(h.renew.is_some() || h.refresh.is_some(), "busy with nothing in flight"),
                        RefreshStart::NotHeld => prop_assert!(h.renew.is_some() || h.refresh.is_some() || !was_held || !h.lock.is_held(h.now)),
                        _ => {}
                    }
                }
                Action::AnswerRefresh(a) => {
                    if let Some(r) = h.refresh.take() {
                        h.store.settle(r.expiry, a);
                        let was_held = h.lock.is_held(h.now);
                        match h.lock.handle_refresh(h.now, a.reply(r.bound)) {
                            RefreshReply::Refreshed => {
                                prop_assert!(matches!(a, Answer::Applied) && was_held);
                                prop_assert_eq!(h.lock.valid_until(), r.expiry.min(h.lock.valid_until()));
                            }
                            RefreshReply::Failed(_) => prop_assert!(!matches!(a, Answer::Applied | Answer::NotOurs)),
                            _ => prop_assert!(matches!(a, Answer::NotOurs) || !was_held || !h.lock.is_held(h.now)),
                        }
                    }
                }
                Action::AbandonRefresh => {
                    if h.refresh.take().is_some() {
                        h.lock.abandon_refresh();
                    }
                }
                Action::Release => {
                    h.lock.release();
                    prop_assert!(!h.lock.is_held(h.now));
                    prop_assert!(h.lock.poll_timeout().is_none());
                    h.ended = true;
                }
                Action::Drop => {
                    let held = h.lock.is_held(h.now);
                    let send = h.lock.release_on_drop(h.now);
                    prop_assert_eq!(send, private || held);
                    prop_assert!(!h.lock.release_on_drop(h.now), "released twice");
                    h.ended = true;
                }
            }
            h.check()?;
        }
    }
}

/// The answer to one obtain attempt.
#[derive(Clone, Copy, Debug)]
enum Grant {
    Acquired,
    Held,
    Unavailable,
    Refused,
    TimedOut,
    Unknown,
}

fn grant() -> impl Strategy<Value = Grant> {
    prop_oneof![
        1 => Just(Grant::Acquired),
        4 => Just(Grant::Held),
        2 => Just(Grant::Unavailable),
        1 => Just(Grant::Refused),
        2 => Just(Grant::TimedOut),
        2 => Just(Grant::Unknown),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn an_obtain_is_truthful_and_bounded(
        ttl in 10u64..5000,
        wait in 0u64..10_000,
        cap in prop::option::of(1u64..10_000),
        retry in prop::option::of(1u64..500),
        private in any::<bool>(),
        seed in any::<u64>(),
        grants in prop::collection::vec((grant(), 0u64..3000), 1..40),
    ) {
        let mut options = LockOptions::new().wait(ms(wait));
        if let Some(c) = cap {
            options = options.operation_timeout(ms(c));
        }
        if let Some(r) = retry {
            options = options.retry(RetryStrategy::linear(ms(r)).expect("valid"));
        }
        if !private {
            options = options.owner("chosen");
        }
        let plan = options.plan(["k"], ms(ttl), || "generated".into()).expect("valid");
        prop_assert_eq!(plan.private_token, private);
        let start = Instant::ZERO + ms(5);
        let bound = cap.map_or(ms(ttl), ms).min(ms(ttl));
        let mut obtain = Obtain::new(&plan, seed, start);
        let mut now = start;
        let mut unknown = false;
        let mut attempts = 0;
        let mut grants = grants.into_iter();
        let outcome = loop {
            if let Some(outcome) = obtain.poll_outcome() {
                break outcome;
            }
            let attempt = match obtain.poll_request(now) {
                Some(a) => a,
                None => {
                    let t = obtain.poll_timeout();
                    prop_assert!(t.is_some_and(|t| t > now), "an obtain that neither ends nor waits");
                    now = t.expect("checked");
                    continue;
                }
            };
            attempts += 1;
            prop_assert!(attempt.sent_at <= start + ms(wait), "an attempt started after the wait deadline");
            prop_assert_eq!(attempt.deadline, attempt.sent_at + bound);
            prop_assert_eq!(obtain.attempt_bound(), bound);
            let (g, after) = grants.next().unwrap_or((Grant::Held, 1));
            now = attempt.sent_at + ms(after).min(bound);
            match g {
                Grant::Acquired => obtain.handle_reply(now, Ok(AcquireOutcome::Acquired { token: Token::new(9).ok(), fence: FenceState::UNKNOWN })),
                Grant::Held => {
                    unknown = false;
                    obtain.handle_reply(now, Ok(AcquireOutcome::Held { holder: None, remaining: None, fence: FenceState::UNKNOWN }))
                }
                Grant::Unavailable => obtain.handle_reply(now, Err(BackendError::Unavailable("down".into()))),
                Grant::Refused => obtain.handle_reply(now, Err(BackendError::Refused("NOPERM".into()))),
                Grant::TimedOut => {
                    unknown = true;
                    now = attempt.deadline;
                    obtain.handle_reply(now, Err(BackendError::Timeout(obtain.attempt_bound())));
                }
                Grant::Unknown => {
                    unknown = true;
                    obtain.handle_reply(now, Err(BackendError::OutcomeUnknown("reset".into())))
                }
            }
            match g {
                Grant::Acquired | Grant::Refused => {
                    prop_assert!(obtain.poll_request(now + ms(100_000)).is_none(), "an attempt after the obtain ended");
                }
                _ => {}
            }
            prop_assert!(attempts < 10_000);
        };
        match outcome {
            Ok(obtained) => {
                prop_assert_eq!(obtained.token, Token::new(9).ok());
                prop_assert!(!obtain.needs_cleanup());
            }
            Err(e) => {
                prop_assert_eq!(e.is_outcome_unknown(), unknown, "{}", e);
                prop_assert_eq!(obtain.needs_cleanup(), unknown && private);
            }
        }
    }
}

#[test]
fn release_results_are_truthful() {
    assert!(release_result(Ok(ReleaseOutcome::Released)).is_ok());
    assert!(matches!(
        release_result(Ok(ReleaseOutcome::NotHeld)),
        Err(lease_core::lock::LockError::NotHeld)
    ));
    assert!(
        release_result(Err(BackendError::Timeout(ms(1))))
            .unwrap_err()
            .is_outcome_unknown()
    );
    assert!(matches!(
        release_result(Err(BackendError::Unavailable("down".into()))),
        Err(lease_core::lock::LockError::Unavailable(_))
    ));
}
