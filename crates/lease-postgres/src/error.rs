//! The Postgres adapter's error type.

use lease_core::{Effect, TokenError};
use tokio_postgres::error::SqlState;

use super::ident::IdentError;

/// A boxed error from a connection source (a pool, for example).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a Postgres fence operation failed.
///
/// A stale token is not an error: it is [`lease_core::FenceOutcome::Stale`] (or
/// [`super::RowOutcome::Stale`]). Errors are the cases where no answer was obtained or the input
/// was refused before any round trip.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgFenceError {
    /// Postgres returned an error or the connection failed. If the connection failed without
    /// an answer (possibly at `COMMIT`), the outcome is unknown: see [`PgFenceError::effect`].
    #[error("postgres: {0}")]
    Postgres(tokio_postgres::Error),
    /// A table, schema or column name is not a usable identifier.
    #[error(transparent)]
    InvalidIdentifier(#[from] IdentError),
    /// A raw value is not a valid token (zero, negative, or above 2^53, which includes
    /// everything beyond `i64`).
    #[error("token out of range: {0}")]
    TokenOutOfRange(TokenError),
    /// A fence name (the key of the marks table) is unusable.
    #[error("invalid fence name: {0}")]
    InvalidName(&'static str),
    /// A mark or fence column holds a value that is not a token (negative, or above 2^53);
    /// something other than this crate wrote it.
    #[error("stored fence mark {value} is not a valid token")]
    InvalidStoredMark {
        /// The value found.
        value: i64,
    },
    /// The number of values does not match the statement's columns.
    #[error("statement expects {expected} values, got {got}")]
    Arity {
        /// The number of columns of the statement.
        expected: usize,
        /// The number of values passed.
        got: usize,
    },
    /// A column list is unusable (duplicate column, or the key or fence column among the
    /// columns to set), or the table does not have the expected shape.
    #[error("invalid table shape: {0}")]
    Shape(String),
    /// The connection source (for example a pool) failed to hand out a connection.
    #[error("no connection: {0}")]
    Connection(BoxError),
}

// The causes are in the messages: `source()` does not repeat them (the fields hold them).
impl From<tokio_postgres::Error> for PgFenceError {
    fn from(e: tokio_postgres::Error) -> Self {
        PgFenceError::Postgres(e)
    }
}

impl From<TokenError> for PgFenceError {
    fn from(e: TokenError) -> Self {
        PgFenceError::TokenOutOfRange(e)
    }
}

impl PgFenceError {
    /// Whether the fenced write may have been applied:
    ///
    /// - [`Effect::NotApplied`] for input refused before a round trip, a connection source
    ///   that handed out no connection, and an error Postgres answered with (a failed
    ///   statement aborts the transaction; a failed `COMMIT` rolls it back);
    /// - [`Effect::Unknown`] for a connection that failed without an answer, and for a session
    ///   Postgres terminated (FATAL/PANIC, SQLSTATE classes 57 and 08): if that was the
    ///   `COMMIT`, the transaction may have committed. Read back before repeating it.
    pub fn effect(&self) -> Effect {
        match self {
            PgFenceError::Postgres(e) => match e.as_db_error() {
                None => Effect::Unknown,
                // The session was terminated (e.g. 57P01 at COMMIT while waiting for
                // synchronous replication, "already committed locally"), or the connection
                // failed: the transaction may have committed.
                Some(db)
                    if matches!(db.severity(), "FATAL" | "PANIC")
                        || db.code().code().starts_with("57")
                        || db.code().code().starts_with("08") =>
                {
                    Effect::Unknown
                }
                Some(_) => Effect::NotApplied,
            },
            _ => Effect::NotApplied,
        }
    }

    /// Shorthand for `self.effect() == Effect::Unknown`.
    pub fn is_outcome_unknown(&self) -> bool {
        self.effect() == Effect::Unknown
    }

    /// Whether Postgres refused the transaction with a serialization failure (SQLSTATE 40001)
    /// or a deadlock (40P01). Under `REPEATABLE READ` or `SERIALIZABLE`, a fence that races
    /// a concurrent raise of the same mark fails this way instead of returning `Stale`; retry
    /// the whole transaction (the retry sees the new mark and reports `Stale` if it applies).
    pub fn is_retryable_conflict(&self) -> bool {
        match self {
            PgFenceError::Postgres(e) => matches!(
                e.code(),
                Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == SqlState::T_R_DEADLOCK_DETECTED
            ),
            _ => false,
        }
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
        let e = PgFenceError::Connection(Box::new(std::io::Error::other("pool closed")));
        assert_eq!(count_in_chain(&e, "pool closed"), 1, "{e}");
        let e = PgFenceError::from(IdentError::Nul("a\0b".into()));
        assert_eq!(count_in_chain(&e, "NUL byte"), 1, "{e}");
        let e = PgFenceError::from(TokenError::Negative(-3));
        assert_eq!(count_in_chain(&e, "-3"), 1, "{e}");
    }
}
