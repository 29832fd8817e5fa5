//! [`Obtain`]: the machine of one obtain call.

use std::time::Duration;

use crate::backend::{AcquireOutcome, BackendError};
use crate::lock::error::LockError;
use crate::lock::options::ObtainPlan;
use crate::lock::schedule::{NextAttempt, ObtainSchedule};
use crate::time::Instant;
use crate::token::Token;

/// An attempt the machine asks the driver to send now: the plan's acquire request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// When it is sent (the `now` it was polled at): the lock is dated from it.
    pub sent_at: Instant,
    /// When to stop waiting and feed a timeout to [`Obtain::handle_reply`].
    pub deadline: Instant,
}

/// A won obtain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Obtained {
    /// The fencing token minted with the lock, when the plan has a fence key.
    pub token: Option<Token>,
    /// When the winning attempt was sent.
    pub sent_at: Instant,
}

#[derive(Debug)]
enum State {
    /// Waiting for the next attempt, made at `at`. `next` is the strategy's word on it:
    /// `At(due)`, a retry that counts when it is made at or after `due` (`at` is earlier only
    /// when something may have freed the lock: a notice, a hand-off line, the holder's
    /// expiry), or the end the obtain comes to if an attempt woken past the strategy's end
    /// fails.
    Due { at: Instant, next: NextAttempt },
    /// An attempt is in flight. `early`: it was made before the strategy's due instant (a
    /// wake-up, not a retry), and what stands if it finds the lock held.
    InFlight {
        sent_at: Instant,
        early: Option<NextAttempt>,
    },
    /// Finished; the outcome not yet taken.
    Done(Option<Result<Obtained, LockError>>),
}

/// One obtain call: attempts, retries within the wait, and the truthful final outcome.
///
/// See the [module documentation](crate::lock) for the driver's contract.
///
/// ```
/// use std::time::Duration;
/// use lease_core::{BackendError, Instant};
/// use lease_core::lock::{LockOptions, Obtain};
/// let plan = LockOptions::new().plan(["k"], Duration::from_secs(1), || "t".into())?;
/// let mut obtain = Obtain::new(&plan, 7, Instant::ZERO);
/// let attempt = obtain.poll_request(Instant::ZERO).expect("the first attempt is due at once");
/// assert_eq!(attempt.deadline, Instant::ZERO + Duration::from_secs(1));
/// // No reply: the lock may be ours, and nothing later settles it.
/// obtain.handle_reply(attempt.deadline, Err(BackendError::Timeout(obtain.attempt_bound())));
/// let err = obtain.poll_outcome().expect("no retry left").unwrap_err();
/// assert!(err.is_outcome_unknown());
/// assert!(obtain.needs_cleanup(), "a generated token is cleaned up");
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct Obtain {
    schedule: ObtainSchedule,
    bound: Duration,
    private_token: bool,
    /// An attempt's outcome is unknown and no later answer settled it.
    unknown: bool,
    /// Whether abandoning the obtain now must clean up.
    armed: bool,
    /// A release notice arrived while an attempt was in flight.
    notice_pending: bool,
    /// Release notices are arriving (the driver's watch is live).
    notices_live: bool,
    /// While the strategy's retries before a holder's expiry are skipped (a wake-up is
    /// expected sooner): the first of them and the schedule from just after it, to make them
    /// after all if no wake-up can come.
    skipped: Option<(Instant, ObtainSchedule)>,
    state: State,
}

impl Obtain {
    /// The obtain of `plan`, started at `now`; `seed` jitters its retries (waiters that saw the
    /// same release spread out). The first attempt is due at once.
    pub fn new(plan: &ObtainPlan, seed: u64, now: Instant) -> Self {
        Obtain {
            schedule: ObtainSchedule::new(plan.retry.jittered_sequence(seed), now + plan.wait),
            bound: plan.attempt_bound(),
            private_token: plan.private_token,
            unknown: false,
            armed: false,
            notice_pending: false,
            notices_live: false,
            skipped: None,
            state: State::Due {
                at: now,
                next: NextAttempt::At(now),
            },
        }
    }

    /// The next attempt to send, if one is due at `now` (none while one is in flight).
    ///
    /// The wait decides when the last attempt may *start*; each attempt is bounded by
    /// [`ObtainPlan::attempt_bound`]. So a zero wait still means "try once", and an attempt
    /// started just before the wait deadline is not cut short into an unknown outcome.
    pub fn poll_request(&mut self, now: Instant) -> Option<Attempt> {
        match self.state {
            State::Due { at, next } if now >= at => {
                self.state = State::InFlight {
                    sent_at: now,
                    early: early(next, now),
                };
                // Abandoned from here on, the attempt may win.
                self.armed = self.private_token;
                Some(Attempt {
                    sent_at: now,
                    deadline: now + self.bound,
                })
            }
            _ => None,
        }
    }

