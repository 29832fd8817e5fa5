//! Retry strategies for lock acquisition.
//!
//! A [`RetryStrategy`] is an immutable value: clone it, share it between tasks, keep it in a
//! static. Each acquisition calls [`RetryStrategy::sequence`] and gets its own
//! [`RetrySequence`] with its own counter, so concurrent acquisitions sharing one strategy can
//! never consume each other's attempts (the shared-counter race of the reference library is
//! impossible by construction: there is no shared counter).

use std::time::Duration;

use crate::config::ConfigError;

/// How to space retries of a contended acquisition.
///
/// ```
/// use std::time::Duration;
/// use lease_core::RetryStrategy;
/// let s = RetryStrategy::limit(3, RetryStrategy::exponential(Duration::from_millis(10), Duration::from_millis(25))?);
/// let mut a = s.sequence();
/// let mut b = s.sequence();
/// assert_eq!(a.next_delay(), Some(Duration::from_millis(10)));
/// assert_eq!(a.next_delay(), Some(Duration::from_millis(20)));
/// assert_eq!(b.next_delay(), Some(Duration::from_millis(10)), "b has its own sequence");
/// assert_eq!(a.next_delay(), Some(Duration::from_millis(25)));
/// assert_eq!(a.next_delay(), None, "three retries, then stop");
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RetryStrategy {
    /// Never retry (the default).
    #[default]
    None,
    /// Retry forever (until the deadline) at a fixed interval.
    Linear(Duration),
    /// Retry forever (until the deadline), `min · 2^k` for the k-th retry, capped at `max`.
    Exponential {
        /// The first delay.
        min: Duration,
        /// The largest delay.
        max: Duration,
    },
    /// At most `retries` retries of `inner`.
    Limit {
        /// How many retries.
        retries: u32,
        /// The spacing.
        inner: Box<RetryStrategy>,
    },
}

impl RetryStrategy {
    /// No retries.
    pub fn none() -> Self {
        RetryStrategy::None
    }

    /// A fixed interval. A zero interval is refused (it would spin).
    pub fn linear(interval: Duration) -> Result<Self, ConfigError> {
        if interval.is_zero() {
            return Err(ConfigError::Invalid(
                "linear retry interval must be positive".into(),
            ));
        }
        Ok(RetryStrategy::Linear(interval))
    }

    /// Doubling delays from `min` up to `max`. Requires `0 < min <= max`.
    pub fn exponential(min: Duration, max: Duration) -> Result<Self, ConfigError> {
        if min.is_zero() {
            return Err(ConfigError::Invalid(
                "exponential retry min must be positive".into(),
            ));
        }
        if min > max {
            return Err(ConfigError::Invalid(format!(
                "exponential retry min {min:?} exceeds max {max:?}"
            )));
        }
        Ok(RetryStrategy::Exponential { min, max })
    }

    /// At most `retries` retries spaced by `inner`.
    pub fn limit(retries: u32, inner: RetryStrategy) -> Self {
        RetryStrategy::Limit {
            retries,
            inner: Box::new(inner),
        }
    }

    /// A fresh sequence of delays for one acquisition.
    pub fn sequence(&self) -> RetrySequence {
        RetrySequence {
            strategy: self.clone(),
            retries: 0,
        }
    }

    /// The delay before retry number `k` (0-based), or `None` when there is none.
    pub fn delay(&self, k: u32) -> Option<Duration> {
        match self {
            RetryStrategy::None => None,
            RetryStrategy::Linear(d) => Some(*d),
            RetryStrategy::Exponential { min, max } => Some(doubled_capped(*min, *max, k)),
            RetryStrategy::Limit { retries, inner } => {
                if k < *retries {
                    inner.delay(k)
                } else {
                    None
                }
            }
        }
    }
}

/// The delays of one acquisition's retries; owned by that acquisition alone.
#[derive(Clone, Debug)]
pub struct RetrySequence {
    strategy: RetryStrategy,
    retries: u32,
}

impl RetrySequence {
    /// The delay before the next retry, or `None` to stop.
    pub fn next_delay(&mut self) -> Option<Duration> {
        let d = self.strategy.delay(self.retries)?;
        self.retries = self.retries.saturating_add(1);
        Some(d)
    }

    /// How many retries this sequence has handed out.
    pub fn retries(&self) -> u32 {
        self.retries
    }
}

/// `min · 2^k`, capped at `max`, for any `k` without overflow.
///
/// Doubles step by step and stops at the cap: since `min >= 1 ns`, the cap (at most
/// `Duration::MAX`, about 2^94 ns) is reached within ~95 doublings, whatever `k` is.
pub(crate) fn doubled_capped(min: Duration, max: Duration, k: u32) -> Duration {
    let mut d = min.min(max);
    for _ in 0..k {
        if d >= max {
            break;
        }
        d = d.checked_mul(2).unwrap_or(max).min(max);
    }
    d
}
