//! The kit's error type.

use std::time::Duration;

/// Everything that can go wrong while starting, controlling or tearing down a
/// test server. Each message names its cause once; `source()` is `None` (the cause is in the
/// message and the field), as for every redlease error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A program the kit needs (e.g. `redis-server`, `initdb`) is not installed.
    #[error("`{program}` not found: {hint}")]
    ProgramNotFound {
        /// The program that was looked for.
        program: String,
        /// What to install, or where it was looked for.
        hint: String,
    },
    /// An I/O operation failed.
    #[error("{context}: {error}")]
    Io {
        /// What the kit was doing.
        context: String,
        /// The underlying error.
        error: std::io::Error,
    },
    /// A helper command (e.g. `redis-cli --cluster create`, `docker kill`) failed.
    #[error("command `{command}` failed: {output}")]
    Command {
        /// The command line that was run.
        command: String,
        /// Its exit status and (the tail of) its output.
        output: String,
    },
    /// A server process exited while the kit was waiting for it to become ready.
    #[error("{what} exited during startup ({status}); log tail:\n{log}")]
    Exited {
        /// Which server.
        what: String,
        /// Its exit status.
        status: String,
        /// The tail of its log.
        log: String,
    },
    /// A server did not become ready within the deadline.
    #[error("{what} was not ready after {waited:?}: {last_error}")]
    NotReady {
        /// Which server.
        what: String,
        /// How long the kit waited.
        waited: Duration,
        /// The last readiness probe failure.
        last_error: String,
    },
    /// A testcontainers / Docker operation failed.
    #[error("container error: {0}")]
    Container(String),
    /// A Redis client error.
    #[error("redis error: {0}")]
    Redis(redis::RedisError),
    /// A Postgres client error.
    #[error("postgres error: {0}")]
    Postgres(tokio_postgres::Error),
    /// The operation is not valid in the server's current state (e.g. `pause()` on a
    /// stopped server).
    #[error("invalid state: {0}")]
    InvalidState(String),
    /// Invalid kit configuration (bad environment variable or builder option).
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Error::Redis(e)
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        Error::Postgres(e)
    }
}

/// The kit's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            error: source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many times `needle` appears in the messages of `e` and of everything below it.
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
        let e = Error::io("reading x", std::io::Error::other("disk on fire"));
        assert_eq!(count_in_chain(&e, "disk on fire"), 1, "{e}");
        let e = Error::from(redis::RedisError::from(std::io::Error::other("wire cut")));
        assert_eq!(count_in_chain(&e, "wire cut"), 1, "{e}");
    }
}
