//! Counting semaphores: at most `N` holders of one name at once, each holding a **permit** that
//! is a lease of its own (its own owner, TTL, renewals and fencing token).
//!
//! # The rule (what every backend's permit operations do)
//!
//! A semaphore named `S` lives in two keys, plus the usual fence keys:
//!
//! - `S:permits` — the current permits: each holder's owner with the instant its permit
//!   expires, **judged by the store's clock** (on Redis a sorted set, owner → expiry in ms of
//!   the server's `TIME`, read inside the script; a permit whose expiry has passed is no
//!   permit, and is removed by the next script that writes);
//! - `S:size` — the permit count `N` the current holders obtained with;
//! - `S:fence`, `S:fence:applied`, `S:fence:epoch` — the fence counter, mark and epoch, exactly
//!   as for a lock (the default fence key of a semaphore is `S:fence`).
//!
//! Every key of one semaphore must be in one Redis Cluster slot: give the name a hash tag
//! (`{deploys}`); a backend refuses a name that breaks it before any round trip
//! ([`LeaseBackend::check_semaphore`]).
//!
//! - **acquire** ([`LeaseBackend::acquire_permit`]): reads first, writes last. If some permit
//!   is current and the stored count differs from the request's,
//!   [`BackendError::PermitsMismatch`] (nothing changed). If the owner holds no current permit
//!   and `N` permits are current, [`AcquireOutcome::Held`] with the remaining TTL of the permit
//!   that expires first (`holder` is `None`). Otherwise — a free permit, or the owner's own
//!   (taken over, like a lock's same-owner takeover) — a token is minted as for a lock
//!   (counter healing from the mark and the floor), expired permits are removed, the owner's
//!   permit is set to expire one TTL from now, the count is stored, and both keys are set to
//!   expire with the last permit (so an abandoned semaphore leaves nothing behind).
//! - **renew** ([`LeaseBackend::renew_permit`]): if the owner's permit is current, it expires
//!   one TTL from now; otherwise nothing changes ("not held").
//! - **release** ([`LeaseBackend::release_permit`]): removes expired permits and the owner's;
//!   when the owner's was current it is "released" and one waiter is woken (the same release
//!   notice a lock's release sends, on the channel of `S:permits`). When no permit is left,
//!   both keys are deleted, and the next obtain may store another count.
//! - **remaining** ([`LeaseBackend::permit_remaining`]) and **inspect**
//!   ([`LeaseBackend::inspect_semaphore`]) only read.
//!
//! The count is fixed for as long as any permit is current: an obtain with another count is
//! refused at its first round trip ([`BackendError::PermitsMismatch`], permanent, so the obtain
//! ends at once). A count outside `1..=`[`MAX_PERMITS`] is refused before any round trip
//! ([`PermitCount::new`]).
//!
//! # Guarantees
//!
//! The store never holds more than `N` current permits of one semaphore: each acquire counts
//! the current permits and adds one atomically. Each holder's local deadline follows the
//! lock rules ([`crate::lock::HeldLock`]: dated from the send, never later than what the store
//! was told), so a holder that believes it holds a permit holds a current one — under the same
//! assumptions as a lock (clocks that drift by at most the backend's margin, a store that does
//! not lose its keys). A crashed holder's permit expires with its TTL; nobody has to release it.
//!
//! # Fenced writes: the resource-side rule of "at most N"
//!
//! The lock's fence rule (`token >= mark`, the mark advanced by each write) admits only the
//! newest holder, so it cannot serve a resource that must admit all `N` current holders. A
//! **permit-fenced write** ([`PermitFencing`]) is checked instead, atomically with the write,
//! in this order:
//!
//! 1. **the permit is current**: the writer's owner is in `S:permits` with an expiry above
//!    the store's clock (on Redis the server's `TIME`, read inside the script). Otherwise
//!    nothing is written: [`PermitWriteOutcome::NotCurrent`]. Since the store never holds more
//!    than `N` current permits, the resource never accepts writes from more than `N` owners
//!    at one instant of the store's clock, however late a paused holder's write arrives.
//! 2. **the token is not below the owner's mark**, `<mark key>:<owner>` (for the default
//!    fence key `S:fence:applied:<owner>`, [`permit_mark_key`]): the lock's rule, per owner.
//!    It refuses an older permit of the same owner (a caller-chosen owner that obtained
//!    again, a takeover minting a newer token) once the newer one has written:
//!    [`PermitWriteOutcome::Stale`].
//! 3. the write is applied and the owner's mark set to the token, expiring with the
//!    semaphore's permits key (never before the writer's permit): the marks of owners that
//!    stop writing expire on their own, so they do not accumulate.
//!
//! A write without a reply is unknown, as every fenced write ([`BackendError::Timeout`],
//! [`Effect::Unknown`](crate::backend::Effect::Unknown)).
//!
//! # Driving
//!
//! A permit is obtained, renewed, refreshed and released by exactly the lock machines
//! ([`crate::lock::Obtain`], [`crate::lock::HeldLock`]) through [`PermitBackend`], a view of a
//! backend whose acquire, renew, release and remaining are the permit operations for one
//! count. `lease-tokio`'s `Semaphore` is that: a `Locker` over a `PermitBackend`.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{
    AcquireOutcome, AcquireRequest, BackendError, Fencing, LeaseBackend, LeaseInfo, LeaseSpec,
    Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest,
};
use crate::config::{ConfigError, Ttl};
use crate::notify::{ReleaseWatch, WatchRole};
use crate::preflight::StoreReport;
use crate::token::{FenceMark, Token};

