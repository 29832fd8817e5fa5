//! Time as an input.
//!
//! The machines never read a clock. The driver picks an origin (for example the moment it
//! started) and passes every "now" as an [`Instant`]: the time elapsed since that origin on a
//! monotonic clock. Tests and simulations use virtual time the same way.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point on the caller's monotonic clock, measured from an origin of the caller's choosing.
///
/// ```
/// use std::time::Duration;
/// use lease_core::Instant;
/// let t = Instant::ZERO + Duration::from_millis(5);
/// assert_eq!(t.saturating_duration_since(Instant::ZERO), Duration::from_millis(5));
/// assert_eq!(Instant::ZERO.saturating_duration_since(t), Duration::ZERO);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(Duration);

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant(Duration::ZERO);

    /// The instant `since_origin` after the origin.
    pub const fn from_origin(since_origin: Duration) -> Self {
        Instant(since_origin)
    }

    /// Time elapsed since the origin.
    pub const fn since_origin(self) -> Duration {
        self.0
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// `self + d`, or `None` on overflow.
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        self.0.checked_add(d).map(Instant)
    }

    /// `self + d`, saturating at the largest representable instant.
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturating addition (never panics).
    fn add(self, rhs: Duration) -> Instant {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating difference (never panics).
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T+{:?}", self.0)
    }
}
