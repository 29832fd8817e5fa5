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
//! | `redis` (default) | `redlease::redis`: the Redis backend and fencer (single node, or Redis Cluster with hash tags) |
//! | `redlock` | `redlease::redlock`: quorum leases over N independent Redis primaries, with fenced quorum tokens |
//! | `fence` | `redlease::fence`: fencing at the resource (Redis fenced writes) |
//! | `postgres` | `redlease::fence` with the Postgres conditional-write adapter |
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
#![forbid(unsafe_code)]

/// Which operation an [`Observer::on_error`] call is about.
pub use lease_core::election::Op;
pub use lease_core::{
    BackendError, ConfigError, Effect, ElectionConfig, ElectionConfigBuilder, FenceMark,
    FenceOutcome, FencedResource, Fencing, LeaseBackend, RetryStrategy, Role, StepDownReason,
    Token, TokenError, Ttl,
};
pub use lease_tokio::{
    AutoRenew, CancellationToken, Elector, ElectorBuilder, ElectorError, ElectorState, LeaderInfo,
    Lock, LockError, LockOptions, Locker, NoopObserver, Observer, Term, default_instance_id,
    random_token,
};

/// The sans-IO core: machines, rules, the backend trait. For adapter authors and simulations.
pub mod core {
    pub use lease_core::*;
}

/// The in-memory backend with a manual clock and fault switches, for unit tests.
pub mod memory {
    pub use lease_core::memory::*;
}

/// The Redis backend: scripts, slot checks, and the fencer.
#[cfg(feature = "redis")]
pub mod redis {
    pub use lease_redis::*;

    /// The redis-rs crate this backend is built on, for building connections.
    pub use ::redis as client;

    /// Connects to the Redis at `url` with a reconnecting [`client::aio::ConnectionManager`]
    /// and wraps it in a standalone [`RedisBackend`].
    ///
    /// **Timeout policy** (the same for this function, the CLI and Redlock nodes): connecting
    /// is bounded by 1 s (retried once); the connection has **no response timeout** (redis-rs's default of
    /// 500 ms is turned off), because the library bounds every call itself — the driver each
    /// lease request by the lease's own deadline, a fencer each write by its timeout
    /// ([`DEFAULT_FENCE_TIMEOUT`]), [`crate::Elector::leader`] by the acquire timeout. A fixed
    /// client-side timeout would cut valid replies short and turn them into unknown outcomes.
    /// Build your own connection with a response timeout if you call it directly.
    ///
    /// For Redis Cluster, build a `client::cluster_async::ClusterConnection` and use
    /// [`RedisBackend::cluster`].
    pub async fn connect(
        url: &str,
    ) -> Result<RedisBackend<client::aio::ConnectionManager>, client::RedisError> {
        let client = client::Client::open(url)?;
        let config = client::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(std::time::Duration::from_secs(1)))
            .set_response_timeout(None)
            // One quick retry, not redis-rs's six with backoff (~6 s): a wrong password or an
            // unreachable server is reported at once; later reconnects happen on the next call,
            // which the driver retries within the lease's bounds anyway.
            .set_number_of_retries(1);
        let manager = client::aio::ConnectionManager::new_with_config(client, config).await?;
        Ok(RedisBackend::new(manager))
    }
}

/// Quorum leases over N independent Redis primaries.
#[cfg(feature = "redlock")]
pub mod redlock {
    pub use lease_redlock::*;
}

/// Fencing enforced at the resource: Redis fenced writes and (feature `postgres`) Postgres.
#[cfg(feature = "fence")]
pub mod fence {
    pub use lease_fence::*;
}

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
