//! What a failed request did at the store ([`Effect`]) and why it failed ([`BackendError`]).

use std::time::Duration;

use crate::token::Token;

/// A boxed error from an adapter.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a failed request did at the store: the one question a caller must answer before it
/// acts on a failure (retry a non-idempotent write? assume the lock is free?).
///
/// ```
/// use std::time::Duration;
/// use lease_core::{BackendError, Effect};
/// assert_eq!(BackendError::Timeout(Duration::from_secs(1)).effect(), Effect::Unknown);
/// assert_eq!(BackendError::Refused("NOPERM".into()).effect(), Effect::NotApplied);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Effect {
    /// Provably not applied: refused before it was sent, the connection could not be made, or
    /// the store answered with an error before changing anything.
    NotApplied,
    /// May or may not have been applied: the request may have reached the store and no reply
    /// was seen (a timeout after sending, a connection lost or reset mid-request). Only a later
    /// read can tell; a retry of a non-idempotent write may apply it twice.
    Unknown,
    /// Applied: the error reports something about a request that took effect
    /// ([`BackendError::TokenRegression`]: the lease was granted, with a regressed token).
    Applied,
}

/// A failure to get an answer from a backend (as opposed to an answer we did not like).
///
/// Every variant says whether the request may have taken effect ([`BackendError::effect`])
/// and whether retrying can help ([`BackendError::is_transient`]):
///
/// | variant | effect | transient |
/// |---|---|---|
/// | [`Unavailable`](Self::Unavailable) | not applied | yes |
/// | [`OutcomeUnknown`](Self::OutcomeUnknown), [`Timeout`](Self::Timeout) | **unknown** | yes |
/// | [`Refused`](Self::Refused), [`Invalid`](Self::Invalid), [`TokenExhausted`](Self::TokenExhausted), [`Corrupt`](Self::Corrupt) | not applied | no |
/// | [`Protocol`](Self::Protocol) | **unknown** | yes |
/// | [`TokenRegression`](Self::TokenRegression) | applied (a report, not a failure) | no |
/// | [`Unsupported`](Self::Unsupported), [`PermitsMismatch`](Self::PermitsMismatch), [`QueueFull`](Self::QueueFull) | not applied | no |
/// | [`Other`](Self::Other) | **unknown** | yes |
///
/// Each message includes its cause once: the wrapped error is in the message (and in the
/// variant's field), not repeated by [`std::error::Error::source`], so a reporter that prints
/// the source chain prints it once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The store could not serve the request and provably did not apply it: the connection
    /// could not be made, or the store answered that it cannot serve now (Redis `LOADING`,
    /// `BUSY`, `TRYAGAIN`, `MASTERDOWN`, `READONLY`, `CLUSTERDOWN`, `MOVED`/`ASK`), or a quorum
    /// round failed and was cleaned up on every node. Transient: retrying can help.
    #[error("backend unavailable (not applied): {0}")]
    Unavailable(BoxError),
    /// The request may have reached the store and no reply was seen (the connection was lost
    /// or reset after sending, the connection's own response timeout fired): it may or may not
    /// have taken effect. Transient.
    #[error("outcome unknown (the request may have been applied): {0}")]
    OutcomeUnknown(BoxError),
    /// The request got no reply within `{0:?}`: it may or may not have taken effect.
    /// Transient.
    #[error("no reply within {0:?}; the outcome is unknown")]
    Timeout(Duration),
    /// The request was refused before any round trip (permanent: retrying cannot help).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The store answered with a permanent error (Redis `WRONGTYPE`, a counter that is not an
    /// integer, `NOPERM`, `NOAUTH`/`WRONGPASS`, a failing script): retrying the same
    /// request cannot help, so it is reported at once, never retried. Not applied: every
    /// script of ours performs its checks before its first write (a caller's own fenced Lua
    /// body is the exception: writes it made before failing stay).
    #[error("refused by the server: {0}")]
    Refused(String),
    /// The store's reply had an unexpected shape: it did something, but we cannot tell what.
    #[error("unexpected reply (outcome unknown): {0}")]
    Protocol(String),
    /// The store refuses because a value is out of range (e.g. the counter passed 2^53).
    #[error("fence counter exhausted: {0}")]
    TokenExhausted(String),
    /// A key the fence keeps (the counter, the applied mark or the fence epoch) holds a value
    /// that is not what it must be (not a decimal integer, or above 2^53 for a counter or a
    /// mark): the store refused before writing anything. Permanent: only an operator can
    /// repair the key (delete it, or set it to a valid value); retrying cannot help, so an
    /// election stops contending instead of looping. `key` is the key's name as the store
    /// printed it (bytes outside printable ASCII escaped as `\xNN`).
    #[error("corrupt fence key {key}: {detail}")]
    Corrupt {
        /// The key's name, escaped.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The store minted a token not above one this instance was granted before: its counter
    /// went back (restart without persistence, eviction, failover). Reported, not fatal.
    #[error("fence counter regressed: minted {minted} after {previous} was granted")]
    TokenRegression {
        /// The highest token granted before.
        previous: Token,
        /// The token just minted.
        minted: Token,
    },
    /// The backend does not offer this operation (for example a semaphore on a backend that
    /// has no permit scripts, or on Redlock, where a count of permits spread over independent
    /// nodes is not sound): refused before any round trip. Permanent.
    #[error("not supported by this backend: {0}")]
    Unsupported(String),
    /// A semaphore was asked for with a permit count other than the one stored with it (the
    /// count of its current holders' obtains): nothing changed. Permanent: every holder of one
    /// semaphore must use the same count (see [`crate::semaphore`]).
    #[error("semaphore {name} has {stored} permits; this obtain asked for {asked}")]
    PermitsMismatch {
        /// The semaphore's name.
        name: String,
        /// The count stored with the semaphore.
        stored: u32,
        /// The count this obtain asked for.
        asked: u32,
    },
    /// A fair lock's queue already holds its bound of live waiters
    /// ([`MAX_WAITERS`](crate::fair::MAX_WAITERS)) and this owner has no place in it: it was
    /// not queued, nothing changed. Permanent for this attempt (reported at once, never
    /// retried): the queue drains only as waiters get the lock, leave or expire.
    #[error("fair lock {name}: its queue is full ({limit} live waiters); not queued")]
    QueueFull {
        /// The fair lock's name.
        name: String,
        /// The bound it reached.
        limit: usize,
    },
    /// An adapter-specific failure whose effect is unknown. Adapters that know a failure was
    /// not applied say so with [`Unavailable`](Self::Unavailable) (with the detailed error in
    /// its message) instead.
    #[error(transparent)]
    Other(BoxError),
}

