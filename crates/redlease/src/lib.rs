//! Lease-based leader election and distributed locks on Redis, with fencing tokens.
//!
//! One instance holds a Redis lease with a TTL and acts while it holds it; if it cannot renew,
//! it steps down so another takes over. Every term gets a strictly increasing **fencing
//! token**, and fenced writes are refused at the resource once a newer term exists, which
//! closes the window a paused or partitioned stale leader would otherwise have.
//!
//! This is the facade: depend on `redlease` and pick backends with features.
//!
//! | feature | what |
//! |---|---|
//! | `redis` (default) | `redlease::redis`: the Redis backend and fencer, on a single server (or a primary with replicas) |
//! | `cluster` | Redis Cluster: `RedisBackend::cluster`, `RedisFencer::new_cluster`, `ReleaseNotices::cluster` and redis-rs's cluster client (`redlease::redis::client::cluster_async`); names need a hash tag (`{jobs}`). Off by default: most deployments are one server, and a build without it compiles none of redis-rs's cluster code |
//! | `redlock` | `redlease::redlock`: quorum leases over N independent Redis primaries, with fenced quorum tokens |
//! | `postgres` | `redlease::postgres`: the Postgres adapter (per-name marks, per-row fences) |
//! | `tls` | `rediss://` URLs over rustls: `redlease::redis::connect_tls` and `TlsConfig` (a custom CA, client certificates for mutual TLS) |
//! | `sentinel` | `redlease::redis::connect_sentinel` and `SentinelConnection`: follow the primary Redis Sentinel names across failovers |
//! | `metrics` | election and lock metrics through the `metrics` facade (your binary installs the recorder/exporter; names in `docs/production.md`) |
//!
//! The in-memory backend ([`memory`]) is always available, for your unit tests.
//!
//! # Leader election
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use redlease::{CancellationToken, ElectionConfig, Elector};
//! use redlease::memory::{ManualClock, MemoryBackend};
//!
//! // In production: `redlease::redis::RedisBackend::new(connection)`.
//! let backend = MemoryBackend::new(ManualClock::new());
//! let config = ElectionConfig::builder("report-builder", redlease::default_instance_id())
//!     .ttl(Duration::from_secs(5))
//!     .build()?;
//! let elector = Elector::new(backend, config);
//! let shutdown = CancellationToken::new();
//! # let stop = shutdown.clone();
//! elector
//!     .run(shutdown, move |term| {
//!         # let stop = stop.clone();
//!         async move {
//!             // Leader work: carry term.token() into every write (or use term.fencer()).
//!             let token = term.token();
//!             # stop.cancel();
//!             term.cancelled().await; // lead until the term ends
//!             let _ = token;
//!         }
//!     })
//!     .await?;
//! # Ok(()) }
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
//! ```
//!
//! # A share of many names (one election per shard)
//!
//! An [`ElectionGroup`] runs one election per name on **one task**, renewing every lease it
//! owns in batches, and splits the names fairly among the group's live members (see
//! [`group`] for the rule and why it was chosen).
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use redlease::ElectionGroup;
//! use redlease::memory::{ManualClock, MemoryBackend};
//!
//! // In production: `redlease::redis::RedisBackend::new(connection)`.
//! let backend = MemoryBackend::new(ManualClock::new());
//! let shards: Vec<String> = (0..8).map(|i| format!("shard-{i}")).collect();
//! let group = ElectionGroup::builder(backend, "shards", shards, redlease::default_instance_id())
//!     .ttl(Duration::from_secs(5))
//!     .start()?;
//! let mut owned = group.subscribe();
//! // Alone in the group: it owns every shard once the roster is read and the acquires answer.
//! tokio::time::timeout(Duration::from_secs(5), owned.wait_for(|o| o.len() == 8)).await??;
//! for (shard, token) in group.owned().iter() {
//!     // Start the shard's work; carry `token` (or `group.fencer(shard)`) into its writes.
//!     assert_eq!(group.token(shard), Some(*token));
//! }
//! group.shutdown().await; // releases every shard
//! # Ok(()) }
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
//! ```
//!
//! # Seeing and breaking locks
//!
//! [`Locker::holder`], [`Locker::is_locked`] and [`Locker::remaining`] read a plain lock from
//! the store (an error is an error, never "not locked"); [`Locker::force_release`] is an
//! administrator's release, whoever holds it, that also raises the fence so the broken holder's
//! fenced writes are refused while the next holder's are accepted ([`ForceReleaseOutcome`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use redlease::{ForceReleaseOutcome, Locker};
//!
//! let locker = Locker::new(redlease::redis::connect("redis://127.0.0.1/").await?);
//! if let Some(h) = locker.holder("nightly").await? {
//!     println!("held by {} ({:?} left)", h.owner, h.remaining);
//! }
//! // The fence key is the one its holders obtain with (`LockOptions::fence_key`).
//! match locker.force_release("nightly", Some("nightly:fence")).await? {
//!     ForceReleaseOutcome::Released { holder, fence, .. } => println!("broke {holder}; fence {fence:?}"),
//!     other => println!("was not held; fence {:?}", other.fence()),
//! }
//! # Ok(()) }
//! ```
//!
//! # Semaphores
//!
//! At most `N` holders of one name at once; each permit is a lease of its own (TTL,
//! auto-renewal, fencing token), so a crashed holder's permit expires instead of leaking.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use redlease::{LockOptions, Locker};
//!
//! let locker = Locker::new(redlease::redis::connect("redis://127.0.0.1/").await?);
//! // Every holder uses the same count; another count is refused (BackendError::PermitsMismatch).
//! let deploys = locker.semaphore("{deploys}", 3)?;
//! let permit = deploys
//!     .acquire(
//!         Duration::from_secs(30),
//!         LockOptions::new()
//!             .auto_renew(Duration::from_secs(10))
//!             .wait(Duration::from_secs(600))
//!             .retry(redlease::RetryStrategy::linear(Duration::from_secs(1))?),
//!     )
//!     .await?;
//! let token = permit.fence_token(); // this permit's fencing token
//! // ... at most 3 of these run at once ...
//! permit.release().await?; // wakes one waiter
//! # let _ = token;
//! # Ok(()) }
//! ```
//!
//! # Fair locks
//!
//! One holder at a time, handed over in FIFO order across processes: a waiter queues at its
//! first failed attempt, keeps its place by retrying (each retry is a heartbeat), and a release
//! wakes the next waiter alone. See `docs/fair-locks.md`. (The plain lock is already first
//! come, first served among the obtains of one [`Locker`] and its clones: a release hands the
//! key to the next of them in one step at the store, see `docs/handover.md`; across processes
//! it is a race.)
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use redlease::{LockOptions, Locker, RetryStrategy};
//!
//! let locker = Locker::new(redlease::redis::connect("redis://127.0.0.1/").await?);
//! let jobs = locker.fair("{jobs}")?;
//! let options = LockOptions::new()
//!     // Each retry keeps the waiter's place; a crashed waiter's place lives 3 x 100 ms.
//!     .retry(RetryStrategy::linear(Duration::from_millis(100))?)
//!     .wait(Duration::from_secs(60));
//! let lock = jobs.acquire(Duration::from_secs(30), options).await?;
//! let token = lock.fence_token(); // this hold's fencing token
//! lock.release().await?; // wakes the next waiter, and only it
//! # let _ = token;
//! # Ok(()) }
//! ```
//!
//! # Read-write locks
//!
//! Readers share a key; the writer is the plain lock of the same key (`flock -s` / `-x`).
//! Writer-preferring: a waiting writer is not starved by a stream of readers.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use redlease::{LockOptions, Locker};
//!
//! let locker = Locker::new(redlease::redis::connect("redis://127.0.0.1/").await?);
//! let ttl = Duration::from_secs(30);
//! // Readers and the writer name one fence key: their tokens come from one counter.
//! let opts = || LockOptions::new().fence_key("{report}:fence").wait(Duration::from_secs(60));
//! let reader = locker.shared("{report}")?.acquire(ttl, opts()).await?;
//! // ... read, beside other readers ...
//! reader.release().await?; // the last reader's release wakes a waiting writer
//! let writer = locker.obtain("{report}", ttl, opts()).await?; // excludes every reader
//! writer.release().await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature show a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The public interface, on one screen. Everything is listed by name: nothing reaches users by a
// wildcard, so a new item in a backend crate is not public API until it is listed here.

