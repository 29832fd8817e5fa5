//! Locks: obtain (single or multi-key), refresh, release, TTL, retries, fencing tokens, and
//! opt-in auto-renewal with a loss signal.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::config::{check_operation_timeout, check_renew_interval};
use lease_core::lease::{HeldLease, LeaseEvent, LeaseTiming};
use lease_core::lock::{NextAttempt, ObtainSchedule};
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, ConfigError, Fencing, LeaseBackend, LeaseSpec,
    LossReason, Metadata, Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest,
    RetryStrategy, Token, Ttl,
};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::ids::{random_token, random_u64};

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
    /// The backend could not serve the request, which provably did not take effect (after
    /// the retries the strategy allowed): nothing changed at the store.
    #[error("backend unavailable (not applied): {0}")]
    Unavailable(#[source] BackendError),
    /// A request may have reached the store and no reply was seen (a timeout, a connection
    /// lost after sending): it may or may not have taken effect.
    ///
    /// - from [`Locker::obtain`]: the lock may be held under this attempt's token. With a
    ///   generated token a cleanup (a compare-and-delete with that token) was started in the
    ///   background; with a caller-chosen token ([`LockOptions::token`]) it is not (another
    ///   handle of yours may hold that token): obtain again with it, or let the TTL expire.
    /// - from [`Lock::refresh`]: the TTL may or may not have been changed. The local deadline
    ///   was not extended; for a shorter TTL it was shortened, as if the refresh had applied.
    /// - from [`Lock::release`]: the lock may still be held until its TTL runs out.
    #[error("outcome unknown (the request may have been applied): {0}")]
    OutcomeUnknown(#[source] BackendError),
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
    /// The backend refused the request with a permanent error, at once and without retrying
    /// (keys across Redis Cluster slots, `WRONGTYPE`, `NOPERM`, `OOM`, ...): nothing changed.
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

    /// Whether the request may have taken effect at the store (directly or as the last cause
    /// of a deadline): [`LockError::OutcomeUnknown`].
    pub fn is_outcome_unknown(&self) -> bool {
        match self {
            LockError::OutcomeUnknown(_) => true,
            LockError::DeadlineExceeded { last } => last.is_outcome_unknown(),
            _ => false,
        }
    }

    /// The truthful error for a failed request: unknown outcome first, then transient
    /// (not applied), then permanent.
    fn from_backend(e: BackendError) -> LockError {
        if e.is_outcome_unknown() {
            LockError::OutcomeUnknown(e)
        } else if e.is_transient() {
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
        // Validate everything before the first round trip.
        let ttl = Ttl::new(ttl)?;
        let spec = Arc::new(LeaseSpec::lock(keys, options.fence_key.clone())?);
        let owner = Owner::new(options.token.clone().unwrap_or_else(random_token))?;
        let metadata = Metadata::new(options.metadata.as_deref().unwrap_or(""))?;
        if let Some(ar) = options.auto_renew {
            check_renew_interval(ar.interval, ttl.get())?;
        }
        if let Some(t) = options.operation_timeout {
            check_operation_timeout(t)?;
        }
        self.backend.check_spec(&spec).map_err(LockError::Refused)?;
        let clock = Clock::new();
        let start = clock.now();
        let wait = options.wait.unwrap_or(ttl.get());
        // Jittered per acquisition, so waiters that saw the same release spread out.
        let mut schedule =
            ObtainSchedule::new(options.retry.jittered_sequence(random_u64()), start + wait);
        let req = AcquireRequest {
            spec: Arc::clone(&spec),
            owner: owner.clone(),
            ttl,
            metadata: metadata.clone(),
        };
        // Whether an attempt's outcome is unknown and no later answer settled it: the lock may
        // be held under our token, and only a later attempt (which takes it over) or a
        // cleanup can tell.
        let mut unknown = false;
        let private_token = options.token.is_none();
        let mut guard = ObtainGuard {
            backend: Arc::clone(&self.backend),
            spec: Arc::clone(&spec),
            owner: owner.clone(),
            bound: ttl.get(),
            armed: false,
        };
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
            // Dropped from here on (the caller gave up on the obtain), the attempt may win.
            guard.armed = private_token;
            let attempt = tokio::time::timeout(bound, self.backend.acquire(&req)).await;
            let last = match attempt {
                Ok(Ok(AcquireOutcome::Acquired { token })) => {
                    guard.armed = false;
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
                        private_token,
                    );
                    tracing::debug!(keys = ?lock.keys(), fence_token = ?token, "lock obtained");
                    return Ok(lock);
                }
                Ok(Ok(AcquireOutcome::Held { holder, .. })) => {
                    // An answer: whatever an earlier unanswered attempt did has been settled
                    // (had it won, this attempt, with the same token, would have taken over).
                    unknown = false;
                    LockError::NotObtained { holder }
                }
                Ok(Ok(_)) => {
                    unknown = true;
                    LockError::from_backend(BackendError::Protocol(
                        "unknown acquire outcome".into(),
                    ))
                }
                Ok(Err(e)) => {
                    unknown |= e.is_outcome_unknown();
                    if !e.is_transient() {
                        // Permanent: refused at once, never retried.
                        guard.armed = private_token && unknown;
                        return Err(Self::give_up(unknown, LockError::from_backend(e)));
                    }
                    LockError::from_backend(e)
                }
                Err(_) => {
                    // The attempt may have won at the server: the next attempt with the same
                    // token takes it over; if there is none, clean up.
                    unknown = true;
                    LockError::OutcomeUnknown(BackendError::Timeout(bound))
                }
            };
            guard.armed = private_token && unknown;
            match schedule.after_failure(clock.now()) {
                NextAttempt::At(t) => tokio::time::sleep_until(clock.to_tokio(t)).await,
                NextAttempt::DeadlineExceeded => {
                    let last = Self::give_up(unknown, last);
                    return Err(LockError::DeadlineExceeded {
                        last: Box::new(last),
                    });
                }
                _ => return Err(Self::give_up(unknown, last)),
            }
        }
    }

    /// The error an obtain ends with. After an attempt with an unknown outcome that no later
    /// answer settled, it is [`LockError::OutcomeUnknown`] (never "unavailable" or "not
    /// obtained": the lock may be ours); the obtain's guard then cleans up with our token —
    /// only when the token was generated for this obtain: a caller-chosen token may also be
    /// held by another handle of the caller's (reentrancy), whose lock a cleanup would delete.
    fn give_up(unknown: bool, last: LockError) -> LockError {
        if !unknown || last.is_outcome_unknown() {
            return last;
        }
        LockError::OutcomeUnknown(BackendError::OutcomeUnknown(
            format!("an earlier attempt got no answer, and no later answer settled it ({last}); cleanup started").into(),
        ))
    }
}

