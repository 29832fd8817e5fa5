//! Background releases (of a dropped or lost lock, and an obtain's cleanup).

use std::sync::Arc;
use std::time::Duration;

use lease_core::{LeaseBackend, ReleaseRequest};

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
