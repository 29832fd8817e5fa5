//! Fair locks: one holder at a time, handed over in **FIFO order across processes**.
//!
//! # The rule (what every backend's fair operations do)
//!
//! A fair lock named `F` lives in three keys, plus the usual fence keys:
//!
//! - `F` — the lock itself: the holder's owner (and metadata) with a TTL, exactly as a plain
//!   lock's key, so renewals, `remaining` and `inspect` are a plain lock's;
//! - `F:queue` — the waiters in arrival order (on Redis a sorted set: owner → arrival
//!   sequence, one above the last entry's);
//! - `F:places` — each waiter's **place**: owner → the instant its place expires, judged by
//!   the store's clock (on Redis a sorted set, owner → expiry in ms of the server's `TIME`);
//! - `F:fence`, `F:fence:applied`, `F:fence:epoch` — the fence counter, mark and epoch (the
//!   default fence key of a fair lock is `F:fence`: every hold mints a token).
//!
//! Every key of one fair lock must be in one Redis Cluster slot: give the name a hash tag
//! (`{jobs}`); a backend refuses a name that breaks it before any round trip
//! ([`LeaseBackend::check_fair`]).
//!
//! # Bounded work per call
//!
//! No operation reads the whole queue: each costs O(log n) in its length n on Redis. Every
//! operation first drops **at most [`PRUNE_PER_CALL`] entries**: the places that have
//! expired, earliest expiry first (ties by owner), then, from the queue's front, the entries
//! without a live place, until it finds the first queued waiter with a live place: the
//! **head**. When the budget runs out before a head is found (more than [`PRUNE_PER_CALL`]
//! waiters crashed at once), the head is unknown for this operation: a free lock is granted
//! to nobody and nobody is woken; the next operations drop the rest (every waiter's heartbeat
//! is one), so crashed waiters are still skipped, a few heartbeats later.
//!
//! The queue holds at most [`MAX_WAITERS`] live places: an attempt that would queue a new
//! waiter past it is refused with [`BackendError::QueueFull`] (nothing changed); a waiter
//! already queued keeps heartbeating.
//!
//! - **acquire** ([`LeaseBackend::acquire_fair`]): the owner gets the lock when `F` holds it
//!   already (a takeover, like a lock's), or when `F` is free and the queue is empty or the
//!   owner is its head: a token is minted as for a lock, `F` is set for one TTL and the owner's
//!   place is removed. Otherwise nothing is granted ([`AcquireOutcome::Held`], the holder —
//!   or, while `F` is free, the head it is kept for), and when the request asks for a place
//!   ([`FairRequest::place_ttl`]) the owner is queued at the back if it has no place, and its
//!   place is set to expire one place TTL from now either way: **each attempt is a
//!   heartbeat**.
//! - **release** ([`LeaseBackend::release_fair`]): when `F` holds the owner (and the release's
//!   term, when given, is the counter, as for a lock), `F` is deleted; the owner's place, if
//!   any, is removed. When `F` is then free and the head is new (the lock was released, or the
//!   head left or expired), the head alone is woken ([`wake_key`]: one channel per waiter).
//! - **leave** ([`LeaseBackend::leave_fair`]): a waiter that gives up removes its place and
//!   never touches `F` (it may be a caller-chosen owner another handle holds); the new head is
//!   woken as after a release.
//! - **inspect** ([`LeaseBackend::inspect_fair`]) only reads: the holder of `F` and its
//!   remaining TTL, the live waiters in queue order (a waiter whose place expired is not
//!   shown) each with the time its place has left — at most [`INSPECT_SHOWN`] of them, found
//!   among the first [`INSPECT_SCAN`] queue entries — the count of all live waiters, and the
//!   fence counter and mark.
//!
//! The queue and places keys expire with the last place, so an abandoned queue leaves nothing.
//!
//! # Guarantees
//!
//! - **One holder**: `F` is a lock's key; a fair acquire grants only when it is free or ours.
//! - **FIFO among live waiters**: places are never reordered; a free lock goes only to the
//!   head. A waiter whose place expired is skipped, and when it comes back it queues again at
//!   the back (even when its entry was not dropped yet).
//! - **The heartbeat bound**: a waiter's place lives [`PLACE_HEARTBEATS`] times the longest
//!   delay of its retry strategy ([`place_ttl`]). Each attempt refreshes it, and a waiter
//!   attempts at least once per longest delay (the fair view never lets it sleep until the
//!   holder's expiry), so a live waiter keeps its place with two heartbeats to spare, and a
//!   crashed one blocks a free lock at most one place TTL (after which the next waiter gets it
//!   at its next heartbeat or wake; when k > [`PRUNE_PER_CALL`] waiters crashed at once,
//!   ⌈k / [`PRUNE_PER_CALL`]⌉ operations after their places lapsed).
//! - **No herd**: a release wakes the next waiter only; no other waiter attempts because of it.
//!
//! A plain `obtain(F)` is not fair: it sees only `F`, so it takes a free `F` past the queue
//! (the waiters then see it as the holder and keep their places), and its release wakes no fair
//! waiter (the head gets the lock at its next heartbeat). Use one kind of lock per name.
//!
//! # Driving
//!
//! A fair hold is obtained, renewed and released by exactly the lock machines
//! ([`crate::lock::Obtain`], [`crate::lock::HeldLock`]) through [`FairBackend`], the view of a
//! backend whose acquire and release are its fair operations, made for one obtain (it carries
//! the waiter's place TTL and its wake channel). A driver that ends an obtain without the lock
//! (not obtained, timed out, cancelled) sends one bounded, best-effort
//! [`LeaseBackend::leave_fair`] ([`leaves_on_give_up`]); a place left behind expires anyway.