// Leader election.
pub use lease_core::election::Op;
pub use lease_core::{ElectionConfig, ElectionConfigBuilder, Role, StepDownReason};
pub use lease_tokio::{
    Elector, ElectorBuilder, ElectorError, ElectorState, LeaderInfo, LeaderWatch, NoopObserver,
    Observer, Term, default_instance_id,
};
// Many elections on one task: a share of N names per member.
pub use lease_tokio::group::{self, ElectionGroup, GroupBuilder, GroupError};

// Locks.
pub use lease_core::RetryStrategy;
/// The old name of [`random_owner`] (deprecated: it returns an owner string, not a token).
#[allow(deprecated)]
pub use lease_tokio::random_token;
pub use lease_tokio::{
    ADMIN_TIMEOUT, AutoRenew, LOCK_LABEL_LIMIT, LOCK_LABEL_MAX_LEN, LOCK_LABEL_OTHER, Lock,
    LockError, LockHolder, LockObserver, LockOptions, Locker, random_owner,
};
// Why a lock ended (`Lock::loss_reason`, `LockObserver::on_lost`): lost, or its cap reached
// (`LockOptions::max_hold`: `LossReason::MaxHoldReached`).
pub use lease_core::LossReason;
// Seeing and breaking plain locks: `Locker::holder`, `is_locked`, `remaining`, `lock_info`,
// `force_release` (an administrator's release that also raises the fence).
pub use lease_core::ForceReleaseOutcome;
// Counting semaphores (at most N holders; each permit a lease with its own fencing token).
pub use lease_core::semaphore::{
    MAX_PERMITS, PermitFencing, PermitHolder, PermitWriteOutcome, SemaphoreInfo,
};
pub use lease_tokio::{Permit, Semaphore};
// Fair locks (FIFO across processes; each hold a lock with its own fencing token).
pub use lease_core::fair::FairInfo;
pub use lease_tokio::{Fair, FairLock};
// Read-write locks (shared readers, or one writer: the plain lock of the same key).
pub use lease_core::rwlock::SharedInfo;
pub use lease_tokio::{ReadGuard, ReadLock};

