//! Sans-IO lease and leader-election state machines for redlease.
//!
//! This crate decides *what* to do; it never does it. It holds:
//!
//! - [`token`]: fencing tokens and the fence rule (accept iff `token >= mark`);
//! - [`time`]: the [`Instant`] type through which the caller passes time in;
//! - [`config`]: validated election configuration ([`ElectionConfig`]);
//! - [`lease`]: the lease-holding machine shared by elections and auto-renewing locks;
//! - [`machine`]: the one contract every machine keeps with its driver (`poll_request`,
//!   `handle_reply(now, id, reply)`, `poll_timeout`, `handle_timeout`, `poll_event` or
//!   `poll_outcome`), stated once;
//! - [`election`]: the election machine built on it ([`Election::poll_request`],
//!   [`Election::handle_reply`], [`Election::poll_timeout`], [`Election::handle_timeout`],
//!   [`Election::poll_event`]);
//! - [`retry`]: retry strategies for lock acquisition, each acquisition with its own sequence;
//! - [`quorum`]: Redlock quorum math, the fenced-quorum token rule, and the sans-IO quorum
//!   round machine ([`quorum::Quorum`], [`quorum::Round`]) that `lease-redlock` drives;
//! - [`backend`]: the [`LeaseBackend`] trait adapters implement, and its typed outcomes;
//! - [`semaphore`]: counting semaphores' rule (at most `N` permits, each a lease of its own)
//!   and [`semaphore::PermitBackend`], the view the lock machines drive permits through;
//! - [`rwlock`]: read-write locks' rule (shared readers or one writer on one key, the writer
//!   being the plain lock; writer-preferring) and [`rwlock::SharedBackend`], the readers' view;
//! - [`notify`]: release notifications: which follower, waiter or observer a release wakes;
//! - [`preflight`]: what a store discloses about how long its tokens survive;
//! - [`memory`]: an in-memory backend with a manual clock and fault switches, with the
//!   exact semantics of the Redis scripts, for unit tests (ours and our users').
//!
//! There is no tokio, no redis, no clock read and no randomness of its own here: time enters
//! as an [`Instant`] passed by the caller and jitter comes from a seed passed by the caller.
//!
//! ```
//! use std::time::Duration;
//! use lease_core::{ElectionConfig, Election, Instant};
//!
//! let config = ElectionConfig::builder("report-builder", "host-a-1")
//!     .ttl(Duration::from_secs(5))
//!     .build()?;
//! assert_eq!(config.renew_interval(), Duration::from_millis(1666));
//! let mut election = Election::new(config, 7, Instant::ZERO);
//! // The machine asks for its first acquire at once.
//! let request = election.poll_request(Instant::ZERO).expect("an acquire");
//! assert!(matches!(request.kind, lease_core::RequestKind::Acquire(_)));
//! # Ok::<(), lease_core::ConfigError>(())
//! ```
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature show a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod backend;
pub mod config;
pub mod election;
pub mod fair;
pub mod lease;
pub mod lock;
pub mod machine;
pub mod memory;
pub mod notify;
pub mod preflight;
pub mod quorum;
pub mod retry;
pub mod rng;
pub mod rwlock;
pub mod semaphore;
pub mod share;
pub mod time;
pub mod token;

pub use backend::{
    AcquireOutcome, AcquireRequest, BackendError, Effect, FenceOutcome, FencedResource, Fencing,
    ForceReleaseOutcome, HandOffOutcome, LeaseBackend, LeaseInfo, LeaseSpec, Metadata, Owner,
    ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest,
};
pub use config::{ConfigError, ElectionConfig, ElectionConfigBuilder, Ttl};
pub use election::{Election, Event, Role, StepDownReason};
pub use lease::{HeldLease, LeaseEvent, LossReason};
pub use retry::{RetrySequence, RetryStrategy};
pub use time::Instant;
pub use token::{Epoch, FenceMark, FenceState, StoreLoss, Token, TokenError, TokenScheme};

/// The wire-level request kinds the machines ask the driver to perform.
pub use election::{Reply, Request, RequestId, RequestKind};
