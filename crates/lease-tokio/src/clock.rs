//! Conversion between tokio's clock and the machines' [`lease_core::Instant`].

use std::time::Duration;

use lease_core::Instant;

/// The driver's clock: an origin on tokio's monotonic clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    origin: tokio::time::Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Clock {
            origin: tokio::time::Instant::now(),
        }
    }

    /// Now, as the machines see it.
    pub(crate) fn now(self) -> Instant {
        self.to_core(tokio::time::Instant::now())
    }

    pub(crate) fn to_core(self, t: tokio::time::Instant) -> Instant {
        Instant::from_origin(t.saturating_duration_since(self.origin))
    }

    pub(crate) fn to_tokio(self, t: Instant) -> tokio::time::Instant {
        // Far-future instants (overflow) become "in a long while".
        self.origin
            .checked_add(t.since_origin())
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86400 * 365))
    }
}
