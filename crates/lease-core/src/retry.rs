//! Retry strategies for lock acquisition.
//!
//! A [`RetryStrategy`] is an immutable value: clone it, share it between tasks, keep it in a
//! static. Each acquisition calls [`RetryStrategy::sequence`] and gets its own
//! [`RetrySequence`] with its own counter, so concurrent acquisitions sharing one strategy can
//! never consume each other's attempts (the shared-counter race of the reference library is
//! impossible by construction: there is no shared counter).

use std::time::Duration;

use crate::config::{ConfigError, check_interval};
use crate::rng::SplitMix64;

/// How much a jittered retry delay may be lengthened: a delay `d` becomes a uniform draw in
/// `[d, d + 25 % · d]`, so waiters that saw the same release do not retry in lockstep — and
/// never shorter, so a retry never runs before the strategy says (three 50 ms retries outlast
/// a holder with 100 ms left, as the caller wrote them to). The wait deadline still stops
/// every obtain: a lengthened retry that would start after it is not made.
pub const RETRY_JITTER_PERCENT: u32 = 25;

/// How to space retries of a contended acquisition.
///
/// Opaque: built only by its constructors, which refuse spinning strategies (a zero or
/// sub-millisecond interval), so an invalid strategy cannot exist.
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
/// assert!(RetryStrategy::linear(Duration::ZERO).is_err());
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct RetryStrategy {
    kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
enum Kind {
    #[default]
    None,
    Linear(Duration),
    Exponential {
        min: Duration,
        max: Duration,
    },
    Limit {
        retries: u32,
        inner: Box<Kind>,
    },
}

impl RetryStrategy {
    /// No retries (the default).
    pub fn none() -> Self {
        RetryStrategy { kind: Kind::None }
    }

    /// A fixed interval, retried until the wait deadline. An interval below
    /// [`MIN_INTERVAL`](crate::config::MIN_INTERVAL) is refused (it would spin).
    pub fn linear(interval: Duration) -> Result<Self, ConfigError> {
        if interval.is_zero() {
            return Err(ConfigError::Invalid(
                "linear retry interval must be positive".into(),
            ));
        }
        check_interval("linear retry interval", interval)?;
        Ok(RetryStrategy {
            kind: Kind::Linear(interval),
        })
    }

    /// Doubling delays from `min` up to `max` (`min · 2^k` for the k-th retry), retried until
    /// the wait deadline. Requires `1 ms <= min <= max`.
    pub fn exponential(min: Duration, max: Duration) -> Result<Self, ConfigError> {
        if min.is_zero() {
            return Err(ConfigError::Invalid(
                "exponential retry min must be positive".into(),
            ));
        }
        check_interval("exponential retry min", min)?;
        if min > max {
            return Err(ConfigError::Invalid(format!(
                "exponential retry min {min:?} exceeds max {max:?}"
            )));
        }
        Ok(RetryStrategy {
            kind: Kind::Exponential { min, max },
        })
    }

    /// At most `retries` retries spaced by `inner`.
    pub fn limit(retries: u32, inner: RetryStrategy) -> Self {
        RetryStrategy {
            kind: Kind::Limit {
                retries,
                inner: Box::new(inner.kind),
            },
        }
    }

    /// Whether this strategy never retries.
    pub fn is_none(&self) -> bool {
        self.delay(0).is_none()
    }

    /// A fresh sequence of the exact delays for one acquisition (no jitter).
    pub fn sequence(&self) -> RetrySequence {
        RetrySequence {
            strategy: self.clone(),
            retries: 0,
            jitter: None,
        }
    }

    /// A fresh sequence for one acquisition whose delays are jittered from `seed`: each is a
    /// draw in `[d, d + RETRY_JITTER_PERCENT % · d]`, never shorter than the exact delay.
    /// Drivers use this, with a random seed per acquisition.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::RetryStrategy;
    /// let s = RetryStrategy::linear(Duration::from_millis(100))?;
    /// let d = s.jittered_sequence(7).next_delay().unwrap();
    /// assert!(d >= Duration::from_millis(100) && d <= Duration::from_millis(125));
    /// # Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn jittered_sequence(&self, seed: u64) -> RetrySequence {
        RetrySequence {
            strategy: self.clone(),
            retries: 0,
            jitter: Some(SplitMix64::new(seed)),
        }
    }

    /// The exact delay before retry number `k` (0-based), or `None` when there is none.
    pub fn delay(&self, k: u32) -> Option<Duration> {
        self.kind.delay(k)
    }

    /// The longest exact delay this strategy waits between two attempts (jitter lengthens a
    /// delay by at most [`RETRY_JITTER_PERCENT`] %), or `None` when it never retries. A fair lock's waiter heartbeats at least this
    /// often (see [`crate::fair`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::RetryStrategy;
    /// let ms = Duration::from_millis;
    /// assert_eq!(RetryStrategy::exponential(ms(10), ms(80))?.longest_delay(), Some(ms(80)));
    /// assert_eq!(RetryStrategy::none().longest_delay(), None);
    /// # Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn longest_delay(&self) -> Option<Duration> {
        self.kind.longest()
    }
}

impl Kind {
    fn longest(&self) -> Option<Duration> {
        match self {
            Kind::None => None,
            Kind::Linear(d) => Some(*d),
            Kind::Exponential { max, .. } => Some(*max),
            Kind::Limit { retries: 0, .. } => None,
            Kind::Limit { inner, .. } => inner.longest(),
        }
    }
}

impl Kind {
    fn delay(&self, k: u32) -> Option<Duration> {
        match self {
            Kind::None => None,
            Kind::Linear(d) => Some(*d),
            Kind::Exponential { min, max } => Some(doubled_capped(*min, *max, k)),
            Kind::Limit { retries, inner } => {
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
    jitter: Option<SplitMix64>,
}

impl RetrySequence {
    /// The delay before the next retry, or `None` to stop.
    pub fn next_delay(&mut self) -> Option<Duration> {
        let d = self.strategy.delay(self.retries)?;
        self.retries = self.retries.saturating_add(1);
        Some(match self.jitter.as_mut() {
            Some(rng) => rng.jitter_up(d, RETRY_JITTER_PERCENT),
            None => d,
        })
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
