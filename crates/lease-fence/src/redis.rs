//! Redis fenced writes (feature `redis`): the fencer of `lease-redis`, re-exported.
//!
//! A [`RedisFencer`] applies [`FencedWrite`]s (`SET`, `HSET`, `DEL`, a Lua body, or several at
//! once) in one script that checks the token against the applied mark, writes, and advances the
//! mark; it implements [`FencedResource`](crate::FencedResource). The elector hands one to each
//! term (`term.fencer()` with the Redis backend), bound to the term's token and the election's
//! mark `<name>:fence:applied`, which the successor's acquire already raises: a deposed term is
//! refused from the moment a successor is elected. Build one by hand with
//! [`RedisFencer::for_election`] or [`RedisFencer::new`] (any mark key), or
//! [`RedisFencer::new_cluster`] on Redis Cluster, where the mark key and every target key must
//! share a hash tag (checked before any round trip: [`SlotError`]).
//!
//! ```no_run
//! # async fn demo(conn: redis::aio::MultiplexedConnection, token: lease_core::Token)
//! # -> Result<(), lease_fence::redis::RedisLeaseError> {
//! use lease_fence::redis::{FencedWrite, RedisFencer};
//!
//! let fencer = RedisFencer::for_election(conn, "{jobs}", token);
//! if !fencer.hset("{jobs}:state", "phase", 3).await?.is_applied() {
//!     return Ok(()); // fenced out: a newer term exists; stop writing
//! }
//! // Several writes under one check, all or nothing:
//! let outcome = fencer
//!     .apply_all(vec![
//!         FencedWrite::set("{jobs}:report", "done"),
//!         FencedWrite::del(["{jobs}:pending"]),
//!     ])
//!     .await?;
//! # let _ = outcome;
//! # Ok(()) }
//! ```

pub use lease_redis::{
    BODY_CACHE_CAPACITY, CrossSlot, FencedWrite, RedisFencer, RedisLeaseError, SlotError, Topology,
};
