//! Fenced writes to Redis: each write checks the token against the applied mark, writes, and
//! advances the mark, in one script.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lease_core::{BackendError, FenceOutcome, FencedResource, Token};
use redis::aio::ConnectionLike;
use redis::{ToRedisArgs, ToSingleRedisArg};

use crate::error::RedisLeaseError;
use crate::replica::{AckConnections, AckLane, DEFAULT_ACK_CONNECTIONS, ReplicaAck};
use crate::reply;
use crate::scripts::{
    Call, LuaScript, S_FENCE_DEL, S_FENCE_EVAL, S_FENCE_HSET, S_FENCE_MULTI, S_FENCE_SET,
};
use crate::slot::{self, SlotError};
use crate::topology::Topology;

mod permit;
mod telemetry;
mod write;

pub use permit::RedisPermitFencer;
pub use telemetry::FENCE_LABEL_LIMIT;
#[cfg(feature = "metrics")]
use telemetry::count;
#[cfg(feature = "metrics")]
pub use telemetry::describe_metrics;
pub use write::FencedWrite;

/// Which fenced script one call runs (the lock's or the permit's variant of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteKind {
    Set,
    HSet,
    Del,
    Eval,
    Multi,
}

impl WriteKind {
    /// The lock's fenced script of this kind.
    fn script(self) -> &'static LuaScript {
        match self {
            WriteKind::Set => &S_FENCE_SET,
            WriteKind::HSet => &S_FENCE_HSET,
            WriteKind::Del => &S_FENCE_DEL,
            WriteKind::Eval => &S_FENCE_EVAL,
            WriteKind::Multi => &S_FENCE_MULTI,
        }
    }
}

/// The default bound of one fenced write: 2 s. Connections carry no response timeout of
/// their own (see the crate docs), so the fencer bounds each write itself; a write that gets
/// no reply in time is [`BackendError::Timeout`](lease_core::BackendError::Timeout): **outcome
/// unknown**, since it may still be applied.
pub const DEFAULT_FENCE_TIMEOUT: Duration = Duration::from_secs(2);

/// Fenced writes to Redis under one term's token, against the applied mark
/// `<fence>:applied` (for an election `<name>:fence:applied`).
///
/// Each call is one script: guard (token >= 1, token >= mark; equal passes), write, advance the
/// mark to the token. A stale token writes nothing and returns
/// [`FenceOutcome::Stale`]; a write that fails (e.g. `WRONGTYPE`) returns an error and leaves
/// the mark unmoved.
///
/// On Redis Cluster (a fencer from a `RedisBackend::cluster` backend, or
/// `RedisFencer::new_cluster`; feature `cluster`) every target key must map to the mark key's
/// hash slot; others are refused with [`RedisLeaseError::Slot`] before any round trip.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use lease_core::Token;
/// use lease_redis::RedisFencer;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let conn = client.get_multiplexed_async_connection().await?;
/// // The CLI's `fence set --name {jobs} --token 7`:
/// let fencer = RedisFencer::for_election(conn, "{jobs}", Token::new(7)?);
/// if !fencer.set("{jobs}:state", "done").await?.is_applied() {
///     eprintln!("fenced out: a newer term exists");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisFencer<C> {
    conn: C,
    mark_key: Arc<str>,
    token: Token,
    topology: Topology,
    timeout: Duration,
    replica_ack: Option<ReplicaAck>,
    /// Dedicated connections for the writes and their `WAIT` (see [`crate::replica`]).
    acks: Option<AckConnections<C>>,
}

impl<C> fmt::Debug for RedisFencer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisFencer")
            .field("mark_key", &self.mark_key)
            .field("token", &self.token)
            .field("topology", &self.topology)
            .field("timeout", &self.timeout)
            .field("replica_ack", &self.replica_ack)
            .finish_non_exhaustive()
    }
}

