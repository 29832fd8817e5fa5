//! Exit codes and the one-line failure every command reports.

use std::fmt;
use std::process::ExitStatus;

use redlease::{BackendError, ConfigError, LockError, TokenError};

/// Success (for `run` and `lock`: CMD exited 0).
pub(crate) const OK: u8 = 0;
/// `unlock`: the lock was not held (by `--owner`): nothing was deleted.
pub(crate) const NOT_HELD: u8 = 1;
/// The command line cannot be parsed: unknown option, missing argument, missing `--` or CMD,
/// malformed duration.
pub(crate) const USAGE: u8 = 2;
/// `fence`: the write was refused because the token is stale (a newer term exists).
pub(crate) const STALE: u8 = 3;
/// A value was refused: name, key or instance id empty, too long or with a NUL byte; TTL or
/// interval out of range; token outside `1..=2^53`; malformed Redis URL; an unreadable or
/// unusable TLS file, `--tls-cert` without `--tls-key`, a `--tls-*` option with `redis://`;
/// a subcommand the topology cannot offer soundly (`topology::Unsupported`: `fence` with
/// `--redlock`).
pub(crate) const INVALID: u8 = 64;
/// Redis cannot be reached (connection refused or timed out, name resolution, no reply), or
/// the TLS handshake failed (unknown CA, expired certificate, wrong host name, client
/// certificate required, not a TLS port).
pub(crate) const UNAVAILABLE: u8 = 69;
/// Redis answered with an error or an unexpected reply (authentication, WRONGTYPE, script
/// error), or another internal failure.
pub(crate) const SOFTWARE: u8 = 70;
/// `lock`: the lock was not obtained within `--wait` (someone else holds it), or a fair lock's
/// queue is full; the default of `-E/--conflict-exit-code`. Not sysexits' `EX_OSERR`, whose
/// number it shares.
pub(crate) const NOT_OBTAINED: u8 = 71;
/// `run`/`lock`: leadership or the lock was lost while CMD ran; CMD was stopped. Not sysexits'
/// `EX_OSFILE`, whose number it shares.
pub(crate) const LOST: u8 = 72;
/// `lock --max-hold`: the hold reached its cap while CMD ran (or while held without CMD);
/// CMD was stopped as for a lost lock, and the lock released (or left to lapse within the
/// cap). Not a loss: nobody else took it. Not sysexits' `EX_CANTCREAT`, whose number it
/// shares.
pub(crate) const MAX_HOLD: u8 = 73;
/// `run`/`lock --health-addr`: the address cannot be bound (in use, not an address of this
/// host, a privileged port).
pub(crate) const CANNOT_LISTEN: u8 = 74;
/// The request may have reached Redis and no reply was seen (timeout or connection lost
/// after sending): it may or may not have been applied (`fence`: the write may have landed;
/// `lock`: the lock may be held until its TTL; a cleanup was attempted).
pub(crate) const OUTCOME_UNKNOWN: u8 = 75;
/// `status --check`: the server's settings let the fence keys be evicted or lost (no or
/// lagging persistence, an `allkeys` eviction policy, a replica); settings the server would
/// not disclose never give this code.
pub(crate) const UNSAFE_STORE: u8 = 78;
/// CMD was found but could not be started (permission denied, not executable).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// CMD was not found.
pub(crate) const NOT_FOUND: u8 = 127;

/// The exit-code table, for `--help` (the crate docs carry the same table).
pub(crate) const TABLE: &str = "\
Exit codes:
  0        success (run/lock: CMD exited 0)
  1        demo: the story did not go as expected; unlock: the lock was not held (by
           --owner), nothing deleted
  1-255    run/lock: CMD's own exit status, passed through; 128+N when CMD was killed by
           signal N (shell convention)
  2        usage: unknown option, missing argument, missing `--` or CMD, malformed duration
  3        fence: refused, the token is stale (a newer term exists); nothing was written
  64       invalid value: name/key/instance id empty, too long or with NUL; TTL or interval
           out of range; token not in 1..=2^53; malformed Redis URL; unusable TLS file,
           --tls-cert without --tls-key (or the reverse), --tls-* with a redis:// URL;
           fence with --redlock (not offered on a quorum); a key outside the election's
           slot on a cluster
  69       Redis unreachable (refused, timed out after ~1 s, unknown host, no reply), or
           TLS failed (unknown CA, expired certificate, wrong host name, client
           certificate required, not a TLS port)
  70       Redis error or unexpected reply (authentication, WRONGTYPE, script error)
  71       lock: not obtained within --wait (held by someone else); choose another status
           with -E/--conflict-exit-code N
  72       run/lock: leadership or the lock was lost while CMD ran; CMD was stopped
  73       lock --max-hold: the hold reached its cap; CMD was stopped (as for 72) and the
           lock released; not a loss
  74       run/lock: --health-addr cannot be bound (in use, not local, privileged port)
  75       outcome unknown: the request may have reached Redis but no reply was seen (fence:
           the write may have been applied; lock: it may be held until its TTL)
  78       status --check / run --require-durable-store: the server's settings let fence
           keys be evicted or lost
  126      CMD could not be executed (permission denied)
  127      CMD not found
  130, 131, 143
           redlease itself got SIGINT / SIGQUIT / SIGTERM: CMD was stopped (at once on
           SIGQUIT) and the lease released (SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH, SIGALRM are
           forwarded to CMD: a CMD they kill gives 128+N as its own status)