use std::fmt;
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
use crate::retry::RetryStrategy;
use crate::semaphore::{FENCE_SUFFIX, PermitHolder};
use crate::token::{FenceMark, Token};

/// The suffix of a fair lock's queue key (`<name>:queue`).
pub const QUEUE_SUFFIX: &str = ":queue";
/// The suffix of a fair lock's places key (`<name>:places`).
pub const PLACES_SUFFIX: &str = ":places";
/// What a waiter's wake key adds to the lock's name (`<name>:wake:<owner>`).
pub const WAKE_INFIX: &str = ":wake:";
/// How many of its longest retry delays a waiter's place outlives its last heartbeat.
pub const PLACE_HEARTBEATS: u32 = 3;
/// The bound on a fair lock's queue: live waiters at most. A new waiter past it is refused
/// with [`BackendError::QueueFull`]. (`FAIR_MAX` in `lease-redis`'s `fair.lua`.)
pub const MAX_WAITERS: usize = 10_000;
/// The entries (expired places, then dead entries at the queue's front) one fair operation
/// drops at most: its work is bounded whatever the queue's length. (`FAIR_PRUNE` in
/// `fair.lua`.)
pub const PRUNE_PER_CALL: usize = 64;
/// The live waiters an inspection lists at most ([`FairInfo::waiters`]; `FAIR_SHOWN`).
pub const INSPECT_SHOWN: usize = 32;
/// The queue entries an inspection reads at most, from the front (`FAIR_SCAN`).
pub const INSPECT_SCAN: usize = 128;

/// The queue and places keys of fair lock `name`.
///
/// ```
/// use lease_core::fair::fair_keys;
/// assert_eq!(fair_keys("{jobs}"), ["{jobs}:queue", "{jobs}:places"]);
/// ```
pub fn fair_keys(name: &str) -> [String; 2] {
    [
        format!("{name}{QUEUE_SUFFIX}"),
        format!("{name}{PLACES_SUFFIX}"),
    ]
}

/// The key whose release notices wake `owner` when it becomes the head of fair lock `name`
/// (a backend derives its notice channel from it as from a lock's key).
///
/// ```
/// use lease_core::fair::wake_key;
/// assert_eq!(wake_key("{jobs}", "w1"), "{jobs}:wake:w1");
/// ```
pub fn wake_key(name: &str, owner: &str) -> String {
    format!("{name}{WAKE_INFIX}{owner}")
}

/// The lease spec of fair lock `name`: its one lock key, fenced by `fence` (default
/// `<name>:fence`). The name must not be empty.
///
/// ```
/// use lease_core::fair::fair_spec;
/// let spec = fair_spec("{jobs}", None)?;
/// assert_eq!(spec.keys(), ["{jobs}"]);
/// assert_eq!(spec.fence_key(), Some("{jobs}:fence"));
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
pub fn fair_spec(name: &str, fence: Option<String>) -> Result<LeaseSpec, ConfigError> {
    if name.is_empty() {
        return Err(ConfigError::Empty {
            what: "fair lock name",
        });
    }
    let fence = fence.unwrap_or_else(|| format!("{name}{FENCE_SUFFIX}"));
    LeaseSpec::lock([name.to_owned()], Some(fence))
}

/// The fair lock's name, from its spec (its one key).
pub fn fair_name(spec: &LeaseSpec) -> &str {
    spec.keys().first().map_or("", String::as_str)
}

