//! Locks: obtain (single or multi-key), refresh, release, TTL, retries, fencing tokens, and
//! opt-in auto-renewal with a loss signal.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::lease::{HeldLease, LeaseEvent, LeaseTiming};
use lease_core::lock::{NextAttempt, ObtainSchedule};
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, ConfigError, Fencing, LeaseBackend, LeaseSpec,
    Metadata, Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest, RetryStrategy,
    Token, Ttl,
};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::ids::random_token;

/// Why a lock operation failed. Match on the variant; every variant is distinct.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock is held by someone else (and no retry is left).
    #[error("lock not obtained: held by {}", holder.as_deref().unwrap_or("another owner"))]
    NotObtained {
        /// The holder, when known.
        holder: Option<String>,
    },
    /// The lock is no longer held by this handle (expired, taken, lost, or released).
    #[error("lock not held")]
    NotHeld,
    /// The backend could not be reached (after the retries the strategy allowed).
    #[error("backend unreachable: {0}")]
    Unavailable(#[source] BackendError),
    /// A request got no reply in time: the lock may be held. Cleanup (a compare-and-delete
    /// with this attempt's token) was started.
    #[error("no reply in time: the outcome is unknown (cleanup attempted)")]
    OutcomeUnknown,
    /// The wait deadline passed; `last` is what the last attempt saw.
    #[error("wait deadline exceeded; last attempt: {last}")]
    DeadlineExceeded {
        /// What the last attempt found (e.g. [`LockError::NotObtained`]).
        #[source]
        last: Box<LockError>,
    },
    /// The input was refused before any round trip.
    #[error("invalid input: {0}")]
    Invalid(#[from] ConfigError),
    /// The backend refused the request as invalid (e.g. keys across Redis Cluster slots).
    #[error("backend refused the request: {0}")]
    Refused(#[source] BackendError),
}

impl LockError {
    /// Whether the error means "someone else holds it" (directly or as the last cause of a
    /// deadline).
    pub fn is_not_obtained(&self) -> bool {
        match self {
            LockError::NotObtained { .. } => true,
            LockError::DeadlineExceeded { last } => last.is_not_obtained(),
            _ => false,
        }
    }

    fn from_backend(e: BackendError) -> LockError {
        if e.is_transient() {
            LockError::Unavailable(e)
        } else {
            LockError::Refused(e)
        }
    }
}

/// Auto-renewal settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoRenew {
    /// How often to renew (must be at most TTL/2).
    pub interval: Duration,
}

/// Options of one obtain call.
///
/// ```
/// use std::time::Duration;
/// use lease_tokio::LockOptions;
/// use lease_tokio::lease_core::RetryStrategy;
/// let opts = LockOptions::new()
///     .retry(RetryStrategy::linear(Duration::from_millis(50)).unwrap())
///     .metadata("job 42")
///     .fence_key("{jobs}:fence")
///     .wait(Duration::from_secs(5));
/// # let _ = opts;
/// ```
#[derive(Clone, Debug, Default)]
pub struct LockOptions {
    retry: RetryStrategy,
    metadata: Option<String>,
    token: Option<String>,
    fence_key: Option<String>,
    wait: Option<Duration>,
    auto_renew: Option<AutoRenew>,
    operation_timeout: Option<Duration>,
}

impl LockOptions {
    /// Defaults: no retry, no metadata, a random token, no fencing, wait one TTL, no
    /// auto-renewal.
    pub fn new() -> Self {
        Self::default()
    }
    /// The retry strategy when the lock is held (shared strategies are fine: each obtain gets
    /// its own sequence).
    pub fn retry(mut self, retry: RetryStrategy) -> Self {
        self.retry = retry;
        self
    }
    /// Metadata stored with the lock.
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = Some(metadata.into());
        self
    }
    /// A caller-chosen ownership token. Obtaining again with the same token is reentrant
    /// (without counting: one release frees it).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }
    /// Mint a fencing token from this counter key atomically with the obtain (on Redis
    /// Cluster it must share the lock keys' hash slot).
    pub fn fence_key(mut self, key: impl Into<String>) -> Self {
        self.fence_key = Some(key.into());
        self
    }
    /// How long to keep retrying (default: one TTL): no attempt starts after this; an attempt
    /// in flight is bounded by the operation timeout (default one TTL).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }
    /// Renew in the background every `interval` until released or lost.
    pub fn auto_renew(mut self, interval: Duration) -> Self {
        self.auto_renew = Some(AutoRenew { interval });
        self
    }
    /// A cap on each round trip (default: the remaining wait, or the remaining validity).
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = Some(timeout);
        self
    }
}

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
#[derive(Debug)]
pub struct Locker<B> {
    backend: Arc<B>,
}