/// The largest permit count of one semaphore.
pub const MAX_PERMITS: u32 = 10_000;

/// The suffix of a semaphore's permits key (`<name>:permits`).
pub const PERMITS_SUFFIX: &str = ":permits";
/// The suffix of a semaphore's count key (`<name>:size`).
pub const SIZE_SUFFIX: &str = ":size";
/// The suffix of a semaphore's default fence counter key (`<name>:fence`).
pub const FENCE_SUFFIX: &str = ":fence";

/// How many permits a semaphore has: `1..=`[`MAX_PERMITS`].
///
/// ```
/// use lease_core::semaphore::PermitCount;
/// assert_eq!(PermitCount::new(3)?.get(), 3);
/// assert!(PermitCount::new(0).is_err());
/// assert!(PermitCount::new(10_001).is_err());
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitCount(NonZeroU32);

impl PermitCount {
    /// Validates a count.
    pub fn new(n: u32) -> Result<PermitCount, ConfigError> {
        match NonZeroU32::new(n) {
            Some(n) if n.get() <= MAX_PERMITS => Ok(PermitCount(n)),
            _ => Err(ConfigError::Invalid(format!(
                "a semaphore's permit count must be in 1..={MAX_PERMITS}, got {n}"
            ))),
        }
    }

    /// The count.
    pub fn get(self) -> u32 {
        self.0.get()
    }
}

impl fmt::Display for PermitCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// The keys of semaphore `name`: the permits key and the count key.
///
/// ```
/// use lease_core::semaphore::semaphore_keys;
/// assert_eq!(semaphore_keys("{deploys}"), ["{deploys}:permits", "{deploys}:size"]);
/// ```
pub fn semaphore_keys(name: &str) -> [String; 2] {
    [
        format!("{name}{PERMITS_SUFFIX}"),
        format!("{name}{SIZE_SUFFIX}"),
    ]
}

/// The lease spec of semaphore `name` (its two keys), fenced by `fence` (default
/// `<name>:fence`). The name must not be empty.
///
/// ```
/// use lease_core::semaphore::semaphore_spec;
/// let spec = semaphore_spec("{deploys}", None)?;
/// assert_eq!(spec.keys(), ["{deploys}:permits", "{deploys}:size"]);
/// assert_eq!(spec.fence_key(), Some("{deploys}:fence"));
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
pub fn semaphore_spec(name: &str, fence: Option<String>) -> Result<LeaseSpec, ConfigError> {
    if name.is_empty() {
        return Err(ConfigError::Empty {
            what: "semaphore name",
        });
    }
    let fence = fence.unwrap_or_else(|| format!("{name}{FENCE_SUFFIX}"));
    LeaseSpec::lock(semaphore_keys(name), Some(fence))
}

