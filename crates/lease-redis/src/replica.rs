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
//!
//! # Dedicated connections: `WAIT` blocks nothing else
//!
//! `WAIT` counts only the writes made on the connection it is sent on, and Redis answers
//! nothing else on that connection until it returns (up to the ack's timeout, at most
//! [`MAX_ACK_TIMEOUT`]). On the shared multiplexed connection every request queued behind
//! it — renewals of other leases, releases, inspections — would wait too. So acknowledged
//! operations (every acquire, renewal, counter raise and fenced write of a backend with a
//! [`ReplicaAck`]) take a connection **of their own** for the write and its `WAIT`: one of at
//! most [`DEFAULT_ACK_CONNECTIONS`] connections (or
//! [`RedisBackend::with_ack_connections`](crate::RedisBackend::with_ack_connections), at most
//! [`MAX_ACK_CONNECTIONS`]) opened lazily from the same connection information, shared by the
//! backend's clones and its fencers, each used by one operation at a time. Operations
//! without a `WAIT` (releases, inspections, every call of a backend without a
//! [`ReplicaAck`]) stay on the shared connection and never wait for these.
//!
//! - The write and its `WAIT` run one after the other on the checked-out connection (the
//!   `WAIT` only after a write that applied, as before: a refused write waits for nothing).
//! - When all of them are busy, the next acknowledged operation waits for one; that wait
//!   counts against the operation's own bound (the driver's deadline, a fencer's timeout),
//!   and an operation abandoned while waiting sent nothing.
//! - A connection whose operation was abandoned mid-call (its reply, or its `WAIT`'s, still
//!   owed) is closed, not reused, so no later operation queues behind a stale `WAIT`.
//! - Supported for [`HealingConnection`](crate::HealingConnection) (what
//!   [`connect()`](crate::connect()) builds) and `SentinelConnection` (each dedicated
//!   connection follows the primary on its own). Other connection types (a plain
//!   `MultiplexedConnection`, `ConnectionManager`, a cluster connection) cannot be re-dialled
//!   from the handle: their `WAIT` goes over the shared connection, with a warning in the
//!   log, as does a backend given `with_ack_connections(0)`.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::{BackendError, ConfigError};
use redis::aio::ConnectionLike;
use redis::{Cmd, RedisFuture, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The longest acknowledgement timeout [`ReplicaAck::new`] accepts: 1 hour. (`WAIT` blocks its
/// connection for up to this long; a timeout beyond any lease's TTL makes no sense, and a
/// value past `u64` milliseconds would have been cut to another value, possibly 0: block
/// forever.)
pub const MAX_ACK_TIMEOUT: Duration = Duration::from_secs(3600);

/// How many dedicated connections a backend (with its clones and fencers) opens at most for
/// acknowledged operations, by default: 4, so four `WAIT`s may be pending at once (each up to
/// the ack's timeout) before a fifth acknowledged operation waits; see the
/// [module documentation](self).
pub const DEFAULT_ACK_CONNECTIONS: usize = 4;

/// The most dedicated connections
/// [`RedisBackend::with_ack_connections`](crate::RedisBackend::with_ack_connections) accepts:
/// 64.
pub const MAX_ACK_CONNECTIONS: usize = 64;

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

/// Opens a new connection to the same server as a template, used by nobody else.
type Opener<C> = Arc<dyn Fn() -> Option<C> + Send + Sync>;

/// `t` as a `C` when they are the same type.
fn same_type<T: 'static, C: 'static>(t: T) -> Option<C> {
    (Box::new(t) as Box<dyn Any>)
        .downcast::<C>()
        .ok()
        .map(|b| *b)
}

/// How to open independent connections like `conn`, for the connection types that can.
fn opener<C: Send + Sync + 'static>(conn: &C) -> Option<Opener<C>> {
    let any: &dyn Any = conn;
    if let Some(healing) = any.downcast_ref::<crate::HealingConnection>() {
        let healing = healing.clone();
        return Some(Arc::new(move || same_type(healing.independent())));
    }
    #[cfg(feature = "sentinel")]
    if let Some(sentinel) = any.downcast_ref::<crate::SentinelConnection>() {
        let sentinel = sentinel.clone();
        return Some(Arc::new(move || same_type(sentinel.independent())));
    }
    None
}

/// The dedicated connections of acknowledged operations (see the
/// [module documentation](self)); clones share them.
pub(crate) struct AckConnections<C> {
    pool: Arc<Pool<C>>,
}

struct Pool<C> {
    open: Opener<C>,
    /// Connections not in use (at most `size`: only `size` are ever out).
    idle: Mutex<Vec<C>>,
    /// One permit per connection.
    permits: Arc<Semaphore>,
}

impl<C> Clone for AckConnections<C> {
    fn clone(&self) -> Self {
        AckConnections {
            pool: Arc::clone(&self.pool),
        }
    }
}

impl<C> fmt::Debug for AckConnections<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AckConnections")
            .field("available", &self.pool.permits.available_permits())
            .finish_non_exhaustive()
    }
}