impl<B> Clone for Locker<B> {
    fn clone(&self) -> Self {
        Locker {
            backend: Arc::clone(&self.backend),
        }
    }
}

impl<B: LeaseBackend> Locker<B> {
    /// A locker over `backend`.
    pub fn new(backend: B) -> Self {
        Locker {
            backend: Arc::new(backend),
        }
    }

    /// A locker over a shared backend.
    pub fn from_arc(backend: Arc<B>) -> Self {
        Locker { backend }
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
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
        // Validate everything before the first round trip.
        let ttl = Ttl::new(ttl)?;
        let spec = Arc::new(LeaseSpec::lock(keys, options.fence_key.clone())?);
        let owner = Owner::new(options.token.clone().unwrap_or_else(random_token))?;
        let metadata = Metadata::new(options.metadata.as_deref().unwrap_or(""))?;
        if let Some(ar) = options.auto_renew {
            if ar.interval.is_zero() {
                return Err(ConfigError::ZeroRenewInterval.into());
            }
            if ar.interval > ttl.get() / 2 {
                return Err(ConfigError::RenewIntervalTooLong {
                    renew: ar.interval,
                    ttl: ttl.get(),
                }
                .into());
            }
        }
        if options.operation_timeout.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::ZeroOperationTimeout.into());
        }
        self.backend.check_spec(&spec).map_err(LockError::Refused)?;
        let clock = Clock::new();
        let start = clock.now();
        let wait = options.wait.unwrap_or(ttl.get());
        let mut schedule = ObtainSchedule::new(options.retry.sequence(), start + wait);
        let req = AcquireRequest {
            spec: Arc::clone(&spec),
            owner: owner.clone(),
            ttl,
            metadata: metadata.clone(),
        };
        let mut unknown = false;
        loop {
            let sent = clock.now();
            // The wait decides when the last attempt may *start*; each attempt is bounded by
            // the caller's cap, else one TTL (a grant heard later than that is worthless). So a
            // zero or tiny wait still means "try once", and an attempt started just before the
            // deadline is not cut short into an unknown outcome.
            let bound = options
                .operation_timeout
                .unwrap_or(ttl.get())
                .min(ttl.get());
            let attempt = tokio::time::timeout(bound, self.backend.acquire(&req)).await;
            let last = match attempt {
                Ok(Ok(AcquireOutcome::Acquired { token })) => {
                    let lock = Lock::new(
                        Arc::clone(&self.backend),
                        spec,
                        owner,
                        metadata,
                        ttl,
                        token,
                        clock,
                        sent,
                        options.auto_renew,
                        options.operation_timeout,
                        options.retry.clone(),
                        options.token.is_none(),
                    );
                    tracing::debug!(keys = ?lock.keys(), fence_token = ?token, "lock obtained");
                    return Ok(lock);
                }
                Ok(Ok(AcquireOutcome::Held { holder, .. })) => {
                    unknown = false;
                    LockError::NotObtained { holder }
                }
                Ok(Ok(_)) => {
                    LockError::Unavailable(BackendError::Protocol("unknown acquire outcome".into()))
                }
                Ok(Err(e)) if !e.is_transient() => return Err(LockError::Refused(e)),
                Ok(Err(e)) => LockError::Unavailable(e),
                Err(_) => {
                    // The attempt may have won at the server: the next attempt with the same
                    // token takes it over; if there is none, clean up.
                    unknown = true;
                    LockError::OutcomeUnknown
                }
            };
            match schedule.after_failure(clock.now()) {
                NextAttempt::At(t) => tokio::time::sleep_until(clock.to_tokio(t)).await,
                NextAttempt::DeadlineExceeded => {
                    if unknown {
                        self.cleanup(&spec, &owner);
                    }
                    return Err(LockError::DeadlineExceeded {
                        last: Box::new(last),
                    });
                }
                _ => {
                    if unknown {
                        self.cleanup(&spec, &owner);
                    }
                    return Err(last);
                }
            }
        }
    }

    fn cleanup(&self, spec: &Arc<LeaseSpec>, owner: &Owner) {
        spawn_release(
            Arc::clone(&self.backend),
            ReleaseRequest {
                spec: Arc::clone(spec),
                owner: owner.clone(),
                term: None,
            },
        );
    }
}

