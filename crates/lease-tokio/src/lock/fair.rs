//! [`Fair`]: a lock handed over in FIFO order across processes, each hold a [`FairLock`].
//!
//! A fair hold is a lock in every respect but the queue: it is obtained, auto-renewed,
//! refreshed, released (or dropped) and lost by the same machines and the same driver as a
//! [`Lock`] — a [`Locker`] over [`FairBackend`], the view of the backend whose acquire and
//! release are its fair operations, made for each obtain (it carries the waiter's place TTL
//! and its own wake channel). So the obtain's retries (each one a heartbeat of the waiter's
//! place), wait, wake-ups, truthful outcomes, cancellation cleanup, batched auto-renewal and
//! loss signal are a lock's. What the driver adds: an obtain that ends without the lock —
//! not obtained, timed out, cancelled — leaves the queue (one bounded, best-effort
//! [`LeaseBackend::leave_fair`]).

use std::sync::Arc;
use std::time::Duration;

use lease_core::fair::{FairBackend, fair_spec, leaves_on_give_up};
use lease_core::lock::{LockError, LockOptions};
use lease_core::{LeaseBackend, LeaseInfo, LeaseSpec, Owner};

use crate::ids::random_owner;
use crate::lock::handle::{Lock, Shared};
use crate::lock::obtain::Locker;
use crate::lock::renewals::Renewals;
use crate::observer::LockObserver;

/// A held fair lock: a [`Lock`] over [`FairBackend`]. Its [`fence_token`](Lock::fence_token)
/// is the hold's fencing token (default fence key `<name>:fence`), and
/// [`release`](Lock::release) hands the lock to the next waiter, waking it alone.
pub type FairLock<B> = Lock<FairBackend<B>>;

/// A fair lock: one holder at a time, in FIFO order across processes (see
/// `docs/fair-locks.md`). Made by [`Locker::fair`]; cheap to clone.
///
/// A waiter takes a place in the queue at its first failed attempt and keeps it by
/// heartbeating: each retry refreshes it. A place lives
/// [`PLACE_HEARTBEATS`](lease_core::fair::PLACE_HEARTBEATS) times the retry strategy's
/// longest delay, so a crashed waiter holds up a free lock at most that long.
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use lease_tokio::{Locker, LockOptions};
/// use lease_tokio::lease_core::RetryStrategy;
/// use lease_tokio::lease_core::memory::{ManualClock, MemoryBackend};
///
/// let locker = Locker::new(MemoryBackend::new(ManualClock::new()));
/// let jobs = locker.fair("{jobs}")?;
/// let ttl = Duration::from_secs(30);
/// let first = jobs.acquire(ttl, LockOptions::new()).await?;
/// let retry = RetryStrategy::linear(Duration::from_millis(20))?;
/// let waiter = tokio::spawn({
///     let jobs = jobs.clone();
///     async move { jobs.acquire(ttl, LockOptions::new().retry(retry)).await }
/// });
/// # tokio::task::yield_now().await;
/// let first_token = first.fence_token();
/// first.release().await?; // wakes the waiter, and only it
/// let second = waiter.await??;
/// assert!(second.fence_token() > first_token);
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
pub struct Fair<B> {
    inner: Arc<B>,
    observer: Option<Arc<dyn LockObserver>>,
    /// One renewal task for every hold of this fair lock and its clones.
    renewals: Arc<Renewals<Shared<FairBackend<B>>>>,
    name: Arc<str>,
    spec: Arc<LeaseSpec>,
}

impl<B> Clone for Fair<B> {
    fn clone(&self) -> Self {
        Fair {
            inner: Arc::clone(&self.inner),
            observer: self.observer.clone(),
            renewals: Arc::clone(&self.renewals),
            name: Arc::clone(&self.name),
            spec: Arc::clone(&self.spec),
        }
    }
}

