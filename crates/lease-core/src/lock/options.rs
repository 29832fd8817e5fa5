//! [`LockOptions`] and their validation into an [`ObtainPlan`].

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{AcquireRequest, LeaseSpec, Metadata, Owner};
use crate::config::{ConfigError, Ttl, check_operation_timeout, check_renew_interval};
use crate::retry::RetryStrategy;
use crate::rwlock::writer_mark;
use crate::token::Token;

/// Auto-renewal settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AutoRenew {
    /// How often to renew (must be at most TTL/2).
    pub interval: Duration,
}

/// Options of one obtain call.
///
/// ```
/// use std::time::Duration;
/// use lease_core::RetryStrategy;
/// use lease_core::lock::LockOptions;
/// let opts = LockOptions::new()
///     .retry(RetryStrategy::linear(Duration::from_millis(50))?)
///     .metadata("job 42")
///     .fence_key("{jobs}:fence")
///     .wait(Duration::from_secs(5));
/// # let _ = opts;
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct LockOptions {
    retry: RetryStrategy,
    metadata: Option<String>,
    owner: Option<String>,
    fence_key: Option<String>,
    wait: Option<Duration>,
    auto_renew: Option<AutoRenew>,
    operation_timeout: Option<Duration>,
    fence_floor: Option<Token>,
    max_hold: Option<Duration>,
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
    /// A caller-chosen owner (the ownership token stored in the keys; not a fencing token).
    /// Obtaining again with the same owner is reentrant (without counting: one release frees
    /// it). Default: a random one, private to this obtain.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
    /// Mint a fencing token from this counter key atomically with the obtain (on Redis
    /// Cluster it must share the lock keys' hash slot).
    pub fn fence_key(mut self, key: impl Into<String>) -> Self {
        self.fence_key = Some(key.into());
        self
    }
    /// The lowest token this obtain may be given, exclusive: the store mints above `floor`
    /// whatever its counter says. Pass the highest token your fenced resource has accepted
    /// (for example a Postgres mark, which is durable) so that a Redis that lost its counter
    /// cannot hand out a token the resource will refuse. Needs [`fence_key`](Self::fence_key).
    pub fn fence_floor(mut self, floor: Token) -> Self {
        self.fence_floor = Some(floor);
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
    /// A cap on the hold under auto-renewal: the lock ends no later than `max_hold` after it
    /// was obtained (dated, like everything else, from the instant the winning obtain was
    /// sent).
    ///
    /// The rule: no renewal or refresh tells the store an expiry (`sent + ttl`) past
    /// `obtained + max_hold`. Auto-renewal stops at the last renewal that fits; the lock then
    /// ends at its local deadline — at most one renew interval before the cap, never after it
    /// — the loss signal fires with [`LossReason::MaxHoldReached`] (never confused with a
    /// lost lock), and a lock with a generated token is released then, so a waiter gets it
    /// at once (with a caller-chosen [`owner`](Self::owner) it lapses with its TTL, which the
    /// rule keeps within the cap). A refresh past the cap is refused with
    /// [`LockError::MaxHoldReached`] before any round trip.
    ///
    /// Needs [`auto_renew`](Self::auto_renew), and at least one TTL (the obtain alone keeps
    /// the key one TTL): otherwise [`LockOptions::plan`] refuses it.
    ///
    /// [`LossReason::MaxHoldReached`]: crate::LossReason::MaxHoldReached
    /// [`LockError::MaxHoldReached`]: crate::lock::LockError::MaxHoldReached
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }
    /// A cap on each round trip (default: the remaining wait, or the remaining validity).
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = Some(timeout);
        self
    }

    /// Validates an obtain of `keys` for `ttl` with these options: every bad input is a
    /// [`ConfigError`] before any round trip. `fresh_token` makes the ownership token when
    /// none was chosen ([`LockOptions::owner`]); it is called at most once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::lock::LockOptions;
    /// let plan = LockOptions::new().plan(["a"], Duration::from_secs(1), || "t1".into())?;
    /// assert!(plan.private_token);
    /// assert_eq!(plan.request.owner.as_str(), "t1");
    /// let err = LockOptions::new()
    ///     .auto_renew(Duration::from_millis(900))
    ///     .plan(["a"], Duration::from_secs(1), || "t1".into());
    /// assert!(err.is_err(), "an auto-renew interval above TTL/2 is refused");
    /// # Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn plan<I, S>(
        &self,
        keys: I,
        ttl: Duration,
        fresh_token: impl FnOnce() -> String,
    ) -> Result<ObtainPlan, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.plan_with(keys, ttl, fresh_token)
    }

    /// [`LockOptions::plan`], with a `fresh_token` that makes the token as any text (a
    /// buffer on the stack, say: the token is copied once, into the plan's [`Owner`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::lock::LockOptions;
    /// let plan = LockOptions::new().plan_with(["a"], Duration::from_secs(1), || "t1")?;
    /// assert_eq!(plan.request.owner.as_str(), "t1");
    /// # Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn plan_with<I, S, T>(
        &self,
        keys: I,
        ttl: Duration,
        fresh_token: impl FnOnce() -> T,
    ) -> Result<ObtainPlan, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
        T: AsRef<str>,
    {
        let ttl = Ttl::new(ttl)?;
        let spec = Arc::new(LeaseSpec::lock(keys, self.fence_key.clone())?);
        if self.fence_floor.is_some() && spec.fence_key().is_none() {
            return Err(ConfigError::Invalid(
                "a fence floor needs a fence key (LockOptions::fence_key)".into(),
            ));
        }
        let owner = match &self.owner {
            Some(t) => Owner::new(t)?,
            None => Owner::new(fresh_token())?,
        };
        let metadata = Metadata::new(self.metadata.as_deref().unwrap_or(""))?;
        if let Some(ar) = self.auto_renew {
            check_renew_interval(ar.interval, ttl.get())?;
        }
        if let Some(t) = self.operation_timeout {
            check_operation_timeout(t)?;
        }
        if let Some(max_hold) = self.max_hold {
            if self.auto_renew.is_none() {
                return Err(ConfigError::Invalid(
                    "a max hold caps auto-renewal: it needs LockOptions::auto_renew".into(),
                ));
            }
            if max_hold < ttl.get() {
                return Err(ConfigError::Invalid(format!(
                    "a max hold of {max_hold:?} is shorter than the TTL {:?} (the obtain alone \
                     keeps the lock one TTL)",
                    ttl.get()
                )));
            }
        }
        let wait = self.wait.unwrap_or(ttl.get());
        Ok(ObtainPlan {
            request: AcquireRequest::new(spec, owner, ttl)
                .with_metadata(metadata)
                .with_floor(self.fence_floor)
                .with_writer_mark(writer_mark(&self.retry, wait, ttl.get())),
            wait,
            operation_timeout: self.operation_timeout,
            auto_renew: self.auto_renew,
            max_hold: self.max_hold,
            retry: self.retry.clone(),
            private_token: self.owner.is_none(),
        })
    }
}