fn spawn_release<B: LeaseBackend>(backend: Arc<B>, req: ReleaseRequest) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        let ttl_bound = Duration::from_secs(30);
        handle.spawn(async move {
            match tokio::time::timeout(ttl_bound, backend.release(&req)).await {
                Ok(Ok(outcome)) => tracing::debug!(keys = ?req.spec.keys(), ?outcome, "background release"),
                Ok(Err(e)) => tracing::warn!(keys = ?req.spec.keys(), error = %e, "background release failed; the lock expires with its TTL"),
                Err(_) => tracing::warn!(keys = ?req.spec.keys(), "background release timed out; the lock expires with its TTL"),
            }
        });
    } else {
        tracing::warn!(keys = ?req.spec.keys(), "no tokio runtime to release the lock; it expires with its TTL");
    }
}

#[derive(Debug)]
struct Shared {
    /// The local deadline (tokio clock) of the lease as last extended.
    valid_until: Mutex<tokio::time::Instant>,
    /// Fires when the lock is no longer held, for any reason.
    lost: CancellationToken,
    released: AtomicBool,
    /// Whether a deadline watch runs (auto-renewal does its own).
    watching: AtomicBool,
    /// The ownership token was generated for this acquisition alone (not caller-chosen): a
    /// compare-and-delete with it can only ever remove this acquisition's keys, so it is safe
    /// even after the lock was lost. With a caller-chosen token a later reentrant obtain shares
    /// the value, so cleanup after loss is skipped.
    private_token: bool,
}

/// A held lock. Dropping it without [`Lock::release`] releases it best-effort in the
/// background (on the current tokio runtime, if any); call `release` to learn the outcome.
#[derive(Debug)]
pub struct Lock<B: LeaseBackend> {
    backend: Arc<B>,
    spec: Arc<LeaseSpec>,
    owner: Owner,
    metadata: Metadata,
    ttl: Ttl,
    fence_token: Option<Token>,
    clock: Clock,
    retry: RetryStrategy,
    operation_timeout: Option<Duration>,
    shared: Arc<Shared>,
    renewer: Option<tokio::task::JoinHandle<()>>,
}