/// [`BackendError::Invalid`] unless `spec` has exactly one key (a fair lock's).
pub fn check_fair_spec(spec: &LeaseSpec) -> Result<(), BackendError> {
    match spec.keys() {
        [_] => Ok(()),
        keys => Err(BackendError::Invalid(format!(
            "a fair lock has exactly one key, got {keys:?}"
        ))),
    }
}

/// How long a waiter's place lives after each heartbeat: [`PLACE_HEARTBEATS`] times the
/// longest delay of `retry` ([`RetryStrategy::longest_delay`]); `None` when `retry` never
/// retries (a single attempt takes a free lock with an empty queue, and never queues).
///
/// Refused before any round trip: a longest delay above the TTL (a waiter that heartbeats
/// less often than a holder renews would hold up a free lock longer than a crashed holder
/// does).
///
/// ```
/// use std::time::Duration;
/// use lease_core::RetryStrategy;
/// use lease_core::fair::place_ttl;
/// let ms = Duration::from_millis;
/// let linear = RetryStrategy::linear(ms(100))?;
/// assert_eq!(place_ttl(&linear, ms(5_000))?.map(|t| t.get()), Some(ms(300)));
/// assert_eq!(place_ttl(&RetryStrategy::none(), ms(5_000))?, None);
/// assert!(place_ttl(&RetryStrategy::linear(ms(9_000))?, ms(5_000)).is_err());
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
pub fn place_ttl(retry: &RetryStrategy, ttl: Duration) -> Result<Option<Ttl>, ConfigError> {
    let Some(longest) = retry.longest_delay() else {
        return Ok(None);
    };
    if longest > ttl {
        return Err(ConfigError::Invalid(format!(
            "a fair lock's waiter heartbeats with each retry: the longest retry delay \
             {longest:?} must not exceed the TTL {ttl:?}"
        )));
    }
    // Whole milliseconds, rounded up (the store keeps places in ms).
    let ms = longest
        .saturating_mul(PLACE_HEARTBEATS)
        .as_nanos()
        .div_ceil(1_000_000);
    let place = Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX));
    Ttl::new(place).map(Some)
}

/// Whether an obtain that ended with `outcome` must leave the queue
/// ([`LeaseBackend::leave_fair`]): every end without the lock, and an obtain abandoned before
/// its end (`None`). Best-effort and bounded like a cleanup release; a place left behind
/// expires after its place TTL.
pub fn leaves_on_give_up<T, E>(outcome: Option<&Result<T, E>>) -> bool {
    !matches!(outcome, Some(Ok(_)))
}

/// What [`LeaseBackend::inspect_fair`] found. An adapter builds it from `FairInfo::default()`
/// (the struct is `#[non_exhaustive]`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FairInfo {
    /// The holder of the lock's key (its owner) and its remaining TTL, while one holds it.
    pub holder: Option<PermitHolder>,
    /// The live waiters, first in line first, each with the time its place has left (a place
    /// lapses unless its waiter heartbeats: see [`place_ttl`]): at most [`INSPECT_SHOWN`], the
    /// live ones among the first [`INSPECT_SCAN`] queue entries.
    pub waiters: Vec<PermitHolder>,
    /// How many waiters have a live place, listed or not.
    pub waiting: usize,
    /// The fence counter: the latest token minted (the holder's, while the lock is held: every
    /// fair hold mints).
    pub counter: Option<Token>,
    /// The applied mark.
    pub mark: FenceMark,
}

/// A validated obtain of a fair lock: the lock's plan and the waiter's place TTL. Made by
/// [`LockOptions::plan_fair`](crate::lock::LockOptions::plan_fair).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FairPlan {
    /// The obtain, as a lock's (the fair lock's key, fenced).
    pub obtain: crate::lock::ObtainPlan,
    /// How long the waiter's place lives after each attempt ([`place_ttl`]).
    pub place_ttl: Option<Ttl>,
}

/// Obtain a fair lock: the acquire a lock would send, plus the waiter's place TTL.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairRequest {
    /// The lock's key ([`fair_spec`]), owner, metadata, TTL and token floor.
    pub acquire: AcquireRequest,
    /// How long the owner's place lives after this attempt; `None`: never queue.
    pub place_ttl: Option<Ttl>,
}

impl FairRequest {
    /// A fair acquire of `acquire.spec`'s lock.
    pub fn new(acquire: AcquireRequest, place_ttl: Option<Ttl>) -> FairRequest {
        FairRequest { acquire, place_ttl }
    }

    /// The fair lock's name.
    pub fn name(&self) -> &str {
        fair_name(&self.acquire.spec)
    }