    /// Feeds the reply of the attempt in flight, received at `now` (ignored when none is).
    /// One attempt is in flight at a time, so no request id is needed.
    ///
    /// No reply by the attempt's deadline is fed as `Err(BackendError::Timeout(bound))`
    /// ([`Obtain::attempt_bound`]), as every error of unknown effect: the attempt may have won
    /// at the store; the next attempt (same token) takes it over, and if there is none the
    /// obtain cleans up.
    pub fn handle_reply(&mut self, now: Instant, reply: Result<AcquireOutcome, BackendError>) {
        let State::InFlight { sent_at, early } = self.state else {
            return;
        };
        let last = match reply {
            Ok(AcquireOutcome::Acquired { token, .. }) => {
                self.armed = false;
                self.unknown = false;
                self.state = State::Done(Some(Ok(Obtained { token, sent_at })));
                return;
            }
            Ok(AcquireOutcome::Held {
                holder, remaining, ..
            }) => {
                // An answer: whatever an earlier unanswered attempt did has been settled (had
                // it won, this attempt, with the same token, would have taken over).
                self.unknown = false;
                let last = LockError::NotObtained { holder };
                let expiry = remaining.map(|r| now + r);
                return self.after_failure(now, last, (sent_at, early), expiry);
            }
            Err(e) => {
                self.unknown |= e.is_outcome_unknown();
                if !e.is_transient() {
                    // Permanent: refused at once, never retried.
                    let err = self.give_up(LockError::from_backend(e));
                    self.finish(Err(err));
                    return;
                }
                LockError::from_backend(e)
            }
        };
        self.after_failure(now, last, (sent_at, early), None);
    }

    /// The attempt in flight was answered by the driver's own process instead of the store:
    /// another lock of this process holds the key (locally valid until `until`, when known) and will hand it to this obtain or say when it lets it go (a hand-off,
    /// [`Obtain::handle_transfer`], or [`Obtain::handle_notice`]). Read like a `Held` reply
    /// with notices live (the next attempt waits for `until`), except that it settles nothing
    /// an earlier unanswered attempt did, and that it never ends the obtain: only the store's
    /// answer is final. Returns whether it was taken; `false` when the obtain would end on it
    /// (out of retries or past the wait): the attempt stays in flight, and the driver sends it
    /// to the store.
    pub fn handle_local_hold(&mut self, now: Instant, until: Option<Instant>) -> bool {
        let State::InFlight { sent_at, early } = self.state else {
            return false;
        };
        // The holder of this process wakes this obtain when it lets the key go: retries
        // before its deadline are skipped as with live notices.
        let (schedule, skipped) = (self.schedule.clone(), self.skipped.clone());
        let next = self.next_after_failure(now, (sent_at, early), until, true);
        let NextAttempt::At(due) = next else {
            self.schedule = schedule;
            self.skipped = skipped;
            return false;
        };
        self.armed = self.private_token && self.unknown;
        self.notice_pending = false;
        self.state = State::Due {
            at: wake_at(now, due, until),
            next,
        };
        true
    }

    /// An acquire sent for this obtain by someone else (the holder of this process that
    /// handed the lock over: `lease-tokio`'s hand-off), sent at `sent_at` and answered at
    /// `now`: fed as if this machine had sent it, so a win is dated from `sent_at` and an
    /// unknown outcome stays unknown until a later attempt is answered. Only while waiting for
    /// the next attempt (returns whether it was taken; nothing in flight, not finished).
    pub fn handle_transfer(
        &mut self,
        now: Instant,
        sent_at: Instant,
        reply: Result<AcquireOutcome, BackendError>,
    ) -> bool {
        let State::Due { next, .. } = self.state else {
            return false;
        };
        self.state = State::InFlight {
            sent_at,
            early: early(next, sent_at),
        };
        self.armed = self.private_token;
        self.handle_reply(now, reply);
        true
    }

    /// A release notice for the lock arrived (see [`crate::notify`]): the next attempt is due
    /// at once instead of at its retry delay. Returns whether it moved.
    ///
    /// A notice that arrives while an attempt is in flight is kept: if that attempt fails,
    /// the next one is due at once (the release may have come after the store judged it),
    /// even when the retry delay would have passed the wait deadline. No attempt starts after
    /// the wait deadline, and a strategy out of retries still gives up.
    pub fn handle_notice(&mut self, now: Instant) -> bool {
        match self.state {
            State::InFlight { .. } => {
                self.notice_pending = true;
                false
            }
            State::Due { at, next } if at > now => {
                self.state = State::Due { at: now, next };
                true
            }
            _ => false,
        }
    }

