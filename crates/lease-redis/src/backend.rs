//! [`RedisBackend`]: the lease scripts over any redis-rs async connection.

use std::fmt;
use std::time::Duration;

use lease_core::backend::mark_key_of;
use lease_core::{
    BackendError, ConfigError, LeaseSpec, Owner, ReleaseOutcome, RenewOutcome, RenewRequest, Token,
    TokenScheme,
};
use redis::aio::ConnectionLike;

use crate::fence::{DEFAULT_FENCE_TIMEOUT, RedisFencer};
use crate::lend::{Clones, Lane, Lent};
use crate::native::{self, Native};
use crate::notify::{self, ReleaseNotices};
use crate::replica::{AckConnections, DEFAULT_ACK_CONNECTIONS, MAX_ACK_CONNECTIONS, ReplicaAck};
use crate::reply;
use crate::scripts::{Call, S_RAISE};
use crate::slot::{self, SlotError};
use crate::topology::{Topology, check_mark_key};
#[cfg(doc)]
use lease_core::{Fencing, LeaseBackend};

mod fair;
mod inspect_views;
mod lease;
mod notice_arg;
mod rwlock;
mod semaphore;
mod view;

pub(crate) use notice_arg::NoticeArg;

/// The default clock-drift factor of a Redis lease's local validity (1 %, plus 2 ms), as
/// Redlock uses; see [`RedisBackend::with_drift_factor`].
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;

/// A [`LeaseBackend`] on one Redis server or one Redis Cluster, over any redis-rs async
/// connection: [`redis::aio::MultiplexedConnection`], [`redis::aio::ConnectionManager`] or,
/// with feature `cluster`, redis-rs's `cluster_async::ClusterConnection` (use
/// `RedisBackend::cluster` for the latter).
///
/// Each operation is one script (see [`crate::scripts`]) with the semantics of lease-core's
/// in-memory backend. Nothing is retried here: timeouts and retries are the driver's (note
/// that a `ClusterConnection` follows redirections and may reconnect on its own, as
/// configured on its client). Cloning is cheap (the connection is cloned, the Eval body cache
/// is shared).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::{sync::Arc, time::Duration};
/// use lease_core::{AcquireOutcome, AcquireRequest, LeaseBackend, LeaseSpec, Owner, Ttl};
/// use lease_redis::RedisBackend;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let backend = RedisBackend::new(client.get_multiplexed_async_connection().await?);
/// let req = AcquireRequest::new(
///     Arc::new(LeaseSpec::election("{jobs}")),
///     Owner::new("host-a-1")?,
///     Ttl::new(Duration::from_secs(5))?,
/// );
/// if let AcquireOutcome::Acquired { token, .. } = backend.acquire(&req).await? {
///     println!("leader with token {token:?}");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBackend<C> {
    conn: C,
    /// Clones of `conn` kept for the calls, per thread (see `lend.rs`).
    clones: Clones<C>,
    topology: Topology,
    fence_timeout: Duration,
    scheme: TokenScheme,
    replica_ack: Option<ReplicaAck>,
    /// The bound of dedicated connections for acknowledged operations.
    ack_connections: usize,
    /// Those connections (with a replica ack on a connection type that can open them).
    acks: Option<AckConnections<C>>,
    /// Whether releases publish a notice (default on).
    publish: bool,
    /// The clock-drift allowance's factor (see [`RedisBackend::with_drift_factor`]).
    drift_factor: f64,
    notices: Option<ReleaseNotices>,
    /// Which native conditional commands the server offers (probed once, shared by clones).
    native: Native,
}

impl<C> fmt::Debug for RedisBackend<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("topology", &self.topology)
            .field("fence_timeout", &self.fence_timeout)
            .field("scheme", &self.scheme)
            .field("replica_ack", &self.replica_ack)
            .field("ack_connections", &self.ack_connections)
            .field("publish", &self.publish)
            .field("drift_factor", &self.drift_factor)
            .field("notices", &self.notices)
            .field("native", &self.native)
            .finish_non_exhaustive()
    }
}