/// A compare-and-delete of `owner`'s value on every key of `spec` (not term-scoped).
fn release_request(spec: &Arc<LeaseSpec>, owner: &Owner) -> ReleaseRequest {
    ReleaseRequest {
        spec: Arc::clone(spec),
        owner: owner.clone(),
        term: None,
    }
}

/// Releases in the background, best effort, each attempt bounded by `bound` (the lock's
/// operation bound: a release answered later than one TTL is moot, the key has expired).
fn spawn_release<B: LeaseBackend>(backend: Arc<B>, req: ReleaseRequest, bound: Duration) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            match tokio::time::timeout(bound, backend.release(&req)).await {
                Ok(Ok(outcome)) => tracing::debug!(keys = ?req.spec.keys(), ?outcome, "background release"),
                Ok(Err(e)) => tracing::warn!(keys = ?req.spec.keys(), error = %e, "background release failed; the lock expires with its TTL"),
                Err(_) => tracing::warn!(keys = ?req.spec.keys(), "background release timed out; the lock expires with its TTL"),
            }
        });
    } else {
        tracing::warn!(keys = ?req.spec.keys(), "no tokio runtime to release the lock; it expires with its TTL");
    }
}

/// Cleans up after an obtain that is dropped (cancelled) while an attempt is in flight or after
/// an attempt whose outcome is unknown: the lock may be held under the obtain's own token, and
/// nobody else will ever release it before its TTL. Armed only for a generated token.
struct ObtainGuard<B: LeaseBackend> {
    backend: Arc<B>,
    spec: Arc<LeaseSpec>,
    owner: Owner,
    bound: Duration,
    armed: bool,
}