    /// When the next attempt is due, while waiting for it.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Due { at, .. } => Some(at),
            _ => None,
        }
    }

    /// The outcome, once the obtain has ended (yielded once).
    pub fn poll_outcome(&mut self) -> Option<Result<Obtained, LockError>> {
        match &mut self.state {
            State::Done(outcome) => outcome.take(),
            _ => None,
        }
    }

    /// Whether the lock may be held under the obtain's generated token with nobody to release
    /// it, if the obtain ends (or is abandoned) now: send one best-effort release.
    pub fn needs_cleanup(&self) -> bool {
        self.armed
    }

    /// The bound of each attempt.
    pub fn attempt_bound(&self) -> Duration {
        self.bound
    }

    /// The bound of the cleanup release [`Obtain::needs_cleanup`] asks for: the lock's one
    /// rule for releases, [`crate::lock::release_bound`] (the same figure as an attempt's).
    pub fn cleanup_bound(&self) -> Duration {
        self.bound
    }

    /// Whether release notices are arriving for this lock (the driver's watch is live). While
    /// they are, an attempt that found the lock held waits for the notice of its release —
    /// and polls only when the holder's key would expire if the holder had crashed (its
    /// reported remaining TTL), skipping the strategy's attempts before then (each still
    /// counts; see [`ObtainSchedule::after_failure_until`]). Notices only make attempts
    /// earlier: the obtain gives up when the strategy's schedule or the wait deadline says,
    /// whichever is earlier, never later. Set it before feeding each reply.
    pub fn set_notices_live(&mut self, live: bool) {
        self.notices_live = live;
    }

    /// After the attempt `(sent_at, early)` failed at `now`; `expiry`: when the holder's key
    /// expires, if known.
    fn after_failure(
        &mut self,
        now: Instant,
        last: LockError,
        attempt: (Instant, Option<NextAttempt>),
        expiry: Option<Instant>,
    ) {
        self.armed = self.private_token && self.unknown;
        let notice = std::mem::take(&mut self.notice_pending);
        // While notices arrive, nothing is worth trying before the holder's key expires: a
        // release wakes the waiter sooner.
        let until = expiry.filter(|_| self.notices_live && !notice);
        let next = self.next_after_failure(now, attempt, until, self.notices_live);
        match next {
            NextAttempt::At(due) => {
                let at = if notice {
                    now
                } else {
                    wake_at(now, due, until)
                };
                self.state = State::Due { at, next };
            }
            NextAttempt::DeadlineExceeded if notice && now <= self.schedule.deadline() => {
                self.state = State::Due { at: now, next };
            }
            NextAttempt::DeadlineExceeded => {
                let last = self.give_up(last);
                self.finish(Err(LockError::DeadlineExceeded {
                    last: Box::new(last),
                }));
            }
            _ => {
                let err = self.give_up(last);
                self.finish(Err(err));
            }
        }
    }

    /// The strategy's word on the next attempt after the attempt `(sent_at, early)` found the
    /// lock held (or failed) at `now`. An attempt made before its due instant (woken by a
    /// notice, a hand-off line or the holder's expiry) is no retry: the schedule stays where
    /// it was. A retry that was due counts; with `until`, the retries before it are skipped
    /// (each still counts) because a wake-up (`wakes`) will come sooner if the lock is let go.
    /// When no wake-up can come any more, skipped retries are made after all.
    fn next_after_failure(
        &mut self,
        now: Instant,
        (sent_at, early): (Instant, Option<NextAttempt>),
        until: Option<Instant>,
        wakes: bool,
    ) -> NextAttempt {
        if let Some(next) = early {
            match self.skipped.take() {
                Some((first, schedule)) if !wakes => {
                    self.schedule = schedule;
                    if sent_at < first {
                        return NextAttempt::At(first);
                    }
                }
                skipped => {
                    self.skipped = skipped;
                    return next;
                }
            }
        }
        self.skipped = None;
        let Some(until) = until.filter(|_| wakes) else {
            return self.schedule.after_failure(now);
        };
        let mut plain = self.schedule.clone();
        let first = plain.after_failure(now);
        let next = self.schedule.after_failure_until(now, until);
        if let (NextAttempt::At(first), true) = (first, next != first) {
            self.skipped = Some((first, plain));
        }
        next
    }

    fn finish(&mut self, outcome: Result<Obtained, LockError>) {
        self.armed = self.private_token && self.unknown;
        self.state = State::Done(Some(outcome));
    }

    /// The error an obtain ends with. After an attempt with an unknown outcome that no later
    /// answer settled, it is [`LockError::OutcomeUnknown`] (never "unavailable" or "not
    /// obtained": the lock may be ours); the driver then cleans up with the obtain's token —
    /// only when the token was generated for this obtain ([`Obtain::needs_cleanup`]).
    fn give_up(&self, last: LockError) -> LockError {
        if !self.unknown || last.is_outcome_unknown() {
            return last;
        }
        LockError::OutcomeUnknown(BackendError::OutcomeUnknown(
            format!("an earlier attempt got no answer, and no later answer settled it ({last}); cleanup started").into(),
        ))
    }
}

