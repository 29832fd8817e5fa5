//! A small seeded generator for jitter.
//!
//! The machines have no randomness of their own: the caller passes a seed, and every draw is
//! reproducible from it (simulations replay a failing seed exactly).

use std::time::Duration;

/// SplitMix64: tiny, fast, and good enough for spreading timers. Not cryptographic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator from `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..=max` (slightly biased for huge `max`; fine for jitter).
    pub fn below_inclusive(&mut self, max: u64) -> u64 {
        match max.checked_add(1) {
            Some(m) => self.next_u64() % m,
            None => self.next_u64(),
        }
    }

    /// A value in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `d` shortened by a random amount of up to `percent` % (jitter only ever shortens).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::rng::SplitMix64;
    /// let mut r = SplitMix64::new(1);
    /// let d = Duration::from_millis(1000);
    /// let j = r.jitter_down(d, 10);
    /// assert!(j <= d && j >= Duration::from_millis(900));
    /// ```
    pub fn jitter_down(&mut self, d: Duration, percent: u32) -> Duration {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let span = nanos / 100 * u64::from(percent.min(100));
        d.saturating_sub(Duration::from_nanos(self.below_inclusive(span)))
    }

    /// `d` lengthened by a random amount of up to `percent` %.
    pub fn jitter_up(&mut self, d: Duration, percent: u32) -> Duration {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let span = nanos / 100 * u64::from(percent);
        d.saturating_add(Duration::from_nanos(self.below_inclusive(span)))
    }
}
