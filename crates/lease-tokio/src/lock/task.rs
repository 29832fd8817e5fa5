//! The lock's background task (auto-renewal and the deadline watch), and background releases.

use std::sync::Arc;
use std::time::Duration;

use lease_core::{BackendError, LeaseBackend, ReleaseRequest};
use tracing::Instrument;

use crate::lock::handle::Shared;

/// Keeps the lock's machine moving: sends each renewal it asks for (auto-renewing locks), one
/// round trip at a time, and wakes at its timeouts so the loss signal fires at the deadline.
/// Ends when the lock is lost or released.
pub(crate) async fn watch<B: LeaseBackend>(shared: Arc<Shared<B>>) {
    let span = shared.span.clone();
    watch_in_span(shared).instrument(span).await;
}

async fn watch_in_span<B: LeaseBackend>(shared: Arc<Shared<B>>) {
    loop {
        let moved = shared.moved.notified();
        tokio::pin!(moved);
        // Registered before the machine is read: a refresh in between still wakes us.
        moved.as_mut().enable();
        renew_if_due(&shared).await;
        let next = shared.with(|m, now| {
            m.handle_timeout(now);
            m.poll_timeout()
        });
        let Some(at) = next else {
            shared.lost.cancel();
            return;
        };
        tokio::select! {
            _ = shared.lost.cancelled() => return,
            _ = moved => {}
            _ = tokio::time::sleep_until(shared.clock.to_tokio(at)) => {}
        }
    }
}

/// Sends the renewal the machine asks for, if one is due, and feeds it the reply.
async fn renew_if_due<B: LeaseBackend>(shared: &Shared<B>) {
    let Some(order) = shared.with(|m, now| m.poll_renew(now)) else {
        return;
    };
    // No std lock is held across the round trip; the machine keeps refreshes out meanwhile.
    let reply = tokio::time::timeout_at(
        shared.clock.to_tokio(order.deadline),
        shared.backend.renew(&shared.renew),
    )
    .await
    .unwrap_or(Err(BackendError::Timeout(order.deadline - order.sent_at)));
    shared.with(|m, now| m.handle_renew(now, reply));
    // The turn is free: a refresh waiting for it may go.
    shared.moved.notify_waiters();
}

/// Releases in the background, best effort, bounded by `bound` (the lock's operation bound: a
/// release answered later than one TTL is moot, the key has expired).
pub(crate) fn spawn_release<B: LeaseBackend>(
    backend: Arc<B>,
    req: ReleaseRequest,
    bound: Duration,
) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            match tokio::time::timeout(bound, backend.release(&req)).await {
                Ok(Ok(outcome)) => tracing::debug!(keys = ?req.spec.keys(), ?outcome, "background release"),
                Ok(Err(e)) => tracing::warn!(keys = ?req.spec.keys(), error = %e, "background release failed; the lock expires with its TTL"),
                Err(_) => tracing::warn!(keys = ?req.spec.keys(), "background release timed out; the lock expires with its TTL"),
            }
        });
    } else {
        tracing::warn!(keys = ?req.spec.keys(), "no tokio runtime to release the lock; it expires with its TTL");
    }
}
