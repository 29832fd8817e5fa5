//! The retry schedule of one obtain call.
//!
//! An obtain attempt that finds the lock held asks its own [`RetrySequence`] for a delay. It
//! gives up with "not obtained" when the sequence stops, and with "deadline exceeded" when the
//! next attempt would start after the wait deadline (default: one TTL after the first attempt).

use std::time::Duration;

use crate::retry::RetrySequence;
use crate::time::Instant;

/// What to do after an attempt found the lock held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NextAttempt {
    /// Try again at this instant.
    At(Instant),
    /// The strategy has no more retries: not obtained.
    GiveUp,
    /// The next retry would start after the wait deadline.
    DeadlineExceeded,
}

/// The retry schedule of one obtain call.
#[derive(Clone, Debug)]
pub struct ObtainSchedule {
    sequence: RetrySequence,
    deadline: Instant,
}

impl ObtainSchedule {
    /// A schedule that stops at `deadline`.
    pub fn new(sequence: RetrySequence, deadline: Instant) -> Self {
        ObtainSchedule { sequence, deadline }
    }

    /// The default wait deadline: one TTL after `start`.
    pub fn default_deadline(start: Instant, ttl: Duration) -> Instant {
        start + ttl
    }

    /// The wait deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// After a failed attempt at `now`: when to try next, or why to stop.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::{Instant, RetryStrategy};
    /// use lease_core::lock::{NextAttempt, ObtainSchedule};
    /// let ms = Duration::from_millis;
    /// let strategy = RetryStrategy::linear(ms(40))?;
    /// let mut s = ObtainSchedule::new(strategy.sequence(), Instant::ZERO + ms(100));
    /// assert_eq!(s.after_failure(Instant::ZERO), NextAttempt::At(Instant::ZERO + ms(40)));
    /// assert_eq!(s.after_failure(Instant::ZERO + ms(70)), NextAttempt::DeadlineExceeded);
    /// let mut none = ObtainSchedule::new(lease_core::RetryStrategy::none().sequence(), Instant::ZERO + ms(100));
    /// assert_eq!(none.after_failure(Instant::ZERO), NextAttempt::GiveUp);
    /// # Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn after_failure(&mut self, now: Instant) -> NextAttempt {
        match self.sequence.next_delay() {
            None => NextAttempt::GiveUp,
            Some(d) => {
                let at = now + d;
                if at > self.deadline {
                    NextAttempt::DeadlineExceeded
                } else {
                    NextAttempt::At(at)
                }
            }
        }
    }

    /// Like [`after_failure`](Self::after_failure), when nothing is worth trying before
    /// `until` (the holder's key expires then, and release notices will wake the waiter
    /// sooner if it is released): the scheduled attempts before `until` are skipped — each
    /// still counts against the strategy — and the first one at or after `until` is returned
    /// (a driver may try at `until` itself: that is a wake-up, not a retry; see
    /// [`Obtain`](crate::lock::Obtain)). The give-up time never moves later than the
    /// strategy's schedule and the wait deadline say: when the strategy (or the deadline) ends
    /// before `until`, the last attempt it allows is kept.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::{Instant, RetryStrategy};
    /// use lease_core::lock::{NextAttempt, ObtainSchedule};
    /// let ms = Duration::from_millis;
    /// let t0 = Instant::ZERO;
    /// // Unlimited 300 ms retries, wait 10 s, the holder expires in 2 s: the retry at 2.1 s.
    /// let mut s = ObtainSchedule::new(RetryStrategy::linear(ms(300))?.sequence(), t0 + ms(10_000));
    /// assert_eq!(s.after_failure_until(t0, t0 + ms(2_000)), NextAttempt::At(t0 + ms(2_100)));
    /// // Two retries 5 ms apart: the last is at 10 ms, then "not obtained", whatever the expiry.
    /// let limited = RetryStrategy::limit(2, RetryStrategy::linear(ms(5))?);
    /// let mut s = ObtainSchedule::new(limited.sequence(), t0 + ms(10_000));
    /// assert_eq!(s.after_failure_until(t0, t0 + ms(1_000)), NextAttempt::At(t0 + ms(10)));
    /// assert_eq!(s.after_failure(t0 + ms(10)), NextAttempt::GiveUp);
    /// # Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn after_failure_until(&mut self, now: Instant, until: Instant) -> NextAttempt {
        /// Skipping is a shortcut; a strategy of tiny delays before a far expiry just polls.
        const MAX_SKIPPED: u32 = 10_000;
        let mut at = match self.after_failure(now) {
            NextAttempt::At(at) => at,
            other => return other,
        };
        for _ in 0..MAX_SKIPPED {
            if at >= until {
                return NextAttempt::At(at);
            }
            let before = self.sequence.clone();
            match self.sequence.next_delay() {
                Some(d) if at + d <= self.deadline => at += d,
                // `at` is the last attempt the strategy or the deadline allows: keep it.
                _ => {
                    self.sequence = before;
                    return NextAttempt::At(at);
                }
            }
        }
        NextAttempt::At(at)
    }
}