// Fencing tokens and fenced resources.
pub use lease_core::{
    Epoch, FenceMark, FenceOutcome, FencedResource, Fencing, StoreLoss, Token, TokenError,
    TokenScheme,
};

// Shared: configuration errors, TTLs, outcomes, the backend trait, cancellation.
pub use lease_core::quorum::QuorumConfigError;
pub use lease_core::{BackendError, ConfigError, Effect, LeaseBackend, Ttl};

// What a store discloses about how long its tokens survive.
pub use lease_core::preflight::{StoreReport, StoreRisk};
pub use lease_tokio::CancellationToken;

/// The attribute macro the backend traits ([`LeaseBackend`], [`Fencing`], [`FencedResource`])
/// are written with: implement them with `#[redlease::async_trait]` and no dependency of your
/// own. (Why not native `async fn` in traits: the drivers need `dyn`-compatible traits whose
/// futures are `Send`; see the README, "Design notes".)
pub use async_trait::async_trait;

/// Describes every redlease metric (unit and help text) to the installed `metrics` recorder;
/// call it once, after installing your recorder (feature `metrics`). Without it the metrics
/// are recorded all the same, only without descriptions.
///
/// ```
/// // After e.g. `metrics::set_global_recorder(..)`:
/// redlease::describe_metrics();
/// ```
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    lease_tokio::describe_metrics();
    #[cfg(feature = "redis")]
    lease_redis::describe_metrics();
}

