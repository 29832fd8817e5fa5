//! The tokio driver for redlease: one generic loop over any [`LeaseBackend`].
//!
//! The rules live in `lease-core` (sans-IO); this crate only performs what the machines ask
//! for — sends each request bounded by its deadline, feeds back the reply, sleeps until the
//! machine's next timeout — and exposes the result as async Rust:
//!
//! - [`Elector`]: leader election with fencing tokens, a leader callback or a token-driven
//!   style, a [`CancellationToken`] per term, role subscriptions, and [`Observer`] hooks;
//! - [`Locker`]: locks (single or multi-key) with retry strategies, metadata, fencing tokens,
//!   refresh/release/TTL, and opt-in auto-renewal with a loss signal;
//! - [`LeaderWatch`]: leader changes of an election, without contending.
//!
//! The same code runs over Redis, Redlock and the in-memory backend, so it is tested once.
//!
//! Feature `metrics`: election and lock metrics through the `metrics` facade (names and labels
//! in `docs/production.md`); no recorder or exporter is installed by the library.
//!
//! [`LeaseBackend`]: lease_core::LeaseBackend
//! [`CancellationToken`]: tokio_util::sync::CancellationToken
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature show a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod bound;
mod clock;
mod elector;
pub mod group;
mod ids;
mod lock;
mod observer;
mod telemetry;
mod watch;

pub use elector::{Elector, ElectorBuilder, ElectorError, ElectorState, LeaderInfo, Term};
pub use group::{ElectionGroup, GroupBuilder, GroupError};
#[allow(deprecated)]
pub use ids::random_token;
pub use ids::{default_instance_id, random_owner};
pub use lock::{
    ADMIN_TIMEOUT, AutoRenew, Fair, FairLock, Lock, LockError, LockHolder, LockOptions, Locker,
    Permit, ReadGuard, ReadLock, Semaphore,
};
pub use observer::{LockObserver, NoopObserver, Observer};
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use telemetry::describe_metrics;
pub use telemetry::{LOCK_LABEL_LIMIT, LOCK_LABEL_MAX_LEN, LOCK_LABEL_OTHER};
pub use watch::LeaderWatch;

pub use lease_core;
/// Which operation an [`Observer::on_error`] call is about.
pub use lease_core::election::Op;
pub use tokio_util::sync::CancellationToken;
