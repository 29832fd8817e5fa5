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
}