/// The sans-IO core, for adapter authors and simulations: the backend contract and the
/// machines the driver runs (the same items as the `lease-core` crate's, listed by name).
///
/// Everything a [`LeaseBackend`] method takes or returns is named here,
/// so a wrapper backend (one that forwards every method to another, adding a twist) can be
/// written against this facade alone; `tests/facade.rs` is such a wrapper.
pub mod core {
    // The backend contract.
    pub use lease_core::backend::{
        MAX_KEYS, MAX_METADATA_LEN, RENEW_BATCH_CHUNK, epoch_key_of, mark_key_of, renew_each,
    };
    pub use lease_core::{
        AcquireOutcome, AcquireRequest, BackendError, Effect, Epoch, FenceMark, FenceOutcome,
        FenceState, FencedResource, Fencing, ForceReleaseOutcome, LeaseBackend, LeaseInfo,
        LeaseSpec, Metadata, Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest,
        StoreLoss, Token, TokenError, TokenScheme,
    };
    // Release notifications: what `LeaseBackend::release_watch` hands out.
    pub use lease_core::notify::{HubLink, NoticeMark, ReleaseHub, ReleaseWatch, WatchRole};
    // Configuration, time and retries.
    pub use lease_core::config::{
        MAX_ID_LEN, MAX_NAME_LEN, MAX_TTL, MIN_ELECTION_TTL, MIN_INTERVAL,
    };
    pub use lease_core::quorum::QuorumConfigError;
    pub use lease_core::token::MAX_TOKEN;
    pub use lease_core::{
        ConfigError, ElectionConfig, ElectionConfigBuilder, Instant, RetrySequence, RetryStrategy,
        Ttl,
    };
    // The election machine.
    pub use lease_core::election::Op;
    pub use lease_core::{
        Election, Event, Reply, Request, RequestId, RequestKind, Role, StepDownReason,
    };
    // The lease and lock machines.
    pub use lease_core::lease::{LeaseTiming, RenewOrder};
    pub use lease_core::lock::{
        Attempt, HeldLock, LockEvent, NextAttempt, Obtain, ObtainPlan, ObtainSchedule, Obtained,
        Refresh, RefreshOrder, RefreshReply, RefreshStart, release_bound, release_request,
        release_result,
    };
    pub use lease_core::{HeldLease, LeaseEvent, LossReason};
    // Semaphores: the permit rule's types and the view the lock machines drive permits through.
    pub use lease_core::semaphore::{
        PermitBackend, PermitCount, PermitRequest, is_semaphore_spec, semaphore_keys,
        semaphore_spec,
    };
    // Fair locks: the rule's types and the view the lock machines drive a fair hold through.
    pub use lease_core::fair::{
        FairBackend, FairPlan, FairRequest, INSPECT_SCAN, INSPECT_SHOWN, MAX_WAITERS,
        PLACE_HEARTBEATS, PRUNE_PER_CALL, fair_keys, fair_spec, place_ttl, wake_key,
    };
    // Read-write locks: the readers' view the lock machines drive reader holds through.
    pub use lease_core::rwlock::{
        SharedBackend, WRITER_MARK_RETRIES, WRITER_WAITING, check_shared_spec, writer_mark,
    };
    // The store's preflight report.
    pub use lease_core::preflight::{
        CLOCK_SKEW_LIMIT, ClockSkew, Eviction, Persistence, Replication, ServerInfo, Setting,
        StoreReport, StoreRisk,
    };
}

/// The in-memory backend with a manual clock and fault switches, for unit tests.
pub mod memory {
    pub use lease_core::memory::{
        Faults, ManualClock, MemoryBackend, MemoryFencer, MemoryWrite, Sleep,
    };
}

