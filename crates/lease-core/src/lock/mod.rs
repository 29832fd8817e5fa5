//! The lock machines: one obtain, one held lock, one explicit refresh.
//!
//! Sans-IO in the manner of quinn-proto, like [`crate::Election`]: these types decide what to
//! send, how long to wait for it, and what each reply means; the driver (`lease-tokio`'s
//! `Locker` and `Lock`) only performs the requests and sleeps. Time enters as [`Instant`]s the
//! driver passes in; randomness (the owner token, the retry jitter seed) comes from the driver.
//!
//! # Obtaining: [`Obtain`]
//!
//! 1. Validate the call with [`LockOptions::plan`]: every bad input is a [`ConfigError`]
//!    before the first round trip. The [`ObtainPlan`] holds the acquire request.
//! 2. Create an [`Obtain`] and loop:
//!    - send the plan's acquire whenever [`Obtain::poll_request`] returns an [`Attempt`],
//!      bounded by its `deadline`; feed the reply to [`Obtain::handle_reply`] — at the
//!      deadline, `Err(BackendError::Timeout(..))` (a reply ready at the deadline counts as
//!      the reply). **Every** attempt gets exactly one reply;
//!    - stop when [`Obtain::poll_outcome`] yields: [`Obtained`] or the final [`LockError`];
//!    - otherwise sleep until [`Obtain::poll_timeout`] (the next attempt) or a release notice
//!      (a [`crate::notify::ReleaseWatch`], registered before the first attempt and activated
//!      after the first failed one), which is fed to [`Obtain::handle_notice`].
//!    - a driver that queues obtains of its own process behind a holder of its own process
//!      answers such an attempt itself with [`Obtain::handle_local_hold`], and feeds the
//!      holder's hand-off (an acquire sent for this obtain) to [`Obtain::handle_transfer`].
//! 3. Whenever the obtain ends — with an error, or because the caller abandoned it (a dropped
//!    future) — [`Obtain::needs_cleanup`] says whether the lock may be held under the obtain's
//!    own generated token with nobody to release it: then send one best-effort release.
//!
//! # Holding: [`HeldLock`]
//!
//! [`HeldLock::new`] from what the obtain returned. The driver then, in any order, but always
//! with the machine behind one mutex and never holding it across a round trip:
//!
//! - sends each renewal [`HeldLock::poll_renew`] returns (auto-renewing locks only), bounded
//!   by its deadline, and feeds the reply (a timeout as [`BackendError::Timeout`]) to
//!   [`HeldLock::handle_renew`];
//! - for an explicit refresh, owns a [`Refresh`]: each attempt takes the *slot* with
//!   [`HeldLock::begin_refresh`] ([`RefreshStart::Busy`]: a renewal is in flight, wait until
//!   its reply was handled), sends the renewal with the refresh's TTL, feeds the reply to
//!   [`HeldLock::handle_refresh`] (or [`HeldLock::abandon_refresh`] if the caller gave up),
//!   and asks [`Refresh::after_failure`] when to retry after a failed attempt;
//! - sleeps until [`HeldLock::poll_timeout`] — or until a refresh or renewal moved the deadline
//!   or freed the slot — and calls [`HeldLock::handle_timeout`];
//! - acts on each [`LockEvent`] from [`HeldLock::poll_event`];
//! - on release, calls [`HeldLock::release`], sends the release and maps its reply with
//!   [`release_result`]; when the handle is dropped instead, sends one in the background if
//!   [`HeldLock::release_on_drop`] says so.
//!
//! The rules (each is tested by property in `tests/lock_props.rs`):
//!
//! - no obtain attempt *starts* after the wait deadline; each is bounded by the operation
//!   timeout, else one TTL (a grant heard later is worthless), whatever the wait;
//! - an obtain attempt whose outcome is unknown stays unknown until a later attempt is
//!   answered (that attempt, with the same token, would have taken the lock over); an obtain
//!   that ends so reports [`LockError::OutcomeUnknown`], never "not obtained" or
//!   "unavailable", and cleans up — only with a generated token (a caller-chosen one may be
//!   held by another of the caller's handles);
//! - permanent errors end an obtain or refresh at once, transient ones are retried per the
//!   caller's [`RetryStrategy`] within the wait (obtain) or the lock's deadline (refresh);
//! - a retry never runs before the strategy says: a wake-up (a release notice, a hand-off
//!   line, the holder's expiry) may make an attempt earlier, and if that attempt finds the
//!   lock still held it is no retry — the strategy's next retry stays where it was;
//! - a lock is dated from the instant its request was sent: `sent + ttl − margin`;
//! - one TTL-changing request (renewal or refresh) is in flight at a time, so replies arrive
//!   in the order the store applied them and the last reply tells what the store was last
//!   told; the local deadline never exceeds that — a refresh to a shorter TTL shortens the
//!   deadline *before* it is sent, and a renewal whose outcome is unknown shortens it when
//!   the store may have been told an earlier expiry;
//! - the lock is never held at or after its local deadline, and no late reply revives it;
//! - "not ours" is loss at once; a renewal refused permanently gives the lock up.
//! - with a cap ([`LockOptions::max_hold`]), no renewal or refresh tells the store an expiry
//!   past `obtained + max_hold`: auto-renewal stops at the last renewal that fits, the lock
//!   ends at its deadline (never after the cap) with [`crate::LossReason::MaxHoldReached`],
//!   released when its token is private; a refresh past the cap is [`RefreshStart::PastCap`]
//!   (tested by property in `tests/lock_cap_props.rs`).

mod error;
mod held;
mod obtain;
mod options;
mod schedule;

pub use error::LockError;
pub use held::{
    HeldLock, LockEvent, Refresh, RefreshOrder, RefreshReply, RefreshStart, release_bound,
    release_request, release_result,
};
pub use obtain::{Attempt, Obtain, Obtained};
pub use options::{AutoRenew, LockOptions, ObtainPlan};
pub use schedule::{NextAttempt, ObtainSchedule};

#[cfg(doc)]
use crate::{BackendError, ConfigError, Instant, RetryStrategy};
