//! Replica acknowledgement: `WAIT numreplicas timeout` after the writes that matter, so a
//! grant or a fenced write is reported as done only once enough replicas hold it.
//!
//! Redis replicates asynchronously: a primary that fails right after a write may be replaced
//! by a replica that never got it. The lease, the fence counter or a fenced write is then
//! lost, and another instance can be granted the same lease. With a [`ReplicaAck`] the
//! backend ([`crate::RedisBackend::with_replica_ack`]) and its fencers send `WAIT` on the same
//! connection after every granted acquire, successful renewal, counter raise and applied
//! fenced write. If fewer replicas than asked acknowledge within the timeout, the call
//! reports [`BackendError::OutcomeUnknown`] (effect unknown: the primary applied it, a
//! failover may still lose it), never success. The driver treats that as it treats any
//! unknown outcome: an acquire is not a grant (the next attempt takes the lease over with a
//! fresh token), a renewal does not extend the deadline.
//!
//! `WAIT` bounds the loss window; it does not make Redis strongly consistent (a replica that
//! acknowledged may still lose the write if it is not the one promoted). See
//! `docs/fencing.md` for what it buys with and without clock-floored tokens.

use std::fmt;
use std::time::Duration;

use lease_core::{BackendError, ConfigError};
use redis::aio::ConnectionLike;

/// The longest acknowledgement timeout [`ReplicaAck::new`] accepts: 1 hour. (`WAIT` blocks its
/// connection for up to this long; a timeout beyond any lease's TTL makes no sense, and a
/// value past `u64` milliseconds would have been cut to another value, possibly 0: block
/// forever.)
pub const MAX_ACK_TIMEOUT: Duration = Duration::from_secs(3600);

/// How many replicas must acknowledge a write, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaAck {
    replicas: u32,
    timeout: Duration,
}

impl ReplicaAck {
    /// At least `replicas` replicas (≥ 1) within `timeout` (a whole number of milliseconds,
    /// ≥ 1 ms: `WAIT` with a timeout of 0 would block forever; at most [`MAX_ACK_TIMEOUT`]).
    pub fn new(replicas: u32, timeout: Duration) -> Result<ReplicaAck, ConfigError> {
        if replicas == 0 {
            return Err(ConfigError::Invalid(
                "replica acknowledgement needs at least one replica".into(),
            ));
        }
        if timeout < Duration::from_millis(1) || !timeout.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(ConfigError::Invalid(format!(
                "replica acknowledgement timeout {timeout:?} must be a positive whole number of milliseconds"
            )));
        }
        if timeout > MAX_ACK_TIMEOUT {
            return Err(ConfigError::Invalid(format!(
                "replica acknowledgement timeout {timeout:?} is above {MAX_ACK_TIMEOUT:?}"
            )));
        }
        Ok(ReplicaAck { replicas, timeout })
    }

    /// The number of replicas.
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// The timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends `WAIT` on `conn` (which must be the connection the write went through) and
    /// checks the count. Errors: [`BackendError::OutcomeUnknown`] when too few replicas
    /// acknowledged (with a [`NotAcknowledged`] source) or when `WAIT` itself failed: the
    /// write was applied on the primary either way.
    pub async fn wait<C: ConnectionLike + Send>(&self, conn: &mut C) -> Result<(), BackendError> {
        let acked: Result<i64, redis::RedisError> = redis::cmd("WAIT")
            .arg(self.replicas)
            .arg(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX))
            .query_async(conn)
            .await;
        match acked {
            Ok(n) if n >= i64::from(self.replicas) => Ok(()),
            Ok(n) => {
                tracing::warn!(
                    wanted = self.replicas,
                    acknowledged = n,
                    timeout = ?self.timeout,
                    "lease-redis: too few replicas acknowledged; outcome unknown"
                );
                Err(BackendError::OutcomeUnknown(Box::new(NotAcknowledged {
                    wanted: self.replicas,
                    acknowledged: n.max(0) as u64,
                    timeout: self.timeout,
                })))
            }
            Err(e) => {
                tracing::warn!(error = %e, "lease-redis: WAIT failed after a write; outcome unknown");
                Err(BackendError::OutcomeUnknown(Box::new(e)))
            }
        }
    }
}

/// Fewer replicas than asked acknowledged a write in time (the source of the
/// [`BackendError::OutcomeUnknown`] a [`ReplicaAck`] reports).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NotAcknowledged {
    /// Replicas asked for.
    pub wanted: u32,
    /// Replicas that acknowledged.
    pub acknowledged: u64,
    /// How long the server waited.
    pub timeout: Duration,
}

impl fmt::Display for NotAcknowledged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} replicas acknowledged the write within {:?}",
            self.acknowledged, self.wanted, self.timeout
        )
    }
}

impl std::error::Error for NotAcknowledged {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused() {
        assert!(ReplicaAck::new(0, Duration::from_secs(1)).is_err());
        assert!(ReplicaAck::new(1, Duration::ZERO).is_err());
        assert!(ReplicaAck::new(1, Duration::from_micros(1500)).is_err());
        assert!(ReplicaAck::new(1, Duration::MAX).is_err());
        assert!(ReplicaAck::new(1, MAX_ACK_TIMEOUT + Duration::from_millis(1)).is_err());
        assert!(ReplicaAck::new(1, MAX_ACK_TIMEOUT).is_ok());
        let ack = ReplicaAck::new(2, Duration::from_millis(250)).unwrap();
        assert_eq!(
            (ack.replicas(), ack.timeout()),
            (2, Duration::from_millis(250))
        );
    }
}