69, 70, 74, 75 and 78 mean what BSD's sysexits.h says (EX_UNAVAILABLE, EX_SOFTWARE,
EX_IOERR, EX_TEMPFAIL, EX_CONFIG), 64 (EX_USAGE) marks a refused value; 71, 72 and 73 are
redlease's own (not EX_OSERR / EX_OSFILE / EX_CANTCREAT). The CLI's own codes (2, 3, 64-75,
78, 126, 127) overlap with statuses CMD may return; with --json the final `exit` event on stderr says
which it was (`\"cause\"`).";

/// A failure: an exit code and one line for stderr.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: one_line(&message.into()),
        }
    }

    pub(crate) fn invalid(what: &str, e: impl fmt::Display) -> Failure {
        Failure::new(INVALID, format!("invalid {what}: {e}"))
    }

    pub(crate) fn config(e: &ConfigError) -> Failure {
        Failure::new(INVALID, format!("invalid value: {e}"))
    }

    pub(crate) fn token(e: &TokenError) -> Failure {
        Failure::new(INVALID, format!("invalid --token: {e}"))
    }

    /// A failure to get an answer, or an answer that is an error.
    pub(crate) fn backend(context: &str, e: &BackendError) -> Failure {
        let code = match e {
            BackendError::Unavailable(_) => UNAVAILABLE,
            BackendError::Invalid(_) => INVALID,
            _ if e.is_outcome_unknown() => OUTCOME_UNKNOWN,
            _ => SOFTWARE,
        };
        Failure::new(code, format!("{context}: {e}"))
    }

    pub(crate) fn redis(context: &str, e: &redlease::redis::client::RedisError) -> Failure {
        let code = if e.is_io_error()
            || e.is_connection_refusal()
            || e.is_timeout()
            || e.is_connection_dropped()
        {
            UNAVAILABLE
        } else {
            SOFTWARE
        };
        Failure::new(code, format!("{context}: {e}"))
    }

    pub(crate) fn lock(key: &str, e: &LockError) -> Failure {
        // A fair lock's full queue (`lock --fair`): not queued, nothing changed.
        if e.is_not_obtained()
            || matches!(
                e,
                LockError::Refused(redlease::BackendError::QueueFull { .. })
            )
        {
            return Failure::new(NOT_OBTAINED, format!("lock {key:?} not obtained: {e}"));
        }
        let code = match e {
            _ if e.is_outcome_unknown() => OUTCOME_UNKNOWN,
            LockError::Invalid(_) => INVALID,
            // `lock -n N` with another count than the semaphore's holders use, or on a
            // topology without semaphores (Redlock): the invocation is wrong, not the server.
            LockError::Refused(
                redlease::BackendError::PermitsMismatch { .. }
                | redlease::BackendError::Unsupported(_),
            ) => INVALID,
            LockError::Unavailable(_) => UNAVAILABLE,
            LockError::DeadlineExceeded { last } => match **last {
                LockError::Unavailable(_) => UNAVAILABLE,
                _ => SOFTWARE,
            },
            _ => SOFTWARE,
        };
        Failure::new(code, format!("lock {key:?}: {e}"))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Joins lines and collapses whitespace: every failure is reported on exactly one line.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// CMD's exit status as a process exit code: its code, or 128 + the signal that killed it.
pub(crate) fn status_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return u8::try_from(code).unwrap_or(1);
    }
    match status.signal() {
        Some(sig) => u8::try_from(128 + sig).unwrap_or(255),
        None => 1,
    }
}

/// A human description of CMD's exit status.
pub(crate) fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("killed by signal {s} ({})", signal_name(s)),
        _ => "ended".to_owned(),
    }
}

pub(crate) fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        28 => "SIGWINCH",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn statuses_follow_the_shell_convention() {
        assert_eq!(status_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(status_code(ExitStatus::from_raw(7 << 8)), 7);
        // Killed by SIGTERM (15) / SIGKILL (9).
        assert_eq!(status_code(ExitStatus::from_raw(15)), 143);
        assert_eq!(status_code(ExitStatus::from_raw(9)), 137);
        assert_eq!(
            describe_status(ExitStatus::from_raw(15)),
            "killed by signal 15 (SIGTERM)"
        );
    }

    #[test]
    fn a_full_fair_queue_is_not_obtained() {
        let e = LockError::Refused(redlease::BackendError::QueueFull {
            name: "{q}".into(),
            limit: 10_000,
        });
        let f = Failure::lock("{q}", &e);
        assert_eq!(f.code, NOT_OBTAINED, "{}", f.message);
        assert!(f.message.contains("queue is full"), "{}", f.message);
    }

    #[test]
    fn failures_are_one_line() {
        let f = Failure::new(USAGE, "error: a\n\n  b\tc\n");
        assert_eq!(f.message, "error: a b c");
    }

    #[test]
    fn codes_are_distinct() {
        let mut codes = [
            USAGE,
            STALE,
            INVALID,
            UNAVAILABLE,
            SOFTWARE,
            NOT_OBTAINED,
            LOST,
            CANNOT_LISTEN,
            OUTCOME_UNKNOWN,
            CANNOT_EXECUTE,
            NOT_FOUND,
        ];
        codes.sort_unstable();
        let n = codes.len();
        let mut dedup = codes.to_vec();
        dedup.dedup();
        assert_eq!(dedup.len(), n);
        assert!(!codes.contains(&OK));
    }
}