/// The Redis backend: the lease backend, the fencer, slot checks and error mapping.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis {
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub use lease_redis::HealingCluster;
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub use lease_redis::SentinelConnection;
    pub use lease_redis::healing;
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub use lease_redis::healing_cluster;
    pub use lease_redis::notify::notice_channel;
    pub use lease_redis::slot::{CrossSlot, SlotError, key_slot};
    pub use lease_redis::{
        CORRUPT, DEFAULT_ACK_CONNECTIONS, DEFAULT_DRIFT_FACTOR, DEFAULT_FENCE_TIMEOUT,
        FENCE_LABEL_LIMIT, FencedWrite, HealingConnection, HealingStats, MAX_ACK_CONNECTIONS,
        MAX_ACK_TIMEOUT, MIN_REDIS, MIN_VALKEY, NotAcknowledged, NoticeStats, RedisBackend,
        RedisFencer, RedisLeaseError, RedisPermitFencer, ReleaseNotices, ReplicaAck,
        TRANSIENT_CODES, Topology, backend_error,
    };

    // Connecting, and TLS (feature `tls`).
    pub use lease_redis::{
        CONNECT_TIMEOUT, ConnectError, TlsFailure, connect_failure, tls_failure,
    };
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub use lease_redis::{TlsConfig, TlsConfigError, is_plain_redis, tls_client};

    /// The redis-rs crate this backend is built on, for building connections.
    pub use ::redis as client;

    /// Connects to the Redis at `url` with a self-healing [`HealingConnection`] and wraps it in
    /// a standalone [`RedisBackend`]. `rediss://` needs feature `tls` (and
    /// trusts the system's roots; `connect_tls` takes a CA and a client certificate).
    ///
    /// **Timeout policy** (the same for this function, the CLI and Redlock nodes): connecting
    /// is bounded by 1 s; the connection has **no response timeout** (redis-rs's default of
    /// 500 ms is turned off), because the library bounds every call itself — the driver each
    /// lease request by the lease's own deadline, a fencer each write by its timeout
    /// ([`DEFAULT_FENCE_TIMEOUT`]), [`crate::Elector::leader`] by the acquire timeout. A fixed
    /// client-side timeout would cut valid replies short and turn them into unknown outcomes.
    /// Build your own connection with a response timeout if you call it directly. The
    /// connection is given up and opened again when the server goes silent (a request
    /// abandoned unanswered and no reply for [`healing::DEFAULT_SILENCE`]), and has TCP
    /// keepalive and `TCP_USER_TIMEOUT`: after a blackhole heals, recovery is bounded by the
    /// lease, not by TCP's retransmission backoff (see [`healing`]).
    ///
    /// The backend wakes followers and lock waiters on release notices ([`ReleaseNotices`]:
    /// one subscriber connection, opened when a waiter first needs it); polling stays the
    /// fallback.
    ///
    /// A failure is a [`ConnectError`]; a plain URL that reached a TLS port says so
    /// ([`TlsFailure::PlainTcpToTlsPort`]). For Redis Cluster (feature `cluster`), use
    /// `connect_cluster`.
    pub async fn connect(url: &str) -> Result<RedisBackend<HealingConnection>, ConnectError> {
        lease_redis::connect(url).await
    }

    /// Connects to the Redis Cluster whose seed nodes are `urls` with a self-healing
    /// [`HealingCluster`] and wraps it in a cluster [`RedisBackend`] (hash tags checked before
    /// any round trip), with release notices over sharded pub/sub. The same timeout policy as
    /// [`connect`]; when a slot's node goes silent (a request abandoned unanswered and no
    /// reply for that slot for [`healing::DEFAULT_SILENCE`]), the connection is built again
    /// from the seeds, with a fresh slot map (see [`healing_cluster`]).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use redlease::{ElectionConfig, Elector};
    ///
    /// let backend = redlease::redis::connect_cluster(&[
    ///     "redis://10.0.0.1:7000/",
    ///     "redis://10.0.0.2:7000/",
    /// ])
    /// .await?;
    /// // On a cluster, an election's name carries a hash tag.
    /// let elector = Elector::new(backend, ElectionConfig::builder("{jobs}", "host-a").build()?);
    /// # let _ = elector;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub async fn connect_cluster<S: AsRef<str>>(
        urls: &[S],
    ) -> Result<RedisBackend<HealingCluster>, ConnectError> {
        lease_redis::connect_cluster(urls).await
    }

    /// Connects to the Redis at `url` (`rediss://`) over TLS, trusting the CA and presenting
    /// the client certificate of `config` (checked before any round trip), like [`connect`].
    /// A failed handshake is [`ConnectError::Tls`] with a [`TlsFailure`] that says why
    /// (unknown CA, expired certificate, wrong host name, client certificate required, not a
    /// TLS port).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use redlease::redis::{TlsConfig, connect_tls};
    ///
    /// let tls = TlsConfig::new()
    ///     .ca_file("/etc/redis/tls/ca.crt")
    ///     .client_identity_files("/etc/redis/tls/client.crt", "/etc/redis/tls/client.key");
    /// let backend = connect_tls("rediss://redis.internal:6380/", &tls).await?;
    /// # let _ = backend;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub async fn connect_tls(
        url: &str,
        config: &TlsConfig,
    ) -> Result<RedisBackend<HealingConnection>, ConnectError> {
        lease_redis::connect_tls(url, config).await
    }

    /// Asks the sentinels at `sentinels` (their URLs, e.g. `redis://127.0.0.1:26379/`) for
    /// the primary named `service`, connects to it, and wraps the connection, which follows
    /// failovers ([`SentinelConnection`]), in a standalone [`RedisBackend`]. The same timeout
    /// policy as [`connect`]. Add [`RedisBackend::with_replica_ack`] to have grants and
    /// fenced writes acknowledged by replicas.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use redlease::redis::{ReplicaAck, connect_sentinel};
    ///
    /// let backend = connect_sentinel(&["redis://127.0.0.1:26379/"], "mymaster")
    ///     .await?
    ///     .with_replica_ack(ReplicaAck::new(1, Duration::from_millis(100))?);
    /// # let _ = backend;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub async fn connect_sentinel(
        sentinels: &[&str],
        service: &str,
    ) -> Result<RedisBackend<SentinelConnection>, client::RedisError> {
        let conn = SentinelConnection::connect(sentinels.iter().copied(), service).await?;
        Ok(RedisBackend::new(conn))
    }
}