impl<B: LeaseBackend> Drop for ObtainGuard<B> {
    fn drop(&mut self) {
        if self.armed {
            spawn_release(
                Arc::clone(&self.backend),
                release_request(&self.spec, &self.owner),
                self.bound,
            );
        }
    }
}

#[derive(Debug)]
struct Shared {
    /// The local deadline (tokio clock) of the lease: never later than what the store was last
    /// told (by the obtain, an auto-renewal or an explicit refresh).
    valid_until: Mutex<tokio::time::Instant>,
    /// The auto-renewal machine, when auto-renewing: a refresh moves its deadline too.
    renewal: Mutex<Option<HeldLease>>,
    /// One TTL-changing round trip at a time (auto-renewal and explicit refresh): the replies
    /// then arrive in the order the store applied the requests, so the last reply tells what
    /// the store was last told.
    turn: tokio::sync::Mutex<()>,
    /// Wakes the deadline watch (or the renewer) when a refresh moved the deadline.
    moved: tokio::sync::Notify,
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

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn valid_until(&self) -> tokio::time::Instant {
        *locked(&self.valid_until)
    }

    /// Sets the deadline to exactly `until` (the store was told so, or may have been), in the
    /// renewal machine as well, and wakes whoever sleeps towards the old one.
    fn set_deadline(&self, clock: Clock, until: tokio::time::Instant) {
        *locked(&self.valid_until) = until;
        if let Some(lease) = locked(&self.renewal).as_mut() {
            lease.set_valid_until(clock.now(), clock.to_core(until));
        }
        self.moved.notify_waiters();
    }
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
        let timing = LeaseTiming {
            ttl,
            renew_interval: auto_renew.map_or(ttl.get(), |ar| ar.interval),
            operation_timeout,
            margin: backend.validity_margin(ttl),
        };
        let renewal = auto_renew.map(|_| HeldLease::new(timing, fence_token, sent, clock.now()));
        let shared = Arc::new(Shared {
            valid_until: Mutex::new(clock.to_tokio(timing.valid_until(sent))),
            renewal: Mutex::new(renewal),
            turn: tokio::sync::Mutex::new(()),
            moved: tokio::sync::Notify::new(),
            lost: CancellationToken::new(),
            released: AtomicBool::new(false),
            watching: AtomicBool::new(false),
            private_token,
        });
        // The loss signal also fires at the deadline if nothing extends the lock.
        // Without auto-renewal, the deadline watch that fires the loss signal is started
        // lazily, on the first `lost()` call: a lock nobody watches costs no task.
        let renewer = auto_renew.map(|_| {
            tokio::spawn(auto_renew_task(
                Arc::clone(&backend),
                RenewRequest {
                    spec: Arc::clone(&spec),
                    owner: owner.clone(),
                    ttl,
                },
                timing,
                clock,
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

    /// The local deadline: the send time of the last obtain/renewal/refresh the store
    /// answered, plus its TTL (minus the backend's drift margin). It never exceeds what the
    /// store was last told: a refresh to a shorter TTL shortens it, even when its outcome is
    /// unknown.
    pub fn valid_until(&self) -> tokio::time::Instant {
        self.shared.valid_until()
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

    /// The bound of one round trip of this lock: the operation timeout, else one TTL.
    fn bound(&self) -> Duration {
        self.operation_timeout.unwrap_or(self.ttl.get())
    }

    /// The remaining TTL at the backend: the minimum over the keys, zero when not held.
    pub async fn ttl(&self) -> Result<Duration, LockError> {
        let bound = self.bound();
        match tokio::time::timeout(bound, self.backend.remaining(&self.spec, &self.owner)).await {
            Ok(Ok(r)) => Ok(r.unwrap_or(Duration::ZERO)),
            // A read changes nothing: its failures are "unavailable" or "refused".
            Ok(Err(e)) if !e.is_transient() => Err(LockError::Refused(e)),
            Ok(Err(e)) => Err(LockError::Unavailable(e)),
            Err(_) => Err(LockError::Unavailable(BackendError::Timeout(bound))),
        }
    }

    /// Extends the lock to `ttl` from now. A lost lock is terminal ([`LockError::NotHeld`], at
    /// once, without a round trip) — and a lock past its local deadline is lost, even if the
    /// loss signal has not fired yet; a reply arriving after the deadline does not revive it.
    /// Transient errors are retried per the lock's retry strategy, while the deadline allows.
    ///
    /// A refresh and the auto-renewal never run at once, and the local deadline becomes what
    /// this refresh told the store (it may shorten it). If no attempt was answered and one may
    /// have been applied, the result is [`LockError::OutcomeUnknown`] and the deadline is not
    /// extended — for a shorter `ttl` it is shortened, as if the refresh had applied.
    pub async fn refresh(&self, ttl: Duration) -> Result<(), LockError> {
        let ttl = Ttl::new(ttl)?;
        let req = RenewRequest {
            spec: Arc::clone(&self.spec),
            owner: self.owner.clone(),
            ttl,
        };
        let margin = self.backend.validity_margin(ttl);
        let mut seq = self.retry.jittered_sequence(random_u64());
        let mut unknown = false;
        loop {
            let turn = self.shared.turn.lock().await;
            // Past the local deadline the lease has lapsed, even if the loss watcher has not
            // run yet (a stalled thread): it must never be extended, only re-obtained.
            if !self.held() {
                self.shared.lost.cancel();
                return Err(LockError::NotHeld);
            }
            let sent = self.clock.now();
            let told = self.clock.to_tokio(sent + ttl.get().saturating_sub(margin));
            // From the moment it is sent, the store may apply it: never believe longer than
            // `told`, even if this call is cancelled or gets no answer.
            if told < self.valid_until() {
                self.shared.set_deadline(self.clock, told);
            }
            let remaining = self
                .valid_until()
                .saturating_duration_since(tokio::time::Instant::now());
            let mut bound = remaining.max(Duration::from_millis(1));
            if let Some(cap) = self.operation_timeout {
                bound = bound.min(cap);
            }
            let result = match tokio::time::timeout(bound, self.backend.renew(&req)).await {
                Ok(r) => r,
                Err(_) => Err(BackendError::Timeout(bound)),
            };
            let err = match result {
                Ok(RenewOutcome::Renewed) => {
                    // A reply at or after the deadline is too late: the loss may already have
                    // been signalled, and no reply revives a lapsed lease.
                    if !self.held() {
                        self.shared.lost.cancel();
                        return Err(LockError::NotHeld);
                    }
                    // An explicit refresh sets the deadline (it may shorten the TTL).
                    self.shared.set_deadline(self.clock, told);
                    return Ok(());
                }
                Ok(_) => {
                    self.shared.lost.cancel();
                    return Err(LockError::NotHeld);
                }
                Err(e) => {
                    unknown |= e.is_outcome_unknown();
                    if !e.is_transient() && !unknown {
                        return Err(LockError::from_backend(e));
                    }
                    if !e.is_transient() {
                        // Permanent, but an earlier attempt may have applied.
                        return Err(LockError::OutcomeUnknown(e));
                    }
                    e
                }
            };
            drop(turn);
            match seq.next_delay() {
                Some(d)
                    if tokio::time::Instant::now()
                        .checked_add(d)
                        .is_some_and(|at| at < self.valid_until()) =>
                {
                    tokio::time::sleep(d).await;
                }
                _ if unknown => {
                    return Err(if err.is_outcome_unknown() {
                        LockError::OutcomeUnknown(err)
                    } else {
                        LockError::OutcomeUnknown(BackendError::OutcomeUnknown(
                            format!("an earlier attempt got no answer ({err})").into(),
                        ))
                    });
                }
                _ => return Err(LockError::from_backend(err)),
            }
        }
    }

    /// Releases the lock (compare-and-delete: never deletes a lock someone else now holds).
    /// Returns [`LockError::NotHeld`] when it was no longer ours, and
    /// [`LockError::OutcomeUnknown`] when the release got no answer (the lock may still be
    /// held until its TTL runs out).
    pub async fn release(mut self) -> Result<(), LockError> {
        self.shared.released.store(true, Ordering::Release);
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
        let req = release_request(&self.spec, &self.owner);
        let bound = self.bound();
        let result = match tokio::time::timeout(bound, self.backend.release(&req)).await {
            Ok(r) => r,
            Err(_) => Err(BackendError::Timeout(bound)),
        };
        self.shared.lost.cancel();
        match result.map_err(LockError::from_backend)? {
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
                release_request(&self.spec, &self.owner),
                self.bound(),
            );
        }
        self.shared.lost.cancel();
    }
}

async fn deadline_watch(shared: Arc<Shared>) {
    loop {
        let moved = shared.moved.notified();
        tokio::pin!(moved);
        // Registered before the deadline is read: a refresh in between still wakes us.
        moved.as_mut().enable();
        let until = shared.valid_until();
        if tokio::time::Instant::now() >= until {
            shared.lost.cancel();
            return;
        }
        tokio::select! {
            _ = shared.lost.cancelled() => return,
            _ = moved => {}
            _ = tokio::time::sleep_until(until) => {}
        }
    }
}

/// Keeps an auto-renewed lock alive: drives the lock's [`HeldLease`] (kept in [`Shared`] so a
/// refresh can move its deadline), one round trip at a time.
async fn auto_renew_task<B: LeaseBackend>(
    backend: Arc<B>,
    req: RenewRequest,
    timing: LeaseTiming,
    clock: Clock,
    shared: Arc<Shared>,
) {
    loop {
        let moved = shared.moved.notified();
        tokio::pin!(moved);
        // Registered before the machine is read: a refresh in between still wakes us.
        moved.as_mut().enable();
        // The turn first: a refresh may have moved the deadline while we waited for it, and
        // the order (its deadline, whether it is due at all) must see that.
        let turn = shared.turn.lock().await;
        let order = {
            let mut lease = locked(&shared.renewal);
            lease.as_mut().and_then(|l| l.poll_renew(clock.now()))
        };
        if let Some(order) = order {
            // No std lock is held across the round trip; the turn keeps refreshes out.
            let reply =
                match tokio::time::timeout_at(clock.to_tokio(order.deadline), backend.renew(&req))
                    .await
                {
                    Ok(r) => r,
                    Err(_) => Err(BackendError::Timeout(order.deadline - order.sent_at)),
                };
            let renewed = matches!(reply, Ok(RenewOutcome::Renewed));
            let unknown = matches!(&reply, Err(e) if e.is_outcome_unknown());
            let now = clock.now();
            let told = timing.valid_until(order.sent_at);
            if let Some(lease) = locked(&shared.renewal).as_mut() {
                lease.handle_renew(now, reply);
                if lease.lost().is_none() && (renewed || (unknown && told < lease.valid_until())) {
                    // Renewed: exactly what the store was told now (an earlier refresh may
                    // have set a later deadline that this renewal replaced). Unknown: the store
                    // may have been told `told`, earlier than a refresh's longer deadline.
                    // Published before the turn passes to a refresh.
                    lease.set_valid_until(now, told);
                    *locked(&shared.valid_until) = clock.to_tokio(lease.valid_until());
                }
            }
        }
        drop(turn);
        let now = clock.now();
        let (events, next) = {
            let mut guard = locked(&shared.renewal);
            let Some(lease) = guard.as_mut() else { return };
            lease.handle_timeout(now);
            let mut events = Vec::new();
            while let Some(ev) = lease.poll_event() {
                events.push(ev);
            }
            (events, lease.poll_timeout())
        };
        for ev in events {
            match ev {
                // Published above, under the turn.
                LeaseEvent::Renewed { .. } => {}
                LeaseEvent::RenewFailed(e) if !e.is_transient() => {
                    tracing::error!(keys = ?req.spec.keys(), error = %e, "lock renewal refused (permanent error); giving the lock up");
                }
                LeaseEvent::RenewFailed(e) => {
                    tracing::warn!(keys = ?req.spec.keys(), error = %e, "lock renewal failed (tolerated until the deadline)");
                }
                LeaseEvent::Lost(reason) => {
                    tracing::warn!(keys = ?req.spec.keys(), ?reason, "lock lost");
                    shared.lost.cancel();
                    if reason == LossReason::DeadlineExpired && shared.private_token {
                        // A renewal sent before the deadline may still land and extend the key
                        // nobody holds any more: delete our own value, best effort. (Not after
                        // a permanent refusal: the release would be refused the same way.)
                        spawn_release(
                            Arc::clone(&backend),
                            release_request(&req.spec, &req.owner),
                            timing.ttl.get(),
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
        match next {
            Some(t) => {
                tokio::select! {
                    _ = shared.lost.cancelled() => return,
                    _ = moved => {}
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
