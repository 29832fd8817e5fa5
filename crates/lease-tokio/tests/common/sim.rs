//! The seeded, faulty network the shipped-loop simulations share (`semaphore_simulation.rs`,
//! `rwlock_simulation.rs`, `fair_simulation.rs`): one [`MemoryBackend`] whose clock follows
//! tokio's paused clock, and calls delayed around the operation timeout (so some are applied
//! after the caller gave up) or whose reply is lost (far beyond every deadline: applied,
//! outcome unknown), while the faults last. One world per seed, on a runtime of its own.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lease_core::Instant;
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::rng::SplitMix64;
use tokio::time::Instant as TokioInstant;

pub const START: Instant = Instant::from_origin(Duration::from_secs(100));

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

pub fn ms_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).expect("fits")
}

/// How long a world runs and how faulty it is, drawn from its seed.
#[derive(Clone, Debug)]
pub struct Faults {
    pub ttl: Duration,
    pub faults_for: Duration,
    pub run_for: Duration,
    pub slow_permille: u64,
    pub lost_permille: u64,
}

impl Faults {
    /// The faults of a world whose TTL is `ttl` (drawn after the world's own parameters).
    pub fn draw(rng: &mut SplitMix64, ttl: Duration) -> Faults {
        Faults {
            ttl,
            faults_for: ttl * 12,
            run_for: ttl * 18,
            slow_permille: rng.below_inclusive(150),
            lost_permille: rng.below_inclusive(60),
        }
    }
}

/// The store, the virtual clock and the seeded delays of one world.
pub struct Net {
    pub faults: Faults,
    pub mem: MemoryBackend,
    pub start: TokioInstant,
    pub rng: Mutex<SplitMix64>,
}

impl Net {
    /// A world's network, started now (on a paused runtime).
    pub fn new(faults: Faults, rng: SplitMix64) -> Net {
        Net {
            faults,
            mem: MemoryBackend::new(ManualClock::starting_at(START)),
            start: TokioInstant::now(),
            rng: Mutex::new(rng),
        }
    }

    /// Virtual time since the start.
    pub fn at(&self) -> Duration {
        TokioInstant::now() - self.start
    }

    /// The store's clock follows tokio's.
    pub fn sync(&self) {
        self.mem.clock().set(START + self.at());
    }

    /// The store's instant now.
    pub fn now(&self) -> Instant {
        START + self.at()
    }

    pub fn draw(&self, max: u64) -> u64 {
        lock(&self.rng).below_inclusive(max)
    }

    pub fn faulty(&self) -> bool {
        self.at() < self.faults.faults_for
    }

    /// A request or reply delay: usually none, sometimes around the operation timeout, and
    /// for replies sometimes lost (far beyond every deadline).
    pub fn delay(&self, reply: bool) -> Duration {
        if !self.faulty() {
            return Duration::ZERO;
        }
        let ttl_ms = ms_of(self.faults.ttl);
        if reply && self.draw(999) < self.faults.lost_permille {
            return self.faults.ttl * 3;
        }
        if self.draw(999) < self.faults.slow_permille {
            return ms(self.draw(ttl_ms * 6 / 10));
        }
        Duration::ZERO
    }

    /// One call to the store: delayed, applied on the synced clock, its reply delayed.
    pub async fn call<T>(&self, f: impl AsyncFnOnce(&MemoryBackend) -> T) -> T {
        let before = self.delay(false);
        tokio::time::sleep(before).await;
        self.sync();
        let r = f(&self.mem).await;
        let after = self.delay(true);
        tokio::time::sleep(after).await;
        r
    }
}

/// The most closed intervals that share an instant.
pub fn max_overlap(intervals: impl Iterator<Item = (Duration, Duration)>) -> usize {
    let mut points: Vec<(Duration, i32)> = Vec::new();
    for (a, b) in intervals {
        points.push((a, 1));
        points.push((b, -1));
    }
    points.sort_by_key(|&(t, d)| (t, -d));
    let (mut depth, mut peak) = (0i32, 0i32);
    for (_, d) in points {
        depth += d;
        peak = peak.max(depth);
    }
    usize::try_from(peak).unwrap_or(0)
}

/// The seeds to run: `<var>=<n>` replays one; `<var>S=<count>` runs that many from 0, else
/// `default`.
pub fn seeds(var: &str, default: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var(var) {
        return vec![s.parse().expect("the seed is a number")];
    }
    let n = std::env::var(format!("{var}S"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    (0..n).collect()
}