impl<B: LeaseBackend> Lock<B> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        backend: Arc<B>,
        spec: Arc<LeaseSpec>,
        owner: Owner,
        metadata: Metadata,
        ttl: Ttl,
        fence_token: Option<Token>,
        clock: Clock,
        sent: lease_core::Instant,
        auto_renew: Option<AutoRenew>,
        operation_timeout: Option<Duration>,
        retry: RetryStrategy,
        private_token: bool,
    ) -> Self {
        let shared = Arc::new(Shared {
            valid_until: Mutex::new(
                clock.to_tokio(sent + ttl.get().saturating_sub(backend.validity_margin(ttl))),
            ),
            lost: CancellationToken::new(),
            released: AtomicBool::new(false),
            watching: AtomicBool::new(false),
            private_token,
        });
        // The loss signal also fires at the deadline if nothing extends the lock.
        // Without auto-renewal, the deadline watch that fires the loss signal is started
        // lazily, on the first `lost()` call: a lock nobody watches costs no task.
        let renewer = auto_renew.map(|ar| {
            tokio::spawn(auto_renew_task(
                Arc::clone(&backend),
                RenewRequest {
                    spec: Arc::clone(&spec),
                    owner: owner.clone(),
                    ttl,
                },
                LeaseTiming {
                    ttl,
                    renew_interval: ar.interval,
                    operation_timeout,
                    margin: backend.validity_margin(ttl),
                },
                fence_token,
                clock,
                sent,
                Arc::clone(&shared),
            ))
        });
        Lock {
            backend,
            spec,
            owner,
            metadata,
            ttl,
            fence_token,
            clock,
            retry,
            operation_timeout,
            shared,
            renewer,
        }
    }

    /// The first key.
    pub fn key(&self) -> &str {
        self.spec.keys().first().map_or("", String::as_str)
    }

    /// Every key.
    pub fn keys(&self) -> &[String] {
        self.spec.keys()
    }

    /// The ownership token stored in the keys.
    pub fn token(&self) -> &str {
        self.owner.as_str()
    }

    /// The fencing token minted at obtain, when a fence key was given.
    pub fn fence_token(&self) -> Option<Token> {
        self.fence_token
    }

    /// The metadata stored with the lock.
    pub fn metadata(&self) -> &str {
        self.metadata.as_str()
    }

    /// The TTL set at obtain (and by auto-renewal).
    pub fn ttl_setting(&self) -> Duration {
        self.ttl.get()
    }

    /// The local deadline: the send time of the last successful obtain/refresh plus its TTL.
    pub fn valid_until(&self) -> tokio::time::Instant {
        *self
            .shared
            .valid_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this handle still holds the lock as far as it knows locally: not released, not
    /// lost, and before the local deadline.
    pub fn held(&self) -> bool {
        !self.shared.lost.is_cancelled() && tokio::time::Instant::now() < self.valid_until()
    }

    /// The loss signal: a token cancelled when the lock is no longer held — renewal failed for
    /// good, the local deadline passed, or the lock was released — whichever comes first. It
    /// belongs to this acquisition: a later obtain has its own.
    pub fn lost(&self) -> CancellationToken {
        if self.renewer.is_none()
            && !self.shared.lost.is_cancelled()
            && !self.shared.watching.swap(true, Ordering::AcqRel)
        {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(deadline_watch(Arc::clone(&self.shared)));
            } else {
                self.shared.watching.store(false, Ordering::Release);
            }
        }
        self.shared.lost.clone()
    }

    /// The remaining TTL at the backend: the minimum over the keys, zero when not held.
    pub async fn ttl(&self) -> Result<Duration, LockError> {
        let r = self
            .bounded(self.backend.remaining(&self.spec, &self.owner))
            .await?;
        Ok(r.unwrap_or(Duration::ZERO))
    }

    async fn bounded<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, BackendError>>,
    ) -> Result<T, LockError> {
        let bound = self.operation_timeout.unwrap_or(self.ttl.get());
        match tokio::time::timeout(bound, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(LockError::from_backend(e)),
            Err(_) => Err(LockError::Unavailable(BackendError::Timeout(bound))),
        }
    }

    /// Extends the lock to `ttl` from now. A lost lock is terminal ([`LockError::NotHeld`], at
    /// once, without a round trip) — and a lock past its local deadline is lost, even if the
    /// loss signal has not fired yet; a reply arriving after the deadline does not revive it.
    /// Transient errors are retried per the lock's retry strategy, while the deadline allows.
    pub async fn refresh(&self, ttl: Duration) -> Result<(), LockError> {
        let ttl = Ttl::new(ttl)?;
        let req = RenewRequest {
            spec: Arc::clone(&self.spec),
            owner: self.owner.clone(),
            ttl,
        };
        let mut seq = self.retry.sequence();
        loop {
            // Past the local deadline the lease has lapsed, even if the loss watcher has not
            // run yet (a stalled thread): it must never be extended, only re-obtained.
            if !self.held() {
                self.shared.lost.cancel();
                return Err(LockError::NotHeld);
            }
            let sent = self.clock.now();
            let until = self.valid_until();
            let remaining = until.saturating_duration_since(tokio::time::Instant::now());
            let mut bound = remaining.max(Duration::from_millis(1));
            if let Some(cap) = self.operation_timeout {
                bound = bound.min(cap);
            }
            let err = match tokio::time::timeout(bound, self.backend.renew(&req)).await {
                Ok(Ok(RenewOutcome::Renewed)) => {
                    let mut v = self
                        .shared
                        .valid_until
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    // A reply at or after the deadline is too late: the loss may already have
                    // been signalled, and no reply revives a lapsed lease.
                    if self.shared.lost.is_cancelled() || tokio::time::Instant::now() >= *v {
                        drop(v);
                        self.shared.lost.cancel();
                        return Err(LockError::NotHeld);
                    }
                    let margin = self.backend.validity_margin(ttl);
                    let next = self.clock.to_tokio(sent + ttl.get().saturating_sub(margin));
                    // An explicit refresh sets the deadline (it may shorten the TTL).
                    *v = next;
                    return Ok(());
                }
                Ok(Ok(_)) => {
                    self.shared.lost.cancel();
                    return Err(LockError::NotHeld);
                }
                Ok(Err(e)) if !e.is_transient() => return Err(LockError::Refused(e)),
                Ok(Err(e)) => LockError::Unavailable(e),
                Err(_) => LockError::Unavailable(BackendError::Timeout(bound)),
            };
            match seq.next_delay() {
                Some(d) if tokio::time::Instant::now() + d < self.valid_until() => {
                    tokio::time::sleep(d).await;
                }
                _ => return Err(err),
            }
        }
    }

    /// Releases the lock (compare-and-delete: never deletes a lock someone else now holds).
    /// Returns [`LockError::NotHeld`] when it was no longer ours.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.shared.released.store(true, Ordering::Release);
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
        let req = ReleaseRequest {
            spec: Arc::clone(&self.spec),
            owner: self.owner.clone(),
            term: None,
        };
        let result = self.bounded(self.backend.release(&req)).await;
        self.shared.lost.cancel();
        match result? {
            ReleaseOutcome::Released => Ok(()),
            _ => Err(LockError::NotHeld),
        }
    }
}

