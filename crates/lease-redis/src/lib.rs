//! Redis adapter for redlease: Lua scripts (acquire, renew, release, fenced writes) run by
//! `EVALSHA` over any redis-rs async connection.
//!
//! - [`RedisBackend`] implements [`lease_core::LeaseBackend`] and [`lease_core::Fencing`] with
//!   exactly the semantics of lease-core's in-memory backend (same-owner takeover with a fresh
//!   token, counter healing from the mark, exact owner match, all-or-nothing multi-key locks,
//!   tokens refused past 2^53). It works over [`HealingConnection`] (what [`connect()`] builds),
//!   `MultiplexedConnection`, `ConnectionManager` and, with feature `cluster`,
//!   `cluster_async::ClusterConnection`.
//! - [`HealingConnection`] is rebuilt when the server goes silent (a request abandoned
//!   unanswered and no reply for a second), not only on hard errors, so recovery after a
//!   blackhole is bounded by the lease, not by TCP's retransmission backoff; see [`healing`].
//! - [`RedisFencer`] applies fenced writes ([`FencedWrite`]: `SET`, `HSET`, `DEL`, a Lua body,
//!   or several at once) and implements [`lease_core::FencedResource`].
//! - [`ReplicaAck`] (`WAIT` after grants, renewals and fenced writes) makes a write that too
//!   few replicas acknowledged an *unknown* outcome instead of a success; see [`replica`].
//! - [`ReleaseNotices`] wakes followers and lock waiters when a lease is released: the
//!   release script publishes, one shared subscriber connection listens; see [`notify`].
//! - `SentinelConnection` (feature `sentinel`) follows the primary that Redis Sentinel names
//!   across failovers.
//! - [`connect()`] (and, with feature `tls`, `connect_tls` for `rediss://` with a custom CA
//!   and client certificates, see the `tls` module) builds a backend over a reconnecting connection;
//!   a failure is a [`ConnectError`] that names TLS failures ([`TlsFailure`]).
//! - [`slot`] computes Redis Cluster hash slots locally: on a cluster, keys that cannot share a
//!   slot are refused before any round trip.
//! - Feature `cluster` (off by default): Redis Cluster through redis-rs's cluster client
//!   (`redis/cluster-async`): `RedisBackend::cluster`, `RedisFencer::new_cluster` and
//!   `ReleaseNotices::cluster` (sharded pub/sub). Without it none of redis-rs's cluster code is
//!   compiled; [`slot`] and [`Topology`] (pure computation) are always there.
//! - [`scripts`] holds the Lua sources: one file per script in `scripts/`, each documenting its
//!   KEYS, ARGV and replies, composed at compile time behind one shared prelude (the fenced
//!   writes also share one guard and one mark advance); fenced Eval bodies run through one fixed
//!   script that takes the body as an argument.
//!
//! # Timeouts and truthful outcomes
//!
//! Give the connection **no response timeout** of its own (redis-rs's `ConnectionManager`
//! defaults to 500 ms; [`connect()`] builds a [`HealingConnection`] without one): the library bounds every call
//! itself — the driver bounds each lease request by the lease's own deadline, and a
//! [`RedisFencer`] bounds each write by [`RedisFencer::with_timeout`] (default
//! [`DEFAULT_FENCE_TIMEOUT`]). A connection-level timeout shorter than those bounds would only
//! cut valid replies short. Whichever fires, a call that may have reached the server and got
//! no reply is reported with [`Effect::Unknown`](lease_core::Effect::Unknown)
//! ([`BackendError::OutcomeUnknown`](lease_core::BackendError::OutcomeUnknown) or
//! [`BackendError::Timeout`](lease_core::BackendError::Timeout)), never as "not applied"; see
//! [`backend_error`] for the whole mapping.
//!
//! Key layout (from [`lease_core::LeaseSpec`]): an election `name` uses `<name>:leader`, the
//! counter `<name>:fence` and the mark `<name>:fence:applied`. On Redis Cluster the name needs a
//! hash tag, e.g. `{report-builder}`, and so does every fenced target key.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::{sync::Arc, time::Duration};
//! use lease_core::{AcquireOutcome, AcquireRequest, Fencing, LeaseBackend, LeaseSpec, Owner, Ttl};
//! use lease_redis::RedisBackend;
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let backend = RedisBackend::new(client.get_multiplexed_async_connection().await?);
//! let spec = Arc::new(LeaseSpec::election("{jobs}"));
//! let req = AcquireRequest::new(
//!     spec.clone(),
//!     Owner::new("host-a-1")?,
//!     Ttl::new(Duration::from_secs(5))?,
//! );
//! if let AcquireOutcome::Acquired { token: Some(token), .. } = backend.acquire(&req).await? {
//!     let fencer = backend.fencer(&LeaseSpec::election_mark_key("{jobs}"), token);
//!     let outcome = fencer.hset("{jobs}:state", "owner", "host-a-1").await?;
//!     assert!(outcome.is_applied());
//! }
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature show a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod backend;
pub mod connect;
pub mod error;
mod fence;
pub mod healing;
#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub mod healing_cluster;
mod lend;
mod native;
pub mod notify;
mod preflight;
pub mod replica;
mod reply;
pub mod scripts;
#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub mod sentinel;
pub mod slot;
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub mod tls;
mod topology;

// Redis Cluster (feature `cluster`): everything that names redis-rs's cluster client
// (`redis::cluster`, `redis::cluster_async`) is behind `#[cfg(feature = "cluster")]`, because the
// workspace's redis dependency does not enable `cluster-async`; only this feature does. A module
// about Redis Cluster connections is declared here, gated as a whole at its boundary:
//
//     #[cfg(feature = "cluster")]
//     #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
//     pub mod <module>;
//
// (and its re-exports below under the same two attributes). The items gated one by one in other
// modules: `RedisBackend::cluster`, `RedisFencer::new_cluster`, `ReleaseNotices::cluster` and
// its `Source::Cluster` / `Conn::Cluster` arms in notify.rs.

pub use backend::{DEFAULT_DRIFT_FACTOR, RedisBackend};
#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use connect::connect_cluster;
pub use connect::{
    CONNECT_TIMEOUT, ConnectError, TlsFailure, connect, connect_failure, tls_failure,
};
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use connect::{connect_tls, is_plain_redis, tls_client};
pub use error::{CORRUPT, RedisLeaseError, TRANSIENT_CODES, backend_error};
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use fence::describe_metrics;
pub use fence::{
    DEFAULT_FENCE_TIMEOUT, FENCE_LABEL_LIMIT, FencedWrite, RedisFencer, RedisPermitFencer,
};
pub use healing::{HealingConnection, HealingStats};
#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use healing_cluster::HealingCluster;
pub use notify::{NoticeStats, ReleaseNotices};
pub use preflight::{MIN_REDIS, MIN_VALKEY};
pub use replica::{
    DEFAULT_ACK_CONNECTIONS, MAX_ACK_CONNECTIONS, MAX_ACK_TIMEOUT, NotAcknowledged, ReplicaAck,
};
#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub use sentinel::SentinelConnection;
pub use slot::{CrossSlot, SlotError};
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use tls::{TlsConfig, TlsConfigError};
pub use topology::Topology;
