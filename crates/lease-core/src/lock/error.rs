//! [`LockError`]: why a lock operation failed, truthfully.

use crate::backend::BackendError;
use crate::config::ConfigError;

/// Why a lock operation failed. Match on the variant; every variant is distinct.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock is held by someone else (and no retry is left).
    #[error("lock not obtained: held by {}", holder.as_deref().unwrap_or("another owner"))]
    NotObtained {
        /// The holder, when known.
        holder: Option<String>,
    },
    /// The lock is no longer held by this handle (expired, taken, lost, or released).
    #[error("lock not held")]
    NotHeld,
    /// The backend could not serve the request, which provably did not take effect (after
    /// the retries the strategy allowed): nothing changed at the store.
    #[error("backend unavailable (not applied): {0}")]
    Unavailable(#[source] BackendError),
    /// A request may have reached the store and no reply was seen (a timeout, a connection
    /// lost after sending): it may or may not have taken effect.
    ///
    /// - from an obtain: the lock may be held under this attempt's token. With a generated
    ///   token a cleanup (a compare-and-delete with that token) was started in the background;
    ///   with a caller-chosen token ([`LockOptions::owner`]) it is not (another handle of yours
    ///   may hold that token): obtain again with it, or let the TTL expire.
    /// - from a refresh: the TTL may or may not have been changed. The local deadline was not
    ///   extended; for a shorter TTL it was shortened, as if the refresh had applied.
    /// - from a release: the lock may still be held until its TTL runs out.
    ///
    /// [`LockOptions::owner`]: crate::lock::LockOptions::owner
    #[error("outcome unknown (the request may have been applied): {0}")]
    OutcomeUnknown(#[source] BackendError),
    /// The wait deadline passed; `last` is what the last attempt saw.
    #[error("wait deadline exceeded; last attempt: {last}")]
    DeadlineExceeded {
        /// What the last attempt found (e.g. [`LockError::NotObtained`]).
        #[source]
        last: Box<LockError>,
    },
    /// The input was refused before any round trip.
    #[error("invalid input: {0}")]
    Invalid(#[from] ConfigError),
    /// The backend refused the request with a permanent error, at once and without retrying
    /// (keys across Redis Cluster slots, `WRONGTYPE`, `NOPERM`, ...): nothing changed.
    #[error("backend refused the request: {0}")]
    Refused(#[source] BackendError),
}

impl LockError {
    /// Whether the error means "someone else holds it" (directly or as the last cause of a
    /// deadline).
    pub fn is_not_obtained(&self) -> bool {
        match self {
            LockError::NotObtained { .. } => true,
            LockError::DeadlineExceeded { last } => last.is_not_obtained(),
            _ => false,
        }
    }

    /// Whether the request may have taken effect at the store (directly or as the last cause
    /// of a deadline): [`LockError::OutcomeUnknown`].
    pub fn is_outcome_unknown(&self) -> bool {
        match self {
            LockError::OutcomeUnknown(_) => true,
            LockError::DeadlineExceeded { last } => last.is_outcome_unknown(),
            _ => false,
        }
    }

    /// The truthful error for a failed request that may change the store: unknown outcome
    /// first, then transient (not applied), then permanent.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::BackendError;
    /// use lease_core::lock::LockError;
    /// let timeout = LockError::from_backend(BackendError::Timeout(Duration::from_secs(1)));
    /// assert!(timeout.is_outcome_unknown());
    /// let refused = LockError::from_backend(BackendError::Refused("WRONGTYPE".into()));
    /// assert!(matches!(refused, LockError::Refused(_)));
    /// ```
    pub fn from_backend(e: BackendError) -> LockError {
        if e.is_outcome_unknown() {
            LockError::OutcomeUnknown(e)
        } else if e.is_transient() {
            LockError::Unavailable(e)
        } else {
            LockError::Refused(e)
        }
    }

    /// The error for a failed *read* (it changes nothing, so it is never "unknown"): permanent
    /// errors are [`LockError::Refused`], every other one (a timeout too) is
    /// [`LockError::Unavailable`].
    pub fn from_read(e: BackendError) -> LockError {
        if e.is_transient() {
            LockError::Unavailable(e)
        } else {
            LockError::Refused(e)
        }
    }
}