/// Quorum leases over N independent Redis primaries.
#[cfg(feature = "redlock")]
#[cfg_attr(docsrs, doc(cfg(feature = "redlock")))]
pub mod redlock {
    /// How a round treats the requests it no longer waits for: only the default is safe; the
    /// others are negative controls for tests
    /// ([`RedlockBackend::with_late_requests_unsafe`]).
    #[doc(hidden)]
    pub use lease_redlock::LateRequests;
    pub use lease_redlock::{
        DEFAULT_DRIFT_FACTOR, DEFAULT_OPERATION_TIMEOUT_CAP, Node, NodeCause, NodeFailure,
        QuorumError, QuorumNode, QuorumOp, RaiseCounter, RedisNode, RedlockBackend, RedlockConfig,
        RoundFailure, client_address,
    };
}

/// Fencing on Postgres: per-name marks raised inside your transactions, and per-row
/// conditional updates and upserts (the `lease-postgres` crate).
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres {
    pub use lease_postgres::{
        BeginOutcome, BoxError, ClientSource, DEFAULT_FENCE_COLUMN, DEFAULT_MARKS_TABLE,
        FencedTable, FencedUpdate, FencedUpsert, Ident, IdentError, MAX_COLUMNS,
        MAX_FENCE_NAME_LEN, MAX_IDENT_LEN, MarkTable, OwnedParam, Param, PgFence, PgFenceError,
        PgStatement, PgWrite, QualifiedName, RowOutcome, TxFuture, TxOutcome, tokio_postgres,
    };
}

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The Rust blocks of the guides in `docs/`, compiled as doctests (`cargo test --doc -p
/// redlease`), so an example in a guide cannot drift from the API. Only under `doctest`: the
/// guides are not in the packaged crate.
#[cfg(doctest)]
pub mod docs_md {
    #[doc = include_str!("../../../docs/fair-locks.md")]
    pub struct FairLocks;
    #[doc = include_str!("../../../docs/fencing.md")]
    pub struct Fencing;
    #[doc = include_str!("../../../docs/production.md")]
    pub struct Production;
    #[doc = include_str!("../../../docs/redlock.md")]
    pub struct Redlock;
    #[doc = include_str!("../../../docs/rwlocks.md")]
    pub struct RwLocks;
    #[doc = include_str!("../../../docs/semaphores.md")]
    pub struct Semaphores;
    #[doc = include_str!("../../../docs/testing.md")]
    pub struct Testing;
}