impl<C> RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A backend on a standalone server (no slot checks).
    ///
    /// The drivers bound every call of the backend themselves, so a connection of your own
    /// needs no response timeout: redis-rs's default one (500 ms on a `MultiplexedConnection`)
    /// is a second timer on every round trip (about 2,200 client instructions per lock cycle,
    /// `docs/benchmarks.md`) and answers a slow reply with an error of unknown effect before
    /// the lease's own bound would. Build it with `AsyncConnectionConfig::set_response_timeout(None)`,
    /// or use [`connect`](fn@crate::connect), which also heals a silent connection.
    pub fn new(conn: C) -> RedisBackend<C> {
        RedisBackend::with_topology(conn, Topology::Standalone)
    }

    /// A backend on a Redis Cluster: leases touching several keys must carry a hash tag, and
    /// every script's keys must share a slot; violations are refused with
    /// [`BackendError::Invalid`] before any round trip (feature `cluster`).
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster(conn: C) -> RedisBackend<C> {
        RedisBackend::with_topology(conn, Topology::Cluster)
    }

    /// A backend with an explicit topology.
    pub fn with_topology(conn: C, topology: Topology) -> RedisBackend<C> {
        let clones = Clones::for_conn(&conn);
        RedisBackend {
            conn,
            clones,
            topology,
            fence_timeout: DEFAULT_FENCE_TIMEOUT,
            scheme: TokenScheme::default(),
            replica_ack: None,
            ack_connections: DEFAULT_ACK_CONNECTIONS,
            acks: None,
            publish: true,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            notices: None,
            native: Native::new(),
        }
    }

    /// Whether the plain lock's renewals and releases use the server's native conditional
    /// commands when it offers them (default `true`): `DELIFEQ` (Valkey 9.0+) or `DELEX ..
    /// IFEQ` (Redis 8.4+) to release, `SET .. IFEQ .. PX` (Valkey 8.1+, Redis 8.4+) to renew,
    /// instead of a script. They apply only to an unfenced single-key lock on a standalone
    /// server (fenced, term-scoped and multi-key leases, and Redis Cluster, always run the
    /// scripts). What the server offers is probed once per backend (shared by its clones)
    /// with `COMMAND INFO delifeq delex` and a `SET .. IFEQ` on a scratch key that cannot
    /// match, never guessed from a version string; a server that later refuses a native
    /// command (a failover to an older one) gets the script for that call and from then on.
    /// A stored value with metadata is not equal to its owner alone: such a lock's native
    /// command changes nothing and the script runs after it (one more round trip). `false`
    /// always runs the scripts (a comparison, or a server whose native commands you do not
    /// trust).
    pub fn with_native_commands(mut self, native: bool) -> RedisBackend<C> {
        self.native = if native { Native::new() } else { Native::off() };
        self
    }

    /// Whether native conditional commands may be used (see
    /// [`with_native_commands`](Self::with_native_commands)).
    pub fn native_commands(&self) -> bool {
        self.native.enabled()
    }

    /// Whether `spec` is a lease the native commands can serve: one key, no fence, a
    /// standalone server, native commands not switched off.
    fn native_fits(&self, spec: &LeaseSpec) -> bool {
        self.topology == Topology::Standalone
            && spec.keys().len() == 1
            && spec.fence_key().is_none()
            && self.native.enabled()
    }

    /// The token scheme as the scripts name it: `counter` or `clock`.
    pub(crate) fn scheme_name(&self) -> &'static str {
        match self.scheme {
            TokenScheme::Counter => "counter",
            _ => "clock",
        }
    }

    /// The acquire scripts' minting argument of a fenced lease: `<scheme>:<floor>` (scheme
    /// `counter` or `clock`; floor a token to mint above, `0`: none).
    fn mint_arg(&self, floor: Option<Token>) -> String {
        let scheme = self.scheme_name();
        format!("{scheme}:{}", floor.map_or(0, Token::get))
    }

    /// The release scripts' notice argument for a lease whose first key is `key`: `''` when
    /// releases do not publish, else `p:<channel>` (`PUBLISH`) or `s:<channel>` (`SPUBLISH`,
    /// Redis Cluster).
    fn notice_arg(&self, key: &str) -> String {
        let mut buf = NoticeArg::default();
        String::from_utf8_lossy(self.notice_arg_in(&mut buf, key)).into_owned()
    }

    /// [`notice_arg`](Self::notice_arg) written into `buf` (on the stack for any key of up to
    /// [`NoticeArg::INLINE`] bytes less the prefix): what every plain lock's release sends.
    fn notice_arg_in<'a>(&self, buf: &'a mut NoticeArg, key: &str) -> &'a [u8] {
        if !self.publish {
            return &[];
        }
        let verb = match self.topology {
            Topology::Cluster => "s:",
            _ => "p:",
        };
        let prefix =
            if self.topology == Topology::Cluster && slot::hash_tag(key.as_bytes()).is_none() {
                ""
            } else {
                notify::CHANNEL_PREFIX
            };
        buf.of(&[verb, prefix, key])
    }

    /// The plain lock's release by the server's compare-and-delete command alone: it deletes
    /// only a value equal to the owner, so never a value with the waiter mark (an attempt
    /// found the lock held; `scripts/prelude.lua`), and an uncontended release needs no
    /// notice. `Ok(None)`: the native command did not delete (or is not offered) and changed
    /// nothing, so the script must decide: it deletes a marked value (or one with metadata)
    /// of ours and publishes the notice when the value was marked.
    async fn release_native<K: ConnectionLike + Send>(
        &self,
        conn: &mut K,
        key: &str,
        owner: &str,
    ) -> Result<Option<ReleaseOutcome>, BackendError> {
        let Some(delete) = self.native.delete(conn).await else {
            return Ok(None);
        };
        if self.publish
            && let Some(notices) = &self.notices
        {
            let mut channel = String::with_capacity(32 + key.len());
            notify::push_channel(&mut channel, key, self.topology);
            if notices.has_watches(&channel) {
                return self
                    .release_native_marked(conn, delete, key, owner, channel)
                    .await;
            }
        }
        let reply: redis::RedisResult<redis::Value> =
            delete.cmd(key, owner).query_async(conn).await;
        match reply {
            Ok(redis::Value::Int(1)) => Ok(Some(ReleaseOutcome::Released)),
            Ok(redis::Value::Int(0)) => Ok(None),
            Err(e) if native::not_offered(&e) => {
                self.native.disable();
                Ok(None)
            }
            // A key of another type (a read-write lock's readers): nothing ran; the script
            // decides (not held).
            Err(e) if e.code() == Some("WRONGTYPE") => Ok(None),
            Err(e) => Err(crate::error::backend_error(e)),
            Ok(other) => Err(BackendError::Protocol(format!(
                "unexpected reply to a native release: {other:?}"
            ))),
        }
    }

    /// The native release when this process has watches on the lease's channel (others of
    /// the process wait, so the value is likely marked): one pipeline of `DELIFEQ key owner`,
    /// `DELIFEQ key owner\0\0w` (the marked value) and the notice's `PUBLISH`, after the
    /// deletes; one round trip where a marked value would otherwise cost a missed `DELIFEQ`
    /// and then the script. The `PUBLISH` goes out even if neither delete applied (a wasted
    /// attempt for one woken waiter, never a lost wake-up: the script then runs and
    /// publishes again if it deletes). `Ok(None)`: nothing deleted, the script decides.
    async fn release_native_marked<K: ConnectionLike + Send>(
        &self,
        conn: &mut K,
        delete: native::NativeDelete,
        key: &str,
        owner: &str,
        channel: String,
    ) -> Result<Option<ReleaseOutcome>, BackendError> {
        let mut marked = String::with_capacity(owner.len() + 3);
        marked.push_str(owner);
        marked.push_str("\0\0w");
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.add_command(delete.cmd(key, owner));
        pipe.add_command(delete.cmd(key, &marked));
        pipe.cmd("PUBLISH").arg(channel).arg(owner);
        let replies: Vec<redis::RedisResult<redis::Value>> = pipe
            .query_async(conn)
            .await
            .map_err(crate::error::backend_error)?;
        let mut deleted = false;
        for reply in replies.into_iter().take(2) {
            match reply {
                Ok(redis::Value::Int(1)) => deleted = true,
                Ok(redis::Value::Int(0)) => {}
                Err(e) if native::not_offered(&e) => {
                    self.native.disable();
                    return Ok(None);
                }
                Err(e) if e.code() == Some("WRONGTYPE") => return Ok(None),
                Err(e) => return Err(crate::error::backend_error(e)),
                Ok(other) => {
                    return Err(BackendError::Protocol(format!(
                        "unexpected reply to a native release: {other:?}"
                    )));
                }
            }
        }
        Ok(deleted.then_some(ReleaseOutcome::Released))
    }

    /// The plain lock's renewal by `SET key owner IFEQ owner PX ttl` (the value is rewritten
    /// unchanged, the TTL set, only while the key holds exactly `owner`). `Ok(None)`: not
    /// renewed and nothing changed, so the script must decide (metadata, not ours, or not
    /// offered).
    async fn renew_native<K: ConnectionLike + Send>(
        &self,
        conn: &mut K,
        req: &RenewRequest,
        key: &str,
    ) -> Result<Option<RenewOutcome>, BackendError> {
        if !self.native.set_ifeq(conn).await {
            return Ok(None);
        }
        let owner = req.owner.as_str();
        let r: redis::RedisResult<redis::Value> = redis::cmd("SET")
            .arg(key)
            .arg(owner)
            .arg("IFEQ")
            .arg(owner)
            .arg("PX")
            .arg(req.ttl.as_millis())
            .query_async(conn)
            .await;
        match r {
            Ok(redis::Value::Okay) => Ok(Some(RenewOutcome::Renewed)),
            Ok(redis::Value::Nil) => Ok(None),
            Err(e) if native::not_offered(&e) => {
                self.native.disable();
                Ok(None)
            }
            // A key of another type (a read-write lock's readers): nothing ran; the script
            // decides (not held).
            Err(e) if e.code() == Some("WRONGTYPE") => Ok(None),
            Err(e) => Err(crate::error::backend_error(e)),
            Ok(other) => Err(BackendError::Protocol(format!(
                "unexpected reply to a native renewal: {other:?}"
            ))),
        }
    }

    /// The clock-drift allowance (default [`DEFAULT_DRIFT_FACTOR`], 1 %): a lease is trusted
    /// locally for `ttl − elapsed − (ceil(ttl × factor) + 2 ms)`, as Redlock does, because
    /// the server expires the key by its own clock. That covers the two clocks running at
    /// slightly different rates; it cannot cover a server clock that *steps* forward (a
    /// manual change, or a failover to a replica whose clock is ahead) by more than the
    /// margin — keep servers on NTP with slewing, and rely on fencing tokens for the rest
    /// (see `docs/production.md`, "Clocks"). `factor` must be finite and in `[0, 0.5)`.
    pub fn with_drift_factor(mut self, factor: f64) -> Result<RedisBackend<C>, ConfigError> {
        self.drift_factor = lease_core::quorum::validate_drift(factor)?;
        Ok(self)
    }

    /// The clock-drift allowance's factor.
    pub fn drift_factor(&self) -> f64 {
        self.drift_factor
    }

    /// Wakes this backend's followers and lock waiters on release notices received by
    /// `notices` (a subscriber connection shared by every backend it is given to; see
    /// [`crate::notify`]). Without it they only poll. `redlease::redis::connect` sets it up.
    pub fn with_release_notices(mut self, notices: ReleaseNotices) -> RedisBackend<C> {
        self.notices = Some(notices);
        self
    }

    /// The release-notice subscriber, if any.
    pub fn release_notices(&self) -> Option<&ReleaseNotices> {
        self.notices.as_ref()
    }

    /// Whether a release publishes a notice on the lease's channel (default `true`;
    /// [`crate::notify::notice_channel`]) when someone may be waiting: when an attempt found
    /// the lock held since it was taken (the attempt marks the held value; an uncontended
    /// release publishes nothing). Publishing is part of the release script (no extra round
    /// trip) and is what wakes *other* processes' waiters, whether or not this backend
    /// subscribes. A publish the server refuses (an ACL without the channel) never fails the
    /// release.
    pub fn with_publish_releases(mut self, publish: bool) -> RedisBackend<C> {
        self.publish = publish;
        self
    }

    /// Replica acknowledgement (off by default): after every granted acquire, successful
    /// renewal, counter raise and applied fenced write (of the fencers this backend hands
    /// out), `WAIT` for `ack`'s replicas; too few in time → the call reports
    /// [`BackendError::OutcomeUnknown`], never success. Costs one round trip per such call
    /// plus the replicas' lag. See [`crate::replica`].
    ///
    /// The write and its `WAIT` go over a connection of their own (at most
    /// [`with_ack_connections`](Self::with_ack_connections) of them, opened lazily), so a
    /// `WAIT` never holds up the other requests of the shared connection; see
    /// [`crate::replica`] for the connection types that support it.
    ///
    /// On Redis Cluster, redis-rs sends `WAIT` to every primary and takes the minimum, so
    /// every primary needs that many replicas.
    pub fn with_replica_ack(mut self, ack: ReplicaAck) -> RedisBackend<C> {
        self.replica_ack = Some(ack);
        self.acks = AckConnections::for_connection(&self.conn, self.ack_connections);
        self
    }

    /// How many dedicated connections acknowledged operations may use at once (default
    /// [`DEFAULT_ACK_CONNECTIONS`], at most [`MAX_ACK_CONNECTIONS`]; shared by this backend's
    /// clones and fencers). When all are busy, the next acknowledged operation waits for one
    /// within its own bound. `0` sends each `WAIT` over the shared connection, where it holds
    /// up every request behind it for up to the ack's timeout (the behaviour of connection
    /// types that cannot open connections of their own). See [`crate::replica`].
    pub fn with_ack_connections(
        mut self,
        connections: usize,
    ) -> Result<RedisBackend<C>, ConfigError> {
        if connections > MAX_ACK_CONNECTIONS {
            return Err(ConfigError::Invalid(format!(
                "{connections} dedicated connections for replica acknowledgement: at most {MAX_ACK_CONNECTIONS}"
            )));
        }
        self.ack_connections = connections;
        if self.replica_ack.is_some() {
            self.acks = AckConnections::for_connection(&self.conn, connections);
        }
        Ok(self)
    }

    /// The bound of dedicated connections for acknowledged operations (see
    /// [`with_ack_connections`](Self::with_ack_connections)).
    pub fn ack_connections(&self) -> usize {
        self.ack_connections
    }

    /// The connection of an operation that may `WAIT`: a dedicated one with a replica ack
    /// (see [`crate::replica`]), the shared one otherwise.
    async fn lane(&self) -> Lane<'_, C> {
        if self.replica_ack.is_some()
            && let Some(acks) = &self.acks
            && let Some(lane) = acks.lane().await
        {
            return Lane::Acked(lane);
        }
        Lane::Shared(self.lend())
    }

    /// A clone of the shared connection for one call, kept for the next when it ends.
    fn lend(&self) -> Lent<'_, C> {
        self.clones.lend(&self.conn)
    }

    /// The replica acknowledgement, if any.
    pub fn replica_ack(&self) -> Option<ReplicaAck> {
        self.replica_ack
    }

    /// `WAIT` on `conn` when replica acknowledgement is on.
    async fn acknowledge<K: ConnectionLike + Send>(
        &self,
        conn: &mut K,
    ) -> Result<(), BackendError> {
        match &self.replica_ack {
            Some(ack) => ack.wait(conn).await,
            None => Ok(()),
        }
    }

    /// How tokens are minted (default [`TokenScheme::ClockFloored`]: `max(counter + 1, server
    /// time in µs)`, strict across a counter loss; [`TokenScheme::Counter`]: `counter + 1`).
    /// Clients of one fence counter may mix schemes without breaking monotonicity (both mint
    /// above the counter); the floor then protects only the acquisitions of clock-floored
    /// clients. See `docs/fencing.md`.
    pub fn with_token_scheme(mut self, scheme: TokenScheme) -> RedisBackend<C> {
        self.scheme = scheme;
        self
    }

    /// The token scheme.
    pub fn token_scheme(&self) -> TokenScheme {
        self.scheme
    }

    /// The bound of each fenced write of the fencers this backend hands out (default
    /// [`DEFAULT_FENCE_TIMEOUT`]); see [`RedisFencer::with_timeout`].
    pub fn with_fence_timeout(mut self, timeout: Duration) -> RedisBackend<C> {
        self.fence_timeout = timeout;
        self
    }

    /// The topology (whether slot checks apply).
    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// The connection.
    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// Checks a lease for this backend without a round trip: on Redis Cluster, see
    /// [`slot::check_spec`]; on a standalone server every lease passes. Call it when building
    /// a configuration to fail early.
    pub fn check_spec(&self, spec: &LeaseSpec) -> Result<(), SlotError> {
        match self.topology {
            Topology::Standalone => Ok(()),
            Topology::Cluster => slot::check_spec(spec),
        }
    }

    fn precheck(&self, op: &'static str, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.check_spec(spec).map_err(|e| {
            tracing::debug!(op, error = %e, "lease-redis: refused before any round trip");
            BackendError::Invalid(e.to_string())
        })
    }

    /// A fencer for writes under `token` against the mark at `mark_key`, sharing this
    /// backend's connection, topology and Eval body cache. On Redis Cluster the mark key must
    /// carry a hash tag.
    pub fn fencer_for(
        &self,
        mark_key: impl Into<String>,
        token: Token,
    ) -> Result<RedisFencer<C>, SlotError> {
        let mark_key = mark_key.into();
        check_mark_key(&mark_key, self.topology)?;
        Ok(
            RedisFencer::from_parts(self.conn.clone(), mark_key, token, self.topology)
                .with_timeout(self.fence_timeout)
                .with_replica_ack_opt(self.replica_ack, self.acks.clone()),
        )
    }

    /// A fencer for election `name`'s term `token` (mark key `<name>:fence:applied`).
    pub fn election_fencer(&self, name: &str, token: Token) -> Result<RedisFencer<C>, SlotError> {
        self.fencer_for(LeaseSpec::election_mark_key(name), token)
    }

    /// The Redlock fenced-quorum second round on this node: if every lock key of `spec` still
    /// holds `owner`, raises the fence counter and the mark to at least `token` and returns
    /// `true`; otherwise changes nothing and returns `false`.
    ///
    /// `spec` must be fenced ([`BackendError::Invalid`] otherwise).
    pub async fn raise_counter(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Result<bool, BackendError> {
        self.precheck("raise", spec)?;
        let Some(fence) = spec.fence_key() else {
            return Err(BackendError::Invalid(
                "raise_counter needs a fenced lease".into(),
            ));
        };
        let mut call = Call::new();
        for k in spec.keys() {
            call.key(k);
        }
        call.key(fence).key(mark_key_of(fence));
        call.arg(owner.as_str())
            .arg(token.to_string())
            .arg(spec.keys().len());
        let mut conn = self.lane().await;
        let v = call.run(&mut conn, &S_RAISE).await?;
        let raised = reply::raise(&v)?;
        if raised {
            self.acknowledge(&mut conn).await?;
        }
        Ok(raised)
    }
}
