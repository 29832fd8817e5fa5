//! The harness's errors.

use std::path::PathBuf;

/// Everything that can stop a run (a failed check is not an error: it is a verdict). Each
/// message names its cause once; `source()` is `None` (the cause is in the message and the
/// field).
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
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        error: std::io::Error,
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
    Server(lease_testkit::Error),
    /// Redis refused or failed a harness request (reading the log).
    #[error("redis: {0}")]
    Redis(redis::RedisError),
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

impl From<lease_testkit::Error> for JepsenError {
    fn from(e: lease_testkit::Error) -> Self {
        JepsenError::Server(e)
    }
}

impl From<redis::RedisError> for JepsenError {
    fn from(e: redis::RedisError) -> Self {
        JepsenError::Redis(e)
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = JepsenError> = std::result::Result<T, E>;

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
        let e = JepsenError::Io {
            path: "h.log".into(),
            error: std::io::Error::other("disk on fire"),
        };
        assert_eq!(count_in_chain(&e, "disk on fire"), 1, "{e}");
        let e = JepsenError::from(redis::RedisError::from(std::io::Error::other("wire cut")));
        assert_eq!(count_in_chain(&e, "wire cut"), 1, "{e}");
        let e = JepsenError::from(lease_testkit::Error::Container("no engine".into()));
        assert_eq!(count_in_chain(&e, "no engine"), 1, "{e}");
    }
}
