//! Redlock quorum backend for redlease: leases and fenced quorum tokens over N independent
//! Redis primaries.
//!
//! [`RedlockBackend`] implements [`lease_core::LeaseBackend`] over an odd number (at least 3) of
//! [`QuorumNode`]s, so `lease-tokio`'s `Elector` and `Locker` run over a quorum unchanged:
//!
//! - every operation is one concurrent round over all nodes, each reply bounded by the
//!   operation timeout (default `min(ttl / 5, 500 ms)`); a slow node never slows a round
//!   beyond that bound;
//! - an acquisition or renewal counts only with a quorum (`N/2 + 1`) and positive validity,
//!   `ttl − elapsed − (ceil(ttl × drift) + 2 ms)`, from one monotonic start instant;
//! - a failed acquisition is cleaned up (compare-and-delete) on **every** node, including those
//!   that timed out; another owner's value is never deleted;
//! - a fenced lease (every election, and locks with a fence key) gets a **fenced quorum
//!   token**: the maximum of the tokens the quorum's nodes minted, then raised on a quorum by a
//!   second round; tokens of successful acquisitions are unique and increase as long as no node
//!   loses its counter;
//! - failures carry the cause on every node ([`QuorumError`]).
//!
//! These rules live in `lease-core`'s sans-IO round machine ([`lease_core::quorum::Round`]);
//! this crate is its I/O driver: it sends the machine's requests to the nodes concurrently,
//! bounds them by the operation timeout, reads tokio's monotonic clock and feeds the replies
//! back.
//!
//! Nodes are [`Node`]s: a backend ([`lease_redis::RedisBackend`] for Redis, or lease-core's
//! in-memory backend for unit tests) with an identity (its address, to refuse the same node
//! twice).
//!
//! The guarantees, the assumptions (independent primaries, bounded clock-rate drift, durable
//! counters) and the outcome mapping are in `docs/redlock.md`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use lease_core::ElectionConfig;
//! use lease_redlock::{Node, RedlockBackend, RedlockConfig};
//! use lease_tokio::{CancellationToken, Elector};
//!
//! let mut nodes = Vec::new();
//! for url in ["redis://redis-a:6379/", "redis://redis-b:6379/", "redis://redis-c:6379/"] {
//!     nodes.push(Node::connect(redis::Client::open(url)?).await?);
//! }
//! let backend = RedlockBackend::new(nodes, RedlockConfig::new())?;
//! let config = ElectionConfig::builder("report-builder", "host-a-1")
//!     .ttl(Duration::from_secs(10))
//!     .build()?;
//! let elector = Elector::new(backend, config);
//! elector
//!     .run(CancellationToken::new(), |term| async move {
//!         // Carry term.token() into every write: it is a fenced quorum token.
//!         term.cancelled().await;
//!     })
//!     .await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature show a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod backend;
pub mod error;
mod node;
pub mod notify;
mod round;

pub use backend::{
    DEFAULT_DRIFT_FACTOR, DEFAULT_OPERATION_TIMEOUT_CAP, RedlockBackend, RedlockConfig,
};
pub use error::{NodeCause, NodeFailure, QuorumError, QuorumOp, RoundFailure};
pub use node::{Node, QuorumNode, RaiseCounter, RedisNode, client_address};
#[doc(hidden)]
pub use round::LateRequests;

#[cfg(test)]
mod tests;
