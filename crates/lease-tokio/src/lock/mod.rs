//! Locks: obtain (single or multi-key), refresh, release, TTL, retries, fencing tokens, and
//! opt-in auto-renewal with a loss signal.
//!
//! The rules are `lease_core::lock`'s machines ([`Obtain`], [`HeldLock`], [`Refresh`]); this
//! module performs what they ask:
//!
//! - `obtain.rs`: [`Locker`] drives one [`Obtain`] per call, and its cleanup guard;
//! - `handle.rs`: [`Lock`], the handle over a [`HeldLock`] behind one mutex (refresh, release,
//!   TTL, loss signal, release on drop);
//! - `task.rs`: the lock's background task (auto-renewal and the deadline watch) and
//!   background releases.
//!
//! [`Obtain`]: lease_core::lock::Obtain
//! [`HeldLock`]: lease_core::lock::HeldLock
//! [`Refresh`]: lease_core::lock::Refresh

mod handle;
mod obtain;
mod task;

pub use handle::Lock;
pub use lease_core::lock::{AutoRenew, LockError, LockOptions};
pub use obtain::Locker;
