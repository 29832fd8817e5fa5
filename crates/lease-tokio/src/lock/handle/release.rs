//! Releasing a [`Lock`]: the explicit release (a hand-off when an obtain of the same locker
//! waits, see `handoff.rs`) and the guards that finish it when its future is dropped.

use std::sync::Arc;
use std::time::Duration;

use lease_core::lock::{LockError, release_request, release_result};
use lease_core::{BackendError, LeaseBackend};

use crate::lock::handoff::{Lines, Waiter};
use crate::lock::task::spawn_release;

use super::Lock;

impl<B: LeaseBackend> Lock<B> {
    /// Releases the lock (compare-and-delete: never deletes a lock someone else now holds).
    /// Returns [`LockError::NotHeld`] when it was no longer ours, and
    /// [`LockError::OutcomeUnknown`] when the release got no answer (the lock may still be
    /// held until its TTL runs out).
    ///
    /// **Dropping the future** before the reply (a `select!`, a `timeout`) still ends the
    /// lock: no more renewals, the loss token fires, and the release is sent again in the
    /// background (compare-and-delete, bounded like [`Drop`]'s), so the key does not outlive
    /// the caller's intent by a TTL.
    ///
    /// When another obtain of the same [`Locker`](crate::Locker) waits for this key (and the
    /// backend can, see [`LeaseBackend::can_hand_off`]), the release hands the lock to the one
    /// that has waited longest, in the same step at the store, unless someone elsewhere waits
    /// for it too (then it is released for everyone). Its outcome is the same for the caller:
    /// released, not held, or unknown.
    pub async fn release(self) -> Result<(), LockError> {
        let bound = self.shared.with_untimed(|m| {
            m.release();
            m.bound()
        });
        let shared = &self.shared;
        let req = release_request(&shared.renew.spec, &shared.renew.owner);
        if let Some(lines) = &self.lines
            && let Some(waiter) = lines.claim(shared)
        {
            return self.hand_off(lines, &waiter, req, bound).await;
        }
        let unanswered = ReleaseGuard { lock: Some(&self) };
        let result = crate::bound::within_for(bound, shared.backend.release(&req))
            .await
            .unwrap_or(Err(BackendError::Timeout(bound)));
        unanswered.disarm();
        shared.lost.fire();
        release_result(result)
    }

    /// The release as a hand-off to `waiter` (claimed from the locker's lines).
    async fn hand_off(
        &self,
        lines: &Lines<B>,
        waiter: &Waiter,
        req: lease_core::ReleaseRequest,
        bound: Duration,
    ) -> Result<(), LockError> {
        let shared = &self.shared;
        let sent_at = tokio::time::Instant::now();
        let mut unanswered = HandOffGuard {
            lock: self,
            lines,
            waiter,
            sent_at,
            bound,
            armed: true,
        };
        let result = crate::bound::within_for(
            bound,
            shared
                .backend
                .hand_off(&req, &self.metadata, waiter.request()),
        )
        .await
        .unwrap_or(Err(BackendError::Timeout(bound)));
        unanswered.armed = false;
        shared.lost.fire();
        lines.settle(&shared.backend, waiter, sent_at, &result, bound);
        {
            let _span = shared.span.enter();
            tracing::debug!(outcome = ?result, "lock released by hand-off");
        }
        if matches!(result, Ok(lease_core::HandOffOutcome::HandedOff)) {
            tokio::task::yield_now().await;
        }
        match result {
            Ok(lease_core::HandOffOutcome::NotHeld) => Err(LockError::NotHeld),
            Ok(_) => Ok(()),
            Err(e) => Err(LockError::from_backend(e)),
        }
    }
}

/// Settles a hand-off whose future was dropped before its reply: unknown for the waiter (its
/// next attempt, with its owner, takes the key over if it was applied), and the holder's
/// release is sent again in the background, like [`ReleaseGuard`]'s.
struct HandOffGuard<'a, B: LeaseBackend> {
    lock: &'a Lock<B>,
    lines: &'a Lines<B>,
    waiter: &'a Waiter,
    sent_at: tokio::time::Instant,
    bound: Duration,
    armed: bool,
}

impl<B: LeaseBackend> Drop for HandOffGuard<'_, B> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let shared = &self.lock.shared;
        let unknown = Err(BackendError::OutcomeUnknown(
            "the releasing future was dropped before the hand-off's reply".into(),
        ));
        self.lines.settle(
            &shared.backend,
            self.waiter,
            self.sent_at,
            &unknown,
            self.bound,
        );
        spawn_release(
            Arc::clone(&shared.backend),
            release_request(&shared.renew.spec, &shared.renew.owner),
            self.bound,
        );
        shared.lost.fire();
    }
}

/// Sends the release in the background when [`Lock::release`] is dropped before its reply.
struct ReleaseGuard<'a, B: LeaseBackend> {
    lock: Option<&'a Lock<B>>,
}

impl<B: LeaseBackend> ReleaseGuard<'_, B> {
    fn disarm(mut self) {
        self.lock = None;
    }
}

impl<B: LeaseBackend> Drop for ReleaseGuard<'_, B> {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            let shared = &lock.shared;
            spawn_release(
                Arc::clone(&shared.backend),
                release_request(&shared.renew.spec, &shared.renew.owner),
                shared.release_bound(),
            );
            shared.lost.fire();
        }
    }
}