impl LockOptions {
    /// Validates an obtain of one permit of semaphore `name` for `ttl` (see
    /// [`crate::semaphore`]): the plan's keys are the semaphore's
    /// ([`semaphore_spec`](crate::semaphore::semaphore_spec)), fenced by
    /// [`fence_key`](Self::fence_key) or else `<name>:fence`, so every permit gets a fencing
    /// token. Permits store no metadata: [`metadata`](Self::metadata) is refused. Every other
    /// option means what it means for a lock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::lock::LockOptions;
    /// let plan = LockOptions::new().plan_permit("{deploys}", Duration::from_secs(5), || "t".into())?;
    /// assert_eq!(plan.request.spec.fence_key(), Some("{deploys}:fence"));
    /// assert!(LockOptions::new().metadata("m").plan_permit("s", Duration::from_secs(5), || "t".into()).is_err());
    /// # Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn plan_permit(
        &self,
        name: &str,
        ttl: Duration,
        fresh_token: impl FnOnce() -> String,
    ) -> Result<ObtainPlan, ConfigError> {
        if self.metadata.as_deref().is_some_and(|m| !m.is_empty()) {
            return Err(ConfigError::Invalid(
                "a semaphore's permits store no metadata (LockOptions::metadata)".into(),
            ));
        }
        let spec = crate::semaphore::semaphore_spec(name, self.fence_key.clone())?;
        let mut options = self.clone();
        options.fence_key = spec.fence_key().map(str::to_owned);
        options.plan(spec.keys().iter().cloned(), ttl, fresh_token)
    }
}

