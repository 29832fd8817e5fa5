//! Locks: obtain (single or multi-key), refresh, release, TTL, retries, fencing tokens, and
//! opt-in auto-renewal with a loss signal.
//!
//! The rules are `lease_core::lock`'s machines ([`Obtain`], [`HeldLock`], [`Refresh`]); this
//! module performs what they ask:
//!
//! - `obtain.rs`: [`Locker`] drives one [`Obtain`] per call, and its cleanup guard;
//! - `handle.rs`: [`Lock`], the handle over a [`HeldLock`] behind one mutex (refresh, release,
//!   TTL, loss signal, release on drop; `handle/release.rs` the explicit release and its
//!   hand-off);
//! - `renewals.rs`: one task per locker that renews every auto-renewed lock, batching the
//!   renewals that fall due together, and fires each watched lock's loss signal at its
//!   deadline;
//! - `handoff.rs`: the locker's lines: obtains waiting behind a lock of the same locker on
//!   the same key, which that lock's release hands the key to in one step at the store;
//! - `task.rs`: background releases;
//! - `semaphore.rs`: [`Semaphore`] and its [`Permit`]s, a [`Locker`] over the backend's
//!   permit operations (`lease_core::semaphore::PermitBackend`);
//! - `fair.rs`: [`Fair`] and its [`FairLock`]s, a [`Locker`] per obtain over the backend's
//!   fair operations (`lease_core::fair::FairBackend`), sharing one renewal task.
//! - `rwlock.rs`: [`ReadLock`] and its [`ReadGuard`]s, a [`Locker`] over the backend's shared
//!   (reader) operations (`lease_core::rwlock::SharedBackend`); the writer is the plain lock.
//!
//! Imports go one way: `obtain` → `handle` → `renewals` (and `task`). The renewal task reads
//! a lock only through its `Renewable` trait, which the handle's shared state implements.
//!
//! [`Obtain`]: lease_core::lock::Obtain
//! [`HeldLock`]: lease_core::lock::HeldLock
//! [`Refresh`]: lease_core::lock::Refresh

mod admin;
mod fair;
mod handle;
mod handoff;
mod obtain;
mod renewals;
mod rwlock;
mod semaphore;
mod task;

pub use admin::{ADMIN_TIMEOUT, LockHolder};
pub use fair::{Fair, FairLock};
pub use handle::Lock;
pub use lease_core::lock::{AutoRenew, LockError, LockOptions};
pub use obtain::Locker;
pub use rwlock::{ReadGuard, ReadLock};
pub use semaphore::{Permit, Semaphore};