impl BackendError {
    /// Whether retrying the same request can help: false for permanent refusals (invalid
    /// input, a permanent server error, an exhausted counter). An unexpected reply counts as
    /// transient: one garbled reply must not stop an election.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            BackendError::Unavailable(_)
                | BackendError::OutcomeUnknown(_)
                | BackendError::Timeout(_)
                | BackendError::Protocol(_)
                | BackendError::Other(_)
        )
    }

    /// Whether the request may have taken effect at the store (see [`Effect`]).
    pub fn effect(&self) -> Effect {
        match self {
            BackendError::OutcomeUnknown(_)
            | BackendError::Timeout(_)
            | BackendError::Protocol(_)
            | BackendError::Other(_) => Effect::Unknown,
            BackendError::Unavailable(_)
            | BackendError::Invalid(_)
            | BackendError::Refused(_)
            | BackendError::TokenExhausted(_)
            | BackendError::Corrupt { .. }
            | BackendError::Unsupported(_)
            | BackendError::PermitsMismatch { .. }
            | BackendError::QueueFull { .. } => Effect::NotApplied,
            BackendError::TokenRegression { .. } => Effect::Applied,
        }
    }

    /// Shorthand for `self.effect() == Effect::Unknown`.
    pub fn is_outcome_unknown(&self) -> bool {
        self.effect() == Effect::Unknown
    }

    /// A copy of this error for each request of a batch that one failure ended (a pipeline
    /// whose connection broke, a batch that timed out): the same variant, so the same
    /// [`Effect`] and [`is_transient`](Self::is_transient); a boxed source is kept as its
    /// message.
    ///
    /// ```
    /// use lease_core::BackendError;
    /// let e = BackendError::OutcomeUnknown("connection reset".into());
    /// let copy = e.duplicate();
    /// assert!(copy.is_outcome_unknown() && copy.is_transient());
    /// assert_eq!(copy.to_string(), e.to_string());
    /// ```
    pub fn duplicate(&self) -> BackendError {
        let boxed = |e: &BoxError| -> BoxError { e.to_string().into() };
        match self {
            BackendError::Unavailable(e) => BackendError::Unavailable(boxed(e)),
            BackendError::OutcomeUnknown(e) => BackendError::OutcomeUnknown(boxed(e)),
            BackendError::Timeout(d) => BackendError::Timeout(*d),
            BackendError::Invalid(m) => BackendError::Invalid(m.clone()),
            BackendError::Refused(m) => BackendError::Refused(m.clone()),
            BackendError::Protocol(m) => BackendError::Protocol(m.clone()),
            BackendError::TokenExhausted(m) => BackendError::TokenExhausted(m.clone()),
            BackendError::Corrupt { key, detail } => BackendError::Corrupt {
                key: key.clone(),
                detail: detail.clone(),
            },
            BackendError::TokenRegression { previous, minted } => BackendError::TokenRegression {
                previous: *previous,
                minted: *minted,
            },
            BackendError::Unsupported(m) => BackendError::Unsupported(m.clone()),
            BackendError::PermitsMismatch {
                name,
                stored,
                asked,
            } => BackendError::PermitsMismatch {
                name: name.clone(),
                stored: *stored,
                asked: *asked,
            },
            BackendError::QueueFull { name, limit } => BackendError::QueueFull {
                name: name.clone(),
                limit: *limit,
            },
            BackendError::Other(e) => BackendError::Other(boxed(e)),
        }
    }
}