impl<C> AckConnections<C>
where
    C: ConnectionLike + Send + Sync + 'static,
{
    /// At most `size` connections like `conn`; `None` when `size` is 0 or `conn`'s type
    /// cannot open another connection (then `WAIT` shares the connection; logged).
    pub(crate) fn for_connection(conn: &C, size: usize) -> Option<AckConnections<C>> {
        if size == 0 {
            return None;
        }
        let Some(open) = opener(conn) else {
            tracing::warn!(
                connection = std::any::type_name::<C>(),
                "lease-redis: replica acknowledgement on a connection type that cannot open \
                 connections of its own: each WAIT holds up every request behind it on the \
                 shared connection (use a HealingConnection or a SentinelConnection)"
            );
            return None;
        };
        Some(AckConnections {
            pool: Arc::new(Pool {
                open,
                idle: Mutex::new(Vec::with_capacity(size)),
                permits: Arc::new(Semaphore::new(size)),
            }),
        })
    }

    /// A connection for one acknowledged operation, waiting while all are busy; `None` only
    /// if none can be made (the caller then uses the shared connection).
    pub(crate) async fn lane(&self) -> Option<AckLane<C>> {
        let permit = Arc::clone(&self.pool.permits).acquire_owned().await.ok()?;
        let idle = self
            .pool
            .idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        let conn = match idle {
            Some(conn) => conn,
            None => (self.pool.open)()?,
        };
        Some(AckLane {
            conn: Some(conn),
            home: Some((Arc::clone(&self.pool), permit)),
            busy: false,
        })
    }
}

/// The connection of one operation: a dedicated one (returned to its pool when the operation
/// ends with no reply owed, closed otherwise) or a clone of the shared one.
pub(crate) struct AckLane<C> {
    conn: Option<C>,
    home: Option<(Arc<Pool<C>>, OwnedSemaphorePermit)>,
    /// A request is in flight (dropped now = abandoned: the connection is not reused).
    busy: bool,
}

impl<C> AckLane<C> {
    /// The shared connection (no pool).
    pub(crate) fn shared(conn: C) -> AckLane<C> {
        AckLane {
            conn: Some(conn),
            home: None,
            busy: false,
        }
    }
}

impl<C> Drop for AckLane<C> {
    fn drop(&mut self) {
        if let Some((pool, permit)) = self.home.take() {
            if !self.busy
                && let Some(conn) = self.conn.take()
            {
                pool.idle
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(conn);
            }
            drop(permit);
        }
    }
}

fn no_lane() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Client, "connection already returned"))
}

impl<C: ConnectionLike + Send> ConnectionLike for AckLane<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        // The shared connection is never returned to a pool, so nothing tracks its requests:
        // its own future, not one more box around it (every plain lock's acquire).
        if self.home.is_none() {
            return match self.conn.as_mut() {
                Some(conn) => conn.req_packed_command(cmd),
                None => Box::pin(async { Err(no_lane()) }),
            };
        }
        Box::pin(async move {
            let AckLane { conn, busy, .. } = self;
            let conn = conn.as_mut().ok_or_else(no_lane)?;
            *busy = true;
            let r = conn.req_packed_command(cmd).await;
            *busy = false;
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let AckLane { conn, busy, .. } = self;
            let conn = conn.as_mut().ok_or_else(no_lane)?;
            *busy = true;
            let r = conn.req_packed_commands(pipeline, offset, count).await;
            *busy = false;
            r
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.as_ref().map_or(0, ConnectionLike::get_db)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lazy() -> crate::HealingConnection {
        crate::HealingConnection::lazy(redis::Client::open("redis://127.0.0.1:1/").unwrap())
            .unwrap()
    }

    #[tokio::test]
    async fn the_pool_is_bounded_and_keeps_only_connections_with_nothing_owed() {
        let conn = lazy();
        assert!(AckConnections::for_connection(&conn, 0).is_none());
        let pool = AckConnections::for_connection(&conn, 2).expect("a healing connection");
        let a = pool.lane().await.expect("first");
        let mut b = pool.lane().await.expect("second");
        // Both are out: a third waits (nothing dialled, nothing sent).
        let third = tokio::time::timeout(Duration::from_millis(50), pool.lane()).await;
        assert!(third.is_err(), "a third connection past the bound of 2");
        drop(a);
        assert_eq!(
            pool.pool.idle.lock().unwrap().len(),
            1,
            "returned: nothing owed"
        );
        // A lane dropped with a request in flight is closed, not kept.
        b.busy = true;
        drop(b);
        assert_eq!(
            pool.pool.idle.lock().unwrap().len(),
            1,
            "the busy one is not kept"
        );
        assert_eq!(pool.pool.permits.available_permits(), 2);
        let c = pool.lane().await.expect("again");
        assert_eq!(
            pool.pool.idle.lock().unwrap().len(),
            0,
            "the idle one is reused"
        );
        drop(c);
    }

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
