//! Errors: the mapping of redis-rs errors to [`BackendError`], and the fencer's error type.

use lease_core::BackendError;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::slot::SlotError;

/// The error code the acquire script answers with when the next token would pass 2^53.
pub const TOKEN_EXHAUSTED: &str = "TOKEN_EXHAUSTED";

/// Maps a redis-rs error to a [`BackendError`].
///
/// | redis-rs error | [`BackendError`] |
/// |---|---|
/// | I/O (refused, reset, broken pipe, timed out), no connection to a cluster node, client-side connection failures | [`Unavailable`](BackendError::Unavailable) |
/// | `LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY`, `MOVED`, `ASK` (the server cannot serve the slot now) | [`Unavailable`](BackendError::Unavailable) |
/// | `TOKEN_EXHAUSTED` (our acquire script) | [`TokenExhausted`](BackendError::TokenExhausted) |
/// | any other error reply (`ERR`, `WRONGTYPE`, `NOSCRIPT`, `NOPERM`, authentication, ...) | [`Server`](BackendError::Server) |
/// | unparsable or unexpected reply | [`Protocol`](BackendError::Protocol) |
pub fn backend_error(e: RedisError) -> BackendError {
    if e.code() == Some(TOKEN_EXHAUSTED) {
        return BackendError::TokenExhausted(e.detail().unwrap_or("").to_owned());
    }
    match e.kind() {
        ErrorKind::Io | ErrorKind::ClusterConnectionNotFound | ErrorKind::Client => {
            BackendError::Unavailable(Box::new(e))
        }
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask,
        ) => BackendError::Unavailable(Box::new(e)),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType | ErrorKind::RESP3NotSupported => {
            BackendError::Protocol(e.to_string())
        }
        _ if e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() => {
            BackendError::Unavailable(Box::new(e))
        }
        _ => BackendError::Server(e.to_string()),
    }
}

/// Why a fenced write failed (a stale token is not an error: it is
/// [`FenceOutcome::Stale`](lease_core::FenceOutcome::Stale)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisLeaseError {
    /// A key cannot be used with this fencer on Redis Cluster (refused before any round trip).
    #[error(transparent)]
    Slot(#[from] SlotError),
    /// The write cannot be expressed (refused before any round trip).
    #[error("invalid fenced write: {0}")]
    InvalidWrite(String),
    /// The backend failed to answer, or answered with an error (the mark did not move).
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl RedisLeaseError {
    /// Whether retrying the same write can help (false for writes refused before a round trip).
    pub fn is_transient(&self) -> bool {
        match self {
            RedisLeaseError::Slot(_) | RedisLeaseError::InvalidWrite(_) => false,
            RedisLeaseError::Backend(e) => e.is_transient(),
        }
    }
}

impl From<RedisLeaseError> for BackendError {
    fn from(e: RedisLeaseError) -> BackendError {
        match e {
            RedisLeaseError::Slot(s) => BackendError::Invalid(s.to_string()),
            RedisLeaseError::InvalidWrite(s) => BackendError::Invalid(s),
            RedisLeaseError::Backend(b) => b,
        }
    }
}

impl From<RedisError> for RedisLeaseError {
    fn from(e: RedisError) -> RedisLeaseError {
        RedisLeaseError::Backend(backend_error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str, detail: &str) -> RedisError {
        redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
    }

    #[test]
    fn io_errors_are_unavailable() {
        for kind in [
            std::io::ErrorKind::ConnectionRefused,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::TimedOut,
            std::io::ErrorKind::ConnectionReset,
        ] {
            let e = RedisError::from(std::io::Error::from(kind));
            assert!(matches!(backend_error(e), BackendError::Unavailable(_)));
        }
    }

    #[test]
    fn token_exhausted_is_typed() {
        let e = server(TOKEN_EXHAUSTED, "the fence counter x would pass 2^53");
        match backend_error(e) {
            BackendError::TokenExhausted(m) => assert!(m.contains("2^53")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_codes_are_server_errors() {
        let e = server("WRONGTYPE", "Operation against a key");
        assert!(matches!(backend_error(e), BackendError::Server(m) if m.contains("WRONGTYPE")));
    }

    #[test]
    fn slot_errors_become_invalid() {
        let e = RedisLeaseError::from(SlotError::NoHashTag { key: "k".into() });
        assert!(!e.is_transient());
        assert!(matches!(BackendError::from(e), BackendError::Invalid(_)));
    }
}