impl<B> std::fmt::Debug for Fair<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fair")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<B: LeaseBackend> Locker<B> {
    /// The fair lock `name` over this locker's backend, reporting its holds to this
    /// locker's observer.
    ///
    /// Refused before any round trip: an empty name ([`LockError::Invalid`]); a backend
    /// without fair locks (Redlock: a fair queue would need one order agreed by a quorum, which
    /// independent nodes do not give; your own backend that does not implement the fair
    /// methods) or, on Redis Cluster, a name whose keys (`<name>`, `<name>:queue`,
    /// `<name>:places`, `<name>:fence`, ...) are not in one slot — give it a hash tag,
    /// `{jobs}` ([`LockError::Refused`]).
    pub fn fair(&self, name: impl Into<String>) -> Result<Fair<B>, LockError> {
        let name: String = name.into();
        let spec = Arc::new(fair_spec(&name, None)?);
        self.backend()
            .check_fair(&spec)
            .map_err(LockError::Refused)?;
        Ok(Fair {
            inner: Arc::clone(self.backend()),
            observer: self.observer(),
            renewals: Arc::new(Renewals::new()),
            name: Arc::from(name),
            spec,
        })
    }
}

impl<B: LeaseBackend> Fair<B> {
    /// The fair lock's name (its lock key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Obtains the lock for `ttl`, in turn, with a lock's options and rules: retries per
    /// [`LockOptions::retry`] within [`LockOptions::wait`] — each a heartbeat of the waiter's
    /// place, and the longest delay must not exceed the TTL ([`LockError::Invalid`] before any
    /// round trip) — auto-renewal, a caller-chosen owner, metadata, a fence key (default
    /// `<name>:fence`) and a fence floor. Without retries the attempt never queues: it takes
    /// the lock only when it is free and nobody waits.
    ///
    /// The errors are a lock's: [`LockError::NotObtained`] (the holder, or the waiter the free
    /// lock is kept for), [`LockError::DeadlineExceeded`], [`LockError::OutcomeUnknown`] (a
    /// cleanup release is started), [`LockError::Refused`]. Every end without the lock, and
    /// dropping the future, leaves the queue in the background (bounded like a cleanup
    /// release); a place left behind expires by itself.
    pub async fn acquire(
        &self,
        ttl: Duration,
        options: LockOptions,
    ) -> Result<FairLock<B>, LockError> {
        let plan = options.plan_fair(&self.name, ttl, random_owner)?;
        let owner = plan.obtain.request.owner.clone();
        let mut leave = Leave {
            backend: Arc::clone(&self.inner),
            spec: Arc::clone(&plan.obtain.request.spec),
            owner: owner.clone(),
            bound: plan.obtain.release_bound(),
            armed: true,
        };
        let view = FairBackend::new(Arc::clone(&self.inner), plan.place_ttl, Some(owner));
        let locker = Locker::from_parts(
            Arc::new(view),
            self.observer.clone(),
            Arc::clone(&self.renewals),
        );
        let got = locker.obtain_plan(plan.obtain).await;
        leave.armed = leaves_on_give_up(Some(&got));
        got
    }

    /// Who holds the lock now, and the fence counter and mark (one read, default fence key).
    pub async fn inspect(&self, timeout: Duration) -> Result<LeaseInfo, LockError> {
        let read = self.inner.inspect(&self.spec);
        match tokio::time::timeout(timeout, read).await {
            Ok(r) => r.map_err(LockError::from_read),
            Err(_) => Err(LockError::from_read(lease_core::BackendError::Timeout(
                timeout,
            ))),
        }
    }
}

/// Leaves the queue when dropped armed: an obtain that ended without the lock, or was
/// abandoned.
struct Leave<B: LeaseBackend> {
    backend: Arc<B>,
    spec: Arc<LeaseSpec>,
    owner: Owner,
    bound: Duration,
    armed: bool,
}

impl<B: LeaseBackend> Drop for Leave<B> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(key = %self.spec.keys()[0], "no runtime to leave the fair queue; the place expires");
            return;
        };
        let backend = Arc::clone(&self.backend);
        let spec = Arc::clone(&self.spec);
        let owner = self.owner.clone();
        let bound = self.bound;
        handle.spawn(async move {
            match tokio::time::timeout(bound, backend.leave_fair(&spec, &owner)).await {
                Ok(Ok(had)) => tracing::debug!(key = ?spec.keys(), had, "left the fair queue"),
                Ok(Err(e)) => tracing::debug!(key = ?spec.keys(), error = %e, "leaving the fair queue failed; the place expires"),
                Err(_) => tracing::debug!(key = ?spec.keys(), "leaving the fair queue timed out; the place expires"),
            }
        });
    }
}
