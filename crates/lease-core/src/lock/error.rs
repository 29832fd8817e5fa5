//! [`LockError`]: why a lock operation failed, truthfully.

use crate::backend::BackendError;
use crate::config::ConfigError;

/// Why a lock operation failed. Match on the variant; every variant is distinct. The message
/// names the cause once (`source()` is `None`: the cause is in the message and the field).
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
    #[error("{}", prefixed("backend unavailable (not applied)", .0))]
    Unavailable(BackendError),
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
    #[error("{}", prefixed("outcome unknown (the request may have been applied)", .0))]
    OutcomeUnknown(BackendError),
    /// The wait deadline passed; `last` is what the last attempt saw.
    #[error("wait deadline exceeded; last attempt: {last}")]
    DeadlineExceeded {
        /// What the last attempt found (e.g. [`LockError::NotObtained`]).
        last: Box<LockError>,
    },
    /// The input was refused before any round trip.
    #[error("invalid input: {0}")]
    Invalid(ConfigError),
    /// The backend refused the request with a permanent error, at once and without retrying
    /// (keys across Redis Cluster slots, `WRONGTYPE`, `NOPERM`, ...): nothing changed.
    #[error("{}", prefixed("backend refused the request", .0))]
    Refused(BackendError),
    /// The request would keep the lock past the cap its holder set
    /// ([`LockOptions::max_hold`](crate::lock::LockOptions::max_hold)): a refresh whose
    /// expiry (`now + ttl`) passes `obtained + max_hold`. Refused before any round trip;
    /// nothing changed, and the lock is still held until its deadline. Never a lost lock.
    #[error("the lock's max hold would be passed: refused, nothing changed")]
    MaxHoldReached,
}

impl From<ConfigError> for LockError {
    fn from(e: ConfigError) -> Self {
        LockError::Invalid(e)
    }
}

/// `prefix: e`, or `e` alone when its message already says what `prefix` says (a
/// [`BackendError::Unavailable`] inside [`LockError::Unavailable`]): each message says its
/// cause once, and no error repeats its cause as its `source()` (the fields hold them).
fn prefixed(prefix: &str, e: &BackendError) -> String {
    let text = e.to_string();
    let already = match e {
        BackendError::Unavailable(_) => prefix.starts_with("backend unavailable"),
        BackendError::OutcomeUnknown(_) | BackendError::Timeout(_) => {
            prefix.starts_with("outcome unknown")
        }
        BackendError::Refused(_) => prefix.starts_with("backend refused"),
        _ => false,
    };
    if already {
        text
    } else {
        format!("{prefix}: {text}")
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn each_cause_is_printed_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = LockError::Unavailable(BackendError::Unavailable(Box::new(io())));
        assert_eq!(e.to_string(), "backend unavailable (not applied): refused");
        assert!(e.source().is_none());
        let b = BackendError::Unavailable(Box::new(io()));
        assert!(b.source().is_none(), "the cause is in the message");
        let e = LockError::OutcomeUnknown(BackendError::Timeout(std::time::Duration::from_secs(1)));
        assert_eq!(e.to_string(), "no reply within 1s; the outcome is unknown");
        let e = LockError::Refused(BackendError::Invalid("keys in two slots".into()));
        assert_eq!(
            e.to_string(),
            "backend refused the request: invalid request: keys in two slots"
        );
        let e = LockError::DeadlineExceeded {
            last: Box::new(LockError::NotHeld),
        };
        assert_eq!(
            e.to_string(),
            "wait deadline exceeded; last attempt: lock not held"
        );
        assert!(e.source().is_none());
    }
}