/// Whether an attempt made at `now` comes before the strategy's `next` one: then it is no
/// retry, and `next` stands if it fails.
fn early(next: NextAttempt, now: Instant) -> Option<NextAttempt> {
    match next {
        NextAttempt::At(due) if now >= due => None,
        other => Some(other),
    }
}

/// When to make the attempt due at `due`: at the holder's expiry `until` when that is sooner
/// (and still ahead), so a crashed holder is not waited on beyond its key.
fn wake_at(now: Instant, due: Instant, until: Option<Instant>) -> Instant {
    match until {
        Some(until) if until > now => due.min(until),
        _ => due,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::FenceState;
    use crate::lock::LockOptions;
    use crate::retry::RetryStrategy;

    fn obtain(wait: Duration) -> Obtain {
        let plan = LockOptions::new()
            .retry(RetryStrategy::linear(Duration::from_millis(100)).expect("retry"))
            .wait(wait)
            .plan(["k"], Duration::from_secs(10), || "me".into())
            .expect("plan");
        Obtain::new(&plan, 7, Instant::ZERO)
    }

    fn acquired() -> Result<AcquireOutcome, BackendError> {
        Ok(AcquireOutcome::Acquired {
            token: None,
            fence: FenceState::UNKNOWN,
        })
    }

    #[test]
    fn a_local_hold_waits_for_the_holders_deadline_and_settles_nothing() {
        let mut o = obtain(Duration::from_secs(60));
        let t0 = Instant::ZERO;
        assert!(o.poll_request(t0).is_some());
        o.handle_reply(t0, Err(BackendError::Timeout(Duration::from_secs(1))));
        let at = o.poll_timeout().expect("a retry");
        assert!(o.poll_request(at).is_some());
        let until = at + Duration::from_secs(5);
        assert!(o.handle_local_hold(at, Some(until)));
        // Waits for the holder (notices live), not the strategy's next delay.
        assert_eq!(o.poll_timeout(), Some(until));
        assert!(o.poll_outcome().is_none());
        // The earlier unknown attempt is still unknown: abandoning now cleans up.
        assert!(o.needs_cleanup());
    }

    #[test]
    fn a_local_hold_never_ends_the_obtain_the_store_does() {
        let mut o = obtain(Duration::ZERO);
        let attempt = o.poll_request(Instant::ZERO).expect("the first attempt");
        assert!(!o.handle_local_hold(Instant::ZERO, None));
        // Still in flight: the driver sends it to the store, whose answer is final.
        assert!(o.poll_request(Instant::ZERO).is_none());
        assert!(o.poll_outcome().is_none());
        o.handle_reply(Instant::ZERO, acquired());
        let won = o.poll_outcome().expect("done").expect("won");
        assert_eq!(won.sent_at, attempt.sent_at);
    }

    #[test]
    fn a_transfer_is_dated_from_when_it_was_sent_and_only_taken_while_waiting() {
        let mut o = obtain(Duration::from_secs(60));
        let t0 = Instant::ZERO;
        o.poll_request(t0).expect("first");
        assert!(
            !o.handle_transfer(t0, t0, acquired()),
            "not while in flight"
        );
        assert!(o.handle_local_hold(t0, None));
        let sent = t0 + Duration::from_millis(30);
        assert!(o.handle_transfer(sent + Duration::from_millis(2), sent, acquired()));
        let won = o.poll_outcome().expect("done").expect("won");
        assert_eq!(won.sent_at, sent);
        assert!(!o.needs_cleanup());
    }

    #[test]
    fn a_transfer_of_unknown_outcome_is_retried_and_cleaned_up_if_abandoned() {
        let mut o = obtain(Duration::from_secs(60));
        let t0 = Instant::ZERO;
        o.poll_request(t0).expect("first");
        assert!(o.handle_local_hold(t0, None));
        let sent = t0 + Duration::from_millis(30);
        let lost = Err(BackendError::Timeout(Duration::from_secs(1)));
        assert!(o.handle_transfer(sent + Duration::from_secs(1), sent, lost));
        assert!(o.poll_outcome().is_none(), "retried");
        assert!(o.poll_timeout().is_some());
        assert!(o.needs_cleanup(), "the key may be this obtain's");
    }
}
