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
/// Kept as whole nanoseconds since the origin in 64 bits (8 bytes: a machine keeps several,
/// and a process may hold thousands of machines), so the latest instant is about 584 years
/// after the origin; arithmetic past it saturates there (or, for
/// [`checked_add`](Instant::checked_add), answers `None`).
///
/// ```
/// use std::time::Duration;
/// use lease_core::Instant;
/// let t = Instant::ZERO + Duration::from_millis(5);
/// assert_eq!(t.saturating_duration_since(Instant::ZERO), Duration::from_millis(5));
/// assert_eq!(Instant::ZERO.saturating_duration_since(t), Duration::ZERO);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

/// `d` in whole nanoseconds, saturating at `u64::MAX`.
pub(crate) const fn nanos(d: Duration) -> u64 {
    let n = d.as_nanos();
    if n > u64::MAX as u128 {
        u64::MAX
    } else {
        n as u64
    }
}

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant(0);

    /// The latest representable instant (about 584 years after the origin).
    pub const MAX: Instant = Instant(u64::MAX);

    /// The instant `since_origin` after the origin (saturating at [`Instant::MAX`]).
    pub const fn from_origin(since_origin: Duration) -> Self {
        Instant(nanos(since_origin))
    }

    /// Time elapsed since the origin.
    pub const fn since_origin(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, or `None` past [`Instant::MAX`].
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        let d = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_add(d).map(Instant)
    }

    /// `self + d`, saturating at [`Instant::MAX`].
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(nanos(d)))
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
        write!(f, "T+{:?}", self.since_origin())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_bytes_exact_to_the_nanosecond() {
        assert_eq!(std::mem::size_of::<Instant>(), 8);
        let d = Duration::new(86_400 * 365, 123_456_789);
        assert_eq!(Instant::from_origin(d).since_origin(), d);
        assert_eq!(
            format!("{:?}", Instant::ZERO + Duration::from_millis(5)),
            "T+5ms"
        );
    }

    #[test]
    fn saturates_at_max() {
        assert_eq!(Instant::from_origin(Duration::MAX), Instant::MAX);
        assert_eq!(Instant::ZERO + Duration::MAX, Instant::MAX);
        assert_eq!(Instant::MAX + Duration::from_nanos(1), Instant::MAX);
        assert_eq!(Instant::ZERO.checked_add(Duration::MAX), None);
        assert_eq!(Instant::MAX.checked_add(Duration::from_nanos(1)), None);
        assert_eq!(
            Instant::MAX.checked_add(Duration::ZERO),
            Some(Instant::MAX),
            "the latest instant itself is representable"
        );
        assert_eq!(Instant::MAX - Instant::ZERO, Duration::from_nanos(u64::MAX));
        assert_eq!(Instant::ZERO - Instant::MAX, Duration::ZERO);
    }
}
