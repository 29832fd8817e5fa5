//! The kit's error type.

use std::time::Duration;

/// Everything that can go wrong while starting, controlling or tearing down a
/// test server.
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
    #[error("{context}: {source}")]
    Io {
        /// What the kit was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
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
    Redis(#[from] redis::RedisError),
    /// A Postgres client error.
    #[error("postgres error: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// The operation is not valid in the server's current state (e.g. `pause()` on a
    /// stopped server).
    #[error("invalid state: {0}")]
    InvalidState(String),
    /// Invalid kit configuration (bad environment variable or builder option).
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// The kit's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