/// The semaphore's name, from its spec (the permits key without its suffix).
pub fn semaphore_name(spec: &LeaseSpec) -> &str {
    let first = spec.keys().first().map_or("", String::as_str);
    first.strip_suffix(PERMITS_SUFFIX).unwrap_or(first)
}

/// Whether `spec` has the shape of a semaphore's (its permits key and its count key, in that
/// order). Backends refuse other specs with [`BackendError::Invalid`] before any round trip.
pub fn is_semaphore_spec(spec: &LeaseSpec) -> bool {
    match spec.keys() {
        [permits, size] => permits
            .strip_suffix(PERMITS_SUFFIX)
            .is_some_and(|name| size.strip_suffix(SIZE_SUFFIX) == Some(name)),
        _ => false,
    }
}

/// [`BackendError::Invalid`] unless `spec` is a semaphore's (see [`is_semaphore_spec`]).
pub fn check_semaphore_spec(spec: &LeaseSpec) -> Result<(), BackendError> {
    if is_semaphore_spec(spec) {
        Ok(())
    } else {
        Err(BackendError::Invalid(format!(
            "not a semaphore's keys (<name>:permits, <name>:size): {:?}",
            spec.keys()
        )))
    }
}

/// Obtain one permit: the acquire a lock would send, plus the permit count. The request's
/// metadata is not stored (permits carry none).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitRequest {
    /// The semaphore's keys ([`semaphore_spec`]), owner, TTL and token floor.
    pub acquire: AcquireRequest,
    /// The permit count this obtain expects the semaphore to have.
    pub permits: PermitCount,
}

impl PermitRequest {
    /// A permit of `acquire.spec`'s semaphore of `permits` permits.
    pub fn new(acquire: AcquireRequest, permits: PermitCount) -> PermitRequest {
        PermitRequest { acquire, permits }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        semaphore_name(&self.acquire.spec)
    }

    /// The owner.
    pub fn owner(&self) -> &Owner {
        &self.acquire.owner
    }

    /// The TTL.
    pub fn ttl(&self) -> Ttl {
        self.acquire.ttl
    }
}

/// One current permit, as [`LeaseBackend::inspect_semaphore`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitHolder {
    /// The holder's owner.
    pub owner: String,
    /// How long until its permit expires.
    pub remaining: Duration,
}

impl PermitHolder {
    /// A holder.
    pub fn new(owner: impl Into<String>, remaining: Duration) -> PermitHolder {
        PermitHolder {
            owner: owner.into(),
            remaining,
        }
    }
}

/// What [`LeaseBackend::inspect_semaphore`] found. An adapter builds it from
/// `SemaphoreInfo::default()` (the struct is `#[non_exhaustive]`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The stored permit count, while any permit is current.
    pub permits: Option<u32>,
    /// The current permits, the one that expires first first (ties by owner).
    pub holders: Vec<PermitHolder>,
    /// The fence counter: the latest token minted.
    pub counter: Option<Token>,
    /// The applied mark.
    pub mark: FenceMark,
}

