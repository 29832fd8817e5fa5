//! [`ManualClock`]: time that moves only when a test says so, and its sleep future.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::lock;
use crate::time::Instant;

#[derive(Debug, Default)]
struct ClockState {
    now: Instant,
    waiters: Vec<(Instant, Waker)>,
}

/// A clock that moves only when told to. Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    state: Arc<Mutex<ClockState>>,
}

impl ManualClock {
    /// A clock at [`Instant::ZERO`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock at `start`.
    pub fn starting_at(start: Instant) -> Self {
        let c = Self::default();
        lock(&c.state).now = start;
        c
    }

    /// The current time.
    pub fn now(&self) -> Instant {
        lock(&self.state).now
    }

    /// Moves time forward by `d` and wakes the sleepers that are due.
    pub fn advance(&self, d: Duration) {
        let now = self.now() + d;
        self.set(now);
    }

    /// Moves time forward to `t` (never backward) and wakes the sleepers that are due.
    pub fn set(&self, t: Instant) {
        let due: Vec<Waker> = {
            let mut s = lock(&self.state);
            if t > s.now {
                s.now = t;
            }
            let now = s.now;
            let (due, keep): (Vec<_>, Vec<_>) = s.waiters.drain(..).partition(|(at, _)| *at <= now);
            s.waiters = keep;
            due.into_iter().map(|(_, w)| w).collect()
        };
        for w in due {
            w.wake();
        }
    }

    /// A future that completes once the clock reaches `at`.
    pub fn sleep_until(&self, at: Instant) -> Sleep {
        Sleep {
            clock: self.clone(),
            at,
        }
    }

    /// The earliest instant a sleeper waits for, if any (useful to drive simulations).
    pub fn next_wake(&self) -> Option<Instant> {
        lock(&self.state).waiters.iter().map(|(at, _)| *at).min()
    }
}

/// Future returned by [`ManualClock::sleep_until`].
#[derive(Debug)]
pub struct Sleep {
    clock: ManualClock,
    at: Instant,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = lock(&self.clock.state);
        if s.now >= self.at {
            return Poll::Ready(());
        }
        let at = self.at;
        s.waiters.push((at, cx.waker().clone()));
        Poll::Pending
    }
}
