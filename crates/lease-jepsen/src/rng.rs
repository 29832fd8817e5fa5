//! The nemesis's only randomness, from the run's seed: the workspace's one SplitMix64
//! ([`lease_core::rng::SplitMix64`]), with the draws the nemesis and the nodes use.

use lease_core::rng::SplitMix64;

/// A seeded generator (SplitMix64: the same sequence for the same seed, on every machine).
#[derive(Debug, Clone)]
pub struct Rng(SplitMix64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64::new(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `lo..=hi` (`lo` when `hi <= lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    /// The sequence of a seed is the one runs were recorded with (SplitMix64's reference
    /// outputs for seed 0), so a seed replays the same faults as before.
    #[test]
    fn a_seed_gives_the_recorded_sequence() {
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(r.next_u64(), 0x06c4_5d18_8009_454f);
    }
}
