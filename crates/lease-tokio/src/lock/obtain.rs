//! [`Locker`]: drives one [`Obtain`] machine per obtain call.

use std::sync::Arc;
use std::time::Duration;

use lease_core::lock::{LockError, LockOptions, Obtain, ObtainPlan, Obtained, release_request};
use lease_core::notify::{ReleaseWatch, WatchRole};
use lease_core::{AcquireRequest, BackendError, LeaseBackend};

use crate::clock::Clock;
use crate::ids::{jitter_seed, random_owner};
use crate::lock::handle::{Lock, Shared};
use crate::lock::renewals::Renewals;
use crate::lock::task::spawn_release;
use crate::observer::LockObserver;
use crate::telemetry;

/// Obtains locks over a backend. Cheap to clone.
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use lease_tokio::{Locker, LockOptions};
/// use lease_tokio::lease_core::memory::{ManualClock, MemoryBackend};
///
/// let locker = Locker::new(MemoryBackend::new(ManualClock::new()));
/// let lock = locker.obtain("report", Duration::from_secs(10), LockOptions::new()).await?;
/// assert!(locker.obtain("report", Duration::from_secs(10), LockOptions::new()).await.is_err());
/// lock.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
pub struct Locker<B> {
    backend: Arc<B>,
    observer: Option<Arc<dyn LockObserver>>,
    /// One renewal task for every lock of this locker and its clones.
    renewals: Arc<Renewals<Shared<B>>>,
}

impl<B> Clone for Locker<B> {
    fn clone(&self) -> Self {
        Locker {
            backend: Arc::clone(&self.backend),
            observer: self.observer.clone(),
            renewals: Arc::clone(&self.renewals),
        }
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for Locker<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.backend)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl<B: LeaseBackend> Locker<B> {
    /// A locker over `backend`.
    pub fn new(backend: B) -> Self {
        Locker::from_arc(Arc::new(backend))
    }

    /// A locker over a shared backend.
    pub fn from_arc(backend: Arc<B>) -> Self {
        Locker {
            backend,
            observer: None,
            renewals: Arc::new(Renewals::new()),
        }
    }

    /// The same locker, reporting every lock it obtains to `observer`.
    pub fn with_observer(mut self, observer: impl LockObserver) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// How many entries the auto-renewal task's timer queue held after its last step (live,
    /// stale and dead ones; 0 before the first auto-renewed lock). Bounded by twice the live
    /// auto-renewed locks plus 64 after each compaction (see `docs/production.md`, "Bounds").
    /// For tests and diagnostics; not a stable API.
    #[doc(hidden)]
    pub fn renewal_queue_len(&self) -> usize {
        self.renewals.queued()
    }

    /// Obtains a lock on `key` for `ttl`.
    pub async fn obtain(
        &self,
        key: impl Into<String>,
        ttl: Duration,
        options: LockOptions,
    ) -> Result<Lock<B>, LockError> {
        self.obtain_multi([key.into()], ttl, options).await
    }

    /// Obtains a lock on every key of `keys` at once, or on none: every key is checked before
    /// any is changed.
    ///
    /// Cancellation-safe: dropping the returned future while an attempt is in flight (or after
    /// one whose outcome is unknown) starts the same background cleanup as
    /// [`LockError::OutcomeUnknown`] does, so a cancelled obtain does not leave a lock behind
    /// until its TTL.
    pub async fn obtain_multi<I, S>(
        &self,
        keys: I,
        ttl: Duration,
        options: LockOptions,
    ) -> Result<Lock<B>, LockError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        // Everything is validated before the first round trip.
        let plan = options.plan(keys, ttl, random_owner)?;
        self.obtain_plan(plan).await
    }

    /// The observer every lock of this locker is reported to.
    pub(crate) fn observer(&self) -> Option<Arc<dyn LockObserver>> {
        self.observer.clone()
    }

    /// A locker over `backend` reporting to `observer`.
    pub(crate) fn with_observer_arc(
        backend: Arc<B>,
        observer: Option<Arc<dyn LockObserver>>,
    ) -> Self {
        Locker {
            backend,
            observer,
            renewals: Arc::new(Renewals::new()),
        }
    }