    /// The owner.
    pub fn owner(&self) -> &Owner {
        &self.acquire.owner
    }
}

/// A view of `B` whose acquire is [`LeaseBackend::acquire_fair`] (with one waiter's place TTL)
/// and whose release is [`LeaseBackend::release_fair`]; renew, remaining and inspect are `B`'s
/// plain lock operations on the lock's key (the queue is read by
/// [`LeaseBackend::inspect_fair`]), `check_spec` is [`LeaseBackend::check_fair`], and
/// `release_watch` is the waiter's own wake ([`LeaseBackend::fair_watch`]). Drivers run the
/// lock machines over it, so a fair hold is obtained, renewed and released with every rule of
/// a lock.
///
/// A `Held` reply reaches the machine without the holder's remaining TTL: a fair waiter must
/// keep heartbeating on its retry schedule even while release notices arrive (a lock waiter
/// would sleep until the holder's expiry).
pub struct FairBackend<B: ?Sized> {
    inner: Arc<B>,
    place_ttl: Option<Ttl>,
    waiter: Option<Owner>,
}

impl<B: ?Sized> FairBackend<B> {
    /// The fair operations of `inner` for one waiter: its place TTL ([`place_ttl`]) and the
    /// owner whose wake its release watch listens to (`None`: no watch).
    pub fn new(inner: Arc<B>, place_ttl: Option<Ttl>, waiter: Option<Owner>) -> FairBackend<B> {
        FairBackend {
            inner,
            place_ttl,
            waiter,
        }
    }

    /// The backend underneath.
    pub fn inner(&self) -> &Arc<B> {
        &self.inner
    }

    /// The place TTL every acquire asks for.
    pub fn place_ttl(&self) -> Option<Ttl> {
        self.place_ttl
    }
}

impl<B: ?Sized> Clone for FairBackend<B> {
    fn clone(&self) -> Self {
        FairBackend {
            inner: Arc::clone(&self.inner),
            place_ttl: self.place_ttl,
            waiter: self.waiter.clone(),
        }
    }
}

impl<B: fmt::Debug + ?Sized> fmt::Debug for FairBackend<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairBackend")
            .field("inner", &&*self.inner)
            .field("place_ttl", &self.place_ttl)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<B: LeaseBackend + ?Sized> LeaseBackend for FairBackend<B> {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        let req = FairRequest::new(req.clone(), self.place_ttl);
        match self.inner.acquire_fair(&req).await? {
            AcquireOutcome::Held { holder, fence, .. } => Ok(AcquireOutcome::Held {
                holder,
                remaining: None,
                fence,
            }),
            acquired => Ok(acquired),
        }
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.inner.renew(req).await
    }
    async fn renew_many(&self, reqs: &[&RenewRequest]) -> Vec<Result<RenewOutcome, BackendError>> {
        self.inner.renew_many(reqs).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.inner.release_fair(req).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.inner.remaining(spec, owner).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.inner.inspect(spec).await
    }
    async fn observe(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.inner.observe(spec).await
    }
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_fair(spec)
    }
    fn validity_margin(&self, ttl: Ttl) -> Duration {
        self.inner.validity_margin(ttl)
    }
    async fn preflight(&self) -> Result<StoreReport, BackendError> {
        self.inner.preflight().await
    }
    fn release_watch(&self, spec: &LeaseSpec, role: WatchRole) -> Option<ReleaseWatch> {
        let waiter = self.waiter.as_ref()?;
        self.inner.fair_watch(spec, waiter, role)
    }
    fn check_fair(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_fair(spec)
    }
    async fn acquire_fair(&self, req: &FairRequest) -> Result<AcquireOutcome, BackendError> {
        self.inner.acquire_fair(req).await
    }
    async fn release_fair(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.inner.release_fair(req).await
    }
    async fn leave_fair(&self, spec: &LeaseSpec, owner: &Owner) -> Result<bool, BackendError> {
        self.inner.leave_fair(spec, owner).await
    }
    async fn inspect_fair(&self, spec: &LeaseSpec) -> Result<FairInfo, BackendError> {
        self.inner.inspect_fair(spec).await
    }
    fn fair_watch(&self, spec: &LeaseSpec, owner: &Owner, role: WatchRole) -> Option<ReleaseWatch> {
        self.inner.fair_watch(spec, owner, role)
    }
}

impl<B: Fencing + ?Sized> Fencing for FairBackend<B> {
    type Fencer = B::Fencer;
    fn fencer(&self, mark_key: &str, token: Token) -> B::Fencer {
        self.inner.fencer(mark_key, token)
    }
}