impl LockOptions {
    /// Validates an obtain of fair lock `name` for `ttl` (see [`crate::fair`]): the plan's key
    /// is the lock's ([`fair_spec`](crate::fair::fair_spec)), fenced by
    /// [`fence_key`](Self::fence_key) or else `<name>:fence`, so every hold gets a fencing
    /// token; the waiter's place TTL is [`place_ttl`](crate::fair::place_ttl) of the retry
    /// strategy (its longest delay must not exceed the TTL) — none, so it never queues, when
    /// the obtain will not try again (no retries, or a zero [`wait`](Self::wait): a try-lock
    /// takes no place in the line). Every other option means what it means for a lock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::RetryStrategy;
    /// use lease_core::lock::LockOptions;
    /// let ms = Duration::from_millis;
    /// let opts = LockOptions::new().retry(RetryStrategy::linear(ms(50))?);
    /// let plan = opts.plan_fair("{jobs}", Duration::from_secs(5), || "t".into())?;
    /// assert_eq!(plan.obtain.request.spec.fence_key(), Some("{jobs}:fence"));
    /// assert_eq!(plan.place_ttl.map(|t| t.get()), Some(ms(150)));
    /// let slow = LockOptions::new().retry(RetryStrategy::linear(Duration::from_secs(9))?);
    /// assert!(slow.plan_fair("{jobs}", Duration::from_secs(5), || "t".into()).is_err());
    /// let once = opts.wait(Duration::ZERO).plan_fair("{jobs}", Duration::from_secs(5), || "t".into())?;
    /// assert_eq!(once.place_ttl, None, "a try-lock never queues");
    /// # Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn plan_fair(
        &self,
        name: &str,
        ttl: Duration,
        fresh_token: impl FnOnce() -> String,
    ) -> Result<crate::fair::FairPlan, ConfigError> {
        let spec = crate::fair::fair_spec(name, self.fence_key.clone())?;
        let mut place_ttl = crate::fair::place_ttl(&self.retry, ttl)?;
        let mut options = self.clone();
        options.fence_key = spec.fence_key().map(str::to_owned);
        let obtain = options.plan(spec.keys().iter().cloned(), ttl, fresh_token)?;
        if obtain.wait.is_zero() {
            // No attempt after the first: a place would only hold back those behind it.
            place_ttl = None;
        }
        Ok(crate::fair::FairPlan { obtain, place_ttl })
    }

    /// Validates an obtain of a reader's hold of the read-write lock on `key` for `ttl` (see
    /// [`crate::rwlock`]): one key, fenced by [`fence_key`](Self::fence_key) when given (give
    /// the writers the same one: readers' and writers' tokens come from one counter). Readers
    /// store no metadata: [`metadata`](Self::metadata) is refused. Every other option means
    /// what it means for a lock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::lock::LockOptions;
    /// let plan = LockOptions::new().fence_key("doc:fence").plan_shared("doc", Duration::from_secs(5), || "t".into())?;
    /// assert_eq!(plan.request.spec.keys(), ["doc"]);
    /// assert!(LockOptions::new().metadata("m").plan_shared("doc", Duration::from_secs(5), || "t".into()).is_err());
    /// # Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn plan_shared(
        &self,
        key: &str,
        ttl: Duration,
        fresh_token: impl FnOnce() -> String,
    ) -> Result<ObtainPlan, ConfigError> {
        if self.metadata.as_deref().is_some_and(|m| !m.is_empty()) {
            return Err(ConfigError::Invalid(
                "a read-write lock's readers store no metadata (LockOptions::metadata)".into(),
            ));
        }
        self.plan([key], ttl, fresh_token)
    }
}

/// A validated obtain: what to send and the bounds of the call. Made by [`LockOptions::plan`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ObtainPlan {
    /// The acquire request every attempt sends.
    pub request: AcquireRequest,
    /// How long after the first attempt a new attempt may still start.
    pub wait: Duration,
    /// The caller's cap on each round trip.
    pub operation_timeout: Option<Duration>,
    /// Auto-renewal, when asked for.
    pub auto_renew: Option<AutoRenew>,
    /// The cap on the hold ([`LockOptions::max_hold`]), when asked for: validated (with
    /// auto-renewal, at least one TTL).
    pub max_hold: Option<Duration>,
    /// The retry strategy while the lock is held by someone else or the store is unavailable.
    pub retry: RetryStrategy,
    /// Whether the ownership token was generated for this obtain alone: only then may a
    /// compare-and-delete with it clean up after an unknown outcome or a loss (a caller-chosen
    /// token may also be held by another of the caller's handles).
    pub private_token: bool,
}

impl ObtainPlan {
    /// The bound of each obtain attempt: the operation timeout, else one TTL, and never more
    /// than one TTL (a grant heard later than that is worthless).
    pub fn attempt_bound(&self) -> Duration {
        super::release_bound(self.request.ttl, self.operation_timeout)
    }

    /// The bound of the cleanup release after an abandoned or unknown obtain: the lock's one
    /// rule, [`super::release_bound`] (the same figure as an attempt's bound).
    pub fn release_bound(&self) -> Duration {
        super::release_bound(self.request.ttl, self.operation_timeout)
    }
}
