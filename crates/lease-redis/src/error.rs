//! Errors: the mapping of redis-rs errors to [`BackendError`], and the fencer's error type.

use lease_core::{BackendError, Effect};
use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::slot::SlotError;

/// The error code the acquire script answers with when the next token would pass 2^53.
pub const TOKEN_EXHAUSTED: &str = "TOKEN_EXHAUSTED";

/// The error code with which our scripts refuse a fence key (counter, mark, epoch) holding a
/// value it must not: `CORRUPT <key> <what>`, the key escaped (see `prelude.lua`).
pub const CORRUPT: &str = "CORRUPT";

/// Error codes with which Redis says "not now": the command was not executed, and the same
/// command can succeed later (loading a dataset, a script running, a failover or resharding
/// in progress, too few replicas, memory full under `maxmemory-policy noeviction`).
///
/// `OOM` is refused before a command (or a script: Redis 7 checks when the script starts;
/// Redis 6.2 refuses a script's first write, before it has written anything) changes
/// anything, so it is not applied; memory may be freed a moment later, so it is transient:
/// electors keep contending and step down by their deadline, and recover when memory is
/// freed, instead of the whole fleet stopping on a memory spike.
pub const TRANSIENT_CODES: &[&str] = &[
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "MASTERDOWN",
    "READONLY",
    "CLUSTERDOWN",
    "MOVED",
    "ASK",
    "NOREPLICAS",
    "MISCONF",
    "OOM",
];

/// Maps a redis-rs error to a [`BackendError`], telling apart what provably did not reach
/// the server from what may have.
///
/// | redis-rs error | [`BackendError`] | effect |
/// |---|---|---|
/// | connection refused, client-side errors (nothing was sent) | [`Unavailable`](BackendError::Unavailable) | not applied |
/// | any other I/O error: response timeout, reset, broken pipe, EOF mid-reply (the request may have been sent); no connection to a cluster node (after the cluster client's own retries) | [`OutcomeUnknown`](BackendError::OutcomeUnknown) | unknown |
/// | a [transient code](TRANSIENT_CODES) (`LOADING`, `BUSY`, `TRYAGAIN`, `MASTERDOWN`, `READONLY`, `CLUSTERDOWN`, `MOVED`, `ASK`, `NOREPLICAS`, `MISCONF`, `OOM`), also when Redis wraps it in a script error (`ERR Error running script ...: -READONLY ...`, `-OOM ...`), `ERR max number of clients reached` | [`Unavailable`](BackendError::Unavailable) | not applied |
/// | `TOKEN_EXHAUSTED` (our acquire script) | [`TokenExhausted`](BackendError::TokenExhausted) | not applied |
/// | `CORRUPT` (our scripts: a fence counter, mark or epoch holding garbage) | [`Corrupt`](BackendError::Corrupt) (permanent, names the key) | not applied |
/// | any other error reply (`ERR`, `WRONGTYPE`, `NOPERM`, `NOAUTH`, `WRONGPASS`, script errors) and failed authentication | [`Refused`](BackendError::Refused) (permanent) | not applied |
/// | unparsable or unexpected reply | [`Protocol`](BackendError::Protocol) | unknown |
///
/// Limits: a `ConnectionManager` reports a failed reconnect (for example a connect timeout)
/// as the request's error, so such a request, never sent, is reported as unknown (the safe
/// side). A redis-rs cluster client built by hand re-sends a request after some I/O errors by
/// itself (16 times by default), after the server may have run it: build it with
/// `ClusterClientBuilder::retries(0)`, as every connection this crate builds is
/// (`connect_cluster`, `HealingCluster`).
pub fn backend_error(e: RedisError) -> BackendError {
    let code = e.code();
    if code == Some(TOKEN_EXHAUSTED) {
        return BackendError::TokenExhausted(e.detail().unwrap_or("").to_owned());
    }
    if code == Some(CORRUPT) {
        let detail = e.detail().unwrap_or("");
        let (key, what) = detail.split_once(' ').unwrap_or((detail, ""));
        return BackendError::Corrupt {
            key: key.to_owned(),
            detail: what.to_owned(),
        };
    }
    if code.is_some_and(|c| TRANSIENT_CODES.contains(&c))
        || (code == Some("ERR")
            && e.detail()
                .and_then(script_wrapped_code)
                .is_some_and(|c| TRANSIENT_CODES.contains(&c)))
        || (code == Some("ERR")
            && e.detail()
                .is_some_and(|d| d.contains("max number of clients")))
    {
        return BackendError::Unavailable(Box::new(e));
    }
    match e.kind() {
        ErrorKind::Client => BackendError::Unavailable(Box::new(e)),
        // The cluster client retries internally: an earlier try may have been sent.
        ErrorKind::ClusterConnectionNotFound => BackendError::OutcomeUnknown(Box::new(e)),
        _ if e.is_connection_refusal() => BackendError::Unavailable(Box::new(e)),
        ErrorKind::Io => BackendError::OutcomeUnknown(Box::new(e)),
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
        _ if e.is_timeout() || e.is_connection_dropped() => {
            BackendError::OutcomeUnknown(Box::new(e))
        }
        _ => BackendError::Refused(server_message(&e)),
    }
}

/// The code of an error a command raised inside a script, as Redis 6.2 reports it: wrapped
/// in `ERR Error running script (call to f_...): @user_script:127: @user_script: 127:
/// -READONLY You can't write against a read only replica.` (Redis 7 and Valkey pass the
/// inner code through). Our scripts check before their first write, so such an error left
/// nothing applied.
pub(crate) fn script_wrapped_code(detail: &str) -> Option<&str> {
    if !detail.starts_with("Error running script") {
        return None;
    }
    let (_, inner) = detail.rsplit_once(": -")?;
    inner.split_whitespace().next()
}