impl<B: LeaseBackend + Fencing> Lock<B> {
    /// A fencer for writes under this lock's fencing token, against `<fence key>:applied`.
    /// `None` when the lock was obtained without a fence key.
    pub fn fencer(&self) -> Option<B::Fencer> {
        let mark = self.spec.mark_key()?;
        Some(self.backend.fencer(&mark, self.fence_token?))
    }
}

impl<B: LeaseBackend> Drop for Lock<B> {
    fn drop(&mut self) {
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
        // Compare-and-delete is safe whether or not the lock is still ours: it deletes only our
        // own value. Releasing even a "lost" lock removes a key that a late renewal (queued
        // before the loss) may have extended.
        if !self.shared.released.swap(true, Ordering::AcqRel)
            && (self.shared.private_token || self.held())
        {
            spawn_release(
                Arc::clone(&self.backend),
                ReleaseRequest {
                    spec: Arc::clone(&self.spec),
                    owner: self.owner.clone(),
                    term: None,
                },
            );
        }
        self.shared.lost.cancel();
    }
}

async fn deadline_watch(shared: Arc<Shared>) {
    loop {
        let until = *shared.valid_until.lock().unwrap_or_else(|e| e.into_inner());
        tokio::select! {
            _ = shared.lost.cancelled() => return,
            _ = tokio::time::sleep_until(until) => {
                let now_until = *shared.valid_until.lock().unwrap_or_else(|e| e.into_inner());
                if tokio::time::Instant::now() >= now_until {
                    shared.lost.cancel();
                    return;
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn auto_renew_task<B: LeaseBackend>(
    backend: Arc<B>,
    req: RenewRequest,
    timing: LeaseTiming,
    token: Option<Token>,
    clock: Clock,
    sent: lease_core::Instant,
    shared: Arc<Shared>,
) {
    let mut lease = HeldLease::new(timing, token, sent, clock.now());
    loop {
        let now = clock.now();
        if let Some(order) = lease.poll_renew(now) {
            // No lock is held across the round trip.
            let reply =
                match tokio::time::timeout_at(clock.to_tokio(order.deadline), backend.renew(&req))
                    .await
                {
                    Ok(r) => r,
                    Err(_) => Err(BackendError::Timeout(order.deadline - order.sent_at)),
                };
            lease.handle_renew(clock.now(), reply);
        }
        lease.handle_timeout(clock.now());
        while let Some(ev) = lease.poll_event() {
            match ev {
                LeaseEvent::Renewed { valid_until } => {
                    *shared.valid_until.lock().unwrap_or_else(|e| e.into_inner()) =
                        clock.to_tokio(valid_until);
                }
                LeaseEvent::RenewFailed(e) => {
                    tracing::warn!(keys = ?req.spec.keys(), error = %e, "lock renewal failed (tolerated until the deadline)");
                }
                LeaseEvent::Lost(reason) => {
                    tracing::warn!(keys = ?req.spec.keys(), ?reason, "lock lost");
                    shared.lost.cancel();
                    if reason == lease_core::LossReason::DeadlineExpired && shared.private_token {
                        // A renewal sent before the deadline may still land and extend the key
                        // nobody holds any more: delete our own value, best effort.
                        spawn_release(
                            Arc::clone(&backend),
                            ReleaseRequest {
                                spec: Arc::clone(&req.spec),
                                owner: req.owner.clone(),
                                term: None,
                            },
                        );
                    }
                    return;
                }
                _ => {}
            }
        }
        if shared.released.load(Ordering::Acquire) {
            return;
        }
        match lease.poll_timeout() {
            Some(t) => {
                tokio::select! {
                    _ = shared.lost.cancelled() => return,
                    _ = tokio::time::sleep_until(clock.to_tokio(t)) => {}
                }
            }
            None => {
                shared.lost.cancel();
                return;
            }
        }
    }
}