/// A view of `B` whose lease operations are `B`'s permit operations for one permit count:
/// `acquire` is [`LeaseBackend::acquire_permit`], `renew` is [`LeaseBackend::renew_permit`]
/// (and a batch of renewals, `renew_many`, is [`LeaseBackend::renew_permit_many`]),
/// `release` is [`LeaseBackend::release_permit`], `remaining` is
/// [`LeaseBackend::permit_remaining`], `inspect` reads [`LeaseBackend::inspect_semaphore`]
/// (the holder whose permit expires first), and `check_spec` is
/// [`LeaseBackend::check_semaphore`]. Drivers run the lock machines over it, so a permit is
/// obtained, renewed and released with every rule of a lock.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lease_core::memory::{ManualClock, MemoryBackend};
/// use lease_core::semaphore::{PermitBackend, PermitCount, semaphore_spec};
/// use lease_core::{AcquireOutcome, AcquireRequest, Owner, Ttl};
///
/// let memory = Arc::new(MemoryBackend::new(ManualClock::new()));
/// let view = PermitBackend::new(Arc::clone(&memory), PermitCount::new(2)?);
/// let spec = Arc::new(semaphore_spec("jobs", None)?);
/// let ttl = Ttl::new(Duration::from_secs(10))?;
/// let ask = |o: &str| AcquireRequest::new(Arc::clone(&spec), Owner::new(o).unwrap(), ttl);
/// # tokio_free(async {
/// use lease_core::LeaseBackend;
/// assert!(matches!(view.acquire(&ask("a")).await?, AcquireOutcome::Acquired { .. }));
/// assert!(matches!(view.acquire(&ask("b")).await?, AcquireOutcome::Acquired { .. }));
/// assert!(matches!(view.acquire(&ask("c")).await?, AcquireOutcome::Held { .. }));
/// # Ok::<(), lease_core::BackendError>(())
/// # })?;
/// # fn tokio_free<F: std::future::Future>(f: F) -> F::Output {
/// #     let waker = std::task::Waker::noop();
/// #     let mut cx = std::task::Context::from_waker(&waker);
/// #     let mut f = std::pin::pin!(f);
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PermitBackend<B: ?Sized> {
    inner: Arc<B>,
    permits: PermitCount,
}

impl<B: ?Sized> PermitBackend<B> {
    /// The permit operations of `inner` for semaphores of `permits` permits.
    pub fn new(inner: Arc<B>, permits: PermitCount) -> PermitBackend<B> {
        PermitBackend { inner, permits }
    }

    /// The backend underneath.
    pub fn inner(&self) -> &Arc<B> {
        &self.inner
    }

    /// The permit count every acquire asks for.
    pub fn permits(&self) -> PermitCount {
        self.permits
    }
}

impl<B: ?Sized> Clone for PermitBackend<B> {
    fn clone(&self) -> Self {
        PermitBackend {
            inner: Arc::clone(&self.inner),
            permits: self.permits,
        }
    }
}

impl<B: fmt::Debug + ?Sized> fmt::Debug for PermitBackend<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitBackend")
            .field("inner", &&*self.inner)
            .field("permits", &self.permits)
            .finish()
    }
}

#[async_trait]
impl<B: LeaseBackend + ?Sized> LeaseBackend for PermitBackend<B> {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        let req = PermitRequest::new(req.clone(), self.permits);
        self.inner.acquire_permit(&req).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.inner.renew_permit(req).await
    }
    async fn renew_many(&self, reqs: &[&RenewRequest]) -> Vec<Result<RenewOutcome, BackendError>> {
        self.inner.renew_permit_many(reqs).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.inner.release_permit(req).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.inner.permit_remaining(spec, owner).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        let sem = self.inner.inspect_semaphore(spec).await?;
        let mut info = LeaseInfo::default();
        if let Some(first) = sem.holders.first() {
            info.holder = Some(first.owner.clone());
            info.remaining = Some(first.remaining);
        }
        info.counter = sem.counter;
        info.mark = sem.mark;
        Ok(info)
    }
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_semaphore(spec)
    }
    fn validity_margin(&self, ttl: Ttl) -> Duration {
        self.inner.validity_margin(ttl)
    }
    async fn preflight(&self) -> Result<StoreReport, BackendError> {
        self.inner.preflight().await
    }
    fn release_watch(&self, spec: &LeaseSpec, role: WatchRole) -> Option<ReleaseWatch> {
        self.inner.release_watch(spec, role)
    }
    fn check_semaphore(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_semaphore(spec)
    }
    async fn acquire_permit(&self, req: &PermitRequest) -> Result<AcquireOutcome, BackendError> {
        self.inner.acquire_permit(req).await
    }
    async fn renew_permit(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.inner.renew_permit(req).await
    }
    async fn renew_permit_many(
        &self,
        reqs: &[&RenewRequest],
    ) -> Vec<Result<RenewOutcome, BackendError>> {
        self.inner.renew_permit_many(reqs).await
    }
    async fn release_permit(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.inner.release_permit(req).await
    }
    async fn permit_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.inner.permit_remaining(spec, owner).await
    }
    async fn inspect_semaphore(&self, spec: &LeaseSpec) -> Result<SemaphoreInfo, BackendError> {
        self.inner.inspect_semaphore(spec).await
    }
}