/// The server's own words: `CODE detail` (e.g. `NOPERM this user has no permissions to run
/// the 'evalsha' command`) when the error came from the server, else redis-rs's description.
fn server_message(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
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
    /// The write failed at or on the way to the server. Whether it may have been applied
    /// is [`RedisLeaseError::effect`]: a timeout or a connection lost after sending is
    /// [`Effect::Unknown`] (the write and the mark advance may have happened: read before you
    /// retry a non-idempotent write); a refused connection or an error reply is
    /// [`Effect::NotApplied`] (the mark did not move).
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

    /// Whether the write may have been applied: [`Effect::NotApplied`] for writes refused
    /// before a round trip, otherwise the backend error's [`BackendError::effect`].
    pub fn effect(&self) -> Effect {
        match self {
            RedisLeaseError::Slot(_) | RedisLeaseError::InvalidWrite(_) => Effect::NotApplied,
            RedisLeaseError::Backend(e) => e.effect(),
        }
    }

    /// Shorthand for `self.effect() == Effect::Unknown`: the write may have been applied.
    pub fn is_outcome_unknown(&self) -> bool {
        self.effect() == Effect::Unknown
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

    /// How many times `needle` appears in the messages of `e` and of everything below it
    /// (the chain a reporter prints by walking `source()`).
    fn count_in_chain(e: &(dyn std::error::Error + 'static), needle: &str) -> usize {
        let mut count = 0;
        let mut next = Some(e);
        while let Some(err) = next {
            count += err.to_string().matches(needle).count();
            next = err.source();
        }
        count
    }

    #[test]
    fn each_cause_is_printed_once() {
        let e = RedisLeaseError::from(BackendError::Unavailable(Box::new(std::io::Error::other(
            "wire cut",
        ))));
        assert_eq!(count_in_chain(&e, "wire cut"), 1, "{e}");
        let e = RedisLeaseError::from(SlotError::NoHashTag { key: "jobs".into() });
        assert_eq!(count_in_chain(&e, "\"jobs\""), 1, "{e}");
        let e = crate::backend_error(RedisError::from(std::io::Error::other("reset by peer")));
        assert_eq!(count_in_chain(&e, "reset by peer"), 1, "{e}");
    }

    fn server(code: &str, detail: &str) -> RedisError {
        redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
    }

    #[test]
    fn a_transient_code_wrapped_in_a_script_error_is_transient() {
        let wrapped = "Error running script (call to f_18c4): @user_script:127: \
                       @user_script: 127: -READONLY You can't write against a read only replica.";
        assert_eq!(script_wrapped_code(wrapped), Some("READONLY"));
        assert_eq!(script_wrapped_code("unknown command 'x'"), None);
        let b = backend_error(server("ERR", wrapped));
        assert!(matches!(b, BackendError::Unavailable(_)), "{b:?}");
        let other = "Error running script (call to f_1): @user_script:1: -WRONGTYPE Operation";
        let b = backend_error(server("ERR", other));
        assert!(matches!(b, BackendError::Refused(_)), "{b:?}");
    }

    #[test]
    fn a_refused_connection_is_unavailable() {
        let e = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let b = backend_error(e);
        assert!(matches!(b, BackendError::Unavailable(_)), "{b:?}");
        assert_eq!(b.effect(), Effect::NotApplied);
        assert!(b.is_transient());
    }

    #[test]
    fn io_errors_after_sending_are_outcome_unknown() {
        for kind in [
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::TimedOut,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::ConnectionAborted,
            std::io::ErrorKind::UnexpectedEof,
        ] {
            let e = RedisError::from(std::io::Error::from(kind));
            let b = backend_error(e);
            assert!(
                matches!(b, BackendError::OutcomeUnknown(_)),
                "{kind:?}: {b:?}"
            );
            assert_eq!(b.effect(), Effect::Unknown);
            assert!(b.is_transient());
        }
    }

    #[test]
    fn transient_codes_are_unavailable_and_not_applied() {
        for code in TRANSIENT_CODES {
            let b = backend_error(server(code, "not now"));
            assert!(matches!(b, BackendError::Unavailable(_)), "{code}: {b:?}");
            assert!(b.is_transient());
            assert_eq!(b.effect(), Effect::NotApplied);
        }
    }

    #[test]
    fn permanent_codes_are_refused_at_once() {
        for code in [
            "ERR",
            "WRONGTYPE",
            "NOPERM",
            "NOAUTH",
            "WRONGPASS",
            "NOSCRIPT",
        ] {
            let b = backend_error(server(code, "no"));
            assert!(
                matches!(&b, BackendError::Refused(m) if m.contains(code)),
                "{code}: {b:?}"
            );
            assert!(!b.is_transient(), "{code}");
            assert_eq!(b.effect(), Effect::NotApplied);
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
    fn corrupt_is_typed_and_names_the_key() {
        let e = server(CORRUPT, "{e}:fence\\x20x is not a decimal integer");
        let b = backend_error(e);
        assert!(!b.is_transient());
        assert_eq!(b.effect(), Effect::NotApplied);
        match b {
            BackendError::Corrupt { key, detail } => {
                assert_eq!(key, "{e}:fence\\x20x");
                assert_eq!(detail, "is not a decimal integer");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_codes_are_server_errors() {
        let e = server("WRONGTYPE", "Operation against a key");
        assert!(matches!(backend_error(e), BackendError::Refused(m) if m.contains("WRONGTYPE")));
    }

    #[test]
    fn slot_errors_become_invalid() {
        let e = RedisLeaseError::from(SlotError::NoHashTag { key: "k".into() });
        assert!(!e.is_transient());
        assert!(matches!(BackendError::from(e), BackendError::Invalid(_)));
    }
}