impl<C> RedisFencer<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A fencer for `token` against the mark at `mark_key`, on a standalone server (no slot
    /// checks).
    pub fn new(conn: C, mark_key: impl Into<String>, token: Token) -> RedisFencer<C> {
        RedisFencer::from_parts(conn, mark_key.into(), token, Topology::Standalone)
    }

    /// A fencer for election `name`'s term `token` (mark key `<name>:fence:applied`), on a
    /// standalone server.
    pub fn for_election(conn: C, name: &str, token: Token) -> RedisFencer<C> {
        RedisFencer::new(conn, lease_core::LeaseSpec::election_mark_key(name), token)
    }

    /// A fencer on Redis Cluster: the mark key must carry a hash tag, and every target key
    /// must map to its slot.
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn new_cluster(
        conn: C,
        mark_key: impl Into<String>,
        token: Token,
    ) -> Result<RedisFencer<C>, SlotError> {
        let mark_key = mark_key.into();
        crate::topology::check_mark_key(&mark_key, Topology::Cluster)?;
        Ok(RedisFencer::from_parts(
            conn,
            mark_key,
            token,
            Topology::Cluster,
        ))
    }

    pub(crate) fn from_parts(
        conn: C,
        mark_key: String,
        token: Token,
        topology: Topology,
    ) -> RedisFencer<C> {
        RedisFencer {
            conn,
            mark_key: mark_key.into(),
            token,
            topology,
            timeout: DEFAULT_FENCE_TIMEOUT,
            replica_ack: None,
            acks: None,
        }
    }

    /// The same fencer with replica acknowledgement: after each applied write, `WAIT` for
    /// `ack`'s replicas; too few in time → the write reports
    /// [`BackendError::OutcomeUnknown`](lease_core::BackendError::OutcomeUnknown) (applied on
    /// the primary, possibly lost by a failover), never "applied". The `WAIT` is bounded by
    /// the ack's timeout on top of [`with_timeout`](Self::with_timeout)'s. The write and its
    /// `WAIT` go over a connection of their own (at most [`DEFAULT_ACK_CONNECTIONS`] for this
    /// fencer and its clones; a backend's fencers share the backend's), so the `WAIT` holds
    /// up nothing else on the shared connection. See [`crate::replica`].
    pub fn with_replica_ack(self, ack: ReplicaAck) -> RedisFencer<C> {
        let acks = AckConnections::for_connection(&self.conn, DEFAULT_ACK_CONNECTIONS);
        self.with_replica_ack_opt(Some(ack), acks)
    }

    pub(crate) fn with_replica_ack_opt(
        mut self,
        ack: Option<ReplicaAck>,
        acks: Option<AckConnections<C>>,
    ) -> RedisFencer<C> {
        self.replica_ack = ack;
        self.acks = acks;
        self
    }

    /// The replica acknowledgement, if any.
    pub fn replica_ack(&self) -> Option<ReplicaAck> {
        self.replica_ack
    }

    /// The same fencer with each write bounded by `timeout` (default
    /// [`DEFAULT_FENCE_TIMEOUT`]). A write without a reply by then fails with
    /// [`BackendError::Timeout`](lease_core::BackendError::Timeout), whose effect is
    /// [`Effect::Unknown`](lease_core::Effect::Unknown): it may still be applied.
    pub fn with_timeout(mut self, timeout: Duration) -> RedisFencer<C> {
        self.timeout = timeout;
        self
    }

    /// The bound of each write.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The token this fencer writes under.
    pub fn token(&self) -> Token {
        self.token
    }

    /// The applied-mark key.
    pub fn mark_key(&self) -> &str {
        &self.mark_key
    }

    /// Whether slot checks apply.
    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// The same fencer under another token (same connection and mark).
    pub fn with_token(&self, token: Token) -> RedisFencer<C> {
        RedisFencer {
            token,
            ..self.clone()
        }
    }

    /// Checks target keys for this fencer without a round trip: on Redis Cluster each must map
    /// to the mark key's slot; on a standalone server every key passes. Use it when
    /// configuring which keys a leader will write.
    pub fn check_keys<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<(), SlotError> {
        match self.topology {
            Topology::Standalone => Ok(()),
            Topology::Cluster => Ok(slot::check_targets(&self.mark_key, keys)?),
        }
    }

    /// Fenced `SET key value`.
    pub fn set(
        &self,
        key: impl Into<String>,
        value: impl ToSingleRedisArg,
    ) -> impl Future<Output = Result<FenceOutcome, RedisLeaseError>> + Send + '_ {
        let w = FencedWrite::set(key, value);
        self.run(self.token, vec![w])
    }

    /// Fenced `HSET key field value`.
    pub fn hset(
        &self,
        key: impl Into<String>,
        field: impl ToSingleRedisArg,
        value: impl ToSingleRedisArg,
    ) -> impl Future<Output = Result<FenceOutcome, RedisLeaseError>> + Send + '_ {
        let w = FencedWrite::hset(key, field, value);
        self.run(self.token, vec![w])
    }

    /// Fenced `DEL keys...`.
    pub fn del<I, S>(
        &self,
        keys: I,
    ) -> impl Future<Output = Result<FenceOutcome, RedisLeaseError>> + Send + '_
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let w = FencedWrite::del(keys);
        self.run(self.token, vec![w])
    }

    /// Runs a Lua `body` under the fence (see [`FencedWrite::Eval`]: the body's keys start at
    /// `KEYS[2]`, its arguments at `ARGV[2]`).
    pub fn eval<K, S, A>(
        &self,
        body: impl Into<String>,
        keys: K,
        args: A,
    ) -> impl Future<Output = Result<FenceOutcome, RedisLeaseError>> + Send + '_
    where
        K: IntoIterator<Item = S>,
        S: Into<String>,
        A: IntoIterator,
        A::Item: ToRedisArgs,
    {
        let w = FencedWrite::eval(body, keys, args);
        self.run(self.token, vec![w])
    }

    /// Applies several writes under one check, all or nothing: every write is type-checked
    /// before any is applied. An empty batch only advances the mark. An
    /// [`Eval`](FencedWrite::Eval) must be alone in its batch.
    pub fn apply_all(
        &self,
        writes: Vec<FencedWrite>,
    ) -> impl Future<Output = Result<FenceOutcome, RedisLeaseError>> + Send + '_ {
        self.run(self.token, writes)
    }

    /// [`apply_all`](Self::apply_all) under an explicit token instead of this fencer's.
    pub fn apply_all_with(
        &self,
        token: Token,
        writes: Vec<FencedWrite>,
    ) -> impl Future<Output = Result<FenceOutcome, RedisLeaseError>> + Send + '_ {
        self.run(token, writes)
    }

    async fn run(
        &self,
        token: Token,
        writes: Vec<FencedWrite>,
    ) -> Result<FenceOutcome, RedisLeaseError> {
        let result = self.run_inner(token, writes).await;
        #[cfg(feature = "metrics")]
        count(&self.mark_key, &result);
        result
    }

    async fn run_inner(
        &self,
        token: Token,
        writes: Vec<FencedWrite>,
    ) -> Result<FenceOutcome, RedisLeaseError> {
        self.send(token, writes, None, reply::fence, |o| o.is_applied())
            .await
    }

    /// One fenced script call: the writes under `token`, checked by the lock's guard or, with
    /// `permit`, by the permit's guard first ([`permit`]); `parse` reads the reply and
    /// `applied` says whether the write was applied (then the replica acknowledgement runs).
    async fn send<O: Copy>(
        &self,
        token: Token,
        writes: Vec<FencedWrite>,
        permit: Option<&permit::PermitGuard>,
        parse: fn(&redis::Value) -> Result<O, BackendError>,
        applied: fn(O) -> bool,
    ) -> Result<O, RedisLeaseError> {
        if writes.len() > 1 && writes.iter().any(|w| matches!(w, FencedWrite::Eval { .. })) {
            return Err(RedisLeaseError::InvalidWrite(
                "an Eval write cannot be batched with other writes; apply it alone".into(),
            ));
        }
        if self.topology == Topology::Cluster {
            let mut targets: Vec<&str> = writes.iter().flat_map(FencedWrite::keys).collect();
            if let Some(p) = permit {
                targets.push(p.permits_key());
            }
            slot::check_targets(&self.mark_key, &targets).map_err(SlotError::from)?;
        }
        let mut call = Call::new();
        call.key(self.mark_key.as_bytes()).arg(token.to_string());
        let kind = match writes.as_slice() {
            [FencedWrite::Set { key, value }] => {
                call.key(key).arg_bytes(value);
                WriteKind::Set
            }
            [FencedWrite::HSet { key, field, value }] => {
                call.key(key).arg_bytes(field).arg_bytes(value);
                WriteKind::HSet
            }
            [FencedWrite::Del { keys }] => {
                for k in keys {
                    call.key(k);
                }
                WriteKind::Del
            }
            [FencedWrite::Eval { body, keys, args }] => {
                for k in keys {
                    call.key(k);
                }
                for a in args {
                    call.arg_bytes(a);
                }
                // The body travels as the last argument of the one fixed script.
                call.arg_bytes(body.as_bytes());
                WriteKind::Eval
            }
            many => {
                call.arg(many.len());
                for w in many {
                    match w {
                        FencedWrite::Set { key, value } => {
                            call.key(key).arg("set").arg(1).arg_bytes(value);
                        }
                        FencedWrite::HSet { key, field, value } => {
                            call.key(key)
                                .arg("hset")
                                .arg(1)
                                .arg_bytes(field)
                                .arg_bytes(value);
                        }
                        FencedWrite::Del { keys } => {
                            for k in keys {
                                call.key(k);
                            }
                            call.arg("del").arg(keys.len());
                        }
                        // Refused above.
                        FencedWrite::Eval { .. } => {
                            return Err(RedisLeaseError::InvalidWrite(
                                "an Eval write cannot be batched with other writes".into(),
                            ));
                        }
                    }
                }
                WriteKind::Multi
            }
        };
        let script: &LuaScript = match permit {
            None => kind.script(),
            Some(p) => {
                // Last, after the body of an Eval: permit_guard.lua removes them first.
                call.key(p.permits_key()).arg_bytes(p.owner().as_bytes());
                permit::script(kind)
            }
        };
        let lane = async {
            if self.replica_ack.is_some()
                && let Some(acks) = &self.acks
            {
                return acks.lane().await;
            }
            None
        };
        let mut conn = match tokio::time::timeout(self.timeout, lane).await {
            Ok(Some(lane)) => lane,
            Ok(None) => AckLane::shared(self.conn.clone()),
            Err(_) => {
                // Every dedicated connection stayed busy: nothing was sent.
                return Err(BackendError::Unavailable(
                    format!(
                        "no connection for an acknowledged write within {:?}",
                        self.timeout
                    )
                    .into(),
                )
                .into());
            }
        };
        let v = match tokio::time::timeout(self.timeout, call.run(&mut conn, script)).await {
            Ok(v) => v?,
            Err(_) => {
                tracing::debug!(
                    script = script.name,
                    token = token.get(),
                    timeout = ?self.timeout,
                    "fenced write: no reply in time; outcome unknown"
                );
                return Err(BackendError::Timeout(self.timeout).into());
            }
        };
        let outcome = parse(&v)?;
        if let (true, Some(ack)) = (applied(outcome), &self.replica_ack) {
            // The reply of WAIT comes after at most the ack's timeout; the fencer's own bound
            // covers the round trip on top of it.
            let bound = self.timeout.saturating_add(ack.timeout());
            match tokio::time::timeout(bound, ack.wait(&mut conn)).await {
                Ok(acked) => acked?,
                Err(_) => return Err(BackendError::Timeout(bound).into()),
            }
        }
        tracing::debug!(
            script = script.name,
            token = token.get(),
            applied = applied(outcome),
            "lease-redis: fenced write"
        );
        Ok(outcome)
    }
}

#[async_trait]
impl<C> FencedResource for RedisFencer<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    type Write = FencedWrite;
    type Error = RedisLeaseError;

    async fn apply(
        &self,
        token: Token,
        write: FencedWrite,
    ) -> Result<FenceOutcome, RedisLeaseError> {
        self.run(token, vec![write]).await
    }
}