impl<B: Fencing + ?Sized> Fencing for PermitBackend<B> {
    type Fencer = B::Fencer;
    fn fencer(&self, mark_key: &str, token: Token) -> B::Fencer {
        self.inner.fencer(mark_key, token)
    }
}

/// The mark of `owner`'s permit-fenced writes to semaphore `spec` (`<mark key>:<owner>`, for
/// the default fence key `<name>:fence:applied:<owner>`), `None` when the spec has no fence
/// key. It shares the semaphore's hash tag, so it is in the semaphore's Cluster slot.
///
/// ```
/// use lease_core::Owner;
/// use lease_core::semaphore::{permit_mark_key, semaphore_spec};
/// let spec = semaphore_spec("{deploys}", None)?;
/// let owner = Owner::new("worker-1").unwrap();
/// assert_eq!(
///     permit_mark_key(&spec, &owner).as_deref(),
///     Some("{deploys}:fence:applied:worker-1")
/// );
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
pub fn permit_mark_key(spec: &LeaseSpec, owner: &Owner) -> Option<String> {
    spec.mark_key()
        .map(|mark| format!("{mark}:{}", owner.as_str()))
}

/// The permits key of semaphore `spec` (`<name>:permits`), after checking the spec is a
/// semaphore's.
pub fn permits_key(spec: &LeaseSpec) -> Result<&str, BackendError> {
    check_semaphore_spec(spec)?;
    Ok(spec.keys().first().map_or("", String::as_str))
}

/// The result of a permit-fenced write (see the module docs, "Fenced writes").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a write that was not applied means this permit must stop writing"]
pub enum PermitWriteOutcome {
    /// The permit was current and the token not below the owner's mark: the write was
    /// applied and the owner's mark set to the token.
    Applied,
    /// The owner holds no current permit (expired, released, or never obtained): nothing was
    /// written, whatever the token.
    NotCurrent,
    /// The permit is current but the token is below the owner's mark (a newer permit of the
    /// same owner has written): nothing was written.
    Stale {
        /// The owner's mark that refused the write.
        mark: FenceMark,
    },
}

impl PermitWriteOutcome {
    /// Whether the write was applied.
    pub fn is_applied(self) -> bool {
        matches!(self, PermitWriteOutcome::Applied)
    }
}

/// A backend that can fence writes by a permit being current (the resource-side rule of "at
/// most N": see the module docs, "Fenced writes").
pub trait PermitFencing {
    /// The fencer handed to a permit: binds its semaphore, owner and token to the store.
    type PermitFencer: Clone + Send + Sync + 'static;
    /// A fencer for writes of `owner`'s permit of semaphore `spec` under `token`, against the
    /// owner's mark ([`permit_mark_key`]). `None` when `spec` is not a fenced semaphore's.
    fn permit_fencer(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Option<Self::PermitFencer>;
}

impl<B: PermitFencing + ?Sized> PermitFencing for PermitBackend<B> {
    type PermitFencer = B::PermitFencer;
    fn permit_fencer(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Option<B::PermitFencer> {
        self.inner.permit_fencer(spec, owner, token)
    }
}
