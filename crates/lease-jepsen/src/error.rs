//! The harness's errors.

use std::path::PathBuf;

/// Everything that can stop a run (a failed check is not an error: it is a verdict).
#[derive(Debug, thiserror::Error)]
pub enum JepsenError {
    /// A system command (`ip`, `iptables`, `kill`) could not run or failed.
    #[error("`{command}` failed: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status and stderr, or why it could not run.
        detail: String,
    },
    /// A history or log file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line of a history file or of the resource's log did not parse.
    #[error("cannot parse {what}: {line:?}")]
    Parse {
        /// What was being parsed.
        what: &'static str,
        /// The offending line.
        line: String,
    },
    /// A test server could not be started or faulted.
    #[error("test server: {0}")]
    Server(#[from] lease_testkit::Error),
    /// Redis refused or failed a harness request (reading the log).
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// A node process could not be started or stopped.
    #[error("node {node}: {detail}")]
    Node {
        /// The node's index.
        node: usize,
        /// What went wrong.
        detail: String,
    },
    /// Something did not happen within its bound.
    #[error("timed out: {0}")]
    Timeout(String),
    /// An invalid option (scenario name, node count, duration).
    #[error("invalid option: {0}")]
    Config(String),
}

/// Shorthand for results of this crate.
pub type Result<T, E = JepsenError> = std::result::Result<T, E>;
