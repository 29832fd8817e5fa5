//! An obtain's place in its locker's lines ([`WaitSeat`]): what `obtain.rs` calls to queue
//! behind a lock of the locker, step out, wait for a delivery, and leave. The rules are the
//! lines' own (see the [parent module](super)).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lease_core::{AcquireRequest, LeaseBackend};

use super::{Delivery, LocalHold, Seat, Shard, Waiter, unqueue_locked};

/// An obtain's place in the lines: its acquire, and its waiter once it queued (the request
/// is copied only then: an obtain that never waits behind a lock of its locker costs one
/// lookup).
pub(crate) struct WaitSeat<'a, B> {
    /// The shard of the lines that holds the obtain's key.
    pub(super) lines: &'a Shard<B>,
    pub(super) request: &'a AcquireRequest,
    /// Which obtain this is, in the lines (an owner may be the caller's, shared by several).
    pub(super) id: u64,
    pub(super) waiter: Option<Arc<Waiter>>,
    /// The obtain won: the key's turn stays for its lock.
    pub(super) won: bool,
}

impl<'a, B: LeaseBackend> WaitSeat<'a, B> {
    pub(crate) fn new(lines: &'a Shard<B>, request: &'a AcquireRequest) -> Self {
        WaitSeat {
            lines,
            request,
            id: lines.next.fetch_add(1, Ordering::Relaxed),
            waiter: None,
            won: false,
        }
    }

    /// The obtain won: leaving the lines keeps the key's turn (its lock takes it over).
    pub(crate) fn won(&mut self) {
        self.won = true;
    }

    /// [`Shard::local_hold`] for this seat.
    pub(crate) fn local_hold(&mut self) -> Option<LocalHold> {
        self.lines.local_hold(self)
    }

    /// Leaves the queue to attempt at the store while a lock of the locker still has the
    /// key's turn (the obtain would end on a local answer, and only the store's is final):
    /// `false` when a hand-off to this obtain began meanwhile (take its delivery instead).
    pub(crate) fn step_out(&mut self) -> bool {
        let mut st = self.lines.state();
        if self.waiter.as_ref().is_some_and(|w| {
            matches!(
                *w.seat(),
                Seat::Claimed | Seat::Delivered(Delivery::Transfer { .. })
            )
        }) {
            return false;
        }
        unqueue_locked(&mut st, self);
        true
    }

    /// [`Shard::abandon`] for this seat.
    pub(crate) fn abandon(&mut self, backend: &Arc<B>, bound: Duration) {
        self.lines.abandon(backend, self, bound);
    }

    /// Whether a hand-off to this obtain is in flight (it must wait for it, not attempt).
    pub(crate) fn claimed(&self) -> bool {
        self.waiter
            .as_ref()
            .is_some_and(|w| matches!(*w.seat(), Seat::Claimed))
    }

    /// Whether this obtain is in a queue or claimed (a delivery will come).
    pub(crate) fn waiting(&self) -> bool {
        self.waiter
            .as_ref()
            .is_some_and(|w| matches!(*w.seat(), Seat::Queued | Seat::Claimed))
    }

    /// A delivery not yet taken, without waiting.
    pub(crate) fn take_delivery(&self) -> Option<Delivery> {
        let waiter = self.waiter.as_ref()?;
        let mut seat = waiter.seat();
        if !matches!(*seat, Seat::Delivered(_)) {
            return None;
        }
        match std::mem::replace(&mut *seat, Seat::Idle) {
            Seat::Delivered(d) => Some(d),
            _ => None,
        }
    }

    /// The next delivery. Cancel-safe: a delivery is only taken when this returns.
    pub(crate) async fn delivered(&self) -> Delivery {
        let Some(waiter) = &self.waiter else {
            return std::future::pending().await;
        };
        loop {
            if let Some(d) = self.take_delivery() {
                return d;
            }
            // A delivery stores a permit when nobody waits: none is missed between the
            // check and the wait.
            waiter.wake.notified().await;
        }
    }
}