    /// A locker over `backend` reporting to `observer`, sharing `renewals` (a fair lock's
    /// per-obtain views share one renewal task).
    pub(crate) fn from_parts(
        backend: Arc<B>,
        observer: Option<Arc<dyn LockObserver>>,
        renewals: Arc<Renewals<Shared<B>>>,
    ) -> Self {
        Locker {
            backend,
            observer,
            renewals,
        }
    }

    /// Obtains the lock of a validated `plan` (the rest of [`Locker::obtain_multi`]).
    pub(crate) async fn obtain_plan(&self, plan: ObtainPlan) -> Result<Lock<B>, LockError> {
        self.backend
            .check_spec(&plan.request.spec)
            .map_err(LockError::Refused)?;
        let clock = Clock::new();
        // Jittered per acquisition, so waiters that saw the same release spread out.
        // Registered before the first attempt (no lost wake-up); subscribed only once an
        // attempt found the lock held.
        let watch = self
            .backend
            .release_watch(&plan.request.spec, WatchRole::Contender);
        let obtained = ObtainRun {
            obtain: Obtain::new(&plan, jitter_seed(), clock.now()),
            backend: Arc::clone(&self.backend),
            request: &plan.request,
            watch,
        }
        .drive(clock)
        .await;
        let label = plan.request.spec.keys().first().map_or("", String::as_str);
        let obtained = match obtained {
            Ok(obtained) => {
                // The clock started with this obtain: its "now" is the time the call took.
                telemetry::lock_obtained(label, clock.now().since_origin());
                obtained
            }
            Err(e) => {
                if e.is_not_obtained() {
                    telemetry::lock_not_obtained(label);
                }
                return Err(e);
            }
        };
        let lock = Lock::new(
            Arc::clone(&self.backend),
            plan,
            obtained,
            clock,
            self.observer.clone(),
            Arc::clone(&self.renewals),
        );
        lock.obtained();
        Ok(lock)
    }
}

/// One obtain in progress. Dropped — at the end, or because the caller abandoned the obtain —
/// it sends the cleanup release the machine asks for ([`Obtain::needs_cleanup`]).
struct ObtainRun<'a, B: LeaseBackend> {
    obtain: Obtain,
    backend: Arc<B>,
    request: &'a AcquireRequest,
    watch: Option<ReleaseWatch>,
}

impl<B: LeaseBackend> ObtainRun<'_, B> {
    async fn drive(mut self, clock: Clock) -> Result<Obtained, LockError> {
        loop {
            if let Some(attempt) = self.obtain.poll_request(clock.now()) {
                // Others of this process waiting on the key: if this attempt wins, the
                // store must know they wait (they will not attempt until woken).
                let with_waiters;
                let request = if self.watch.as_ref().is_some_and(ReleaseWatch::others_wait) {
                    with_waiters = self.request.clone().with_waiters(true);
                    &with_waiters
                } else {
                    self.request
                };
                let reply = tokio::time::timeout_at(
                    clock.to_tokio(attempt.deadline),
                    self.backend.acquire(request),
                )
                .await;
                // While notices arrive, a lost race waits for the release's notice.
                self.obtain
                    .set_notices_live(self.watch.as_ref().is_some_and(ReleaseWatch::is_live));
                // No reply by the deadline is a timeout of the attempt's bound: its outcome
                // is unknown (it may have won at the store).
                let bound = self.obtain.attempt_bound();
                let reply = reply.unwrap_or(Err(BackendError::Timeout(bound)));
                self.obtain.handle_reply(clock.now(), reply);
            }
            if let Some(outcome) = self.obtain.poll_outcome() {
                return outcome;
            }
            if let Some(at) = self.obtain.poll_timeout() {
                match self.watch.as_mut() {
                    Some(watch) => {
                        watch.activate();
                        tokio::select! {
                            biased;
                            () = watch.notified() => {
                                self.obtain.handle_notice(clock.now());
                            }
                            () = tokio::time::sleep_until(clock.to_tokio(at)) => {}
                        }
                    }
                    None => tokio::time::sleep_until(clock.to_tokio(at)).await,
                }
            }
        }
    }
}

impl<B: LeaseBackend> Drop for ObtainRun<'_, B> {
    fn drop(&mut self) {
        if self.obtain.needs_cleanup() {
            spawn_release(
                Arc::clone(&self.backend),
                release_request(&self.request.spec, &self.request.owner),
                self.obtain.cleanup_bound(),
            );
        }
    }
}
